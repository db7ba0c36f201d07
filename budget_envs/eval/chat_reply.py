"""What a chat reply holds: the first choice's message, checked, and its text split from the
thinking.

A reply whose message is not usable (:func:`_message_problem`) is retried as a malformed body;
``<think>...</think>`` is kept apart from the action (:func:`split_reasoning`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["split_reasoning"]


def split_reasoning(text: str | None) -> tuple[str, str | None]:
    """``(answer, reasoning)`` of a reply that may hold a ``<think>...</think>`` block.

    A reply without the opening tag but with a closing one (templates that open the block in
    the prompt) has everything before ``</think>`` as reasoning; an unclosed block is all
    reasoning (the answer is empty).

    >>> split_reasoning("<think>the key is east</think>\\ngo east")
    ('go east', 'the key is east')
    >>> split_reasoning("go east")
    ('go east', None)
    """
    if not text:
        return "", None
    stripped = text.lstrip()
    if stripped.startswith("<think>"):
        body = stripped[len("<think>") :]
        thought, closed, rest = body.partition("</think>")
        if not closed:
            return "", thought.strip()
        return rest.strip(), thought.strip()
    head, closed, rest = text.partition("</think>")
    if closed:
        return rest.strip(), head.strip()
    return text.strip(), None


def _count(value: Any) -> int:
    """A token count from a reply's ``usage`` (0 when a server sends something else)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return 0


def _message_problem(message: Any) -> str | None:
    """What is wrong with a reply's assistant message, or None when it is usable (an endpoint
    answering garbage ends the episode as one :class:`AgentError`, never as an exception from
    deep inside the agent)."""
    if not isinstance(message, dict):
        return "choices[0].message is not an object"
    if not isinstance(message.get("content"), (str, type(None))):
        return "message content is not text"
    calls = message.get("tool_calls")
    if not isinstance(calls, (list, type(None))) or not all(
        isinstance(c, dict) and isinstance(c.get("function", {}), dict) for c in calls or []
    ):
        return "tool_calls is not a list of call objects"
    return None


@dataclass
class _Reply:
    message: dict[str, Any]
    finish_reason: str | None
    usage: dict[str, Any] = field(default_factory=dict)
    retries: int = 0
