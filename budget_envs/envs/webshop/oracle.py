"""The exact oracle: optimal next actions and turns-to-success from (task, session state).

A pure function of the task and the session state (as the server reports it). It searches a
small abstract graph whose moves are the only ones that can lie on a shortest path: search a
target's title (the task generator checked it lists the target on page 1), page through the
current results, open a target, pick its goal options, add to cart or buy, remove a wrong cart
entry, check out. Every other action (sub-pages, other products, other options) never shortens
the way to success, so the breadth-first distance over this graph is the exact cost-to-go.

Any query that lists the target on page 1 is as good as its title; ``oracle_actions`` names the
title query and, when it does, the instruction's natural query.

Permanent faults enter through the state: a target that is out of stock can never be bought
(every goal item has exactly one product scoring 1.0, so the task is lost), and a delisted
target can no longer be found by a search (only reached from its own page or a result list
that still holds it).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from budget_envs.core import UNREACHABLE
from budget_envs.envs.webshop.tasks import PAGE_SIZE, Task

__all__ = ["oracle"]

_SUCCESS = "success"


def _results_info(task: Task, state: dict[str, Any]) -> tuple:
    results = state.get("results") or []
    npages = max(1, (len(results) + PAGE_SIZE - 1) // PAGE_SIZE)
    pos = []
    for j, item in enumerate(task.items):
        if item.asin in results:
            pos.append((j, results.index(item.asin) // PAGE_SIZE + 1))
    return (int(state.get("page_no", 1)), npages, tuple(pos))


def _abstract(task: Task, state: dict[str, Any]) -> tuple:
    goal_asins = [it.asin for it in task.items]
    ok = 0
    wrong = 0
    for entry in state.get("cart", []):
        if entry["asin"] in goal_asins:
            j = goal_asins.index(entry["asin"])
            if all(entry["options"].get(d) == v for d, v in task.items[j].goal_options.items()):
                ok |= 1 << j
        else:
            wrong += 1
    page = state["page"]
    if page == "search":
        loc: tuple = ("search",)
    elif page == "results":
        loc = ("results", _results_info(task, state))
    else:
        asin = state.get("asin")
        j = goal_asins.index(asin) if asin in goal_asins else -1
        sel = 0
        if j >= 0:
            sel = sum(
                state.get("selected", {}).get(d) == v for d, v in task.items[j].goal_options.items()
            )
        loc = ("item" if page == "item" else "sub", j, sel, _results_info(task, state))
    return (loc, ok, wrong)


def _moves(task: Task, s: tuple, hidden: frozenset[int] = frozenset()):
    """(move, next state) pairs; next state ``_SUCCESS`` ends the episode won. ``hidden``:
    goal items that search no longer lists."""
    loc, ok, wrong = s
    full = (1 << len(task.items)) - 1
    multi = task.multi
    kind = loc[0]
    if kind == "search":
        for j in range(len(task.items)):
            if not ok >> j & 1 and j not in hidden:
                yield ("search", j), (("results", (1, 1, ((j, 1),))), ok, wrong)
        if wrong:
            yield ("remove",), (loc, ok, wrong - 1)
        if multi and ok == full and not wrong:
            yield ("checkout",), _SUCCESS
        return
    back = (("search",), ok, wrong)
    if kind == "results":
        page_no, npages, pos = loc[1]
        yield ("back",), back
        if page_no < npages:
            yield ("next",), (("results", (page_no + 1, npages, pos)), ok, wrong)
        if page_no > 1:
            yield ("prev",), (("results", (page_no - 1, npages, pos)), ok, wrong)
        for j, p in pos:
            if p == page_no:
                yield ("open", j), (("item", j, 0, loc[1]), ok, wrong)
        return
    _, j, sel, res = loc
    yield ("back",), back
    if kind == "sub":
        yield ("prev",), (("item", j, sel, res), ok, wrong)
        return
    yield ("prev",), (("results", res), ok, wrong)
    if j < 0:
        return
    k = task.items[j].k
    if sel < k:
        yield ("option", j), (("item", j, sel + 1, res), ok, wrong)
    done_ok = (ok | 1 << j) if sel == k else (ok & ~(1 << j))
    if multi:
        yield ("add",), (("search",), done_ok, wrong)
    if sel == k and (not multi or (done_ok == full and not wrong)):
        yield ("buy",), _SUCCESS


def _distance(task: Task, start: tuple, hidden: frozenset[int] = frozenset()) -> int:
    if start == _SUCCESS:
        return 0
    seen = {start: 0}
    queue = deque([start])
    while queue:
        s = queue.popleft()
        d = seen[s]
        for _, nxt in _moves(task, s, hidden):
            if nxt == _SUCCESS:
                return d + 1
            if nxt not in seen:
                seen[nxt] = d + 1
                queue.append(nxt)
    return UNREACHABLE


def _concrete(task: Task, state: dict[str, Any], move: tuple) -> list[str]:
    name = move[0]
    if name == "search":
        item = task.items[move[1]]
        acts = [f"search[{item.title_query}]"]
        if item.natural_page == 1 and item.natural_query != item.title_query:
            acts.append(f"search[{item.natural_query}]")
        return acts
    if name == "open":
        return [f"click[{task.items[move[1]].asin.lower()}]"]
    if name == "option":
        item = task.items[move[1]]
        selected = state.get("selected", {})
        return [f"click[{v.lower()}]" for d, v in item.goal_options.items() if selected.get(d) != v]
    if name == "remove":
        goal_asins = {it.asin for it in task.items}
        return [
            f"click[remove {c['asin'].lower()}]"
            for c in state.get("cart", [])
            if c["asin"] not in goal_asins
        ]
    return [
        {
            "back": "click[back to search]",
            "next": "click[next >]",
            "prev": "click[< prev]",
            "add": "click[add to cart]",
            "buy": "click[buy now]",
            "checkout": "click[checkout]",
        }[name]
    ]


def oracle(task: Task, state: dict[str, Any]) -> tuple[list[str], int]:
    """``(optimal next actions, cost_to_go)`` for ``state`` of ``task`` (not finished)."""
    sold_out = set(state.get("out_of_stock") or ())
    if any(it.asin in sold_out for it in task.items):
        return [], UNREACHABLE
    delisted = set(state.get("delisted") or ())
    hidden = frozenset(j for j, it in enumerate(task.items) if it.asin in delisted)
    start = _abstract(task, state)
    best = _distance(task, start, hidden)
    if best >= UNREACHABLE:
        return [], UNREACHABLE
    actions: list[str] = []
    for move, nxt in _moves(task, start, hidden):
        if 1 + _distance(task, nxt, hidden) == best:
            for a in _concrete(task, state, move):
                if a not in actions:
                    actions.append(a)
    return actions, best
