"""The env contract, checked on every registered id (product ids plus the toy env).

A family joins these tests the moment its row lands in the registry table. The family's own
rules (hooks, oracle, candidates, bad input, snapshots, seeded determinism, task ids, the bare
env's ``check_env``...) are ``budget_envs.contract.check_family``'s, called on every id by
tests/test_check_family.py; this file keeps what only a test can do: the wrapper stack that
``gymnasium.make`` builds, a fresh process, vector envs, the import-free form. Most tests play the
first two tasks (``options["task_id"]``), so families that generate games on first use build few.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from budget_envs.registry import entry_for, registered_ids
from budget_envs.wrappers import BudgetWrapper, ErrorInjection
from contract_helpers import TOY_ID, FirstTasks, make, policy_action, transcript
from gymnasium.utils.env_checker import check_env

from budget_envs.info import ALL_KEYS, CORE_KEYS

IDS = registered_ids()
ROOT = pathlib.Path(__file__).resolve().parents[1]

_make = make
_policy_action = policy_action


@pytest.fixture(params=IDS, ids=IDS)
def env_id(request):
    return request.param


def test_registry_has_every_row():
    assert TOY_ID in IDS
    for env_id in IDS:
        assert env_id in gym.registry
        assert entry_for(env_id).description


def test_check_env_full_stack(env_id):
    env = _make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)
    env.close()


def test_budget_none_gives_the_bare_env(env_id):
    env = _make(env_id, budget=None)
    assert not any(isinstance(w, (BudgetWrapper, ErrorInjection)) for w in _chain(env))
    env.close()


def _chain(env):
    out = []
    while isinstance(env, gym.Wrapper):
        out.append(env)
        env = env.env
    return out


def test_spaces_are_printable_text(env_id):
    env = _make(env_id)
    for space in (env.observation_space, env.action_space):
        assert isinstance(space, gym.spaces.Text)
        assert space.contains("go north")
        assert space.contains("")
    env.close()


def test_info_keys(env_id):
    env = _make(env_id, faults={"kinds": "drop", "at_turn": 2, "seed": 0})
    obs, info = env.reset(seed=0, options={"task_id": 0})
    seen = set(info)
    assert set(CORE_KEYS) <= set(info)
    assert isinstance(info["admissible_actions"], list)
    rng = np.random.default_rng(0)
    for _ in range(3):
        obs, r, term, trunc, info = env.step(_policy_action(env, info, rng))
        assert set(CORE_KEYS) <= set(info)
        seen |= set(info)
        if term or trunc:
            break
    assert "fault" in seen and "budget" in seen
    undocumented = seen - set(ALL_KEYS)
    assert not undocumented, f"info keys missing from budget_envs/info.py: {undocumented}"
    env.close()


def test_same_transcript_in_a_fresh_process(env_id):
    here = transcript(_make(env_id), seed=11, options={"task_id": 1})
    code = f"""
import json, sys, warnings
sys.path.insert(0, {str(ROOT / "tests")!r})
import budget_envs
import contract_helpers as h
h.register_toy()
print(json.dumps(h.transcript({env_id!r}, 11, options={{"task_id": 1}})))
"""
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == here


def test_an_action_with_a_line_break_is_an_invalid_counted_turn(env_id):
    """Engines read a line break as the end of a command: a second command after one would run
    unseen by the turn count, so every family refuses the whole action as one turn."""
    env = _make(env_id, budget=100)
    obs, info = env.reset(seed=5, options={"task_id": 0})
    first = env.unwrapped.oracle_actions()[0]
    cost = env.unwrapped.cost_to_go()
    for turn, action in enumerate((f"{first}\n{first}", f"{first}\r", f"\n{first}"), start=1):
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["invalid_action"] and "line break" in obs, action
        assert reward == 0.0 and not terminated and info["turn"] == turn
        assert env.unwrapped.cost_to_go() == cost
    obs, reward, terminated, truncated, info = env.step(first)  # the same action, on one line
    assert not info["invalid_action"] and env.unwrapped.cost_to_go() == cost - 1
    env.close()


def test_make_from_spec_rebuilds_the_stack(env_id):
    env = _make(
        env_id,
        budget=(3, 9),
        visibility="remaining",
        faults={"kinds": "garble", "rate": 0.5, "seed": 1},
    )
    again = _make(env.spec)
    assert [type(w).__name__ for w in _chain(env)] == [type(w).__name__ for w in _chain(again)]
    assert transcript(env, 7, options={"task_id": 0}) == transcript(
        again, 7, options={"task_id": 0}
    )
    budget = env.get_wrapper_attr("budget_spec")
    assert budget == again.get_wrapper_attr("budget_spec")
    env.close()
    again.close()


PRODUCT_IDS = registered_ids(include_extra=False)


@pytest.mark.parametrize("product_id", PRODUCT_IDS or [None], ids=PRODUCT_IDS or ["no-product-id"])
def test_import_free_form_in_fresh_process(product_id):
    """gym.make("budget_envs:<id>") works in a process that never imported the package."""
    env_id = product_id or "BudgetMix/NoSuchEnv-v0"
    code = (
        "import gymnasium as gym, warnings\n"
        "warnings.simplefilter('ignore')\n"
        f"env = gym.make('budget_envs:{env_id}', budget=5)\n"
        "obs, info = env.reset(seed=0)\n"
        "print(info['budget']['limit'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if product_id is None:  # no product registered yet: the form must still resolve the package
        assert out.returncode != 0 and "BudgetMix" in out.stderr
        return
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "5"


def test_budget_is_enforced_on_every_id(env_id):
    env = _make(env_id, budget=3, visibility="remaining")
    obs, info = env.reset(seed=0, options={"task_id": 0})
    assert obs.endswith("Turns left: 3 of 3")
    steps = 0
    truncated = terminated = False
    while not (terminated or truncated):
        obs, r, terminated, truncated, info = env.step("look around please")
        steps += 1
    assert steps <= 3
    if not terminated:
        assert steps == 3 and truncated
        assert info["episode_summary"]["used"] == 3
    env.close()


def test_fault_kinds_never_crash(env_id):
    env = _make(env_id, budget=None)
    kinds = ("slip", "drop", "garble") + tuple(env.unwrapped.fault_kinds())
    env = ErrorInjection(env, kinds=list(kinds), rate=1.0, seed=0)
    rng = np.random.default_rng(0)
    for seed in range(2):
        obs, info = env.reset(seed=seed, options={"task_id": seed})
        for _ in range(2 * len(kinds)):
            obs, r, term, trunc, info = env.step(_policy_action(env, info, rng))
            assert env.observation_space.contains(obs)
            assert info["fault"]["kind"] in kinds
            if term:
                break
    seen = {f["kind"] for f in info["faults"]}
    assert seen
    env.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs_with_autoreset(env_id, mode):
    n = 2
    fns = [
        (
            lambda: FirstTasks(
                _make(env_id, budget=(2, 6), faults={"kinds": "drop", "rate": 0.3, "seed": 0})
            )
        )
        for _ in range(n)
    ]
    if mode == "sync":
        venv = gym.vector.SyncVectorEnv(fns)
    else:
        venv = gym.vector.AsyncVectorEnv(fns, shared_memory=False)
    obs, infos = venv.reset(seed=[10, 20])
    limits = [set() for _ in range(n)]
    for i in range(n):
        limits[i].add(int(infos["budget"]["limit"][i]))
    ends = 0
    for _ in range(25):
        obs, rewards, terms, truncs, infos = venv.step(["look"] * n)
        assert all(isinstance(o, str) for o in obs)
        for i in range(n):
            if infos["_budget"][i]:
                limits[i].add(int(infos["budget"]["limit"][i]))
                assert 2 <= infos["budget"]["limit"][i] <= 6
        ends += int(np.sum(terms | truncs))
    venv.close()
    assert ends >= 2
    assert any(len(s) > 1 for s in limits) or limits[0] != limits[1]


def test_unknown_id_says_what_was_expected():
    import budget_envs  # noqa: F401

    with pytest.raises(gym.error.Error, match="BudgetMix"):
        gym.make("BudgetMix/NoSuchEnv-v0")
