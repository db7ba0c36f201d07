"""The ToolUse family's fault hooks: transient and permanent tool failures, and slips.

``tool_error``, ``tool_timeout`` and ``stale_read`` last one turn; ``tool_down`` (a tool stays
down) and ``stale_tool`` (a read tool keeps answering from the start state) last the episode,
kept in the env's ``_down`` and ``_stale``. A slip runs another read-only call, never a write.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from budget_envs.core import FaultOutcome
from budget_envs.envs.tooluse.calls import call_json, parse_action
from budget_envs.envs.tooluse.schemas import READ_TOOLS, TOOL_NAMES, WRITE_TOOLS
from budget_envs.errors import ActionRejected

__all__ = ["FaultHooks"]


def _down_message(name: str) -> str:
    return (
        f"Error: the {name} tool is down (HTTP 503 Service Unavailable) and stays down for the "
        "rest of this session; the call was not run."
    )


class FaultHooks:
    """The fault hooks of :class:`~budget_envs.core.TextAgentEnv` for the ToolUse env.

    Mixed into :class:`~budget_envs.envs.tooluse.env.ToolUseEnv`: it runs calls through the
    env's ``_run`` (``_attempt`` for a malformed one), reads what was shown (``_pr``, ``_task``)
    and owns the permanent faults' ``_down`` and ``_stale`` (reset with each task).
    """

    #: A slipped call's result names no call, so it reads as the answer to the agent's own call.
    family_fault_cells = {
        "slip": ("silent", "transient"),
        "tool_error": ("explicit", "transient"),
        "tool_timeout": ("explicit", "transient"),
        "stale_read": ("silent", "transient"),
        "tool_down": ("explicit", "permanent"),
        "stale_tool": ("silent", "permanent"),
    }

    def fault_kinds(self) -> tuple[str, ...]:
        """``tool_error`` (not run), ``tool_timeout`` (writes run, result lost), ``stale_read``,
        ``tool_down`` (the tool stays down), ``stale_tool`` (a read stays stale)."""
        return ("tool_error", "tool_timeout", "stale_read", "tool_down", "stale_tool")

    def _fault(self, kind: str, rng: np.random.Generator, action: Any) -> FaultOutcome:
        """``tool_error``: the call is not run; ``tool_timeout``: a write runs, a read or
        ``submit`` does not, and either way the result is lost; ``stale_read``: a read answers
        from the start-of-episode database, anything else runs as usual. A malformed call is
        rejected as on any turn (the timeout and stale kinds then change nothing).

        Permanent kinds: ``tool_down``: a tool (any but ``submit``, drawn from ``rng``) goes
        down for the rest of the episode, with a notice; the agent's call runs as usual unless
        it is to that tool. When every way to success needs that tool the task is lost. ``stale_tool``:
        the called read tool answers from the start-of-episode database from now on, with no
        sign of it (a write or ``submit`` runs as usual and nothing goes stale)."""
        if kind == "tool_error":
            code = (500, 502, 503)[int(rng.integers(3))]
            return FaultOutcome(
                f"Error: the tool service failed with a transient error (HTTP {code}); "
                "the call was not run. Retry it.",
                "dropped",
            )
        name = None
        if self.check_action(action) is None:
            try:
                name, args = parse_action(action)
            except ActionRejected:
                name = None
        if name is None:
            obs, reward, invalid = self._attempt(action)
            return FaultOutcome(obs, "none", None, reward, invalid)
        if kind == "tool_down":
            pool = sorted(set(TOOL_NAMES) - {"submit"} - self._down)
            broken = pool[int(rng.integers(len(pool)))]
            self._down = self._down | {broken}
            notice = f"Notice: {_down_message(broken)[len('Error: ') :]}"
            if name == broken:
                obs, reward, executed, effect = _down_message(name), 0.0, None, "dropped"
            else:
                obs, reward = self._run(name, args)
                executed, effect = action, "world"
            if self._needs_down_tool():
                self.lost = True
            return FaultOutcome(f"{obs}\n{notice}", effect, executed, reward)
        if kind == "stale_tool":
            if name not in READ_TOOLS:
                obs, reward = self._run(name, args)
                return FaultOutcome(obs, "none", action, reward)
            self._stale = self._stale | {name}
            obs, reward = self._run(name, args)
            return FaultOutcome(obs, "observation", action, reward)
        if kind == "tool_timeout":
            lost = (
                "Error: the tool call timed out after 30 s; its result is unknown (a write "
                "may or may not have been applied)."
            )
            if name in WRITE_TOOLS:
                _, reward = self._run(name, args)
                return FaultOutcome(lost, "observation", action, reward)
            return FaultOutcome(lost, "dropped")
        if name in READ_TOOLS:
            obs, reward = self._run(name, args, self.world.template)
            return FaultOutcome(obs, "observation", action, reward)
        obs, reward = self._run(name, args)
        return FaultOutcome(obs, "none", action, reward)

    def no_effect_feedback(self) -> str:
        return "Error: no response from the tool service; the call was not run."

    def slip_action(self, action: str, rng: np.random.Generator) -> str | None:
        """A different valid read-only call on ids already shown (a slip never writes)."""
        pr = self._pr
        calls = [call_json("list_promotions", {})]
        calls += [call_json("find_customer", {"email": e}) for e in self._task.emails]
        for rid in sorted(pr.revealed):
            prefix = rid[:3]
            if prefix == "cus":
                calls.append(call_json("list_orders", {"customer_id": rid}))
                calls.append(call_json("get_loyalty_points", {"customer_id": rid}))
            elif prefix == "ord":
                calls.append(call_json("get_order", {"order_id": rid}))
                calls.append(call_json("track_shipment", {"order_id": rid}))
            elif prefix == "prd":
                calls.append(call_json("list_variants", {"product_id": rid}))
                calls.append(call_json("get_product", {"product_id": rid}))
        try:
            mine = call_json(*parse_action(action))
        except (ActionRejected, TypeError):
            mine = None
        others = [c for c in calls if c != mine and c != action]
        if not others:
            return None
        return others[int(rng.integers(len(others)))]
