"""ToolUse speed: an env step against the bare SQLite queries it runs, and reset speed.

Run: ``.venv/bin/python -m pytest benchmarks/bench_tooluse.py --benchmark-only -p no:cacheprovider``

Goals (issue 3): >= 5,000 env steps/s on one core; >= 500 resets/s. The floor of a step is the
same parameterized queries on a bare connection (role ``baseline``); the ratio printed at the end
is env step / bare queries, from the same run.
"""

from __future__ import annotations

import itertools
import json
import sqlite3

import pytest

from budget_envs.envs.tooluse import ToolUseEnv
from budget_envs.envs.tooluse.tools import call_json

CALLS = 500


@pytest.fixture(scope="module")
def env_mid():
    """An L3 episode a few calls in, with a customer, orders and items shown."""
    env = ToolUseEnv(level=3)
    env.reset(options={"task_id": 0})
    for _ in range(3):
        env.step(env.oracle_actions()[0])
    return env


def _ids(env, prefix):
    return sorted(i for i in env._pr.revealed if i.startswith(prefix))


def _bare_get_order(conn, oid):
    row = conn.execute(
        "SELECT o.id, o.day, o.status, o.address, o.note, o.cancel_reason, p.id, p.method, "
        "p.amount_cents FROM orders o JOIN payments p ON p.order_id=o.id WHERE o.id=?",
        (oid,),
    ).fetchone()
    items = conn.execute(
        "SELECT i.id, i.product_id, p.name, p.color, p.size, i.qty, i.price_cents, i.status, "
        "i.exchange_product_id FROM order_items i JOIN products p ON p.id=i.product_id "
        "WHERE i.order_id=? ORDER BY i.rowid",
        (oid,),
    ).fetchall()
    return row, items


def _bare_list_orders(conn, cid):
    return conn.execute(
        "SELECT o.id, o.day, o.status, p.amount_cents, "
        "(SELECT count(*) FROM order_items i WHERE i.order_id=o.id) "
        "FROM orders o JOIN payments p ON p.order_id=o.id WHERE o.customer_id=? "
        "ORDER BY o.seq LIMIT ? OFFSET ?",
        (cid, 5, 0),
    ).fetchall()


def _bare_conn(env):
    conn = sqlite3.connect(":memory:", isolation_level=None)
    env.world.copy_into(conn)
    return conn


@pytest.mark.parametrize("role", ["baseline", "ours"])
def test_get_order_step(benchmark, env_mid, role):
    """``get_order``: env.step (parse, check, query, JSON, info) vs the two bare queries."""
    orders = _ids(env_mid, "ord")[:4]
    benchmark.group = "tooluse-get-order"
    benchmark.extra_info.update(
        compare="tooluse-get-order-step", role=role, calls=CALLS, goal=">= 5,000 env steps/s"
    )
    if role == "baseline":
        conn = _bare_conn(env_mid)
        cycle = itertools.cycle(orders)
        run = lambda: [_bare_get_order(conn, next(cycle)) for _ in range(CALLS)]  # noqa: E731
    else:
        acts = itertools.cycle([call_json("get_order", {"order_id": o}) for o in orders])
        step = env_mid.step
        run = lambda: [step(next(acts)) for _ in range(CALLS)]  # noqa: E731
    benchmark.pedantic(run, rounds=30, warmup_rounds=2)
    benchmark.extra_info["per_second"] = CALLS / benchmark.stats.stats.min


@pytest.mark.parametrize("role", ["baseline", "ours"])
def test_list_orders_step(benchmark, env_mid, role):
    """``list_orders`` (first page): env.step vs the bare page query."""
    cid = _ids(env_mid, "cus")[0]
    benchmark.group = "tooluse-list-orders"
    benchmark.extra_info.update(
        compare="tooluse-list-orders-step", role=role, calls=CALLS, goal=">= 5,000 env steps/s"
    )
    if role == "baseline":
        conn = _bare_conn(env_mid)
        run = lambda: [_bare_list_orders(conn, cid) for _ in range(CALLS)]  # noqa: E731
    else:
        act = call_json("list_orders", {"customer_id": cid})
        step = env_mid.step
        run = lambda: [step(act) for _ in range(CALLS)]  # noqa: E731
    benchmark.pedantic(run, rounds=30, warmup_rounds=2)
    benchmark.extra_info["per_second"] = CALLS / benchmark.stats.stats.min


def test_invalid_json_step(benchmark, env_mid):
    """A malformed action: parse failure and feedback (no SQL)."""
    benchmark.group = "tooluse-invalid"
    step = env_mid.step
    benchmark.pedantic(
        lambda: [step('{"tool_calls": [') for _ in range(CALLS)], rounds=20, warmup_rounds=2
    )
    benchmark.extra_info["per_second"] = CALLS / benchmark.stats.stats.min


RESETS = 100


@pytest.mark.parametrize("role", ["baseline", "ours"])
@pytest.mark.parametrize("level", [1, 5])
def test_reset(benchmark, role, level):
    """env.reset (task generation + a fresh database) vs copying the template with the backup
    API alone."""
    env = ToolUseEnv(level=level)
    env.reset(options={"task_id": 0})
    benchmark.group = f"tooluse-reset-L{level}"
    benchmark.extra_info.update(
        compare=f"tooluse-reset-L{level}", role=role, calls=RESETS, goal=">= 500 resets/s"
    )
    if role == "baseline":
        template, target = env.world.template, sqlite3.connect(":memory:")
        run = lambda: [template.backup(target) for _ in range(RESETS)]  # noqa: E731
    else:
        ids = itertools.cycle(range(5000))
        reset = env.reset
        run = lambda: [reset(options={"task_id": next(ids)}) for _ in range(RESETS)]  # noqa: E731
    benchmark.pedantic(run, rounds=15, warmup_rounds=1)
    benchmark.extra_info["per_second"] = RESETS / benchmark.stats.stats.min


def test_oracle_actions_level5(benchmark):
    """``oracle_actions()`` midway through a level-5 ticket (the eval harness calls it often)."""
    env = ToolUseEnv(level=5)
    env.reset(options={"task_id": 1})
    for _ in range(12):
        env.step(env.oracle_actions()[0])
    benchmark.group = "tooluse-oracle"
    benchmark(env.oracle_actions)
    benchmark.extra_info["per_second"] = 1 / benchmark.stats.stats.min
    json.dumps(env.oracle_actions())
