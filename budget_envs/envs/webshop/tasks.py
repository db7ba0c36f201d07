"""Seeded shopping tasks with a unique correct answer, at five difficulty levels.

A task is drawn from ``random.Random`` seeded with (catalogue seed, level, index), so a task id
means the same task in every process. Every goal item has exactly one product in the catalogue
that satisfies it (type, attributes, options and, for one-item tasks, the price bound), checked
with exact matching when the task is made.

Levels (optimal turns = search + click + one click per option + buy, per item):

====== ===================================================================== ==============
level  what                                                                  optimal turns
====== ===================================================================== ==============
1      one item, at most one option, target on page 1 of the natural query  3-4
2      one item, two options, target on page 1 of the natural query          5
3      one item, two or three options, target on page 2-3, near misses       5-6
4      two items in a cart under a spending limit, sub-page-only attributes  8-12
5      three to five items in a cart under a spending limit, pages 2-5       15-30
====== ===================================================================== ==============

The natural query is the goal's attributes and type noun, the query an agent reading the
instruction would type first; the oracle searches the target's title instead, which always lists
the target on page 1 (checked here), so ``cost_to_go`` does not depend on the result pages.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from budget_envs.envs.webshop.catalogue import Product
from budget_envs.errors import TaskGenerationError

__all__ = [
    "LEVELS",
    "Catalogue",
    "GoalItem",
    "Task",
    "TaskGenerationError",
    "make_task",
    "parse_task_id",
]

LEVELS = (1, 2, 3, 4, 5)
PAGE_SIZE = 10


class Catalogue(Protocol):
    """What task generation reads of a shop (:class:`~budget_envs.envs.webshop.shop.Shop` is
    one): the products, by type, searchable. The shop builds its tasks with this module, so
    this module names no shop."""

    seed: int
    products: list[Product]
    by_type: dict[int, list[Product]]
    unseen_types: bool
    unseen_products: list[Product]

    def product(self, asin: str) -> Product: ...

    def search_asins(self, query: str) -> list[str]: ...


@dataclass
class GoalItem:
    """One product to buy: its target and what the instruction asks for."""

    asin: str
    query: str
    product_category: str
    name: str
    attributes: list[str]
    goal_options: dict[str, str]
    price_upper: float
    title_query: str
    natural_query: str
    natural_page: int
    near_misses: int

    @property
    def k(self) -> int:
        """Option clicks this item needs."""
        return len(self.goal_options)


@dataclass
class Task:
    """A shopping task: one or more goal items, an instruction and an optional spending limit."""

    task_id: str
    level: int
    instruction: str
    items: list[GoalItem]
    spending_limit: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def multi(self) -> bool:
        """Whether the task fills a cart (several items) rather than buying one product."""
        return len(self.items) > 1

    def optimal_turns(self) -> int:
        """Turns of an optimal episode from the start page."""
        return sum(2 + it.k for it in self.items) + len(self.items)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able copy (the server sends it to the env)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        """Inverse of :meth:`to_dict`."""
        items = [GoalItem(**it) for it in data["items"]]
        return cls(
            task_id=data["task_id"],
            level=int(data["level"]),
            instruction=data["instruction"],
            items=items,
            spending_limit=data.get("spending_limit"),
            extra=dict(data.get("extra") or {}),
        )


def parse_task_id(task_id: str) -> tuple[int, int]:
    """``"L3-0042"`` (or a held-out split's ``"test/L3-0042"``, ``"test_unseen/L3-0042"``) ->
    ``(3, 42)``.

    Raises ValueError on anything else.
    """
    if isinstance(task_id, str):
        split, sep, rest = task_id.partition("/")
        if sep and split in ("valid", "test", "test_unseen"):
            task_id = rest
    if not isinstance(task_id, str) or len(task_id) > 16 or not task_id.startswith("L"):
        raise ValueError(f"bad task id {task_id!r}; expected e.g. 'L1-0000'")
    head, _, tail = task_id[1:].partition("-")
    if not (head.isdigit() and tail.isdigit() and len(tail) >= 4):
        raise ValueError(f"bad task id {task_id!r}; expected e.g. 'L1-0000'")
    level, index = int(head), int(tail)
    if level not in LEVELS:
        raise ValueError(f"bad task id {task_id!r}: level must be one of {LEVELS}")
    return level, index


def _ceil10(x: float) -> float:
    return float(math.ceil((x + 0.001) / 10.0) * 10)


def _matches(p: Product, attrs: list[str], options: dict[str, str], price_upper: float | None):
    if price_upper is not None and p.price > price_upper:
        return False
    pa = p.attributes
    for a in attrs:
        if a not in pa:
            return False
    for dim, value in options.items():
        if value not in p.options.get(dim, ()):
            return False
    return True


def _near_misses(shop: Catalogue, p: Product, attrs, options, price_upper) -> int:
    """Products of the same type failing exactly one constraint."""
    count = 0
    for q in shop.by_type[p.type_index]:
        if q is p:
            continue
        misses = sum(a not in q.attributes for a in attrs)
        misses += sum(v not in q.options.get(d, ()) for d, v in options.items())
        if price_upper is not None and q.price > price_upper:
            misses += 1
        if misses == 1:
            count += 1
    return count


def _option_phrase(dim: str, value: str) -> str:
    if dim == "color":
        return f"{value} color"
    if value.startswith("pack of") or value.endswith("count"):
        return value
    if dim == "size":
        return f"size {value}" if value.replace(".", "").isdigit() else f"{value} size"
    return f"{value} {dim}"


def _describe(item: GoalItem) -> str:
    attrs = item.attributes
    noun = item.query
    plural = noun.endswith("s")
    text = noun if plural else ("an " if noun[0] in "aeiou" else "a ") + noun
    if attrs:
        listed = ", ".join(attrs[:-1]) + " and " + attrs[-1] if len(attrs) > 1 else attrs[0]
        text += (" that are " if plural else " that is ") + listed
    if item.goal_options:
        phrases = [_option_phrase(d, v) for d, v in item.goal_options.items()]
        text += ", in " + " and ".join(phrases)
    return text


def _level_params(level: int, rng: random.Random) -> dict[str, Any]:
    if level == 1:
        return dict(n=1, k=(0, 1), attrs=(1, 2), pages=(1, 1), near=0, hidden=False)
    if level == 2:
        return dict(n=1, k=(2, 2), attrs=(2, 2), pages=(1, 1), near=0, hidden=False)
    if level == 3:
        return dict(n=1, k=(2, 3), attrs=(2, 3), pages=(2, 3), near=2, hidden=False)
    if level == 4:
        return dict(n=2, k=(1, 3), attrs=(2, 3), pages=(1, 3), near=1, hidden=True)
    return dict(n=rng.choice([3, 4, 5]), k=(2, 3), attrs=(2, 3), pages=(2, 5), near=2, hidden=True)


def _draw_item(
    shop: Catalogue,
    rng: random.Random,
    params: dict[str, Any],
    single: bool,
    used_types: set[int],
    pool: list[Product],
) -> GoalItem | None:
    p = pool[rng.randrange(len(pool))]
    if p.type_index in used_types:
        return None
    dims = list(p.options)
    k_lo, k_hi = params["k"]
    k = min(rng.randint(k_lo, k_hi), len(dims))
    if k < k_lo:
        return None
    options = {d: rng.choice(p.options[d]) for d in dims[:k]}
    pool = list(p.attributes)
    if params["hidden"]:
        hidden = [
            a
            for a in pool
            if a not in p.title_attributes and not any(a.upper() in b for b in p.bullets)
        ]
        if not hidden:
            return None
        first = rng.choice(hidden)
        pool = [first] + [a for a in pool if a != first]
    else:
        pool = rng.sample(pool, len(pool))
    n_attr = rng.randint(*params["attrs"])
    attrs = pool[:n_attr]
    # Tighten the goal until this product is the only match (more attributes, lower price bound).
    price_upper = _ceil10(p.price) if single else None
    extra_pool = pool[n_attr:]
    while True:
        others = [
            q
            for q in shop.by_type[p.type_index]
            if q is not p and _matches(q, attrs, options, price_upper)
        ]
        if not others:
            break
        if not extra_pool or len(attrs) >= 4:
            return None
        attrs.append(extra_pool.pop(0))
    near = _near_misses(shop, p, attrs, options, price_upper)
    if near < params["near"]:
        return None
    noun = p.spec.noun
    natural_query = " ".join(attrs + [noun])
    ranked = shop.search_asins(natural_query)
    if p.asin not in ranked:
        return None
    natural_page = ranked.index(p.asin) // PAGE_SIZE + 1
    lo, hi = params["pages"]
    if not lo <= natural_page <= hi:
        return None
    title_query = p.title.lower().replace(",", "")
    if p.asin not in shop.search_asins(title_query)[:PAGE_SIZE]:
        return None
    return GoalItem(
        asin=p.asin,
        query=p.query,
        product_category=p.product_category,
        name=p.title,
        attributes=attrs,
        goal_options=options,
        price_upper=price_upper if price_upper is not None else 0.0,
        title_query=title_query,
        natural_query=natural_query,
        natural_page=natural_page,
        near_misses=near,
    )


def make_task(shop: Catalogue, task_id: str) -> Task:
    """Build task ``task_id`` (e.g. ``"L2-0007"``) on ``shop``'s catalogue, deterministically.

    A ``test_unseen/`` task needs a shop with the held-out types and draws its goals from them
    only (ValueError otherwise)."""
    level, index = parse_task_id(task_id)
    pool = shop.products
    if task_id.startswith("test_unseen/"):
        if not shop.unseen_types:
            raise ValueError(
                f"task {task_id!r} needs the test_unseen catalogue (a shop with the held-out "
                "types: budgetmix serve-web --unseen-types)"
            )
        pool = shop.unseen_products
    rng = random.Random(f"budgetmix-webshop-task:{shop.seed}:{level}:{index}")
    params = _level_params(level, rng)
    n = params["n"]
    items: list[GoalItem] = []
    used: set[int] = set()
    attempts = 0
    while len(items) < n:
        attempts += 1
        if attempts > 20_000:
            raise TaskGenerationError(f"no task found for {task_id!r} on seed {shop.seed}")
        item = _draw_item(shop, rng, params, n == 1, used, pool)
        if item is None:
            continue
        items.append(item)
        used.add(shop.product(item.asin).type_index)
    if n == 1:
        it = items[0]
        instruction = f"i need {_describe(it)}, and price lower than {it.price_upper:.2f} dollars"
        limit = None
    else:
        total = sum(shop.product(it.asin).price for it in items)
        limit = _ceil10(total)
        parts = [f"({i + 1}) {_describe(it)}" for i, it in enumerate(items)]
        instruction = (
            f"i want to buy {n} things with a total price lower than {limit:.2f} dollars: "
            + "; ".join(parts)
        )
    return Task(
        task_id=task_id, level=level, instruction=instruction, items=items, spending_limit=limit
    )
