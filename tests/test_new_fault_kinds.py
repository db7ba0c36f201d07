"""The silent and permanent fault kinds: real effects, oracle cost-to-go kept exact, replayable."""

from __future__ import annotations

import json

import pytest
from budget_envs.wrappers import ErrorInjection

from budget_envs.core import UNREACHABLE
from budget_envs.envs.alfworld import AlfWorldEnv
from budget_envs.envs.tooluse import ToolUseEnv


@pytest.fixture(scope="module")
def alf(tmp_path_factory):
    return AlfWorldEnv(
        split="valid_seen", cache_dir=tmp_path_factory.mktemp("alf"), tasks_per_level=2
    )


def _play_with_fault(base, kind, task, at_turn=2, seed=0):
    env = ErrorInjection(base, kinds=kind, at_turn=at_turn, seed=seed)
    obs, info = env.reset(seed=seed, options={"task_id": task})
    fault = None
    for _ in range(at_turn):
        obs, _, terminated, truncated, info = env.step(base.oracle_actions()[0])
        fault = info.get("fault", fault)
        if terminated:
            break
    return env, obs, info, fault


def test_alfworld_phantom_reports_the_action_but_leaves_the_state(alf):
    alf.reset(seed=0, options={"task_id": 0})
    alf.step(alf.oracle_actions()[0])
    snap = alf.snapshot()
    action = alf.oracle_actions()[0]
    honest = alf.step(action)[0]
    alf.restore(snap)
    before = (alf.cost_to_go(), sorted(alf.current_info()["admissible_actions"]))
    env = ErrorInjection(alf, kinds="phantom", at_turn=1, seed=0)
    env.reset(seed=0, options={"task_id": 0})
    env.unwrapped.step(env.unwrapped.oracle_actions()[0])  # the same first turn, no fault
    obs, _, _, _, info = env.step(action)
    assert obs == honest  # what the agent sees is the action's usual feedback ...
    assert info["fault"]["effect"] == "dropped" and info["fault"]["cell"] == ["silent", "transient"]
    # ... but nothing happened.
    assert (alf.cost_to_go(), sorted(info["admissible_actions"])) == before


@pytest.mark.parametrize("kind", ["unreachable", "silent_unreachable"])
def test_alfworld_unreachable_blocks_for_good_and_the_oracle_plans_around_it(alf, kind):
    outcomes = set()
    for task, seed in [(t, s) for t in range(len(alf.task_ids)) for s in (0, 1)]:
        if outcomes == {"lost", "playable"} and task >= 4:
            break
        env, obs, info, fault = _play_with_fault(alf, kind, task, seed=seed)
        if fault is None or fault["effect"] != "world":
            continue
        (gone,) = alf.blocked
        assert ("out of reach" in obs) == (kind == "unreachable")
        assert fault["cost_after"] == alf.cost_to_go()
        if alf.lost:
            assert alf.cost_to_go() == UNREACHABLE and info["stop_reason"] == "lost"
            outcomes.add("lost")
            continue
        outcomes.add("playable")
        # Nothing admissible names the lost entity, and naming it is an invalid turn.
        assert not any(gone in a.split(" to ")[-1] for a in info["admissible_actions"])
        snap = alf.snapshot()
        alf.restore(snap)
        assert alf.blocked == {gone} and alf.cost_to_go() == fault["cost_after"]
        obs, _, _, _, info = env.step(f"go to {gone}")
        assert info["invalid_action"]
        # The oracle still wins in exactly cost-to-go turns.
        cost, turns = alf.cost_to_go(), 0
        while not alf.done:
            env.step(alf.oracle_actions()[0])
            turns += 1
        assert alf.won and turns == cost
    assert outcomes == {"lost", "playable"}


def test_tooluse_tool_down_stays_down_and_loses_only_when_needed():
    base = ToolUseEnv(level=3)
    seen = set()
    for task in range(12):
        env, obs, info, fault = _play_with_fault(base, "tool_down", task, seed=task)
        assert fault["cell"] == ["explicit", "permanent"]
        (broken,) = base._down
        assert f"the {broken} tool is down" in obs
        if base.lost:
            assert fault["cost_after"] == UNREACHABLE and info["stop_reason"] == "lost"
            seen.add("lost")
            continue
        seen.add("playable")
        cost, turns = base.cost_to_go(), 0
        while not base.done:
            env.step(base.oracle_actions()[0])
            turns += 1
        assert base.won and turns == cost
        assert base._down == {broken}
    assert seen == {"lost", "playable"}


def test_tooluse_stale_tool_keeps_answering_from_the_start_state():
    base = ToolUseEnv(level=2)
    env = ErrorInjection(base, kinds="stale_tool", at_turn=1, seed=0)
    env.reset(seed=0, options={"task_id": 0})
    first = base.oracle_actions()[0]
    obs, _, _, _, info = env.step(first)
    name = json.loads(first)["tool_calls"][0]["name"]
    assert info["fault"]["cell"] == ["silent", "permanent"]
    assert base._stale == {name} and "Error" not in obs
    snap = base.snapshot()
    base.restore(snap)
    assert base._stale == {name}
    cost, turns = base.cost_to_go(), 0
    while not base.done:
        env.step(base.oracle_actions()[0])
        turns += 1
    assert base.won and turns == cost


def test_textworld_phantom_reports_the_action_but_leaves_the_game(tmp_path):
    from budget_envs.envs.textworld import TreasureHunterEnv

    tw = TreasureHunterEnv(level=10, tasks_per_level=1)
    tw.reset(seed=0, options={"task_id": 0})
    assert tw.cost_to_go() >= 2
    snap = tw.snapshot()
    action = tw.oracle_actions()[0]
    honest = tw.step(action)[0]
    tw.restore(snap)
    before = (tw.cost_to_go(), tw.state_hash(), sorted(tw.current_info()["admissible_actions"]))
    env = ErrorInjection(tw, kinds="phantom", at_turn=1, seed=0)
    env.reset(seed=0, options={"task_id": 0})
    obs, _, terminated, _, info = env.step(action)
    assert obs == honest  # the action's usual feedback ...
    assert not terminated
    assert info["fault"]["effect"] == "dropped" and info["fault"]["cell"] == ["silent", "transient"]
    # ... but the game is where it was.
    after = (tw.cost_to_go(), tw.state_hash(), sorted(info["admissible_actions"]))
    assert after == before
