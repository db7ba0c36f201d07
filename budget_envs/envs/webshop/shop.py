"""The shop's page logic: sessions, actions, page views and purchases, independent of HTTP.

A page is a list of :class:`Block` (text, button or selected button). The HTML page and the
agent's text view (block texts joined by ``" [SEP] "``, buttons marked) are both rendered from
it, so the agent sees exactly the visible text of the page a person sees.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from budget_envs.envs.webshop.catalogue import (
    CATALOGUE_VERSION,
    TYPES,
    Product,
    generate_catalogue,
)
from budget_envs.envs.webshop.scoring import SCORING_MODES, product_record, score_item
from budget_envs.envs.webshop.search import SearchIndex
from budget_envs.envs.webshop.tasks import PAGE_SIZE, Task, make_task

__all__ = ["Block", "block", "MAX_QUERY", "SEP", "SessionState", "Shop", "StepResult", "get_shop"]

SEP = " [SEP] "
MAX_QUERY = 300
SUBPAGES = ("description", "features", "reviews", "attributes")
PAGES = ("search", "results", "item", "sub", "done")
_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.S | re.I)
_SPACES = re.compile(r"\s+")
_BUYING = ("click[buy now]", "click[add to cart]", "click[checkout]")


class Block(NamedTuple):
    """One visible element: ``kind`` is "text", "title", "instr", "button" or "clicked".

    ``action`` is the click action of a button (``click[<lowercased text>]``), else None.
    Build blocks with :func:`block`, which fills it in.
    """

    text: str
    kind: str = "text"
    action: str | None = None

    def as_text(self) -> str:
        """The block in the agent's text view."""
        if self.kind == "button":
            return f"[button] {self.text} [button_]"
        if self.kind == "clicked":
            return f"[clicked button] {self.text} [clicked button_]"
        return self.text


def block(text: str, kind: str = "text") -> Block:
    """A :class:`Block`, with its click action when it is a button."""
    if kind in ("button", "clicked"):
        return Block(text, kind, f"click[{text.lower()}]")
    return Block(text, kind)


@dataclass
class SessionState:
    """Everything a session holds; JSON-able through :meth:`to_dict` (the snapshot format).

    ``out_of_stock`` and ``delisted`` are the effects of permanent faults, kept for the rest of
    the session: products that can no longer be bought (the pages say so), and products that
    search no longer lists (nothing says so).
    """

    task_id: str
    scoring: str = "exact"
    page: str = "search"
    query: str = ""
    page_no: int = 1
    results: list[str] = field(default_factory=list)
    asin: str | None = None
    sub: str | None = None
    selected: dict[str, str] = field(default_factory=dict)
    cart: list[dict[str, Any]] = field(default_factory=list)
    out_of_stock: list[str] = field(default_factory=list)
    delisted: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able deep copy."""
        return {
            "task_id": self.task_id,
            "scoring": self.scoring,
            "page": self.page,
            "query": self.query,
            "page_no": self.page_no,
            "results": list(self.results),
            "asin": self.asin,
            "sub": self.sub,
            "selected": dict(self.selected),
            "cart": [{"asin": c["asin"], "options": dict(c["options"])} for c in self.cart],
            "out_of_stock": list(self.out_of_stock),
            "delisted": list(self.delisted),
        }


@dataclass
class StepResult:
    """What one action did."""

    invalid: bool = False
    feedback: str = ""
    reward: float = 0.0
    done: bool = False
    purchase: dict[str, Any] | None = None
    score: float | None = None


def _norm(text: str) -> str:
    return _SPACES.sub(" ", text.strip().lower())


class Shop:
    """A catalogue with its search index and tasks; sessions are plain :class:`SessionState`."""

    def __init__(
        self, seed: int = 0, num_products: int = 10_000, unseen_types: bool = False
    ) -> None:
        self.seed = int(seed)
        self.num_products = int(num_products)
        #: Whether the catalogue holds the held-out types (the ``test_unseen`` split's shop).
        self.unseen_types = bool(unseen_types)
        self.version = CATALOGUE_VERSION
        self.products = generate_catalogue(self.seed, self.num_products, self.unseen_types)
        self._by_asin = {p.asin: p for p in self.products}
        self.by_type: dict[int, list[Product]] = {}
        for p in self.products:
            self.by_type.setdefault(p.type_index, []).append(p)
        #: The products of the held-out types (goals of ``test_unseen/`` tasks are drawn here).
        self.unseen_products = [p for p in self.products if p.type_index >= len(TYPES)]
        self.index = SearchIndex(self.products)
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        self._task_lock = threading.Lock()

    # ---------------------------------------------------------------- catalogue and tasks
    def product(self, asin: str) -> Product:
        """The product with ``asin`` (KeyError if unknown)."""
        return self._by_asin[asin]

    def has_product(self, asin: Any) -> bool:
        """Whether ``asin`` names a product of this catalogue."""
        return isinstance(asin, str) and asin in self._by_asin

    def search_asins(self, query: str) -> list[str]:
        """Ranked asins for ``query`` (at most 50)."""
        return [self.products[i].asin for i in self.index.search(query)]

    def task(self, task_id: str) -> Task:
        """Task ``task_id`` (built on first use, then cached)."""
        with self._task_lock:
            task = self._tasks.get(task_id)
            if task is not None:
                self._tasks.move_to_end(task_id)
                return task
        task = make_task(self, task_id)
        with self._task_lock:
            self._tasks[task_id] = task
            if len(self._tasks) > 4096:
                self._tasks.popitem(last=False)
        return task

    def info(self) -> dict[str, Any]:
        """What the server tells clients about itself."""
        return {
            "seed": self.seed,
            "num_products": self.num_products,
            "version": self.version,
            "unseen_types": self.unseen_types,
        }

    # ---------------------------------------------------------------- views
    def blocks(self, state: SessionState) -> list[Block]:
        """The visible elements of the session's current page."""
        task = self.task(state.task_id)
        out = [
            block("WebShop", "title"),
            block("Instruction:", "instr"),
            block(task.instruction, "instr"),
        ]
        if task.multi:
            total = sum(self.product(c["asin"]).price for c in state.cart)
            out.append(block(f"Cart: {len(state.cart)} item(s), total ${total:.2f}"))
        if state.page == "search":
            if task.multi:
                for c in state.cart:
                    p = self.product(c["asin"])
                    opts = ", ".join(c["options"].values()) or "no options"
                    gone = " (out of stock)" if p.asin in state.out_of_stock else ""
                    out.append(block(f"{p.asin}: {p.title} ({opts}) ${p.price:.2f}{gone}"))
                    out.append(block(f"Remove {p.asin}", "button"))
                if state.cart and self._cart_sold_out(state):
                    out.append(block("Remove the out-of-stock items to check out."))
                elif state.cart:
                    out.append(block("Checkout", "button"))
            out.append(block("Search", "button"))
            return out
        if state.page == "done":
            out.append(block("Thank you for shopping with us!"))
            return out
        out.append(block("Back to Search", "button"))
        if state.page == "results":
            n = len(state.results)
            out.append(block(f"Results for: {state.query}"))
            out.append(block(f"Page {state.page_no} (Total results: {n})"))
            if state.page_no > 1:
                out.append(block("< Prev", "button"))
            if state.page_no * PAGE_SIZE < n:
                out.append(block("Next >", "button"))
            start = (state.page_no - 1) * PAGE_SIZE
            for asin in state.results[start : start + PAGE_SIZE]:
                p = self.product(asin)
                out += [block(p.asin, "button"), block(p.title), block(f"${p.price:.2f}")]
                if asin in state.out_of_stock:
                    out.append(block("Out of stock"))
            if not n:
                out.append(block("No products match your search."))
            return out
        p = self.product(state.asin)
        out.append(block("< Prev", "button"))
        if state.page == "sub":
            out += self._sub_blocks(p, state.sub)
            return out
        for dim, values in p.options.items():
            chosen = state.selected.get(dim)
            out.append(block(dim if chosen is None else f"{dim}: {chosen}"))
            out += [block(v, "clicked" if v == chosen else "button") for v in values]
        out.append(block(p.title, "title"))
        out.append(block(f"Price: ${p.price:.2f}"))
        out.append(block(f"Rating: {p.rating if p.rating is not None else 'N.A.'}"))
        out += [block(s.capitalize(), "button") for s in SUBPAGES]
        if p.asin in state.out_of_stock:
            out.append(block("Currently unavailable: this item is out of stock."))
            return out
        if task.multi:
            out.append(block("Add to Cart", "button"))
        out.append(block("Buy Now", "button"))
        return out

    @staticmethod
    def _cart_sold_out(state: SessionState) -> bool:
        return any(c["asin"] in state.out_of_stock for c in state.cart)

    @staticmethod
    def _sub_blocks(p: Product, sub: str | None) -> list[Block]:
        if sub == "description":
            return [block(p.description)]
        if sub == "features":
            return [block(b) for b in p.bullets] or [block("No features listed.")]
        if sub == "reviews":
            if not p.reviews:
                return [block("No reviews yet.")]
            return [block(f"{score}/5: {text}") for score, text in p.reviews]
        return [block(a) for a in p.attributes]

    def text_view(self, state: SessionState) -> str:
        """The agent's observation: visible text joined by " [SEP] ", buttons marked."""
        return SEP.join(b.as_text() for b in self.blocks(state))

    def admissible(self, state: SessionState) -> list[str]:
        """Valid actions on the current page (``search[...]`` stands for any query)."""
        return self.view_and_admissible(state)[1]

    def view_and_admissible(self, state: SessionState) -> tuple[str, list[str]]:
        """:meth:`text_view` and :meth:`admissible` from one rendering of the page."""
        blocks = self.blocks(state)
        view = SEP.join(b.as_text() for b in blocks)
        if state.page == "done":
            return view, []
        acts = [b.action for b in blocks if b.action and b.text != "Search"]
        if state.page == "search":
            acts.insert(0, "search[...]")
        return view, acts

    # ---------------------------------------------------------------- actions
    def new_state(self, task_id: str, scoring: str = "exact") -> SessionState:
        """A fresh session on the start page (builds the task; ValueError if the id is bad)."""
        if scoring not in SCORING_MODES:
            raise ValueError(f"scoring must be one of {SCORING_MODES}, got {scoring!r}")
        self.task(task_id)
        return SessionState(task_id=task_id, scoring=scoring)

    def step(self, state: SessionState, action: str) -> StepResult:
        """Apply ``action``; on an invalid one the state is left exactly as it was."""
        if not isinstance(action, str):
            return StepResult(invalid=True, feedback="Invalid action: expected text.")
        m = _ACTION.match(action)
        if m is None:
            return StepResult(
                invalid=True,
                feedback="Invalid action: use search[your query] or click[a button on the page].",
            )
        verb, arg = m.group(1).lower(), _norm(m.group(2))
        if state.page == "done":
            return StepResult(invalid=True, feedback="The purchase is complete; nothing to do.")
        if verb == "search":
            if state.page != "search":
                return StepResult(
                    invalid=True,
                    feedback="Invalid action: there is no search bar on this page; "
                    "click[back to search] first.",
                )
            if not arg:
                return StepResult(invalid=True, feedback="Invalid action: the query is empty.")
            if len(arg) > MAX_QUERY:
                return StepResult(
                    invalid=True,
                    feedback=f"Invalid action: the query is over {MAX_QUERY} characters.",
                )
            state.query = arg
            state.results = self.search_asins(arg)
            if state.delisted:
                state.results = [a for a in state.results if a not in state.delisted]
            state.page, state.page_no, state.asin, state.sub = "results", 1, None, None
            state.selected = {}
            return StepResult()
        target = f"click[{arg}]"
        buttons = {b.action: b for b in self.blocks(state) if b.action is not None}
        buttons.pop("click[search]", None)
        if target not in buttons and target in _BUYING:
            if state.page == "item" and state.asin in state.out_of_stock:
                return StepResult(
                    invalid=True,
                    feedback="Invalid action: this item is out of stock; it cannot be bought "
                    "or added to the cart.",
                )
            if state.page == "search" and self._cart_sold_out(state):
                return StepResult(
                    invalid=True,
                    feedback="Invalid action: the cart holds an out-of-stock item; remove it "
                    "to check out.",
                )
        if target not in buttons:
            shown = arg if len(arg) <= 60 else arg[:57] + "..."
            return StepResult(
                invalid=True,
                feedback=f"Invalid action: there is no button {shown!r} on this page.",
            )
        return self._click(state, buttons[target].text)

    def _click(self, state: SessionState, label: str) -> StepResult:
        low = label.lower()
        task = self.task(state.task_id)
        if low == "back to search":
            state.page, state.asin, state.sub, state.selected = "search", None, None, {}
            state.results, state.query, state.page_no = [], "", 1
        elif low == "next >":
            state.page_no += 1
        elif low == "< prev":
            if state.page == "results":
                state.page_no -= 1
            elif state.page == "item":
                state.page, state.asin, state.selected = "results", None, {}
            else:
                state.page, state.sub = "item", None
        elif state.page == "results":
            state.page, state.asin, state.selected = "item", label, {}
        elif state.page == "item" and low in SUBPAGES:
            state.page, state.sub = "sub", low
        elif low == "add to cart":
            self._put_in_cart(state)
            state.page, state.asin, state.sub, state.selected = "search", None, None, {}
            state.results, state.query, state.page_no = [], "", 1
        elif low == "buy now":
            self._put_in_cart(state)
            return self._purchase(state, task)
        elif low == "checkout":
            return self._purchase(state, task)
        elif low.startswith("remove "):
            asin = label.split(" ", 1)[1]
            state.cart = [c for c in state.cart if c["asin"] != asin]
        else:  # an option value on the item page
            p = self.product(state.asin)
            for dim, values in p.options.items():
                if label in values:
                    state.selected[dim] = label
                    break
        return StepResult()

    @staticmethod
    def _put_in_cart(state: SessionState) -> None:
        entry = {"asin": state.asin, "options": dict(state.selected)}
        state.cart = [c for c in state.cart if c["asin"] != state.asin] + [entry]

    def _purchase(self, state: SessionState, task: Task) -> StepResult:
        bought = [(self.product(c["asin"]), c["options"]) for c in state.cart]
        total = round(sum(p.price for p, _ in bought), 2)
        records = []
        rewards = []
        used: set[int] = set()
        for item in task.items:
            goal = {
                "asin": item.asin,
                "query": item.query,
                "product_category": item.product_category,
                "name": item.name,
                "attributes": list(item.attributes),
                "goal_options": list(item.goal_options.values()),
                "price_upper": item.price_upper,
                "instruction_text": task.instruction,
            }
            brand = self.product(item.asin).brand
            best, best_j = 0.0, None
            for j, (p, opts) in enumerate(bought):
                if j in used:
                    continue
                if task.multi:
                    price_ok = total <= task.spending_limit
                else:
                    price_ok = p.price <= item.price_upper if item.price_upper > 0 else None
                r = score_item(state.scoring, product_record(p), goal, opts, price_ok, brand)
                if best_j is None or r > best or (r == best and p.asin == item.asin):
                    best, best_j = r, j
            product = None
            if best_j is not None:
                used.add(best_j)
                p, opts = bought[best_j]
                product = {**product_record(p), "options": dict(opts), "price": p.price}
            rewards.append(best)
            records.append(
                {
                    "goal": goal,
                    # {} and 0.0 when nothing was bought for this item: never None, so the
                    # purchase in info batches in vector envs (docs/info-keys.md).
                    "product": {} if product is None else product,
                    "price": 0.0 if product is None else product["price"],
                    "options": {} if product is None else product["options"],
                    "reward": best,
                }
            )
        score = sum(rewards) / max(len(task.items), len(bought), 1)
        if task.multi:
            purchase = {
                "items": records,
                "total": total,
                "spending_limit": task.spending_limit,
                "extra_items": max(0, len(bought) - len(task.items)),
            }
        else:
            purchase = records[0]
        state.page, state.sub = "done", None
        return StepResult(reward=score, done=True, purchase=purchase, score=score)

    # ---------------------------------------------------------------- snapshots
    def state_from_dict(self, data: Any) -> SessionState:
        """Validate a snapshot (ValueError on anything inconsistent) and build the state."""
        if not isinstance(data, dict):
            raise ValueError("state must be an object")
        try:
            task_id = data["task_id"]
            self.task(task_id)
            st = SessionState(
                task_id=task_id,
                scoring=data["scoring"],
                page=data["page"],
                query=str(data["query"])[:MAX_QUERY],
                page_no=int(data["page_no"]),
                results=list(data["results"]),
                asin=data["asin"],
                sub=data["sub"],
                selected=dict(data["selected"]),
                cart=[{"asin": c["asin"], "options": dict(c["options"])} for c in data["cart"]],
                out_of_stock=[str(a) for a in data.get("out_of_stock") or []],
                delisted=[str(a) for a in data.get("delisted") or []],
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed state: {exc}") from None
        ok = (
            st.scoring in SCORING_MODES
            and st.page in PAGES
            and len(st.results) <= 50
            and all(self.has_product(a) for a in st.results)
            and 1 <= st.page_no <= max(1, (len(st.results) + PAGE_SIZE - 1) // PAGE_SIZE)
            and (st.asin is None or self.has_product(st.asin))
            and (st.page not in ("item", "sub") or st.asin is not None)
            and (st.sub is None or st.sub in SUBPAGES)
            and (st.page != "sub" or st.sub is not None)
            and len(st.cart) <= 20
            and all(self.has_product(c["asin"]) for c in st.cart)
            and len(st.out_of_stock) <= 1000
            and len(st.delisted) <= 1000
            and all(self.has_product(a) for a in st.out_of_stock + st.delisted)
        )
        if ok:
            for opts, asin in [(st.selected, st.asin)] + [
                (c["options"], c["asin"]) for c in st.cart
            ]:
                offered = self.product(asin).options if asin else {}
                if any(v not in offered.get(d, ()) for d, v in opts.items()):
                    ok = False
        if not ok:
            raise ValueError("state is inconsistent with this catalogue")
        return st


_SHOPS: dict[tuple[int, int, bool], Shop] = {}
_SHOPS_LOCK = threading.Lock()
_FORK_HOOK: list[bool] = []


def _forget_shops_in_child() -> None:
    # A forked child must not share the parent's SQLite connection or a lock held at fork time.
    global _SHOPS_LOCK
    _SHOPS.clear()
    _SHOPS_LOCK = threading.Lock()


def get_shop(seed: int = 0, num_products: int = 10_000, unseen_types: bool = False) -> Shop:
    """A process-wide shared :class:`Shop` per (seed, size, types): the catalogue is built once."""
    key = (int(seed), int(num_products), bool(unseen_types))
    if not _FORK_HOOK:
        _FORK_HOOK.append(True)
        os.register_at_fork(after_in_child=_forget_shops_in_child)
    with _SHOPS_LOCK:
        shop = _SHOPS.get(key)
        if shop is None:
            shop = Shop(*key)
            _SHOPS[key] = shop
        return shop
