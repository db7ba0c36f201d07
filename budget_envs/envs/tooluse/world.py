"""The generated retail world behind ToolUse: customers, orders, items, payments, products.

One world is drawn from ``world_seed`` and built once per process as a template SQLite database
(plus the same facts as Python records, which the task generator and the oracle read). Every
episode starts from a byte copy of the template, so a reset costs a memcpy, not a rebuild.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass, field

import numpy as np

from budget_envs.envs.tooluse.lru import MEMO_SIZE, LRUCache

__all__ = ["PAGE_SIZE", "TODAY", "RETURN_WINDOW", "World", "get_world"]

#: Orders per ``list_orders`` page.
PAGE_SIZE = 5
#: The fixed "today" of every episode (day of the year), so no tool ever reads a clock.
TODAY = 365
#: A delivered item can be returned when ``TODAY - order day <= RETURN_WINDOW``.
RETURN_WINDOW = 30

SCHEMA = """
CREATE TABLE customers(id TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL UNIQUE,
                       city TEXT NOT NULL, tier TEXT NOT NULL, points INTEGER NOT NULL);
CREATE TABLE products(id TEXT PRIMARY KEY, model TEXT NOT NULL, name TEXT NOT NULL,
                      color TEXT NOT NULL, size TEXT NOT NULL, price_cents INTEGER NOT NULL,
                      stock INTEGER NOT NULL);
CREATE TABLE orders(id TEXT PRIMARY KEY, customer_id TEXT NOT NULL, seq INTEGER NOT NULL,
                    day INTEGER NOT NULL, status TEXT NOT NULL, address TEXT NOT NULL,
                    note TEXT, cancel_reason TEXT, carrier TEXT NOT NULL);
CREATE TABLE payments(id TEXT PRIMARY KEY, order_id TEXT NOT NULL, method TEXT NOT NULL,
                      amount_cents INTEGER NOT NULL);
CREATE TABLE order_items(id TEXT PRIMARY KEY, order_id TEXT NOT NULL, product_id TEXT NOT NULL,
                         qty INTEGER NOT NULL, price_cents INTEGER NOT NULL, status TEXT NOT NULL,
                         exchange_product_id TEXT);
CREATE TABLE refunds(item_id TEXT PRIMARY KEY, order_id TEXT NOT NULL, payment_id TEXT NOT NULL,
                     amount_cents INTEGER NOT NULL);
CREATE INDEX orders_by_customer ON orders(customer_id, seq);
CREATE INDEX items_by_order ON order_items(order_id);
CREATE INDEX payments_by_order ON payments(order_id);
CREATE INDEX products_by_model ON products(model);
"""

_FIRST = (
    "Ava Ben Cara Dev Eli Fay Gus Hana Ivo Jun Kai Lena Milo Nia Omar Pia Quin Rosa Sami Tara "
    "Uma Vik Wren Xia Yara Zed Ines Jonas Leah Marco"
).split()
_LAST = (
    "Patel Okafor Lindqvist Moreau Tanaka Silva Novak Haddad Quinn Reyes Brandt Costa Ito Kowal "
    "Mensah Byrne Dubois Fischer Garza Holm"
).split()
_CITIES = "Springfield Riverton Lakeside Fairview Brookhaven Oakdale Millbrook Eastport".split()
_STREETS = "Elm Oak Maple Cedar Birch Willow Pine Ash Spruce Linden Hazel Poplar".split()
_ADJ = (
    "Trail Harbor Summit Canyon Meadow Coastal Alpine Urban Prairie Delta Nordic Solar Lunar "
    "Cobalt Ember"
).split()
_NOUN = "Mug Jacket Backpack Lamp Kettle Scarf Sneaker Bottle Blanket Headphones Tent Watch".split()
_COLORS = "black white red blue green grey navy olive".split()
_SIZES = ("S", "M", "L", "XL")
_METHODS = ("credit_card", "paypal", "gift_card")
_CARRIERS = ("UPS", "DHL", "FedEx", "USPS")


@dataclass(frozen=True)
class Product:
    id: str
    model: str
    name: str
    color: str
    size: str
    price_cents: int
    stock: int


@dataclass(frozen=True)
class Item:
    id: str
    order_id: str
    product_id: str
    qty: int
    price_cents: int
    status: str


@dataclass(frozen=True)
class Order:
    id: str
    customer_id: str
    seq: int
    page: int
    day: int
    status: str
    address: str
    payment_id: str
    method: str
    items: tuple[str, ...]


@dataclass(frozen=True)
class Customer:
    id: str
    name: str
    email: str
    city: str
    orders: tuple[str, ...]
    #: ``cursors[k]`` opens page ``k + 1`` (1-based); ``cursors[0]`` is None (page 1 needs none).
    cursors: tuple[str | None, ...]


@dataclass
class World:
    """The facts of one generated world and its template database (read-only after build)."""

    seed: int
    customers: dict[str, Customer] = field(default_factory=dict)
    orders: dict[str, Order] = field(default_factory=dict)
    items: dict[str, Item] = field(default_factory=dict)
    products: dict[str, Product] = field(default_factory=dict)
    models: dict[str, tuple[str, ...]] = field(default_factory=dict)
    email_to_customer: dict[str, str] = field(default_factory=dict)
    cursor_owner: dict[str, tuple[str, int]] = field(default_factory=dict)
    image: bytes = b""
    template: sqlite3.Connection | None = None
    _order_reveals: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)
    #: Derived lookups the task generator memoizes (pure functions of the world), at most
    #: :data:`~budget_envs.envs.tooluse.lru.MEMO_SIZE` of them (least recently used go first).
    memo: LRUCache = field(default_factory=lambda: LRUCache(MEMO_SIZE), repr=False)

    def copy_into(self, conn: sqlite3.Connection) -> None:
        """Overwrite ``conn`` with the start state (a memcpy where ``deserialize`` exists)."""
        if self.image:
            conn.deserialize(self.image)
        else:
            self.template.backup(conn)

    def pages(self, customer_id: str) -> int:
        """Number of ``list_orders`` pages of a customer."""
        return len(self.customers[customer_id].cursors)

    def page_orders(self, customer_id: str, page: int) -> tuple[str, ...]:
        """Order ids on a 1-based page."""
        orders = self.customers[customer_id].orders
        return orders[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]

    def page_reveals(self, customer_id: str, page: int) -> tuple[str, ...]:
        """Ids a page shows: its orders and the cursor of the next page."""
        out = self.page_orders(customer_id, page)
        cursors = self.customers[customer_id].cursors
        if page < len(cursors):
            out = out + (cursors[page],)
        return out

    def order_reveals(self, order_id: str) -> tuple[str, ...]:
        """Ids ``get_order`` shows: the payment, the items and their products."""
        out = self._order_reveals.get(order_id)
        if out is None:
            order = self.orders[order_id]
            ids = [order.payment_id]
            for item_id in order.items:
                ids.append(item_id)
                ids.append(self.items[item_id].product_id)
            out = self._order_reveals[order_id] = tuple(ids)
        return out

    def variant_reveals(self, product_id: str) -> tuple[str, ...]:
        """Ids ``list_variants`` shows: every product of the same model."""
        return self.models[self.products[product_id].model]


def _hex_ids(rng: np.random.Generator, prefix: str, n: int, used: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        value = f"{prefix}_{int(rng.integers(0, 2**32)):08x}"
        if value not in used:
            used.add(value)
            out.append(value)
    return out


def build_world(seed: int, n_customers: int = 240) -> World:
    """Draw a world from ``seed`` and build its template database."""
    rng = np.random.default_rng([0x70015E, seed])
    used: set[str] = set()
    world = World(seed=seed)
    rows: dict[str, list[tuple]] = {"customers": [], "orders": [], "payments": [], "items": []}
    rows["products"] = _draw_products(rng, used, world)
    product_ids = list(world.products)
    emails: set[str] = set()
    for cid in _hex_ids(rng, "cus", n_customers, used):
        _draw_customer(rng, used, world, cid, product_ids, emails, rows)
    # Pre-existing refunds for the items generated as already refunded.
    rows["refunds"] = [
        (i.id, i.order_id, world.orders[i.order_id].payment_id, i.qty * i.price_cents)
        for i in world.items.values()
        if i.status == "refunded"
    ]
    conn = _template_db(rows)
    if hasattr(conn, "serialize"):  # Python >= 3.11; otherwise episodes copy with backup()
        world.image = conn.serialize()
    world.template = conn
    return world


def _draw_products(rng: np.random.Generator, used: set[str], world: World) -> list[tuple]:
    """Products into ``world``, and their rows: models with colour x size variants; about one
    variant in six is out of stock."""
    product_rows = []
    model_names = [f"{a} {n}" for a in _ADJ for n in _NOUN]
    picks = rng.choice(len(model_names), size=40, replace=False)
    for m in picks:
        model = model_names[int(m)]
        colors = [_COLORS[int(i)] for i in rng.choice(len(_COLORS), rng.integers(2, 4), False)]
        sizes = list(_SIZES[: int(rng.integers(1, 4))])
        price = int(rng.integers(8, 200)) * 100 + int(rng.choice([0, 50, 99]))
        ids = _hex_ids(rng, "prd", len(colors) * len(sizes), used)
        k = 0
        for color in colors:
            for size in sizes:
                stock = 0 if rng.random() < 0.17 else int(rng.integers(1, 40))
                p = Product(ids[k], model, model, color, size, price, stock)
                world.products[p.id] = p
                product_rows.append((p.id, model, model, color, size, price, stock))
                k += 1
        world.models[model] = tuple(ids)
    return product_rows


def _draw_customer(
    rng: np.random.Generator,
    used: set[str],
    world: World,
    cid: str,
    product_ids: list[str],
    emails: set[str],
    rows: dict[str, list[tuple]],
) -> None:
    """One customer with their orders, payments and items, into ``world`` and ``rows``."""
    first = _FIRST[int(rng.integers(len(_FIRST)))]
    last = _LAST[int(rng.integers(len(_LAST)))]
    email = f"{first}.{last}{int(rng.integers(1, 100))}@example.com".lower()
    while email in emails:
        email = f"{first}.{last}{int(rng.integers(100, 1000))}@example.com".lower()
    emails.add(email)
    city = _CITIES[int(rng.integers(len(_CITIES)))]
    n_orders = int(rng.integers(3, 26))
    chosen = _order_days(rng, n_orders)
    oids = _hex_ids(rng, "ord", n_orders, used)
    pays = _hex_ids(rng, "pay", n_orders, used)
    n_pages = (n_orders + PAGE_SIZE - 1) // PAGE_SIZE
    cursors = [None] + _hex_ids(rng, "cur", n_pages - 1, used)
    for seq, ((day, kind), oid, pay) in enumerate(zip(chosen, oids, pays)):
        status = {"pending": "pending", "cancelled": "cancelled"}.get(kind, "delivered")
        item_status = {"pending": "processing", "cancelled": "cancelled"}.get(kind, "delivered")
        iids, total = _draw_items(rng, used, world, oid, item_status, product_ids, rows["items"])
        method = _METHODS[int(rng.choice(3, p=[0.55, 0.27, 0.18]))]
        address = (
            f"{int(rng.integers(1, 300))} {_STREETS[int(rng.integers(len(_STREETS)))]} St, {city}"
        )
        carrier = _CARRIERS[int(rng.integers(len(_CARRIERS)))]
        world.orders[oid] = Order(
            oid,
            cid,
            seq,
            seq // PAGE_SIZE + 1,
            day,
            status,
            address,
            pay,
            method,
            tuple(iids),
        )
        rows["orders"].append((oid, cid, seq, day, status, address, None, None, carrier))
        rows["payments"].append((pay, oid, method, total))
    for k, cur in enumerate(cursors):
        if cur is not None:
            world.cursor_owner[cur] = (cid, k + 1)
    world.customers[cid] = Customer(
        cid, f"{first} {last}", email, city, tuple(oids), tuple(cursors)
    )
    world.email_to_customer[email] = cid
    tier = ("bronze", "silver", "gold")[int(rng.integers(3))]
    rows["customers"].append(
        (cid, f"{first} {last}", email, city, tier, int(rng.integers(0, 5000)))
    )


def _order_days(rng: np.random.Generator, n_orders: int) -> list[tuple[int, str]]:
    """A customer's orders as sorted (day, kind): the kinds first, then distinct days inside
    each kind's range."""
    days_free = {
        "pending": list(range(TODAY - 14, TODAY)),
        "recent": list(range(TODAY - RETURN_WINDOW, TODAY - 14)),
        "old": list(range(1, TODAY - RETURN_WINDOW)),
    }
    chosen = []
    for _ in range(n_orders):
        kind = ("pending", "recent", "old", "cancelled")[
            int(rng.choice(4, p=[0.22, 0.3, 0.38, 0.1]))
        ]
        pool = days_free["old" if kind == "cancelled" else kind]
        if not pool:
            kind, pool = "old", days_free["old"]
        day = pool.pop(int(rng.integers(len(pool))))
        chosen.append((day, kind))
    chosen.sort()
    return chosen


def _draw_items(
    rng: np.random.Generator,
    used: set[str],
    world: World,
    oid: str,
    item_status: str,
    product_ids: list[str],
    item_rows: list[tuple],
) -> tuple[list[str], int]:
    """One order's items, into ``world`` and ``item_rows``: their ids and the order's total."""
    n_items = int(rng.integers(1, 5))
    prods = rng.choice(len(product_ids), size=n_items, replace=False)
    iids = _hex_ids(rng, "itm", n_items, used)
    total = 0
    for iid, p in zip(iids, prods):
        prod = world.products[product_ids[int(p)]]
        qty = 1 if rng.random() < 0.8 else 2
        st = item_status
        if st == "delivered" and rng.random() < 0.04:
            st = "refunded"
        world.items[iid] = Item(iid, oid, prod.id, qty, prod.price_cents, st)
        item_rows.append((iid, oid, prod.id, qty, prod.price_cents, st, None))
        total += qty * prod.price_cents
    return iids, total


def _template_db(rows: dict[str, list[tuple]]) -> sqlite3.Connection:
    """The template database: the schema and every row, in one transaction."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.executescript(SCHEMA)
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO customers VALUES (?,?,?,?,?,?)", rows["customers"])
    conn.executemany("INSERT INTO products VALUES (?,?,?,?,?,?,?)", rows["products"])
    conn.executemany("INSERT INTO orders VALUES (?,?,?,?,?,?,?,?,?)", rows["orders"])
    conn.executemany("INSERT INTO payments VALUES (?,?,?,?)", rows["payments"])
    conn.executemany("INSERT INTO order_items VALUES (?,?,?,?,?,?,?)", rows["items"])
    conn.executemany("INSERT INTO refunds VALUES (?,?,?,?)", rows["refunds"])
    conn.execute("COMMIT")
    return conn


_CACHE: dict[tuple[int, int], World] = {}
_LOCK = threading.Lock()


def get_world(seed: int) -> World:
    """The world of ``seed``, built once per process (a forked child builds its own)."""
    key = (os.getpid(), seed)
    world = _CACHE.get(key)
    if world is None:
        with _LOCK:
            world = _CACHE.get(key)
            if world is None:
                world = build_world(seed)
                _CACHE[key] = world
    return world
