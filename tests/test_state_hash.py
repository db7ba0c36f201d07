"""``info["state_hash"]``: present, stable across processes, path-independent, collision-free.

Parametrized over the registry, plus one test per family of two different action paths that
reach the same state.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from budget_envs.registry import registered_ids
from contract_helpers import make, policy_action

from budget_envs.envs.tooluse.tools import call_json

IDS = registered_ids()
HEX = re.compile(r"^[0-9a-f]{32}$")
TESTS = Path(__file__).parent


def _bare(env_id):
    return make(env_id, budget=None)


def _hashes(env_id, seed, turns):
    """State hashes along a seeded mixed oracle/random episode."""
    env = _bare(env_id)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out = [info["state_hash"]]
    for _ in range(turns):
        obs, _, term, trunc, info = env.step(policy_action(env, info, rng))
        out.append(info["state_hash"])
        if term or trunc:
            break
    env.close()
    return out


@pytest.mark.parametrize("env_id", IDS)
def test_hash_on_every_reset_and_step(env_id):
    hashes = _hashes(env_id, seed=5, turns=6)
    assert len(hashes) >= 2
    assert all(isinstance(h, str) and HEX.match(h) for h in hashes), hashes


@pytest.mark.parametrize("env_id", IDS)
def test_same_task_same_start_hash(env_id):
    env = _bare(env_id)
    _, a = env.reset(seed=1, options={"task_id": 0})
    _, b = env.reset(seed=99, options={"task_id": 0})
    _, c = env.reset(seed=3, options={"task_id": 1})
    env.close()
    assert a["state_hash"] == b["state_hash"]
    assert a["task_id"] != c["task_id"] and a["state_hash"] != c["state_hash"]


@pytest.mark.parametrize("env_id", IDS)
def test_invalid_action_keeps_hash(env_id):
    env = _bare(env_id)
    _, info = env.reset(seed=2)
    before = info["state_hash"]
    for bad in ("", "\x00", "x" * (env.unwrapped.max_action_length + 1)):
        _, _, _, _, info = env.step(bad)
        assert info["invalid_action"] and info["state_hash"] == before
    env.close()


@pytest.mark.parametrize("env_id", IDS)
def test_snapshot_restore_restores_hash(env_id):
    env = _bare(env_id)
    rng = np.random.default_rng(4)
    _, info = env.reset(seed=4)
    for _ in range(2):
        _, _, _, _, info = env.step(policy_action(env, info, rng))
    snap, at = env.unwrapped.snapshot(), info["state_hash"]
    for _ in range(3):
        _, _, term, _, info = env.step(policy_action(env, info, rng))
        if term:
            break
    env.unwrapped.restore(snap)
    assert env.unwrapped.state_hash() == at
    env.close()


@pytest.mark.parametrize("env_id", IDS)
def test_hash_stable_across_processes_and_hash_seeds(env_id):
    here = _hashes(env_id, seed=7, turns=5)
    code = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(TESTS)!r})
        import budget_envs
        from contract_helpers import register_toy
        register_toy()
        from test_state_hash import _hashes
        print(json.dumps(_hashes({env_id!r}, seed=7, turns=5)))
        """
    )
    for hash_seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert json.loads(out.stdout.strip().splitlines()[-1]) == here


def _signature(env):
    """What must differ between states with different hashes: admissible actions, the
    cost-to-go, and the ``look`` text (text games) or the page (web shop)."""
    u = env.unwrapped
    adm = tuple(sorted(u.current_info()["admissible_actions"]))
    view = None
    if "look" in adm:
        snap = u.snapshot()
        view = u.step("look")[0]
        u.restore(snap)
    elif hasattr(u, "_view"):
        view = u._view
    return adm, u.cost_to_go(), view


@pytest.mark.parametrize("env_id", IDS)
def test_no_collision_between_different_states(env_id):
    """Over oracle and random episodes: one hash never stands for two different signatures."""
    env = _bare(env_id)
    seen: dict[str, tuple] = {}
    states = 0
    for seed, eps in ((0, 0.0), (1, 1.0), (2, 0.5)):
        rng = np.random.default_rng(seed)
        _, info = env.reset(seed=seed, options={"task_id": seed % 2})
        for _ in range(12):
            sig = _signature(env)
            old = seen.setdefault(info["state_hash"], sig)
            assert old == sig, f"hash {info['state_hash']} for two different states"
            states += 1
            if env.unwrapped.done:
                break
            best = env.unwrapped.oracle_actions()
            if best and rng.random() >= eps:
                action = best[0]
            elif hasattr(env.unwrapped, "sample_action"):
                action = env.unwrapped.sample_action(rng)
            else:
                options = info["admissible_actions"]
                action = options[int(rng.integers(len(options)))]
            _, _, term, trunc, info = env.step(action)
    env.close()
    assert states >= 10 and len(seen) >= 3


# ---------------------------------------------------------------------- two paths, one state
def _round_trip(env, pairs):
    """Find an action and its inverse from the start: the hash leaves and comes back."""
    _, info = env.reset(seed=0, options={"task_id": 0})
    start = info["state_hash"]
    for first in info["admissible_actions"]:
        for verb, back in pairs:
            if first.startswith(verb):
                inverse = back + first[len(verb) :]
                env.reset(seed=0, options={"task_id": 0})
                _, _, _, _, mid = env.step(first)
                if inverse in mid["admissible_actions"] and mid["state_hash"] != start:
                    _, _, _, _, end = env.step(inverse)
                    return start, mid["state_hash"], end["state_hash"]
    return None


def test_toy_two_paths():
    env = _bare("BudgetMixTest/Toy-v0")
    _, info = env.reset(seed=0, options={"task_id": 3})
    start = info["state_hash"]
    move = "go east" if "go east" in info["admissible_actions"] else "go west"
    back = "go west" if move == "go east" else "go east"
    env.step(move)
    _, _, _, _, info = env.step(back)
    assert info["state_hash"] == start


@pytest.mark.parametrize(
    "env_id",
    [i for i in IDS if i.startswith("BudgetMix/TextWorld")],
)
def test_textworld_two_paths(env_id):
    env = _bare(env_id)
    pairs = [
        ("go north", "go south"),
        ("go south", "go north"),
        ("go east", "go west"),
        ("go west", "go east"),
        ("open ", "close "),
        ("close ", "open "),
        ("take ", "drop "),
    ]
    found = _round_trip(env, pairs)
    env.close()
    assert found is not None, "no reversible action from the start state"
    start, mid, end = found
    assert mid != start and end == start


def test_alfworld_two_paths():
    env = _bare("BudgetMix/ALFWorld-v0")
    _, info = env.reset(seed=0, options={"task_id": 0})
    goes = [a for a in info["admissible_actions"] if a.startswith("go to ")]
    assert len(goes) >= 2
    env.step(goes[0])
    _, _, _, _, via = env.step(goes[1])
    env.reset(seed=0, options={"task_id": 0})
    _, _, _, _, direct = env.step(goes[1])
    assert via["state_hash"] == direct["state_hash"]
    _, _, _, _, back = env.step(goes[0])
    assert back["state_hash"] != direct["state_hash"]
    env.close()


def test_webshop_two_paths():
    env = _bare("BudgetMix/WebShop-v0")
    env.reset(seed=0, options={"task_id": 0})
    _, _, _, _, direct = env.step("search[red shoes]")
    env.reset(seed=0, options={"task_id": 0})
    env.step("search[blue lamp]")
    env.step("click[back to search]")
    _, _, _, _, via = env.step("search[red shoes]")
    assert via["state_hash"] == direct["state_hash"]
    product = next(a for a in via["admissible_actions"] if a.startswith("click[b"))
    _, _, _, _, page = env.step(product)
    assert page["state_hash"] != via["state_hash"]
    env.close()


def test_tooluse_two_paths():
    """Oracle calls alone vs the same calls with extra reads and a note written then cleared."""
    env = _bare("BudgetMix/ToolUse-v0")
    u = env.unwrapped
    env.reset(seed=0, options={"task_id": "L3-00002"})
    plan = []
    for _ in range(4):
        action = u.oracle_actions()[0]
        plan.append(action)
        _, _, _, _, direct = env.step(action)
    order = sorted(i for i in u._pr.revealed if i.startswith("ord_"))[0]
    env.reset(seed=0, options={"task_id": "L3-00002"})
    env.step(call_json("list_promotions", {}))
    for action in plan[:2]:
        env.step(action)
        env.step(action)  # the same read again changes nothing
    for action in plan[2:]:
        env.step(action)
    _, _, _, _, noted = env.step(call_json("set_order_note", {"order_id": order, "note": "x"}))
    _, _, _, _, cleared = env.step(call_json("set_order_note", {"order_id": order, "note": ""}))
    assert noted["state_hash"] != direct["state_hash"]
    assert cleared["state_hash"] == direct["state_hash"]
    env.close()


def test_tooluse_row_log_agrees_with_whole_database():
    """The incremental check at submit equals comparing every table with the gold database."""
    from budget_envs.envs.tooluse.tools import dump_tables

    env = _bare("BudgetMix/ToolUse-v0")
    u = env.unwrapped
    verdicts = set()
    for seed in range(12):
        rng = np.random.default_rng(seed)
        _, info = env.reset(seed=seed)
        for _ in range(int(rng.integers(2, 25))):
            best = u.oracle_actions()
            action = best[0] if best and rng.random() < 0.8 else u.sample_action(rng)
            if '"submit"' in action:
                break
            _, _, term, _, info = env.step(action)
            if term:
                break
        if u.done:
            continue
        whole = dump_tables(u._conn) == dump_tables(u.gold_connection())
        assert u._db_matches_gold() == whole
        verdicts.add(whole)
    assert verdicts == {True, False}


def test_tooluse_reused_digest_and_candidates_equal_fresh_ones():
    """What ToolUse reuses while nothing shown changed equals what it builds from scratch, at
    every step of oracle and random episodes, across snapshot / restore and permanent faults."""
    env = _bare("BudgetMix/ToolUse-v0")
    u = env.unwrapped
    hits = 0

    def fresh():
        digest, hashed, calls = u._digest, u._hash_memo, u._candidates
        u._digest = u._hash_memo = u._candidates = None
        try:
            return u._state_digest(), u.state_hash(), u.candidate_actions()
        finally:
            u._digest, u._hash_memo, u._candidates = digest, hashed, calls

    for seed in range(10):
        rng = np.random.default_rng(seed)
        _, info = env.reset(seed=seed)
        snap = None
        for turn in range(int(rng.integers(5, 30))):
            best = u.oracle_actions()
            action = best[0] if best and rng.random() < 0.6 else u.sample_action(rng)
            if turn == 3:
                snap = u.snapshot()
            if turn == 6 and snap is not None:
                u.restore(snap)
            if turn == 8:
                u.arm_fault("tool_down", rng=rng)
            before = u._digest
            _, _, term, _, info = env.step(action)
            hits += u._digest is before
            want_digest, want_hash, want_calls = fresh()
            assert u._state_digest() == want_digest
            assert info["state_hash"] == want_hash
            assert info["candidate_actions"] == want_calls
            if term:
                break
    assert hits > 10  # the reuse was exercised, not only the rebuild
    env.close()
