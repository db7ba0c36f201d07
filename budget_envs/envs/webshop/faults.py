"""The WebShop family's fault hooks: server-side faults, played out by the shop server.

``http_error``, ``stale_page`` and ``slow_response`` last one turn (the step request carries
them); ``out_of_stock`` and ``delisted`` hit a product on screen for the rest of the episode,
kept in the session state (so in ``state_hash`` and in snapshots).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np

from budget_envs.core import FaultOutcome
from budget_envs.envs.webshop.shop import SEP
from budget_envs.envs.webshop.tasks import PAGE_SIZE

__all__ = ["FaultHooks"]

_FAULTS = ("http_error", "stale_page", "slow_response", "out_of_stock", "delisted")
#: The permanent kinds and the session-state list each one grows.
_PERMANENT = {"out_of_stock": "out_of_stock", "delisted": "delisted"}
_REASONS = {500: "Internal Server Error", 503: "Service Unavailable"}


def _on_screen(state: dict[str, Any]) -> list[str]:
    """The products the page of ``state`` shows: the current results page, the product of an
    item page or sub-page, or the cart entries on the start page."""
    page = state.get("page")
    if page == "results":
        start = (int(state["page_no"]) - 1) * PAGE_SIZE
        return list(state["results"][start : start + PAGE_SIZE])
    if page in ("item", "sub") and state.get("asin"):
        return [state["asin"]]
    if page == "search":
        return [c["asin"] for c in state.get("cart", [])]
    return []


class FaultHooks:
    """The fault hooks of :class:`~budget_envs.core.TextAgentEnv` for the WebShop env.

    Mixed into :class:`~budget_envs.envs.webshop.env.WebShopEnv`: it sends faults with the
    env's step request (``_step_request``), runs a malformed action through ``_attempt``, takes
    the answer with ``_after`` and sets a permanent fault's state with ``_put_state``.
    """

    family_fault_cells: ClassVar[dict[str, tuple[str, str]]] = {
        "http_error": ("explicit", "transient"),
        "stale_page": ("silent", "transient"),
        "slow_response": ("explicit", "transient"),
        "out_of_stock": ("explicit", "permanent"),
        "delisted": ("silent", "permanent"),
    }

    def fault_kinds(self) -> tuple[str, ...]:
        """``http_error`` (500/503, page unchanged), ``stale_page``, ``slow_response``,
        ``out_of_stock`` and ``delisted`` (permanent)."""
        return _FAULTS

    def _fault(self, kind: str, rng: np.random.Generator, action: Any) -> FaultOutcome:
        """Server-side faults (the request carries them; the server plays them out):

        * ``http_error``: the server answers 500 or 503 and does not run the action;
        * ``stale_page``: the action runs; the agent is shown the page from before it;
        * ``slow_response``: the action runs; the answer arrives 0.15-0.6 s late (noted).

        Reward, score and purchase of an action that runs are the normal turn's. A malformed
        action is rejected as on any turn (the fault then changes nothing).

        Permanent kinds (the effect is part of the session state, so of ``state_hash`` and of
        snapshots): the action is handled as usual, then one product the page now shows (a
        result of the current results page, the product of an item page, a cart entry on the
        start page; drawn from ``rng``) is hit for the rest of the episode:

        * ``out_of_stock``: it can no longer be bought; the pages say so (results, item page,
          cart) and a notice is shown; buying it or checking out a cart holding it is refused;
        * ``delisted`` (silent): searches no longer list it and it leaves the current result
          list; nothing says so.

        The oracle plans around the effect; when the target is hit beyond reach (sold out, or
        delisted and not on screen any more) the task is lost (``cost_to_go()`` UNREACHABLE).
        """
        if kind in _PERMANENT:
            return self._permanent(kind, rng, action)
        runnable = self.check_action(action) is None
        if kind == "http_error":
            status = int(rng.choice([500, 503]))
            self._step_request(action if runnable else "", {"kind": kind, "status": status})
            return FaultOutcome(
                f"HTTP {status} {_REASONS[status]}: the shop did not answer. "
                "The page is unchanged; try again.",
                "dropped",
            )
        fault: dict[str, Any] = {"kind": kind}
        if kind == "slow_response":
            fault["delay_ms"] = delay = int(rng.integers(150, 600))
        if not runnable:
            obs, reward, invalid = self._attempt(action)
            return FaultOutcome(obs, "none", None, reward, invalid)
        data = self._step_request(action, fault)
        if data["invalid"]:
            return FaultOutcome(data["feedback"], "none", None, 0.0, True)
        reward = self._after(data)
        if kind == "stale_page":
            return FaultOutcome(data["stale_view"], "observation", action, reward)
        note = f"(The page took {delay / 1000:.2f} s to load.)"
        return FaultOutcome(f"{self._view}{SEP}{note}", "observation", action, reward)

    def _permanent(self, kind: str, rng: np.random.Generator, action: Any) -> FaultOutcome:
        obs, reward, invalid = self._attempt(action)
        executed = None if invalid else action
        if self.won or self.lost:
            return FaultOutcome(obs, "none", executed, reward, invalid)
        state = json.loads(json.dumps(self._state))
        listed = _PERMANENT[kind]
        hit = set(state.get(listed) or ())
        pool = [a for a in _on_screen(state) if a not in hit]
        if not pool:
            return FaultOutcome(obs, "none", executed, reward, invalid)
        asin = pool[int(rng.integers(len(pool)))]
        state[listed] = sorted(hit | {asin})
        if kind == "delisted" and asin in state["results"]:
            state["results"] = [a for a in state["results"] if a != asin]
            pages = max(1, -(-len(state["results"]) // PAGE_SIZE))
            state["page_no"] = min(int(state["page_no"]), pages)
        self._put_state(state)
        self._check_lost()
        if kind == "delisted":
            return FaultOutcome(self._view, "world", executed, reward, invalid)
        note = f"Notice: item {asin} is now out of stock; it can no longer be bought."
        return FaultOutcome(f"{self._view}{SEP}{note}", "world", executed, reward, invalid)
