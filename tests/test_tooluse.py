"""ToolUse-v0: exact oracle, task range, bad input, faults, snapshots, determinism (issue 3)."""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import re
import sqlite3
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from budget_envs.wrappers import ErrorInjection

from budget_envs.core import UNREACHABLE
from budget_envs.envs.tooluse import ToolUseEnv
from budget_envs.envs.tooluse import oracle as orc
from budget_envs.envs.tooluse.tasks import make_task
from budget_envs.envs.tooluse.tools import READ_TOOLS, TOOLS_SCHEMA, call_json, dump_tables
from budget_envs.envs.tooluse.world import build_world

LEVELS = (1, 2, 3, 4, 5)
_ID = re.compile(r"\b(?:cus|ord|itm|pay|prd|cur)_[0-9a-f]{8}\b")


def _env(level=None, **kw) -> ToolUseEnv:
    return ToolUseEnv(level=level, **kw)


def _play_oracle(env: ToolUseEnv, stop_before_submit: bool = False):
    """Follow the oracle to the end; return (turns, last step tuple)."""
    turns, out = 0, None
    while not env.done:
        acts = env.oracle_actions()
        assert acts, (env.task_id, env.cost_to_go())
        if stop_before_submit and env.cost_to_go() == 1:
            break
        before = env.cost_to_go()
        out = env.step(acts[0])
        turns += 1
        assert not out[4]["invalid_action"], out[0]
        if not env.done:
            assert env.cost_to_go() == before - 1, (env.task_id, acts[0], out[0])
    return turns, out


def _state(env: ToolUseEnv):
    pr = env._pr
    return (
        dump_tables(env._conn),
        sorted(pr.revealed),
        dict(pr.pages_seen),
        dict(pr.changed),
        pr.submitted,
        sorted(pr.listed),
        env.won,
        env.lost,
    )


# --------------------------------------------------------------------------- oracle and range
@pytest.mark.parametrize("level", LEVELS)
def test_oracle_solves_each_level_in_exactly_cost_to_go_turns(level):
    env = _env(level)
    for index in range(0, 5000, 250):
        env.reset(options={"task_id": index})
        need = env.cost_to_go()
        turns, (obs, reward, terminated, truncated, info) = _play_oracle(env)
        assert turns == need
        assert info["won"] and terminated and not truncated and reward == 1.0
        assert info["score"] == 1.0
        assert env.cost_to_go() == 0 and env.oracle_actions() == []


def test_optimal_lengths_cover_3_to_30_plus():
    spans = {}
    for level in LEVELS:
        env = _env(level)
        costs = []
        for index in range(0, 5000, 25):
            env.reset(options={"task_id": index})
            costs.append(env.cost_to_go())
        spans[level] = (min(costs), max(costs))
    assert spans[1][0] == 3
    assert spans[5][1] >= 30
    assert min(lo for lo, _ in spans.values()) >= 3
    # Levels get harder: each level's shortest task is no shorter than the previous one's.
    assert all(spans[a][0] <= spans[b][0] for a, b in zip(LEVELS, LEVELS[1:]))


def _broad_actions(env: ToolUseEnv, rng) -> list[str]:
    """Many valid calls from here: every read on every shown id, the fixes, random writes."""
    pr, world = env._pr, env.world
    shown = sorted(pr.revealed)
    by = {p: [i for i in shown if i.startswith(p)] for p in ("cus", "ord", "prd", "cur")}
    acts = [call_json("list_promotions", {})]
    acts += [call_json("find_customer", {"email": e}) for e in env.task.emails]
    for cid in by["cus"]:
        acts.append(call_json("list_orders", {"customer_id": cid}))
        acts += [call_json("list_orders", {"customer_id": cid, "cursor": c}) for c in by["cur"]]
        acts.append(call_json("get_loyalty_points", {"customer_id": cid}))
    for oid in by["ord"]:
        acts += [call_json(n, {"order_id": oid}) for n in ("get_order", "track_shipment")]
    for pid in by["prd"]:
        acts += [
            call_json(n, {"product_id": pid})
            for n in ("list_variants", "get_product", "get_product_reviews")
        ]
    gold = orc.Gold(world, env.task)
    for slot in orc.diff_slots(gold, pr):
        acts.append(call_json(*orc.fix_call(gold, slot)))
    acts += [env.sample_action(rng) for _ in range(6)]
    answer = env.task.answer_cents
    acts.append(call_json("submit", {"answer": f"{answer // 100}.{answer % 100:02d}"}))
    return list(dict.fromkeys(acts))


@pytest.mark.parametrize("level", (1, 2, 3, 4))
def test_cost_to_go_is_bellman_consistent_and_oracle_lists_every_optimal_call(level):
    """From states on seeded trajectories: no call lowers the cost by more than one, and the
    calls that lower it by exactly one are precisely ``oracle_actions()``."""
    env = _env(level)
    rng = np.random.default_rng(level)
    for index in (3, 77, 1234):
        env.reset(options={"task_id": index})
        for _ in range(12):
            if env.done:
                break
            cost = env.cost_to_go()
            oracle = set(env.oracle_actions())
            assert oracle, env.task_id
            snap = env.snapshot()
            lowering = set()
            for act in _broad_actions(env, rng):
                env.step(act)
                after = env.cost_to_go()
                assert after >= cost - 1, (env.task_id, act)
                if after == cost - 1:
                    lowering.add(act)
                env.restore(snap)
            assert lowering == oracle, (env.task_id, lowering ^ oracle)
            # Move on: mostly oracle, sometimes a random (possibly harmful but not losing) call.
            act = sorted(oracle)[0]
            if rng.random() < 0.3:
                cand = env.sample_action(rng)
                env.step(cand)
                if env.done:
                    env.restore(snap)
                    env.step(act)
            else:
                env.step(act)


@pytest.mark.parametrize("level", (4, 5))
def test_random_agent_rarely_succeeds_at_hard_levels(level):
    env = _env(level)
    rng = np.random.default_rng(7)
    wins = 0
    for index in range(40):
        env.reset(options={"task_id": index})
        for _ in range(60):
            *_, terminated, _, info = env.step(env.sample_action(rng))
            if terminated:
                break
        wins += info["won"]
    assert wins <= 1


def test_thousands_of_distinct_tasks_per_level():
    world = _env().world
    for level in LEVELS:
        # The first line only names the task id; compare what the agent is asked to do.
        asks = {make_task(world, f"L{level}-{i:05d}").ticket.split("\n", 1)[1] for i in range(5000)}
        assert len(asks) >= (4000 if level == 1 else 4900), level


def test_tasks_are_never_solved_at_start():
    for level in LEVELS:
        env = _env(level)
        for index in range(0, 5000, 17):
            env.reset(options={"task_id": index})
            gold = orc.Gold(env.world, env.task)
            assert gold.slots
            for slot, value in gold.slots.items():
                assert value != orc.initial_value(env.world, slot), (env.task_id, slot)
            assert env.cost_to_go() >= 3
        env.reset(options={"task_id": 5})
        assert dump_tables(env.gold_connection()) != dump_tables(env._conn)
    assert len(_env().task_ids) == 5 * 5000
    assert _env(3, tasks_per_level=20).task_ids[-1] == "L3-00019"


def test_database_verdict_equals_whole_database_comparison():
    env = _env(3)
    for index in range(0, 600, 60):
        env.reset(options={"task_id": index})
        _play_oracle(env, stop_before_submit=True)
        assert dump_tables(env._conn) == dump_tables(env.gold_connection())
        assert env._db_matches_gold()
        # Skip the last gold write: the database differs and the submit loses.
        env.reset(options={"task_id": index})
        while True:
            acts = env.oracle_actions()
            if env.cost_to_go() == 2:
                break
            env.step(acts[0])
        assert dump_tables(env._conn) != dump_tables(env.gold_connection())
        assert not env._db_matches_gold()
        *_, terminated, _, info = env.step(call_json("submit", {"answer": "0.00"}))
        assert terminated and info["lost"] and not info["won"]
        assert env.cost_to_go() == UNREACHABLE and env.oracle_actions() == []


def test_wrong_answer_loses_even_with_the_gold_database():
    env = _env(2)
    env.reset(options={"task_id": 11})
    _play_oracle(env, stop_before_submit=True)
    answer = env.task.answer_cents + 1
    *_, terminated, _, info = env.step(
        call_json("submit", {"answer": f"{answer // 100}.{answer % 100:02d}"})
    )
    assert terminated and info["lost"] and info["score"] < 1.0


def test_money_answers_are_read_leniently():
    env = _env(1)
    env.reset(options={"task_id": 0})
    _play_oracle(env, stop_before_submit=True)
    cents = env.task.answer_cents
    obs, reward, *_ = env.step(call_json("submit", {"answer": f" ${cents / 100:,.2f} "}))
    assert reward == 1.0, obs


# --------------------------------------------------------------------------- writes and loss
def _find_state(env, pred, max_steps=60):
    """Follow the oracle until ``pred(env)`` returns a truthy value; return it."""
    for _ in range(max_steps):
        hit = pred(env)
        if hit:
            return hit
        if env.done:
            return None
        env.step(env.oracle_actions()[0])
    return None


def test_wrong_irreversible_write_loses_the_episode():
    env = _env(3)
    world = env.world
    lost = 0
    for index in range(30):
        env.reset(options={"task_id": index})
        gold = orc.Gold(world, env.task)

        def wrong_refund(e):
            for iid in sorted(i for i in e._pr.revealed if i.startswith("itm")):
                item = world.items[iid]
                pay = world.orders[item.order_id].payment_id
                if item.status == "delivered" and ("item", iid) not in gold.slots:
                    return call_json(
                        "refund_item",
                        {"order_id": item.order_id, "item_id": iid, "payment_id": pay},
                    )
            return None

        act = _find_state(env, wrong_refund)
        if act is None:
            continue
        obs, reward, terminated, truncated, info = env.step(act)
        assert '"ok":true' in obs
        assert terminated and info["lost"] and not info["won"] and reward == 0.0
        assert env.cost_to_go() == UNREACHABLE and env.oracle_actions() == []
        lost += 1
    assert lost >= 5


def test_wrong_reversible_write_is_corrected_by_the_oracle():
    env = _env(3)
    corrected = 0
    for index in range(20):
        env.reset(options={"task_id": index})
        gold = orc.Gold(env.world, env.task)

        def spare_order(e):
            orders = [o for o in sorted(e._pr.revealed) if o.startswith("ord")]
            return next((o for o in orders if ("note", o) not in gold.slots), None)

        oid = _find_state(env, spare_order)
        if oid is None or env.done:
            continue
        cost = env.cost_to_go()
        obs, *_ = env.step(call_json("set_order_note", {"order_id": oid, "note": "oops"}))
        assert not env.done and env.cost_to_go() == cost + 1
        fix = call_json("set_order_note", {"order_id": oid, "note": ""})
        assert fix in env.oracle_actions()
        need = env.cost_to_go()
        turns, out = _play_oracle(env)
        assert turns == need and out[4]["won"]
        corrected += 1
    assert corrected >= 5


def test_cancel_after_a_wrong_address_is_not_optimal():
    """A wrong address on an order the gold cancels must be fixed first (cancel freezes it)."""
    env = _env(3)
    checked = 0
    for index in range(200):
        env.reset(options={"task_id": index})
        cancels = [s[1] for s in orc.Gold(env.world, env.task).slots if s[0] == "status"]
        if not cancels:
            continue
        oid = _find_state(env, lambda e: cancels[0] in e._pr.revealed and cancels[0])
        cost = env.cost_to_go()
        env.step(call_json("update_address", {"order_id": oid, "address": "1 Wrong Way"}))
        assert env.cost_to_go() == cost + 1
        cancel = [a for a in env.oracle_actions() if "cancel_order" in a]
        assert not cancel
        snap = env.snapshot()
        reason = dict(env.task.gold)[("status", oid)][1]
        *_, terminated, _, info = env.step(
            call_json("cancel_order", {"order_id": oid, "reason": reason})
        )
        assert terminated and info["lost"]
        env.restore(snap)
        assert not env.lost and env.cost_to_go() == cost + 1
        checked += 1
        if checked == 3:
            break
    assert checked == 3


def test_score_counts_applied_changes_minus_collateral():
    env = _env(4)
    env.reset(options={"task_id": 8})
    n = len(env.task.gold) + 1
    scores = [0.0]
    while env.cost_to_go() > 1:
        *_, info = env.step(env.oracle_actions()[0])
        scores.append(info["score"])
    assert scores == sorted(scores) and scores[-1] == pytest.approx((n - 1) / n)
    oid = next(
        o
        for o in sorted(env._pr.revealed)
        if o.startswith("ord") and ("note", o) not in dict(env.task.gold)
    )
    *_, info = env.step(call_json("set_order_note", {"order_id": oid, "note": "collateral"}))
    assert info["score"] == pytest.approx((n - 2) / n)


# --------------------------------------------------------------------------- actions and bad input
def test_openai_message_shapes_and_one_call_per_turn():
    env = _env(1)
    env.reset(options={"task_id": 0})
    act = env.oracle_actions()[0]
    call = json.loads(act)["tool_calls"][0]
    snap = env.snapshot()
    canonical = env.step(act)[0]
    shapes = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
                }
            ],
        },
        {"tool_calls": [{"name": call["name"], "arguments": json.dumps(call["arguments"])}]},
        {"name": call["name"], "arguments": call["arguments"]},
    ]
    for shape in shapes:
        env.restore(snap)
        obs, _, _, _, info = env.step(json.dumps(shape))
        assert obs == canonical and not info["invalid_action"]
    env.restore(snap)
    before = _state(env)
    two = {"tool_calls": [call, {"name": "list_promotions", "arguments": {}}]}
    obs, _, terminated, _, info = env.step(json.dumps(two))
    assert info["invalid_action"] and "one tool call" in obs and not terminated
    assert _state(env) == before


BAD = [
    "not json",
    "{",
    "[]",
    "null",
    "42",
    '"text"',
    "[" * 8000 + "]" * 8000,
    '{"tool_calls":' + '{"a":' * 4000 + "1" + "}" * 4000 + "}",
    '{"tool_calls": []}',
    '{"tool_calls": "get_order"}',
    '{"content": "I am done"}',
    '{"tool_calls": [{"name": "drop_table", "arguments": {}}]}',
    '{"tool_calls": [{"name": 7, "arguments": {}}]}',
    '{"tool_calls": [{"name": "get_order", "arguments": []}]}',
    '{"tool_calls": [{"name": "get_order", "arguments": "{\\"order_id\\": "}]}',
    '{"tool_calls": [{"name": "get_order", "arguments": {"order_id": 12}}]}',
    '{"tool_calls": [{"name": "get_order", "arguments": {"order_id": null}}]}',
    '{"tool_calls": [{"name": "get_order", "arguments": {"order_id": ["ord_00000000"]}}]}',
    '{"tool_calls": [{"name": "get_order", "arguments": {"order_id": "1 OR 1=1"}}]}',
    '{"tool_calls": [{"name": "get_order", "arguments": {"id": "ord_00000000"}}]}',
    '{"tool_calls": [{"name": "cancel_order", "arguments": {"order_id": "ord_00000000", '
    '"reason": "\'; DROP TABLE orders; --"}}]}',
    '{"tool_calls": [{"name": "set_order_note", "arguments": {"order_id": "ord_00000000", '
    '"note": "' + "x" * 15000 + '"}}]}',
    '{"tool_calls": [{"name": "submit", "arguments": {"answer": true}}]}',
    "x" * 1_000_000,
    "\x00" + "{}",
]
# Well-formed calls that the tools refuse: a readable error, a normal turn, nothing changed.
REFUSED = [
    '{"tool_calls": [{"name": "find_customer", "arguments": {"email": "x\' OR \'1\'=\'1"}}]}',
    '{"tool_calls": [{"name": "find_customer", "arguments": {"email": "a@b.c; DELETE FROM '
    'customers"}}]}',
    '{"tool_calls": [{"name": "get_order", "arguments": {"order_id": "ord_00000000"}}]}',
    '{"tool_calls": [{"name": "cancel_order", "arguments": {"order_id": "ord_ffffffff", '
    '"reason": "no_longer_needed"}}]}',
]


def test_bad_input_is_an_invalid_turn_and_leaves_the_database_untouched():
    env = _env(2)
    env.reset(options={"task_id": 3})
    env.step(env.oracle_actions()[0])
    before = _state(env)
    for turn, action in enumerate(BAD, start=2):
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["invalid_action"], action[:80]
        assert obs and reward == 0.0 and not terminated and info["turn"] == turn
        assert _state(env) == before
    for action in REFUSED:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.startswith("Error:") and not info["invalid_action"] and not terminated
        assert _state(env) == before
    assert env.observation_space.contains(obs)


def test_tool_observations_show_only_revealed_ids_and_stay_compact():
    env = _env(3)
    rng = np.random.default_rng(5)
    for index in range(10):
        env.reset(options={"task_id": index})
        for _ in range(30):
            act = env.oracle_actions()[0] if rng.random() < 0.5 else env.sample_action(rng)
            obs, *_, terminated, _, info = env.step(act)
            if not obs.startswith(("Error", "Submitted")):
                json.loads(obs)
                assert set(_ID.findall(obs)) <= env._pr.revealed, act
                assert len(obs) < 4000 and ", " not in obs.split('"')[0]
            if terminated:
                break


def test_info_carries_tool_schema_and_tool_names():
    env = _env(1)
    obs, info = env.reset(seed=3)
    names = [t["function"]["name"] for t in info["tools"]]
    assert info["admissible_actions"] == names and "submit" in names
    assert info["tools"] is TOOLS_SCHEMA
    for tool in info["tools"]:
        assert tool["type"] == "function"
        params = tool["function"]["parameters"]
        assert params["type"] == "object" and set(params["required"]) <= set(params["properties"])
    assert 0.0 <= info["score"] <= 1.0 and info["goal"] in obs


def test_constructor_checks_its_arguments():
    for bad in (0, 6, "3", True):
        with pytest.raises(ValueError, match=repr(bad)):
            ToolUseEnv(level=bad)
    with pytest.raises(ValueError, match="0"):
        ToolUseEnv(tasks_per_level=0)
    with pytest.raises(TypeError, match="'x'"):
        ToolUseEnv(tasks_per_level="x")
    with pytest.raises(ValueError, match="-1"):
        ToolUseEnv(world_seed=-1)


def test_registered_id_has_a_budget_and_kwargs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make("BudgetMix/ToolUse-v0", level=5)
    obs, info = env.reset(seed=0)
    assert info["budget"]["limit"] == 40 and info["task_id"].startswith("L5-")
    env.close()


# --------------------------------------------------------------------------- faults
def test_tool_error_changes_nothing():
    env = _env(2)
    env.reset(options={"task_id": 4})
    env.step(env.oracle_actions()[0])
    before, cost = _state(env), env.cost_to_go()
    act = env.oracle_actions()[0]
    env.arm_fault("tool_error", np.random.default_rng(0))
    obs, _, _, _, info = env.step(act)
    assert obs.startswith("Error:") and "transient" in obs
    assert _state(env) == before and env.cost_to_go() == cost
    assert info["fault"]["executed"] == "" and info["fault"]["effect"] == "dropped"


def test_tool_timeout_runs_writes_but_hides_every_result():
    env = _env(2)
    env.reset(options={"task_id": 4})
    read = env.oracle_actions()[0]
    before = _state(env)
    env.arm_fault("tool_timeout", np.random.default_rng(0))
    obs = env.step(read)[0]
    assert "timed out" in obs and _state(env) == before
    while not any(
        json.loads(a)["tool_calls"][0]["name"] not in READ_TOOLS for a in env.oracle_actions()
    ):
        env.step(env.oracle_actions()[0])
    write = next(
        a for a in env.oracle_actions() if json.loads(a)["tool_calls"][0]["name"] not in READ_TOOLS
    )
    cost = env.cost_to_go()
    env.arm_fault("tool_timeout", np.random.default_rng(0))
    obs, _, _, _, info = env.step(write)
    assert "timed out" in obs and info["fault"]["executed"] == write
    assert env.cost_to_go() == cost - 1 and write not in env.oracle_actions()


def test_stale_read_serves_the_start_state_and_still_reveals():
    env = _env(3)
    for index in range(100):
        env.reset(options={"task_id": index})
        cancels = [slot[1] for slot, _ in env.task.gold if slot[0] == "status"]
        if cancels:
            break
    oid = cancels[0]
    _find_state(env, lambda e: ("status", oid) in e._pr.changed)
    fresh = env.step(call_json("get_order", {"order_id": oid}))[0]
    env.arm_fault("stale_read", np.random.default_rng(0))
    stale = env.step(call_json("get_order", {"order_id": oid}))[0]
    assert json.loads(fresh)["status"] == "cancelled"
    assert json.loads(stale)["status"] == "pending"
    # A stale list page still reveals its orders and cursor.
    env.reset(options={"task_id": index})
    first = env.oracle_actions()[0]
    env.step(first)
    page = call_json(
        "list_orders", {"customer_id": next(c for c in env._pr.revealed if c.startswith("cus"))}
    )
    cost = env.cost_to_go()
    env.arm_fault("stale_read", np.random.default_rng(0))
    env.step(page)
    assert env.cost_to_go() == cost - 1


def test_error_injection_wrapper_records_damage():
    env = ErrorInjection(
        _env(3), kinds=["tool_timeout", "tool_error", "stale_read", "slip"], rate=0.5, seed=3
    )
    obs, info = env.reset(seed=1)
    for _ in range(40):
        obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_actions()[0])
        if terminated:
            break
    assert info["faults"] and all(f["cost_after"] is not None for f in info["faults"])
    assert info["won"]


def test_slip_is_a_different_valid_read():
    env = _env(3)
    rng = np.random.default_rng(0)
    env.reset(options={"task_id": 9})
    for _ in range(8):
        act = env.oracle_actions()[0]
        slip = env.slip_action(act, rng)
        assert slip != act
        assert json.loads(slip)["tool_calls"][0]["name"] in READ_TOOLS
        snap = env.snapshot()
        before = dump_tables(env._conn)
        *_, info = env.step(slip)
        assert not info["invalid_action"] and dump_tables(env._conn) == before
        env.restore(snap)
        env.step(act)


# --------------------------------------------------------------------------- snapshots
def test_snapshot_restore_brings_back_database_and_episode_state():
    env = _env(4)
    env.reset(options={"task_id": 2})
    for _ in range(6):
        env.step(env.oracle_actions()[0])
    snap = env.snapshot()
    before, cost, oracle = _state(env), env.cost_to_go(), env.oracle_actions()
    _play_oracle(env)
    assert env.won
    assert env.restore(snap) == snap.observation
    assert _state(env) == before and not env.won and not env.done
    assert env.cost_to_go() == cost and env.oracle_actions() == oracle
    # Restoring across a reset to another task brings the old task back too.
    env.reset(options={"task_id": 3})
    env.restore(snap)
    assert env.task_id == snap.task_id and _state(env) == before
    turns, out = _play_oracle(env)
    assert turns == cost and out[4]["won"]
    # Restoring out of a lost episode clears the loss.
    env.restore(snap)
    env.step(call_json("submit", {"answer": "999.99"}))
    assert env.lost
    env.restore(snap)
    assert not env.lost and _state(env) == before


# --------------------------------------------------------------------------- determinism
def tooluse_transcript(seed: int, level: int | None = None) -> list[str]:
    """A seeded episode mixing oracle and random calls (also run in a subprocess)."""
    env = ToolUseEnv(level=level)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    lines = [info["task_id"], obs]
    for _ in range(25):
        act = env.oracle_actions()[0] if rng.random() < 0.6 else env.sample_action(rng)
        if rng.random() < 0.15:
            env.arm_fault(("tool_error", "tool_timeout", "stale_read")[int(rng.integers(3))], rng)
            obs, reward, terminated, _, info = env.step(act)
            lines += [act, obs, repr(reward), repr(info["fault"])]
        else:
            obs, reward, terminated, _, info = env.step(act)
            lines += [act, obs, repr(reward), repr(info["score"]), repr(env.cost_to_go())]
        if env.done:
            break
    return lines


def test_same_seed_same_task_and_transcript_across_processes():
    here = [tooluse_transcript(s, lv) for s, lv in ((1, None), (2, 5), (3, 2))]
    assert here == [tooluse_transcript(s, lv) for s, lv in ((1, None), (2, 5), (3, 2))]
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import test_tooluse as t; "
        "print(json.dumps([t.tooluse_transcript(s, lv) for s, lv in ((1, None), (2, 5), (3, 2))]))"
    )
    tests_dir = str(pathlib.Path(__file__).resolve().parent)
    for hashseed in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=hashseed)
        out = subprocess.run(
            [sys.executable, "-c", code, tests_dir],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        assert json.loads(out.stdout) == here
    assert tooluse_transcript(1) != tooluse_transcript(4)


def test_task_ids_pick_the_same_task_in_any_env_instance():
    a, b = ToolUseEnv(level=4), ToolUseEnv(level=4, world_seed=0)
    for tid in ("L4-00000", "L4-04999"):
        assert a.reset(options={"task_id": tid})[0] == b.reset(options={"task_id": tid})[0]
    assert (
        ToolUseEnv(level=4, world_seed=1).reset(options={"task_id": "L4-00000"})[0]
        != a.reset(options={"task_id": "L4-00000"})[0]
    )


def test_start_state_copies_the_same_with_or_without_deserialize():
    world = build_world(0)
    a, b = sqlite3.connect(":memory:"), sqlite3.connect(":memory:")
    world.copy_into(a)
    world.image = b""  # Python 3.10 has no Connection.deserialize: the backup API is used
    world.copy_into(b)
    assert dump_tables(a) == dump_tables(b) == dump_tables(world.template)


def test_every_level_reaches_its_tasks_quickly_enough_for_many_resets():
    env = _env()
    seen = {
        tid.split("-")[0]
        for tid in itertools.islice((env.reset(seed=s)[1]["task_id"] for s in range(200)), 200)
    }
    assert seen == {f"L{lv}" for lv in LEVELS}


def test_the_episode_database_is_copied_at_its_first_write_with_the_same_transcript():
    """Reads before any write answer from the world's template; the first write copies the
    start state. Transcripts equal an env that copies at every reset, snapshots included."""
    lazy, eager = ToolUseEnv(level=3), ToolUseEnv(level=3)
    copied_at_reset = fresh_reads = copied_at_write = 0
    for seed in range(8):
        rng = np.random.default_rng(seed)
        lazy.reset(seed=seed)
        eager.reset(seed=seed)
        eager._conn  # noqa: B018 - the copy made now, as before the change
        copied_at_reset += not lazy._fresh
        snap_lazy = snap_eager = None
        for turn in range(30):
            best = lazy.oracle_actions()
            action = best[0] if best and rng.random() < 0.7 else lazy.sample_action(rng)
            name = json.loads(action)["tool_calls"][0]["name"] if '"tool_calls"' in action else ""
            was_fresh = lazy._fresh
            got, want = lazy.step(action), eager.step(action)
            assert got == want, (seed, turn, action)
            if was_fresh and name in READ_TOOLS:
                fresh_reads += 1
                assert lazy._fresh  # a read copies nothing
            copied_at_write += was_fresh and not lazy._fresh
            if turn == 2:
                snap_lazy, snap_eager = lazy.snapshot(), eager.snapshot()
            if turn == 12 and snap_lazy is not None:
                assert lazy.restore(snap_lazy) == eager.restore(snap_eager)
            if got[2]:
                break
        assert dump_tables(lazy._conn) == dump_tables(eager._conn)
    assert copied_at_reset == 0 and fresh_reads > 8 and copied_at_write > 2
    lazy.close()
    eager.close()


def test_tool_results_are_encoded_as_json_dumps_would():
    from budget_envs.envs.tooluse.env import _ENCODE

    results = [
        {"customer_id": "cus_0", "name": "Zoë \u00e9\u4e2d", "n": 3, "x": None, "ok": True},
        {"orders": [{"id": "ord_1", "total": 12.5, "items": []}], "next_cursor": None},
        {"text": 'quote " backslash \\ newline \n tab \t', "neg": -1, "big": 10**20},
        [],
        {},
    ]
    for result in results:
        assert _ENCODE(result) == json.dumps(result, separators=(",", ":"))
