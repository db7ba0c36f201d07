"""The calls the ToolUse env offers: candidate calls built from what the agent was shown, and
random calls.

:meth:`CandidateCalls.candidate_actions` (``info["candidate_actions"]``) lists every tool with
every argument combination the ticket and the tool results so far have shown; it is rebuilt
only when what was shown changes (:meth:`CandidateCalls._shown_key`).
:meth:`CandidateCalls.sample_action` is the random agent's call.
"""

from __future__ import annotations

import re

import numpy as np

from budget_envs.envs.tooluse.calls import call_json, parse_money
from budget_envs.envs.tooluse.schemas import TOOL_BY_NAME, TOOL_NAMES
from budget_envs.envs.tooluse.tasks import DECLINE_NOTE, Task

__all__ = ["CandidateCalls"]

_EMAIL = re.compile(r"<([^<>\s]+@[^<>\s]+)>")
_QUOTED = re.compile(r'"([^"\n]{1,200})"')
_SAMPLE_TEXT = ("Call the customer before delivery", DECLINE_NOTE, "", "12 Mill Street, Oakdale")


class CandidateCalls:
    """Candidate and random calls of :class:`~budget_envs.envs.tooluse.env.ToolUseEnv`.

    Mixed into the env: it reads the world, the task and what was shown (``world``, ``_task``,
    ``_pr``, ``_rows``, ``_down``, ``_stale``) and keeps the last list in ``_candidates`` and
    the calls each shown id adds in ``_blocks``.
    """

    def candidate_actions(self) -> list[str]:
        """Full tool calls built only from what the agent has been shown (``info["candidate_actions"]``).

        Every tool with every argument combination the ticket and the tool results so far have
        shown together: ids of the right kind (an item with its own order and that order's
        payment; an exchange target among the listed variants of the item's model), the
        quoted texts of the ticket as addresses and notes (plus the empty note), both cancel
        reasons; for ``submit``, ``0.00``, every amount shown so far and the sum of the refunds
        made. Trainers with a finite action set (RLlib) choose among these; the oracle is not
        consulted, so a wrong call stays possible.
        """
        self._require_reset()
        if self._done:
            return []
        found = self._known_candidates()
        return found if isinstance(found, list) else self._build_candidates(*found)

    def _known_candidates(self) -> list[str] | tuple:
        """The calls of this state when the last list still holds (a copy of it), else what
        building them needs, copied: ``(task, ids shown, models listed, changed slots, cheap
        key)``."""
        # The calls depend only on the ticket and on what was shown (ids, models listed,
        # refunds made); most steps change none of them, so the last list is reused
        # (building it, ~11 JSON texts, was two thirds of a step). The cheap key decides here;
        # the exact one (sorted ids) when the calls are built.
        pr, task = self._pr, self._task
        memo = self._candidates
        quick = self._quick or self._shown_key()
        if memo is not None and memo[0] is task and memo[3] == quick:
            return list(memo[2])
        return (
            task,
            frozenset(pr.revealed),
            frozenset(pr.listed),
            tuple(pr.changed.items()),
            quick,
        )

    def _build_candidates(
        self, task: Task, shown: frozenset, listed_set: frozenset, changed: tuple, quick: tuple
    ) -> list[str]:
        """The calls of the state captured by :meth:`_known_candidates`: a function of its
        arguments alone, so it may run after later steps."""
        refunded = sorted(
            target for (kind, target), value in changed if kind == "item" and value[0] == "refunded"
        )
        revealed = tuple(sorted(shown))
        key = (revealed, tuple(sorted(listed_set)), tuple(refunded))
        memo = self._candidates
        if memo is not None and memo[0] is task and memo[1] == key:
            self._candidates = (task, key, memo[2], quick)
            return list(memo[2])
        world, blocks = self.world, self._blocks
        quoted = tuple(q for q in _QUOTED.findall(task.ticket) if parse_money(q) is None)
        texts: list[str] = [call_json("list_promotions", {})]
        texts += [call_json("find_customer", {"email": e}) for e in _EMAIL.findall(task.ticket)]
        amounts: set[int] = set()
        for rid in revealed:
            # What an id adds depends on the ticket and, for an item, on whether its payment,
            # its model's listing and which variants were shown: built once per context.
            context: tuple = ()
            if rid[:3] == "itm":
                item = world.items[rid]
                order = world.orders[item.order_id]
                model = world.products[item.product_id].model
                variants = (
                    tuple(p for p in world.models[model] if p in shown)
                    if model in listed_set
                    else None
                )
                context = (order.payment_id in shown, variants)
            block = blocks.get((rid, context, quoted))
            if block is None:
                block = blocks[(rid, context, quoted)] = self._id_calls(rid, quoted, context)
            texts += block[0]
            amounts.update(block[1])
        # What refund_item answered in this episode ("refunded": amount), and their sum.
        refunds = [world.items[t].qty * world.items[t].price_cents for t in refunded]
        amounts.update(refunds)
        amounts.update((0, sum(refunds)))
        for cents in sorted(amounts):
            texts.append(call_json("submit", {"answer": f"{cents // 100}.{cents % 100:02d}"}))
        out = list(dict.fromkeys(texts))
        self._candidates = (task, key, tuple(out), quick)
        return list(out)

    def _shown_key(self) -> tuple:
        """A cheap key equal between two calls only if nothing the state digest and the
        candidate calls read changed in between (an equal key may come from equal content).

        Within an episode the ids shown and the models listed only grow, and a customer's
        pages read only rise, so their sizes (and the pages' sum) tell a change apart on the
        same :class:`~budget_envs.envs.tooluse.oracle.Progress`; a write (the only thing
        that changes a slot or a row) makes a new row-log text; a restore, a reset or a
        permanent fault puts a new object in place.
        """
        pr = self._pr
        pages = pr.pages_seen
        return (
            pr,
            len(pr.revealed),
            len(pr.listed),
            len(pages),
            sum(pages.values()),
            pr.submitted,
            pr.answer_ok,
            self._rows.text(),
            self._down,
            self._stale,
        )

    def _id_calls(
        self, rid: str, quoted: tuple[str, ...], context: tuple = ()
    ) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The candidate calls one shown id adds (in order) and the amounts it shows; for an
        item, ``context`` is (its payment shown, the variants of its model shown or None)."""
        world = self.world
        calls: list[tuple[str, dict]] = []
        amounts: list[int] = []
        kind = rid[:3]
        if kind == "cus":
            calls.append(("list_orders", {"customer_id": rid}))
            calls.append(("get_loyalty_points", {"customer_id": rid}))
        elif kind == "cur":
            calls.append(
                ("list_orders", {"customer_id": world.cursor_owner[rid][0], "cursor": rid})
            )
        elif kind == "ord":
            calls.append(("get_order", {"order_id": rid}))
            calls.append(("track_shipment", {"order_id": rid}))
            for reason in TOOL_BY_NAME["cancel_order"].params[1].enum:
                calls.append(("cancel_order", {"order_id": rid, "reason": reason}))
            for text in quoted:
                calls.append(("update_address", {"order_id": rid, "address": text}))
            for text in [*quoted, ""]:
                calls.append(("set_order_note", {"order_id": rid, "note": text}))
        elif kind == "itm":
            item = world.items[rid]
            order = world.orders[item.order_id]
            amounts.append(item.price_cents)
            paid, variants = context
            if paid:
                args = {"order_id": order.id, "item_id": rid, "payment_id": order.payment_id}
                calls.append(("refund_item", args))
            for pid in variants or ():
                if pid != item.product_id:
                    args = {"order_id": order.id, "item_id": rid, "new_product_id": pid}
                    calls.append(("exchange_item", args))
        elif kind == "prd":
            amounts.append(world.products[rid].price_cents)
            for name in ("list_variants", "get_product", "get_product_reviews"):
                calls.append((name, {"product_id": rid}))
        return tuple(call_json(name, args) for name, args in calls), tuple(amounts)

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random well-formed call: a uniform tool, arguments drawn from the ids shown so far.

        This is the random agent (writes and ``submit`` included); when a tool needs an id that
        has not been shown yet, a ticket email lookup is sent instead.
        """
        self._require_reset()
        pr = self._pr
        name = TOOL_NAMES[int(rng.integers(len(TOOL_NAMES)))]
        shown: dict[str, list[str]] = {}
        for rid in sorted(pr.revealed):
            shown.setdefault(rid[:3], []).append(rid)
        args: dict[str, str] = {}
        for p in TOOL_BY_NAME[name].params:
            if p.kind == "id":
                pool = shown.get(p.prefix, [])
                if not pool:
                    if not p.required:
                        continue
                    return self._lookup_call(rng)
                args[p.name] = pool[int(rng.integers(len(pool)))]
            elif p.kind == "enum":
                args[p.name] = p.enum[int(rng.integers(len(p.enum)))]
            elif p.name == "email":
                return self._lookup_call(rng)
            elif p.name == "answer":
                args[p.name] = f"{int(rng.integers(0, 400))}.{int(rng.integers(0, 100)):02d}"
            else:
                args[p.name] = _SAMPLE_TEXT[int(rng.integers(len(_SAMPLE_TEXT)))]
        return call_json(name, args)

    def _lookup_call(self, rng: np.random.Generator) -> str:
        emails = self._task.emails
        if not emails:
            return call_json("list_promotions", {})
        return call_json("find_customer", {"email": emails[int(rng.integers(len(emails)))]})
