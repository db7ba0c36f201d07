"""Ticket generator for ToolUse: a task is drawn from (world seed, level, index) alone.

A ticket asks for several operations on a customer's orders (cancel, re-address, note, return).
Returns follow a store policy with three branches (refund, exchange, decline), so the gold
program depends on facts the agent has to read. Generation is cheap and lazy (one task at reset).

The ``test_unseen`` split (ids ``test_unseen/L<level>-<index>``) words its tickets with request
templates no other split uses (:data:`TEMPLATES`), and adds a request type of its own: a *swap*
(an exchange whatever the payment, inside the return window; declined outside it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from budget_envs.envs.tooluse.world import RETURN_WINDOW, TODAY, World

__all__ = [
    "LEVELS",
    "DECLINE_NOTE",
    "TEMPLATES",
    "UNSEEN_POLICY",
    "LevelSpec",
    "Op",
    "Task",
    "make_task",
    "parse_task_id",
]

#: The note that declines a return outside the window (the policy quotes it verbatim).
DECLINE_NOTE = "Return declined: outside the 30-day window"

_REASONS = {
    "ordered_by_mistake": "I ordered it by mistake",
    "no_longer_needed": "I no longer need it",
}
_NOTES = (
    "Leave the parcel at the back door",
    "Call the customer before delivery",
    "Gift order: do not include the invoice",
    "Customer reports the box arrived damaged",
    "Customer asked for a paper receipt",
)
_STREETS = ("Larch Lane", "Harbor Road", "Mill Street", "Orchard Way", "Station Road", "Bay Drive")

POLICY = (
    f"Store policy: today is day {TODAY}. An item can be returned when its order is at most "
    f"{RETURN_WINDOW} days old (today minus the order day is {RETURN_WINDOW} or less). A return "
    f'outside that window is declined by setting the order note to exactly "{DECLINE_NOTE}" '
    "(no refund, no exchange). Orders paid by gift card are never refunded: exchange the item for "
    "the variant the customer names. Any other return is refunded to the order's payment. Only "
    "pending orders can be cancelled or re-addressed. When every request is handled, call submit "
    "with the total amount refunded for this ticket in dollars with two decimals "
    '(e.g. "42.50"; "0.00" if nothing was refunded).'
)


#: The extra policy sentence of ``test_unseen`` tickets (the swap request exists only there).
UNSEEN_POLICY = (
    "A request to swap an item for another variant is an exchange for that variant, whatever the "
    "payment, when the order is inside the return window; outside it the swap is declined like a "
    "return."
)

#: Ticket templates: ``"seen"`` words every ticket of ``train``, ``valid`` and ``test``;
#: ``"unseen"`` words the ``test_unseen`` tickets. No template text is shared by the two sets.
#: ``header`` introduces a customer's requests, ``given`` a ticket about a named order, ``when``
#: names an order by its day; the request kinds are ``cancel``, ``address``, ``note``,
#: ``return`` and (unseen only) ``swap``.
TEMPLATES: dict[str, dict[str, str]] = {
    "seen": {
        "header": "Customer {name} <{email}> writes:",
        "given": "A customer writes about order {order}:",
        "when": "my order from day {day}",
        "cancel": "Please cancel {when}: {reason}.",
        "address": 'Please ship {when} to "{address}" instead.',
        "note": 'Please put the note "{note}" on {when}.',
        "return": (
            "I want to return the {product} ({color}, size {size}) I got in {when}; if it "
            "cannot be refunded, I will take the {want_color} one in size {want_size} instead."
        ),
    },
    "unseen": {
        "header": "Message from {name} <{email}>:",
        "given": "Message about order {order}:",
        "when": "the order I placed on day {day}",
        "cancel": "Stop {when} before it ships ({reason}).",
        "address": 'Deliver {when} to this address from now on: "{address}".',
        "note": 'Add this remark to {when}: "{note}".',
        "return": (
            "Sending back the {product} ({color}, size {size}) from {when}; should a refund be "
            "ruled out, the {want_color} variant in size {want_size} would do."
        ),
        "swap": (
            "Swap the {product} ({color}, size {size}) from {when} for the {want_color} variant "
            "in size {want_size}, please."
        ),
    },
}


@dataclass(frozen=True)
class LevelSpec:
    """How hard a level is: customers per ticket, requests per customer, deepest page used."""

    customers: tuple[int, int]
    ops: tuple[int, int]
    max_page: int
    min_deep: int
    given_order_p: float = 0.0


LEVELS: dict[int, LevelSpec] = {
    1: LevelSpec(customers=(1, 1), ops=(1, 1), max_page=1, min_deep=1, given_order_p=0.6),
    2: LevelSpec(customers=(1, 1), ops=(2, 2), max_page=2, min_deep=1),
    3: LevelSpec(customers=(1, 1), ops=(3, 3), max_page=3, min_deep=2),
    4: LevelSpec(customers=(2, 2), ops=(2, 3), max_page=4, min_deep=3),
    5: LevelSpec(customers=(3, 3), ops=(3, 4), max_page=5, min_deep=4),
}


@dataclass(frozen=True)
class Op:
    """One request of a ticket."""

    kind: str  # "cancel" | "address" | "note" | "return" | "swap" (test_unseen only)
    order_id: str
    item_id: str | None = None
    value: str | None = None  # cancel reason, new address, note text, or wanted product id


@dataclass(frozen=True)
class Task:
    """A ticket with its gold end state.

    ``gold`` maps every slot the gold program changes to its gold value (see ``oracle.py`` for
    slots); ``gold_calls`` is that program as (tool, arguments) pairs.
    """

    task_id: str
    level: int
    ticket: str
    emails: tuple[str, ...]
    customers: tuple[str, ...]
    given_orders: tuple[str, ...]
    ops: tuple[Op, ...]
    gold: tuple[tuple[tuple[str, str], tuple], ...]
    gold_calls: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    answer_cents: int


def parse_task_id(task_id: str) -> tuple[int, int]:
    """``"L3-00042"`` -> ``(3, 42)``; a held-out split's ``"test/L3-00042"`` too."""
    level, _, index = task_id.rpartition("/")[2].partition("-")
    return int(level[1:]), int(index)


def _returnable(world: World, item_id: str) -> list[str]:
    """In-stock alternative variants of a delivered item (empty when it cannot be a return)."""
    item = world.items[item_id]
    if item.status != "delivered":
        return []
    prod = world.products[item.product_id]
    return [p for p in world.models[prod.model] if p != prod.id and world.products[p].stock > 0]


def _candidates(
    world: World, cid: str, max_page: int, unseen: bool = False
) -> list[tuple[str, str, str | None]]:
    """Possible requests on a customer's orders up to ``max_page`` (memoized on the world).

    With ``unseen`` (the ``test_unseen`` split) every second return request is a swap."""
    key = ("candidates", cid, max_page, unseen)
    out = world.memo.get(key)
    if out is None:
        out = _build_candidates(world, cid, max_page)
        if unseen:
            out = [
                ("swap", o, i) if k == "return" and n % 2 else (k, o, i)
                for n, (k, o, i) in enumerate(out)
            ]
        world.memo[key] = out
    return out


def _build_candidates(world: World, cid: str, max_page: int) -> list[tuple[str, str, str | None]]:
    out: list[tuple[str, str, str | None]] = []
    for oid in world.customers[cid].orders:
        order = world.orders[oid]
        if order.page > max_page:
            break
        if order.status == "pending":
            out += [("cancel", oid, None), ("address", oid, None), ("note", oid, None)]
        elif order.status == "delivered":
            out.append(("note", oid, None))
            for iid in order.items:
                if _returnable(world, iid):
                    out += [("return", oid, iid)] * 2
    return out


def _describe(world: World, op: Op, words: dict[str, str], when: str | None = None) -> str:
    """The request ``op`` in the templates ``words`` (``when`` replaces the order's day)."""
    order = world.orders[op.order_id]
    when = words["when"].format(day=order.day) if when is None else when
    if op.kind == "cancel":
        return words["cancel"].format(when=when, reason=_REASONS[op.value])
    if op.kind == "address":
        return words["address"].format(when=when, address=op.value)
    if op.kind == "note":
        return words["note"].format(when=when, note=op.value)
    item = world.items[op.item_id]
    prod = world.products[item.product_id]
    want = world.products[op.value]
    return words[op.kind].format(
        product=prod.name,
        color=prod.color,
        size=prod.size,
        when=when,
        want_color=want.color,
        want_size=want.size,
    )


def _gold(world: World, op: Op) -> tuple[tuple[str, str], tuple | str | None]:
    order = world.orders[op.order_id]
    if op.kind == "cancel":
        return ("status", op.order_id), ("cancelled", op.value)
    if op.kind == "address":
        return ("address", op.order_id), op.value
    if op.kind == "note":
        return ("note", op.order_id), op.value
    if TODAY - order.day > RETURN_WINDOW:
        return ("note", op.order_id), DECLINE_NOTE
    if op.kind == "swap" or order.method == "gift_card":
        return ("item", op.item_id), ("exchanged", op.value)
    return ("item", op.item_id), ("refunded", order.payment_id)


def _gold_call(slot: tuple[str, str], value, world: World) -> tuple[str, tuple]:
    kind, target = slot
    if kind == "status":
        return "cancel_order", (("order_id", target), ("reason", value[1]))
    if kind == "address":
        return "update_address", (("order_id", target), ("address", value))
    if kind == "note":
        return "set_order_note", (("order_id", target), ("note", value or ""))
    item = world.items[target]
    if value[0] == "refunded":
        return "refund_item", (
            ("order_id", item.order_id),
            ("item_id", target),
            ("payment_id", value[1]),
        )
    return "exchange_item", (
        ("order_id", item.order_id),
        ("item_id", target),
        ("new_product_id", value[1]),
    )


def _draw_op(world: World, rng: np.random.Generator, kind: str, oid: str, iid: str | None) -> Op:
    if kind == "cancel":
        reasons = sorted(_REASONS)
        return Op(kind, oid, None, reasons[int(rng.integers(len(reasons)))])
    if kind == "address":
        street = _STREETS[int(rng.integers(len(_STREETS)))]
        city = world.customers[world.orders[oid].customer_id].city
        return Op(kind, oid, None, f"{int(rng.integers(1, 400))} {street}, {city}")
    if kind == "note":
        return Op(kind, oid, None, _NOTES[int(rng.integers(len(_NOTES)))])
    alts = _returnable(world, iid)
    return Op(kind, oid, iid, alts[int(rng.integers(len(alts)))])


def make_task(world: World, task_id: str) -> Task:
    """Draw the task ``task_id`` (``"L<level>-<index>"``) of ``world``; deterministic.

    A ``test_unseen/`` id is worded with the unseen templates and may ask for swaps."""
    level, index = parse_task_id(task_id)
    spec = LEVELS[level]
    unseen = task_id.startswith("test_unseen/")
    words = TEMPLATES["unseen" if unseen else "seen"]
    returns = ("return", "swap") if unseen else ("return",)
    rng = np.random.default_rng([0x7A5C, world.seed, level, index])
    cids = list(world.customers)
    if spec.given_order_p and rng.random() < spec.given_order_p:
        # The ticket names the order id itself: a return on an order inside the window.
        while True:
            cid = cids[int(rng.integers(len(cids)))]
            cands = [
                (k, o, i)
                for k, o, i in _candidates(world, cid, world.pages(cid), unseen)
                if k in returns and TODAY - world.orders[o].day <= RETURN_WINDOW
            ]
            if cands:
                break
        kind, oid, iid = cands[int(rng.integers(len(cands)))]
        op = _draw_op(world, rng, kind, oid, iid)
        text = _describe(world, op, words, when=f"order {oid}")
        ticket = f"Support ticket {task_id}. {words['given'].format(order=oid)}\n1. {text}"
        return _finish(world, task_id, level, ticket, (), (), (oid,), (op,), unseen)

    n_cust = int(rng.integers(spec.customers[0], spec.customers[1] + 1))
    eligible = world.memo.get(("eligible", spec.min_deep))
    if eligible is None:
        eligible = [c for c in cids if world.pages(c) >= spec.min_deep]
        world.memo[("eligible", spec.min_deep)] = eligible
    chosen: list[str] = []
    plan: list[list[Op]] = []
    while len(chosen) < n_cust:
        cid = eligible[int(rng.integers(len(eligible)))]
        if cid in chosen:
            continue
        n_ops = int(rng.integers(spec.ops[0], spec.ops[1] + 1))
        cands = _candidates(world, cid, spec.max_page, unseen)
        deep = world.memo.get(("deep", cid, spec.max_page, spec.min_deep, unseen))
        if deep is None:
            deep = [c for c in cands if world.orders[c[1]].page >= spec.min_deep]
            world.memo[("deep", cid, spec.max_page, spec.min_deep, unseen)] = deep
        if not deep:
            continue
        picks = [deep[int(rng.integers(len(deep)))]]
        used = {picks[0][1]}
        for _ in range(50):
            if len(picks) >= n_ops:
                break
            cand = cands[int(rng.integers(len(cands)))]
            if cand[1] not in used:
                used.add(cand[1])
                picks.append(cand)
        if len(picks) < n_ops:
            continue
        # Requests in the order of the customer's order list, which reads naturally.
        picks.sort(key=lambda c: world.orders[c[1]].seq)
        chosen.append(cid)
        plan.append([_draw_op(world, rng, k, o, i) for k, o, i in picks])

    lines = [f"Support ticket {task_id}."]
    n = 1
    for cid, ops in zip(chosen, plan):
        cust = world.customers[cid]
        lines.append(words["header"].format(name=cust.name, email=cust.email))
        for op in ops:
            lines.append(f"{n}. {_describe(world, op, words)}")
            n += 1
    emails = tuple(world.customers[c].email for c in chosen)
    ops_all = tuple(op for ops in plan for op in ops)
    return _finish(
        world, task_id, level, "\n".join(lines), emails, tuple(chosen), (), ops_all, unseen
    )


def _finish(
    world: World,
    task_id: str,
    level: int,
    ticket: str,
    emails: tuple,
    customers: tuple,
    given: tuple,
    ops: tuple[Op, ...],
    unseen: bool = False,
) -> Task:
    gold = [_gold(world, op) for op in ops]
    answer = 0
    for (kind, target), value in gold:
        if kind == "item" and value[0] == "refunded":
            item = world.items[target]
            answer += item.qty * item.price_cents
    return Task(
        task_id=task_id,
        level=level,
        ticket=f"{ticket}\n{POLICY} {UNSEEN_POLICY}" if unseen else f"{ticket}\n{POLICY}",
        emails=emails,
        customers=customers,
        given_orders=given,
        ops=ops,
        gold=tuple(gold),
        gold_calls=tuple(_gold_call(slot, value, world) for slot, value in gold),
        answer_cents=answer,
    )
