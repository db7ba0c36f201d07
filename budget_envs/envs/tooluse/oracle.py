"""Exact oracle for ToolUse: a small model of the episode and its cost-to-go.

The model tracks what the database state matters for (write *slots*) and what the agent has been
shown (*revealed* ids). A slot is one thing a single write call sets:

* ``("status", order)``: ``(status, cancel_reason)``; ``cancel_order``; irreversible;
* ``("address", order)``: the address; ``update_address`` (pending orders only);
* ``("note", order)``: the note or None; ``set_order_note`` (always allowed);
* ``("item", item)``: ``(status, payment or new product)``; ``refund_item`` / ``exchange_item``;
  irreversible.

Tools accept an id only once a tool result (or the ticket) has shown it, and each id is shown by
exactly one kind of read (customer <- ``find_customer``; orders and the next cursor <- a
``list_orders`` page, reachable only through the previous page's cursor; items, payment and
products <- ``get_order``). An exchange target must also come from a ``list_variants`` of its model
(the stock check), tracked per model. So the fewest turns to success is exactly: the reads forced
by the ids that the remaining writes need, plus one call per slot that differs from gold, plus
``submit``. Write order matters in one case only: a wrong address must be fixed before the gold
cancel of that order (a cancelled order cannot be re-addressed); ``oracle_calls`` checks every
candidate against the cost-to-go, so it never proposes the stranding cancel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from budget_envs.core import UNREACHABLE
from budget_envs.envs.tooluse.tasks import Task
from budget_envs.envs.tooluse.tools import call_json
from budget_envs.envs.tooluse.world import World

__all__ = ["Progress", "apply_call", "cost_to_go", "needed_tools", "oracle_calls", "score"]

_IRREVERSIBLE = ("status", "item")


@dataclass
class Progress:
    """The Python side of an episode: revealed ids, pages read, changed slots, submission."""

    revealed: set[str] = field(default_factory=set)
    pages_seen: dict[str, int] = field(default_factory=dict)
    changed: dict[tuple[str, str], object] = field(default_factory=dict)
    submitted: bool = False
    answer_ok: bool = False
    listed: set[str] = field(default_factory=set)

    def copy(self) -> Progress:
        return Progress(
            set(self.revealed),
            dict(self.pages_seen),
            dict(self.changed),
            self.submitted,
            self.answer_ok,
            set(self.listed),
        )


def initial_value(world: World, slot: tuple[str, str]):
    kind, target = slot
    if kind == "status":
        return (world.orders[target].status, None)
    if kind == "address":
        return world.orders[target].address
    if kind == "note":
        return None
    return (world.items[target].status, None)


class Gold:
    """A task's gold slots with fast lookups."""

    def __init__(self, world: World, task: Task) -> None:
        self.world = world
        self.task = task
        self.slots: dict[tuple[str, str], object] = dict(task.gold)

    def value(self, slot):
        v = self.slots.get(slot, _MISSING)
        return initial_value(self.world, slot) if v is _MISSING else v


_MISSING = object()


def current(world: World, pr: Progress, slot):
    v = pr.changed.get(slot, _MISSING)
    return initial_value(world, slot) if v is _MISSING else v


def set_slot(world: World, pr: Progress, slot, value) -> None:
    if value == initial_value(world, slot):
        pr.changed.pop(slot, None)
    else:
        pr.changed[slot] = value


def diff_slots(gold: Gold, pr: Progress) -> list[tuple[str, str]]:
    """Slots whose current value differs from gold, in a fixed order."""
    world = gold.world
    out = [s for s, v in gold.slots.items() if current(world, pr, s) != v]
    out += [s for s in pr.changed if s not in gold.slots and pr.changed[s] != gold.value(s)]
    return out


def is_lost(gold: Gold, pr: Progress, won: bool = False) -> bool:
    """Whether success has become impossible."""
    if pr.submitted:
        return not won
    world = gold.world
    for slot, value in pr.changed.items():
        kind, target = slot
        if kind in _IRREVERSIBLE and value != gold.value(slot):
            return True
        if kind == "address" and value != gold.value(slot):
            if current(world, pr, ("status", target))[0] != "pending":
                return True
    # A correct cancel can strand a wrong address written earlier on the same order.
    for slot in gold.slots:
        if slot[0] == "status" and slot in pr.changed:
            addr = ("address", slot[1])
            if current(world, pr, addr) != gold.value(addr):
                return True
    return False


def cost_to_go(gold: Gold, pr: Progress, won: bool = False) -> int:
    """Fewest turns from this state to success (see the module docstring)."""
    if won:
        return 0
    if is_lost(gold, pr, won):
        return UNREACHABLE
    world = gold.world
    revealed = pr.revealed
    diff = diff_slots(gold, pr)
    need_orders: set[str] = set()
    forced_get: set[str] = set()
    variants: list[str] = []
    for slot in diff:
        kind, target = slot
        if kind != "item":
            need_orders.add(target)
            continue
        oid = world.items[target].order_id
        need_orders.add(oid)
        value = gold.value(slot)
        if target not in revealed or (value[0] == "refunded" and value[1] not in revealed):
            forced_get.add(oid)
        if value[0] == "exchanged" and world.products[value[1]].model not in pr.listed:
            variants.append(value[1])
    reads = len(forced_get)
    deepest: dict[str, int] = {}
    for oid in need_orders | forced_get:
        if oid not in revealed:
            order = world.orders[oid]
            deepest[order.customer_id] = max(deepest.get(order.customer_id, 0), order.page)
    for cid, page in deepest.items():
        reads += page - pr.pages_seen.get(cid, 0)
        if cid not in revealed:
            reads += 1
    reads += len({world.products[v].model for v in variants})
    return reads + len(diff) + 1


def fix_call(gold: Gold, slot) -> tuple[str, dict]:
    """The write call that sets ``slot`` to its gold value."""
    world = gold.world
    kind, target = slot
    value = gold.value(slot)
    if kind == "status":
        return "cancel_order", {"order_id": target, "reason": value[1]}
    if kind == "address":
        return "update_address", {"order_id": target, "address": value}
    if kind == "note":
        return "set_order_note", {"order_id": target, "note": value or ""}
    oid = world.items[target].order_id
    if value[0] == "refunded":
        return "refund_item", {"order_id": oid, "item_id": target, "payment_id": value[1]}
    return "exchange_item", {"order_id": oid, "item_id": target, "new_product_id": value[1]}


def apply_call(world: World, pr: Progress, name: str, args: dict) -> None:
    """Update the model for a call that succeeded (reads reveal, writes set a slot)."""
    if name == "find_customer":
        pr.revealed.add(world.email_to_customer[args["email"].lower()])
    elif name == "list_orders":
        cid, cursor = args["customer_id"], args.get("cursor")
        page = 1 if cursor is None else world.cursor_owner[cursor][1]
        pr.revealed.update(world.page_reveals(cid, page))
        if page > pr.pages_seen.get(cid, 0):
            pr.pages_seen[cid] = page
    elif name == "get_order":
        pr.revealed.update(world.order_reveals(args["order_id"]))
    elif name == "list_variants":
        pr.revealed.update(world.variant_reveals(args["product_id"]))
        pr.listed.add(world.products[args["product_id"]].model)
    elif name == "cancel_order":
        set_slot(world, pr, ("status", args["order_id"]), ("cancelled", args["reason"]))
    elif name == "update_address":
        set_slot(world, pr, ("address", args["order_id"]), args["address"])
    elif name == "set_order_note":
        set_slot(world, pr, ("note", args["order_id"]), args["note"] or None)
    elif name == "refund_item":
        set_slot(world, pr, ("item", args["item_id"]), ("refunded", args["payment_id"]))
    elif name == "exchange_item":
        set_slot(world, pr, ("item", args["item_id"]), ("exchanged", args["new_product_id"]))


def _candidate_calls(gold: Gold, pr: Progress) -> list[tuple[str, dict]]:
    world = gold.world
    out: list[tuple[str, dict]] = []
    for email in gold.task.emails:
        if world.email_to_customer[email] not in pr.revealed:
            out.append(("find_customer", {"email": email}))
    for rid in sorted(pr.revealed):
        prefix = rid[:3]
        if prefix == "cus":
            page = pr.pages_seen.get(rid, 0) + 1
            if page <= world.pages(rid):
                args = {"customer_id": rid}
                if page > 1:
                    args["cursor"] = world.customers[rid].cursors[page - 1]
                out.append(("list_orders", args))
        elif prefix == "ord":
            if not pr.revealed.issuperset(world.order_reveals(rid)):
                out.append(("get_order", {"order_id": rid}))
        elif prefix == "prd":
            if world.products[rid].model not in pr.listed:
                out.append(("list_variants", {"product_id": rid}))
    for slot in diff_slots(gold, pr):
        name, args = fix_call(gold, slot)
        if all(v in pr.revealed for k, v in args.items() if k.endswith("_id")) and (
            name != "exchange_item" or world.products[args["new_product_id"]].model in pr.listed
        ):
            out.append((name, args))
    return out


def oracle_calls(gold: Gold, pr: Progress, won: bool = False) -> list[str]:
    """Every call (as action text) that lowers the cost-to-go by one."""
    if won or pr.submitted:
        return []
    now = cost_to_go(gold, pr)
    if now >= UNREACHABLE:
        return []
    if now == 1:
        answer = f"{gold.task.answer_cents // 100}.{gold.task.answer_cents % 100:02d}"
        return [call_json("submit", {"answer": answer})]
    out = []
    for name, args in _candidate_calls(gold, pr):
        nxt = pr.copy()
        apply_call(gold.world, nxt, name, args)
        if cost_to_go(gold, nxt) == now - 1:
            out.append(call_json(name, args))
    return sorted(set(out))


def needed_tools(gold: Gold, pr: Progress) -> set[str]:
    """The tools a shortest way to success from here calls (empty once lost or submitted).

    Every call of a shortest way is forced (each id has one kind of read, each slot one write),
    so following the oracle once collects the tools every shortest way needs.
    """
    from budget_envs.envs.tooluse.tools import parse_action  # noqa: PLC0415 (import cycle)

    pr = pr.copy()
    tools: set[str] = set()
    for _ in range(cost_to_go(gold, pr) if cost_to_go(gold, pr) < UNREACHABLE else 0):
        calls = oracle_calls(gold, pr)
        if not calls:
            break
        name, args = parse_action(calls[0])
        tools.add(name)
        if name == "submit":
            break
        apply_call(gold.world, pr, name, args)
    return tools


def score(gold: Gold, pr: Progress, won: bool) -> float:
    """Gold changes applied (plus a correct answer) minus collateral changes, in [0, 1]."""
    if won:
        return 1.0
    world = gold.world
    applied = sum(1 for s, v in gold.slots.items() if current(world, pr, s) == v)
    wrong = sum(1 for s, v in pr.changed.items() if v != gold.value(s))
    points = applied - wrong + (1 if pr.submitted and pr.answer_ok else 0)
    return max(0.0, min(1.0, points / (len(gold.slots) + 1)))
