"""The text of a ToolUse call: parsing an assistant message into a checked call, writing the
canonical call text, and reading an amount of money.

A malformed message raises :class:`~budget_envs.errors.ActionRejected` whose text tells the
agent what to send instead; argument text is checked here (ids, enums, lengths) and never
becomes SQL.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from budget_envs._util import tool_call_action
from budget_envs.envs.tooluse.schemas import _PARAM_NAMES, TOOL_BY_NAME, TOOL_NAMES, Tool
from budget_envs.errors import ActionRejected

__all__ = ["call_json", "parse_action", "parse_money"]

_ID_RE = {
    p: re.compile(rf"^{p}_[0-9a-f]{{8}}$") for p in ("cus", "ord", "itm", "pay", "prd", "cur")
}

_SHAPE_HINT = (
    'Send one tool call as JSON: {"tool_calls": [{"name": "<tool>", "arguments": {...}}]} '
    "(the OpenAI assistant-message shape is accepted too)."
)


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise ActionRejected(f"Error: {what} is nested too deeply. {_SHAPE_HINT}") from None
    except ValueError as exc:
        raise ActionRejected(f"Error: {what} is not valid JSON ({exc}). {_SHAPE_HINT}") from None


def parse_action(action: str) -> tuple[str, dict[str, str | None]]:
    """Parse an assistant message into ``(tool name, checked arguments)``.

    Accepted: ``{"tool_calls": [{"name", "arguments"}]}``, the OpenAI message shape with
    ``{"function": {"name", "arguments"}}`` entries, or a bare ``{"name", "arguments"}`` call;
    arguments as an object or a JSON string. Exactly one call per message. Raises
    :class:`ActionRejected` with readable feedback otherwise.
    """
    msg = _loads(action, "the message")
    if not isinstance(msg, dict):
        raise ActionRejected(f"Error: the message must be a JSON object. {_SHAPE_HINT}")
    if "tool_calls" in msg:
        calls = msg["tool_calls"]
        if not isinstance(calls, list):
            raise ActionRejected(f"Error: tool_calls must be a list. {_SHAPE_HINT}")
        if len(calls) != 1:
            raise ActionRejected(
                f"Error: send exactly one tool call per message (got {len(calls)}); "
                "each call is one turn. To finish, call submit."
            )
        call = calls[0]
    elif "name" in msg or "function" in msg:
        call = msg
    else:
        raise ActionRejected(
            f"Error: the message has no tool call. {_SHAPE_HINT} To finish, call submit."
        )
    if not isinstance(call, dict):
        raise ActionRejected(f"Error: a tool call must be a JSON object. {_SHAPE_HINT}")
    if isinstance(call.get("function"), dict):
        call = call["function"]
    name = call.get("name")
    if not isinstance(name, str):
        raise ActionRejected(f"Error: the tool call has no name. {_SHAPE_HINT}")
    tool = TOOL_BY_NAME.get(name)
    if tool is None:
        shown = name if len(name) <= 60 else name[:60] + "..."
        raise ActionRejected(
            f"Error: unknown tool {shown!r}. Available tools: {', '.join(TOOL_NAMES)}."
        )
    args = call.get("arguments")
    if args is None or args == "":
        args = {}
    elif isinstance(args, str):
        args = _loads(args, f"the arguments string of {name}")
    if not isinstance(args, dict):
        raise ActionRejected(f"Error: the arguments of {name} must be a JSON object.")
    return name, _check_args(tool, args)


def _check_args(tool: Tool, args: dict) -> dict[str, str | None]:
    known = _PARAM_NAMES[tool.name]
    if not known.issuperset(args):
        extra = sorted(k for k in args if k not in known)
        shown = ", ".join(repr(k[:40]) for k in extra[:5])
        raise ActionRejected(
            f"Error: {tool.name} got unexpected argument(s) {shown}; it takes "
            f"{', '.join(p.name for p in tool.params) or 'no arguments'}."
        )
    out: dict[str, str | None] = {}
    for p in tool.params:
        value = args.get(p.name)
        if value is None:
            if p.required:
                raise ActionRejected(f"Error: {tool.name} needs the argument {p.name!r}.")
            out[p.name] = None
            continue
        if not isinstance(value, str):
            raise ActionRejected(
                f"Error: argument {p.name!r} of {tool.name} must be a string, "
                f"got {type(value).__name__}."
            )
        if p.kind == "id":
            if not _ID_RE[p.prefix].match(value):
                raise ActionRejected(
                    f"Error: argument {p.name!r} of {tool.name} must be an id like "
                    f"'{p.prefix}_0123abcd' from an earlier tool result."
                )
        elif p.kind == "enum":
            if value not in p.enum:
                raise ActionRejected(
                    f"Error: argument {p.name!r} of {tool.name} must be one of {list(p.enum)}."
                )
        else:
            value = " ".join(value.split())
            if len(value) > p.max_length:
                raise ActionRejected(
                    f"Error: argument {p.name!r} of {tool.name} is {len(value)} characters; "
                    f"the limit is {p.max_length}."
                )
        out[p.name] = value
    return out


def call_json(name: str, args: dict[str, str | None] | tuple) -> str:
    """The canonical action text of a call (what the oracle emits); ``args`` as a dict or as
    ``(name, value)`` pairs. The text is the suite's one tool-call form
    (:func:`budget_envs._util.tool_call_action`, which writes string calls from templates).

    >>> call_json("get_order", {"order_id": "ord_1"})
    '{"tool_calls":[{"name":"get_order","arguments":{"order_id":"ord_1"}}]}'
    """
    return tool_call_action(name, args if type(args) is dict else dict(args))


def parse_money(text: str) -> int | None:
    """``"$1,234.50"`` -> 123450 cents; None when it is not an amount."""
    text = text.strip().strip("\"'").replace(",", "").lstrip("$").strip()
    try:
        value = Decimal(text)
        if not value.is_finite() or abs(value) > 10**9:
            return None
        return int((value * 100).to_integral_value())
    except (InvalidOperation, ArithmeticError, ValueError):
        return None
