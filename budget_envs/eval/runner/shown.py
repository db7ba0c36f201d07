"""What an episode showed, kept turn by turn, and its rendering as OpenAI-style chat messages.

:class:`EpisodeShown` is what the episode driver keeps when a job asks for a transcript: the
system prompt and first user message of the reset, the tools, every observation and, per turn,
the budget left, the fault and the stop reason. :func:`render_messages` turns that and the
agent's actions into the messages of a chat row, the way the chat agent
(:class:`~budget_envs.eval.chat.ChatEpisode`) talks to a model: the family's system prompt, the
goal before the first observation unless it already holds it, an action that is a tool call as
an assistant ``tool_calls`` message answered by ``role: tool`` messages, any other action as
assistant text answered by a user message. :func:`message_action` reads an action back from an
assistant message, exactly (a tool call is rendered as one only when it reads back to the same
text), so a row's assistant messages replay the episode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from budget_envs._util import tool_calls_action

__all__ = [
    "EpisodeShown",
    "SEE_PREVIOUS",
    "assistant_message",
    "first_user_message",
    "message_action",
    "render_messages",
    "turn_entry",
]

#: The content of the tool messages after the first one of a message with several calls (the
#: env ran none of them: one call per turn), as the chat agent sends it.
SEE_PREVIOUS = "(see the previous tool result)"


def first_user_message(observation: str, goal: Any) -> str:
    """The first user message: the goal first unless the observation already holds it (as the
    chat agent sends it)."""
    if not goal or not isinstance(goal, str) or goal in observation:
        return observation
    return f"Goal: {goal}\n\n{observation}"


def turn_entry(turn: int, reward: Any, info: Mapping[str, Any]) -> dict[str, Any]:
    """One turn's bookkeeping, every value typed the same in every family (-1 and ``""`` where
    there is nothing to say, as in ``info``): the budget left, the fault (kind, and the action
    that ran instead, ``""`` when nothing ran), whether the action was invalid, the reward, and
    the stop reason on the last turn."""
    budget = info.get("budget")
    fault = info.get("fault")
    fault = fault if isinstance(fault, Mapping) else {}
    return {
        "turn": int(turn),
        "budget_left": int(budget["remaining"]) if isinstance(budget, Mapping) else -1,
        "fault_kind": str(fault.get("kind") or ""),
        "fault_executed": str(fault.get("executed") or ""),
        "invalid_action": bool(info.get("invalid_action", False)),
        "reward": float(reward),
        "stop_reason": str(info.get("stop_reason") or ""),
    }


class EpisodeShown:
    """What one episode showed: the reset's head, then every observation and turn entry."""

    def __init__(self, env_id: str, observation: str, info: Mapping[str, Any]) -> None:
        from budget_envs.eval.prompts import DEFAULT_PROMPTS, system_prompt

        tools = info.get("tools")
        self.system = system_prompt(env_id, info, DEFAULT_PROMPTS)
        self.first = first_user_message(observation, info.get("goal"))
        self.tools: list[Any] | None = list(tools) if tools else None
        self.observations: list[str] = []
        self.turns: list[dict[str, Any]] = []

    def turn(self, observation: str, reward: Any, info: Mapping[str, Any]) -> None:
        self.observations.append(observation)
        self.turns.append(turn_entry(len(self.turns) + 1, reward, info))

    def as_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "first": self.first,
            "tools": self.tools,
            "observations": list(self.observations),
            "turns": list(self.turns),
        }


def _tool_calls(action: Any) -> list[tuple[str, dict[str, Any]]] | None:
    """The ``(name, arguments)`` calls of a tool-call action that reads back to the same text,
    else None (plain text, broken JSON, a shape the chat API cannot carry)."""
    if not isinstance(action, str) or not action.startswith('{"tool_calls":'):
        return None
    try:
        data = json.loads(action)
    except ValueError:
        return None
    calls = data.get("tool_calls") if isinstance(data, dict) and len(data) == 1 else None
    if not isinstance(calls, list) or not calls:
        return None
    pairs = []
    for call in calls:
        if (
            not isinstance(call, dict)
            or set(call) != {"name", "arguments"}
            or not isinstance(call["name"], str)
            or not isinstance(call["arguments"], dict)
        ):
            return None
        pairs.append((call["name"], call["arguments"]))
    return pairs if tool_calls_action(pairs) == action else None


def assistant_message(action: str, turn: int) -> dict[str, Any]:
    """The assistant message of ``action`` on ``turn`` (1-based): native tool calls (ids
    ``call_<turn>_<n>``, arguments a JSON string) when the action is one, else the text."""
    calls = _tool_calls(action)
    if calls is None:
        return {"role": "assistant", "content": action}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": f"call_{turn}_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for n, (name, arguments) in enumerate(calls)
        ],
    }


def message_action(message: Mapping[str, Any]) -> str:
    """The env action of an assistant message of a row (the inverse of
    :func:`assistant_message`; a message read back by ``datasets`` has ``tool_calls`` None).

    >>> message_action(assistant_message('{"tool_calls":[{"name":"submit","arguments":{}}]}', 1))
    '{"tool_calls":[{"name":"submit","arguments":{}}]}'
    >>> message_action({"role": "assistant", "content": "go east", "tool_calls": None})
    'go east'
    """
    calls = message.get("tool_calls")
    if calls:
        return tool_calls_action(
            (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls
        )
    return str(message.get("content") or "")


def render_messages(shown: Mapping[str, Any], actions: Sequence[str]) -> list[dict[str, Any]]:
    """The chat messages of an episode: system, first user message, then per turn the
    assistant's action and the observation that answered it (``role: tool`` after tool calls,
    one message per call id, else ``role: user``). ``shown`` is :meth:`EpisodeShown.as_dict`."""
    observations = shown["observations"]
    if len(observations) != len(actions):
        raise ValueError(
            f"an episode of {len(actions)} actions needs as many observations, got "
            f"{len(observations)}"
        )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": shown["system"]},
        {"role": "user", "content": shown["first"]},
    ]
    for turn, (action, observation) in enumerate(zip(actions, observations), start=1):
        said = assistant_message(action, turn)
        messages.append(said)
        calls = said.get("tool_calls")
        if not calls:
            messages.append({"role": "user", "content": observation})
            continue
        for n, call in enumerate(calls):
            content = observation if n == 0 else SEE_PREVIOUS
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return messages
