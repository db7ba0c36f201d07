"""The chat agents' system prompts: a family's own prompt from its registry row, overridable.

A family's prompt is on its registry row (``EnvEntry.prompt``); ``ChatAgent(prompts=...)``
overrides it per family or per id, and :data:`DEFAULT_PROMPTS` covers an env whose row has none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_PROMPTS", "MAX_SHOWN_ACTIONS", "reply_action", "system_prompt", "with_actions"]

#: The system prompt of an env whose registry row has none. A family's own prompt is on its
#: registry row (``EnvEntry.prompt``); ``ChatAgent(prompts=...)`` overrides both per family.
DEFAULT_PROMPTS: dict[str, str] = {
    "default": (
        "You are an agent in a text environment. Each message is what you observe. Reply with "
        "exactly one action as plain text, nothing else."
    ),
}


def system_prompt(env_id: str, info: Mapping[str, Any], prompts: Mapping[str, str]) -> str:
    """The system prompt for an episode of ``env_id`` starting with ``info``.

    In order: ``prompts[<the row's family>]``, ``prompts[env_id]``, the registry row's own
    prompt, ``prompts["default"]``. An id that is not registered gets the default prompt.
    """
    from gymnasium.error import NameNotFound

    from budget_envs.registry import entry_for

    default = prompts.get("default", DEFAULT_PROMPTS["default"])
    try:
        entry = entry_for(env_id)
    except NameNotFound:  # an env that is not a registry row (a user's own id)
        return prompts.get(env_id, default)
    for key in (entry.family, env_id):
        if key in prompts:
            return prompts[key]
    return entry.chat_prompt(info) or default


#: How many offered actions a prompt lists at most (``show_actions``); the rest are counted.
MAX_SHOWN_ACTIONS = 40


def with_actions(text: str, info: Mapping[str, Any], limit: int = MAX_SHOWN_ACTIONS) -> str:
    """``text`` followed by the actions the env offers (``info["candidate_actions"]``), one a
    line, as published ALFWorld and WebShop agent prompts list the admissible actions.

    >>> print(with_actions("You see a key.", {"candidate_actions": ["take key", "go north"]}))
    You see a key.
    Actions you can take:
    - take key
    - go north
    """
    actions = [str(a) for a in info.get("candidate_actions") or []]
    if not actions:
        return text
    shown = actions[: max(1, int(limit))]
    lines = [text, "Actions you can take:"] + [f"- {' '.join(a.split())}" for a in shown]
    if len(actions) > len(shown):
        lines.append(f"(and {len(actions) - len(shown)} more)")
    return "\n".join(lines)


_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def reply_action(text: str) -> str:
    """The one env action in a model's reply, on one line.

    Reasoning (``<think>...</think>``) is dropped; an unclosed think block leaves no action.
    A ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` block (the Hermes/Qwen format)
    becomes the env's tool-call action; a reply that starts with a JSON value is that value,
    re-serialised on one line; anything else is its first non-empty line, without surrounding
    quotes or backticks.

    >>> reply_action("<think>the key is east</think>\\ngo east\\nthen north")
    'go east'
    >>> reply_action('<tool_call>\\n{"name": "submit", "arguments": {"answer": "1"}}\\n</tool_call>')
    '{"tool_calls":[{"name":"submit","arguments":{"answer":"1"}}]}'
    >>> reply_action('{"tool_calls": [\\n {"name": "submit", "arguments": {}}]}')
    '{"tool_calls":[{"name":"submit","arguments":{}}]}'
    """
    from budget_envs._util import tool_call_action

    if "<think>" in text or "</think>" in text:
        head, closed, rest = text.partition("</think>")
        if not closed:
            return ""
        text = rest
    text = text.strip()
    call = _TOOL_CALL.search(text)
    if call:
        try:
            data = json.loads(call.group(1))
        except ValueError:
            return " ".join(call.group(1).split())  # the env answers broken JSON as a turn
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            return tool_call_action(data["name"], data.get("arguments") or {})
    if text[:1] in "{[":
        try:
            value, _ = json.JSONDecoder().raw_decode(text)
        except ValueError:
            pass
        else:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for line in text.splitlines():
        line = line.strip().strip("`").strip()
        if len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'":
            line = line[1:-1].strip()
        if line:
            return line
    return ""
