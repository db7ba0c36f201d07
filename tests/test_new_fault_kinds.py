"""The silent and permanent fault kinds: real effects, oracle cost-to-go kept exact, replayable."""

from __future__ import annotations

import json

import numpy as np
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


# ---------------------------------------------------------------------- WebShop permanent kinds
@pytest.fixture(scope="module")
def shop():
    from budget_envs.envs.webshop import WebShopEnv

    env = WebShopEnv(level=2, tasks_per_level=2)
    yield env
    env.close()


def _on_results(shop):
    """Reset task 0 and search the target's title: the results page lists it on page 1."""
    shop.reset(seed=0, options={"task_id": 0})
    shop.step(shop.oracle_actions()[0])
    target = shop._task.items[0].asin
    assert target in shop._state["results"][:10]
    return target


def _fault_turn(env, kind, action, seed=0):
    env.arm_fault(kind, np.random.default_rng(seed))
    return env.step(action)


def test_webshop_out_of_stock_is_for_good_and_loses_only_a_target(shop):
    target = _on_results(shop)
    other = next(a for a in shop._state["results"][:10] if a != target)
    shop.step(f"click[{other.lower()}]")
    cost = shop.cost_to_go()
    snap = shop.snapshot()
    honest = shop.step("click[description]")[4]
    shop.restore(snap)
    obs, _, terminated, _, info = _fault_turn(shop, "out_of_stock", "click[description]")
    assert info["fault"]["effect"] == "world"
    assert info["fault"]["cell"] == ["explicit", "permanent"]
    assert f"item {other} is now out of stock" in obs
    assert shop._state["out_of_stock"] == [other]
    assert info["state_hash"] != honest["state_hash"]
    # Not a target: the way to success is as long as before (the sub-page cost one turn).
    assert not terminated and shop.cost_to_go() == cost + 1 == honest_cost(shop, snap)
    obs, _, _, _, info = shop.step("click[< prev]")
    assert "out of stock" in obs and "click[buy now]" not in info["admissible_actions"]
    obs, _, _, _, info = shop.step("click[buy now]")
    assert info["invalid_action"] and "out of stock" in obs
    # It stays out of stock: in a later search, and across snapshot/restore.
    snap = shop.snapshot()
    shop.step("click[back to search]")
    obs = shop.step(f"search[{shop._task.items[0].title_query}]")[0]
    # The same search as before lists it on page 1 again, now marked.
    assert other in shop._state["results"][:10] and "Out of stock" in obs
    shop.restore(snap)
    assert shop._state["out_of_stock"] == [other]
    # The target going out of stock loses the task at once.
    shop.step("click[< prev]")
    shop.step(f"click[{target.lower()}]")
    obs, _, terminated, _, info = _fault_turn(shop, "out_of_stock", "click[features]")
    assert terminated and info["lost"] and info["stop_reason"] == "lost"
    assert shop.cost_to_go() == UNREACHABLE


def honest_cost(shop, snap):
    """The cost-to-go after the same turn without the fault (restores ``snap`` after)."""
    here = shop.snapshot()
    shop.restore(snap)
    shop.step("click[description]")
    cost = shop.cost_to_go()
    shop.restore(here)
    return cost


def test_webshop_delisted_hides_a_product_from_search_without_a_word(shop):
    target = _on_results(shop)
    shop.step(f"click[{target.lower()}]")
    cost = shop.cost_to_go()
    snap = shop.snapshot()
    honest_obs, _, _, _, honest = shop.step("click[features]")
    shop.restore(snap)
    obs, _, terminated, _, info = _fault_turn(shop, "delisted", "click[features]")
    assert info["fault"]["effect"] == "world"
    assert info["fault"]["cell"] == ["silent", "permanent"]
    assert obs == honest_obs  # nothing says anything happened ...
    assert shop._state["delisted"] == [target]  # ... but the target is gone from search
    assert info["state_hash"] != honest["state_hash"]
    # Still on its page (sub-page): buying it is as close as before.
    assert not terminated and shop.cost_to_go() == cost + 1
    snap = shop.snapshot()
    shop.restore(snap)
    assert shop._state["delisted"] == [target] and shop.cost_to_go() == cost + 1
    # The oracle still wins in exactly cost-to-go turns from here.
    turns, expected = 0, shop.cost_to_go()
    while not shop.done:
        shop.step(shop.oracle_actions()[0])
        turns += 1
    assert shop.won and turns == expected
    # Leaving its page for results that no longer hold it loses the task.
    shop.restore(snap)
    shop.step("click[< prev]")
    obs, _, terminated, _, info = shop.step("click[< prev]")
    assert target.lower() not in obs.lower()
    assert terminated and info["lost"] and shop.cost_to_go() == UNREACHABLE


def test_webshop_delisted_off_target_drops_it_from_the_current_results(shop):
    target = _on_results(shop)
    listed = shop._state["results"][:10]
    cost = shop.cost_to_go()
    for seed in range(20):
        _on_results(shop)
        shop.step("click[next >]")
        # The action brings page 1 back on screen; then one product of it is delisted.
        obs, _, _, _, info = _fault_turn(shop, "delisted", "click[< prev]", seed=seed)
        (gone,) = shop._state["delisted"]
        if gone != target:
            break
    assert gone != target and gone in listed
    assert gone not in shop._state["results"] and gone.lower() not in obs.lower()
    assert shop.cost_to_go() == cost
    shop.step("click[back to search]")
    shop.step(f"search[{shop._task.items[0].title_query}]")
    assert gone not in shop._state["results"] and target in shop._state["results"]


# ---------------------------------------------------------------------- TextWorld permanent kinds
@pytest.mark.parametrize("kind", ["unreachable", "silent_unreachable"])
def test_textworld_unreachable_blocks_for_good_and_the_oracle_plans_around_it(kind):
    from budget_envs.envs.textworld import TreasureHunterEnv

    tw = TreasureHunterEnv(level=10, tasks_per_level=2)
    outcomes = set()
    for task in range(2):
        tw.reset(seed=0, options={"task_id": task})
        fault = None
        while not tw.done:
            snap = tw.snapshot()
            action = tw.oracle_actions()[0]
            honest = tw.step(action)[4]
            tw.restore(snap)
            cost = tw.cost_to_go()
            obs, _, terminated, _, info = _fault_turn(tw, kind, action)
            fault = info["fault"]
            if fault["effect"] == "world":
                break
        assert fault is not None and fault["effect"] == "world", task
        assert fault["cell"] == [("explicit" if kind == "unreachable" else "silent"), "permanent"]
        (gone,) = tw.blocked
        assert ("out of reach" in obs) == (kind == "unreachable")
        assert info["state_hash"] != honest["state_hash"]
        if tw.lost:
            assert terminated and tw.cost_to_go() == UNREACHABLE and info["stop_reason"] == "lost"
            outcomes.add("lost")
            continue
        outcomes.add("playable")
        assert tw.cost_to_go() >= cost - 1
        assert not any(gone in a for a in info["admissible_actions"])
        snap = tw.snapshot()
        obs, _, _, _, info = tw.step(f"take {gone}")
        assert info["invalid_action"]
        assert (gone in obs) == (kind == "unreachable")
        tw.restore(snap)
        assert tw.blocked == {gone}
        turns, expected = 0, tw.cost_to_go()
        while not tw.done:
            tw.step(tw.oracle_actions()[0])
            turns += 1
        assert tw.won and turns == expected
    assert outcomes == {"lost", "playable"}
    tw.close()


# ---------------------------------------------------------------------- replay
@pytest.mark.parametrize(
    "env_id,kind",
    [
        ("BudgetMix/WebShop-v0", "out_of_stock"),
        ("BudgetMix/WebShop-v0", "delisted"),
        ("BudgetMix/TextWorld-TreasureHunter-v0", "unreachable"),
        ("BudgetMix/TextWorld-TreasureHunter-v0", "silent_unreachable"),
    ],
)
def test_permanent_kinds_same_seed_same_transcript(env_id, kind):
    from contract_helpers import make, transcript

    runs = []
    for _ in range(2):
        base = make(env_id, budget=None, level=10 if "TextWorld" in env_id else 2)
        env = ErrorInjection(base, kinds=kind, rate=0.5, seed=7)
        lines = transcript(env, seed=3, turns=10, options={"task_id": 0})
        hit = [e for e in base.unwrapped.trace if e[0] == "fault"]
        runs.append((lines, base.unwrapped.state_hash(), len(hit)))
        env.close()
    assert runs[0][2] > 0
    assert runs[0] == runs[1]
