"""ToolUse tools: the SQL behind them, and the rows their writes touch.

Every tool runs fixed, parameterized SQL; argument text never becomes SQL. A tool that cannot do
what was asked raises :class:`ToolError` before it changes anything. :class:`RowLog` keeps every
row an episode's writes touched, which the state digest hashes and ``submit`` compares with the
gold program's rows (:func:`matches_gold`). The tools' table and schemas are in
:mod:`~budget_envs.envs.tooluse.schemas`, the text of a call in
:mod:`~budget_envs.envs.tooluse.calls`; their public names are importable from here too.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from budget_envs.envs.tooluse.calls import call_json, parse_action, parse_money
from budget_envs.envs.tooluse.schemas import (
    READ_TOOLS,
    TOOL_NAMES,
    TOOLS_SCHEMA,
    WRITE_TOOLS,
)
from budget_envs.envs.tooluse.world import PAGE_SIZE, World
from budget_envs.errors import ToolError

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
