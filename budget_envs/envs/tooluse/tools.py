"""ToolUse tools: their OpenAI schemas, the parser for assistant messages, and the SQL behind them.

Every tool runs fixed, parameterized SQL; argument text never becomes SQL. A tool that cannot do
what was asked raises :class:`ToolError` before it changes anything.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from budget_envs._util import tool_call_action
from budget_envs.envs.tooluse.world import PAGE_SIZE, World
from budget_envs.errors import ActionRejected, ToolError

__all__ = [
    "READ_TOOLS",
    "RowLog",
    "TOOL_NAMES",
    "TOOLS_SCHEMA",
    "WRITE_TOOLS",
    "ToolError",
    "call_json",
    "dump_tables",
    "matches_gold",
    "parse_action",
    "parse_money",
    "run_tool",
    "write_keys",
]

_ID_RE = {
    p: re.compile(rf"^{p}_[0-9a-f]{{8}}$") for p in ("cus", "ord", "itm", "pay", "prd", "cur")
}


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "id" | "text" | "enum"
    description: str
    prefix: str = ""
    required: bool = True
    max_length: int = 200
    enum: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tool:
    name: str
    kind: str  # "read" | "write" | "submit"
    description: str
    params: tuple[Param, ...] = ()


def _id(name: str, prefix: str, what: str, required: bool = True) -> Param:
    return Param(name, "id", f"{what} id, as shown by an earlier tool result", prefix, required)


TOOLS: tuple[Tool, ...] = (
    Tool(
        "find_customer",
        "read",
        "Look up a customer by email address.",
        (Param("email", "text", "the customer's email address", max_length=120),),
    ),
    Tool(
        "list_orders",
        "read",
        f"List a customer's orders, oldest first, {PAGE_SIZE} per page. Pass the next_cursor of "
        "a page to get the following page.",
        (
            _id("customer_id", "cus", "customer"),
            _id("cursor", "cur", "page cursor (omit for the first page)", required=False),
        ),
    ),
    Tool(
        "get_order",
        "read",
        "Show an order: status, address, note, payment and items.",
        (_id("order_id", "ord", "order"),),
    ),
    Tool(
        "list_variants",
        "read",
        "List every variant (colour, size, stock) of a product's model.",
        (_id("product_id", "prd", "product"),),
    ),
    Tool(
        "get_product",
        "read",
        "Show one product: name, colour, size, price, stock.",
        (_id("product_id", "prd", "product"),),
    ),
    Tool(
        "track_shipment",
        "read",
        "Show the carrier and shipping state of an order.",
        (_id("order_id", "ord", "order"),),
    ),
    Tool(
        "get_product_reviews",
        "read",
        "Show the average rating of a product.",
        (_id("product_id", "prd", "product"),),
    ),
    Tool("list_promotions", "read", "List the store's current promotions."),
    Tool(
        "get_loyalty_points",
        "read",
        "Show a customer's loyalty points and tier.",
        (_id("customer_id", "cus", "customer"),),
    ),
    Tool(
        "cancel_order",
        "write",
        "Cancel a pending order. Irreversible.",
        (
            _id("order_id", "ord", "order"),
            Param(
                "reason",
                "enum",
                "why the order is cancelled",
                enum=("no_longer_needed", "ordered_by_mistake"),
            ),
        ),
    ),
    Tool(
        "update_address",
        "write",
        "Change the shipping address of a pending order.",
        (_id("order_id", "ord", "order"), Param("address", "text", "the full new address")),
    ),
    Tool(
        "set_order_note",
        "write",
        "Set the note of an order; an empty note clears it.",
        (
            _id("order_id", "ord", "order"),
            Param("note", "text", "the note text (empty string to clear)"),
        ),
    ),
    Tool(
        "refund_item",
        "write",
        "Refund a delivered item to a payment of its order. Irreversible.",
        (
            _id("order_id", "ord", "order"),
            _id("item_id", "itm", "item"),
            _id("payment_id", "pay", "payment"),
        ),
    ),
    Tool(
        "exchange_item",
        "write",
        "Exchange a delivered item for another in-stock variant of the same model. Irreversible.",
        (
            _id("order_id", "ord", "order"),
            _id("item_id", "itm", "item"),
            _id("new_product_id", "prd", "product to send instead"),
        ),
    ),
    Tool(
        "submit",
        "submit",
        "Finish the ticket with the final answer. Ends the episode.",
        (Param("answer", "text", "the final answer asked for by the ticket", max_length=100),),
    ),
)
TOOL_BY_NAME: dict[str, Tool] = {t.name: t for t in TOOLS}
#: Each tool's argument names (for the check of unexpected arguments).
_PARAM_NAMES: dict[str, frozenset[str]] = {
    t.name: frozenset(p.name for p in t.params) for t in TOOLS
}
TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in TOOLS)
READ_TOOLS = frozenset(t.name for t in TOOLS if t.kind == "read")
WRITE_TOOLS = frozenset(t.name for t in TOOLS if t.kind == "write")


def _schema(tool: Tool) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for p in tool.params:
        spec: dict[str, Any] = {"type": "string", "description": p.description}
        if p.kind == "id":
            spec["pattern"] = f"^{p.prefix}_[0-9a-f]{{8}}$"
        elif p.kind == "enum":
            spec["enum"] = list(p.enum)
        else:
            spec["maxLength"] = p.max_length
        props[p.name] = spec
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": [p.name for p in tool.params if p.required],
                "additionalProperties": False,
            },
        },
    }


#: The OpenAI tools schema (``info["tools"]``); shared, do not mutate.
TOOLS_SCHEMA: list[dict[str, Any]] = [_schema(t) for t in TOOLS]

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


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


# --------------------------------------------------------------------------- SQL behind the tools
def _one(conn: sqlite3.Connection, sql: str, params: tuple) -> tuple | None:
    return conn.execute(sql, params).fetchone()


def _order_row(conn: sqlite3.Connection, order_id: str) -> tuple:
    row = _one(conn, "SELECT status, day FROM orders WHERE id=?", (order_id,))
    if row is None:
        raise ToolError(f"Error: no order with id {order_id}.")
    return row


def run_tool(
    conn: sqlite3.Connection, world: World, name: str, args: dict[str, str | None]
) -> dict[str, Any]:
    """Run a read or write tool (not ``submit``) on ``conn`` and return its JSON result.

    Ids are assumed to have passed the env's visibility check; the SQL checks existence and
    state. Raises :class:`ToolError` before any change when the call cannot be done.
    """
    return _RUNNERS[name](conn, world, args)


def _find_customer(conn, world, a):
    row = _one(
        conn,
        "SELECT id, name, email, city, tier FROM customers WHERE email=?",
        (a["email"].lower(),),
    )
    if row is None:
        raise ToolError(f"Error: no customer with email {a['email'][:120]!r}.")
    return {"customer_id": row[0], "name": row[1], "email": row[2], "city": row[3], "tier": row[4]}


def _list_orders(conn, world, a):
    cid, cursor = a["customer_id"], a["cursor"]
    if cid not in world.customers:
        raise ToolError(f"Error: no customer with id {cid}.")
    page = 1
    if cursor is not None:
        owner = world.cursor_owner.get(cursor)
        if owner is None or owner[0] != cid:
            raise ToolError(f"Error: cursor {cursor} does not belong to customer {cid}.")
        page = owner[1]
    rows = conn.execute(
        "SELECT o.id, o.day, o.status, p.amount_cents, "
        "(SELECT count(*) FROM order_items i WHERE i.order_id=o.id) "
        "FROM orders o JOIN payments p ON p.order_id=o.id WHERE o.customer_id=? "
        "ORDER BY o.seq LIMIT ? OFFSET ?",
        (cid, PAGE_SIZE, (page - 1) * PAGE_SIZE),
    ).fetchall()
    cursors = world.customers[cid].cursors
    return {
        "customer_id": cid,
        "page": page,
        "pages": len(cursors),
        "orders": [
            {"order_id": r[0], "day": r[1], "status": r[2], "total": _money(r[3]), "items": r[4]}
            for r in rows
        ],
        "next_cursor": cursors[page] if page < len(cursors) else None,
    }


def _get_order(conn, world, a):
    oid = a["order_id"]
    row = _one(
        conn,
        "SELECT o.id, o.day, o.status, o.address, o.note, o.cancel_reason, p.id, "
        "p.method, p.amount_cents FROM orders o JOIN payments p ON p.order_id=o.id "
        "WHERE o.id=?",
        (oid,),
    )
    if row is None:
        raise ToolError(f"Error: no order with id {oid}.")
    items = conn.execute(
        "SELECT i.id, i.product_id, p.name, p.color, p.size, i.qty, i.price_cents, i.status, "
        "i.exchange_product_id FROM order_items i JOIN products p ON p.id=i.product_id "
        "WHERE i.order_id=? ORDER BY i.rowid",
        (oid,),
    ).fetchall()
    out = {"order_id": row[0], "day": row[1], "status": row[2], "address": row[3], "note": row[4]}
    if row[5] is not None:
        out["cancel_reason"] = row[5]
    out["payment"] = {"payment_id": row[6], "method": row[7], "amount": _money(row[8])}
    lines = []
    for r in items:
        line = {
            "item_id": r[0],
            "product_id": r[1],
            "name": r[2],
            "color": r[3],
            "size": r[4],
            "qty": r[5],
            "price": _money(r[6]),
            "status": r[7],
        }
        if r[8] is not None:
            line["exchange_product_id"] = r[8]
        lines.append(line)
    out["items"] = lines
    return out


def _list_variants(conn, world, a):
    rows = conn.execute(
        "SELECT id, name, color, size, price_cents, stock FROM products WHERE model="
        "(SELECT model FROM products WHERE id=?) ORDER BY rowid",
        (a["product_id"],),
    ).fetchall()
    if not rows:
        raise ToolError(f"Error: no product with id {a['product_id']}.")
    return {
        "model": rows[0][1],
        "variants": [
            {
                "product_id": r[0],
                "color": r[2],
                "size": r[3],
                "price": _money(r[4]),
                "in_stock": r[5] > 0,
            }
            for r in rows
        ],
    }


def _get_product(conn, world, a):
    r = _one(
        conn,
        "SELECT id, name, color, size, price_cents, stock FROM products WHERE id=?",
        (a["product_id"],),
    )
    if r is None:
        raise ToolError(f"Error: no product with id {a['product_id']}.")
    return {
        "product_id": r[0],
        "name": r[1],
        "color": r[2],
        "size": r[3],
        "price": _money(r[4]),
        "stock": r[5],
    }


def _track_shipment(conn, world, a):
    r = _one(conn, "SELECT status, day, carrier FROM orders WHERE id=?", (a["order_id"],))
    if r is None:
        raise ToolError(f"Error: no order with id {a['order_id']}.")
    state = {
        "pending": "label created",
        "delivered": f"delivered on day {r[1] + 3}",
        "cancelled": "no shipment",
    }.get(r[0], r[0])
    return {"order_id": a["order_id"], "carrier": r[2], "state": state}


def _get_product_reviews(conn, world, a):
    r = _one(conn, "SELECT id, stock, price_cents FROM products WHERE id=?", (a["product_id"],))
    if r is None:
        raise ToolError(f"Error: no product with id {a['product_id']}.")
    seed = int(r[0][4:], 16)
    return {"product_id": r[0], "rating": round(3 + (seed % 21) / 10, 1), "reviews": 5 + seed % 300}


def _list_promotions(conn, world, a):
    return {
        "promotions": [
            {"code": "FREESHIP", "detail": "free shipping over 50.00"},
            {"code": "LOYAL10", "detail": "10% off for gold tier"},
        ]
    }


def _get_loyalty_points(conn, world, a):
    r = _one(conn, "SELECT points, tier FROM customers WHERE id=?", (a["customer_id"],))
    if r is None:
        raise ToolError(f"Error: no customer with id {a['customer_id']}.")
    return {"customer_id": a["customer_id"], "points": r[0], "tier": r[1]}


def _cancel_order(conn, world, a):
    oid = a["order_id"]
    status, _ = _order_row(conn, oid)
    if status != "pending":
        raise ToolError(f"Error: order {oid} is {status}; only pending orders can be cancelled.")
    conn.execute(
        "UPDATE orders SET status='cancelled', cancel_reason=? WHERE id=?", (a["reason"], oid)
    )
    return {"ok": True, "order_id": oid, "status": "cancelled", "reason": a["reason"]}


def _update_address(conn, world, a):
    oid = a["order_id"]
    status, _ = _order_row(conn, oid)
    if status != "pending":
        raise ToolError(f"Error: order {oid} is {status}; only pending orders can be re-addressed.")
    if not a["address"]:
        raise ToolError("Error: the address is empty.")
    conn.execute("UPDATE orders SET address=? WHERE id=?", (a["address"], oid))
    return {"ok": True, "order_id": oid, "address": a["address"]}


def _set_order_note(conn, world, a):
    oid = a["order_id"]
    _order_row(conn, oid)
    note = a["note"] or None
    conn.execute("UPDATE orders SET note=? WHERE id=?", (note, oid))
    return {"ok": True, "order_id": oid, "note": note}


def _item_for_change(conn, a) -> tuple:
    oid, iid = a["order_id"], a["item_id"]
    _order_row(conn, oid)
    r = _one(
        conn,
        "SELECT status, product_id, qty, price_cents FROM order_items WHERE id=? AND order_id=?",
        (iid, oid),
    )
    if r is None:
        raise ToolError(f"Error: order {oid} has no item {iid}.")
    if r[0] != "delivered":
        raise ToolError(f"Error: item {iid} is {r[0]}; only delivered items can be returned.")
    return r


def _refund_item(conn, world, a):
    oid, iid, pay = a["order_id"], a["item_id"], a["payment_id"]
    _, _, qty, price = _item_for_change(conn, a)
    if _one(conn, "SELECT 1 FROM payments WHERE id=? AND order_id=?", (pay, oid)) is None:
        raise ToolError(f"Error: payment {pay} does not belong to order {oid}.")
    amount = qty * price
    conn.execute("UPDATE order_items SET status='refunded' WHERE id=?", (iid,))
    conn.execute("INSERT INTO refunds VALUES (?,?,?,?)", (iid, oid, pay, amount))
    return {"ok": True, "item_id": iid, "refunded": _money(amount), "payment_id": pay}


def _exchange_item(conn, world, a):
    iid, new = a["item_id"], a["new_product_id"]
    _, old, _, _ = _item_for_change(conn, a)
    r = _one(
        conn,
        "SELECT p.stock, p.model = q.model FROM products p, products q WHERE p.id=? AND q.id=?",
        (new, old),
    )
    if r is None:
        raise ToolError(f"Error: no product with id {new}.")
    if new == old or not r[1]:
        raise ToolError(f"Error: {new} is not another variant of the item's product.")
    if r[0] <= 0:
        raise ToolError(f"Error: product {new} is out of stock.")
    conn.execute(
        "UPDATE order_items SET status='exchanged', exchange_product_id=? WHERE id=?", (new, iid)
    )
    return {"ok": True, "item_id": iid, "status": "exchanged", "new_product_id": new}


_RUNNERS = {
    "find_customer": _find_customer,
    "list_orders": _list_orders,
    "get_order": _get_order,
    "list_variants": _list_variants,
    "get_product": _get_product,
    "track_shipment": _track_shipment,
    "get_product_reviews": _get_product_reviews,
    "list_promotions": _list_promotions,
    "get_loyalty_points": _get_loyalty_points,
    "cancel_order": _cancel_order,
    "update_address": _update_address,
    "set_order_note": _set_order_note,
    "refund_item": _refund_item,
    "exchange_item": _exchange_item,
}


def dump_tables(conn: sqlite3.Connection) -> dict[str, list[tuple]]:
    """Every row of every table, in key order (for whole-database comparisons)."""
    names = [
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
    ]
    return {n: conn.execute(f"SELECT * FROM {n} ORDER BY 1").fetchall() for n in names}


# --------------------------------------------------------------------------- the rows writes touch
_PRIMARY_KEY = {"orders": "id", "order_items": "id", "refunds": "item_id"}
_ROW_SQL = {t: f"SELECT * FROM {t} WHERE {k}=?" for t, k in _PRIMARY_KEY.items()}


def write_keys(name: str, args: dict[str, str | None]) -> tuple[tuple[str, str], ...]:
    """The ``(table, primary key)`` rows a write tool can change (empty for reads)."""
    if name in ("cancel_order", "update_address", "set_order_note"):
        return (("orders", args["order_id"]),)
    if name == "refund_item":
        return (("order_items", args["item_id"]), ("refunds", args["item_id"]))
    if name == "exchange_item":
        return (("order_items", args["item_id"]),)
    return ()


def _read_row(conn: sqlite3.Connection, key: tuple[str, str]) -> tuple | None:
    return conn.execute(_ROW_SQL[key[0]], (key[1],)).fetchone()


def _put_row(conn: sqlite3.Connection, key: tuple[str, str], row: tuple | None) -> None:
    table, rid = key
    if row is None:
        conn.execute(f"DELETE FROM {table} WHERE {_PRIMARY_KEY[table]}=?", (rid,))
    else:
        marks = ",".join("?" * len(row))
        conn.execute(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", row)


class RowLog:
    """Every row an episode's writes touched, with its start value and its current value.

    Rows no write touched equal the start state (the world template), so this log is the whole
    difference between the episode's database and the start: the state digest hashes it, and
    ``submit`` compares it with the gold program's log instead of comparing whole databases.
    """

    __slots__ = ("rows", "_text")

    def __init__(self, rows: dict | None = None) -> None:
        self.rows: dict[tuple[str, str], tuple[tuple | None, tuple | None]] = dict(rows or {})
        self._text: str | None = None

    def copy(self) -> RowLog:
        return RowLog(self.rows)

    def run(
        self, conn: sqlite3.Connection, world: World, name: str, args: dict[str, str | None]
    ) -> dict[str, Any]:
        """Run a tool on ``conn`` like :func:`run_tool`, logging the rows a write changes."""
        keys = write_keys(name, args)
        if not keys:
            return run_tool(conn, world, name, args)
        before = {k: self.rows[k][0] if k in self.rows else _read_row(conn, k) for k in keys}
        result = run_tool(conn, world, name, args)  # raises before any change
        for k in keys:
            self.rows[k] = (before[k], _read_row(conn, k))
        self._text = None
        return result

    def changed(self) -> dict[tuple[str, str], tuple | None]:
        """Rows whose current value differs from the start: key -> current row (None: gone)."""
        return {k: after for k, (before, after) in self.rows.items() if after != before}

    def text(self) -> str:
        """The changed rows as canonical text (cached until the next write)."""
        if self._text is None:
            self._text = "\n".join(
                f"{table}:{rid}:{row!r}" for (table, rid), row in sorted(self.changed().items())
            )
        return self._text


def matches_gold(conn: sqlite3.Connection, world: World, log: RowLog, gold_calls: tuple) -> bool:
    """Whether the episode's database equals the gold end state (the gold program run on the
    start state), comparing only the rows either of them wrote.

    Inside a savepoint the episode's logged rows are put back to their start values, the gold
    program runs through the real tools with its own log, and everything is rolled back: a few
    statements instead of building and comparing a second database.
    """
    gold = RowLog()
    conn.execute("SAVEPOINT gold_check")
    try:
        for key, (before, _after) in log.rows.items():
            _put_row(conn, key, before)
        for name, args in gold_calls:
            gold.run(conn, world, name, dict(args))
    finally:
        conn.execute("ROLLBACK TO gold_check")
        conn.execute("RELEASE gold_check")
    for key in set(log.rows) | set(gold.rows):
        mine = log.rows[key][1] if key in log.rows else gold.rows[key][0]
        theirs = gold.rows[key][1] if key in gold.rows else log.rows[key][0]
        if mine != theirs:
            return False
    return True
