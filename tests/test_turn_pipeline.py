"""One turn pipeline: every turn, faulty or not, is one ``step`` through the whole wrapper chain.

ErrorInjection arms a fault and steps through ``self.env``; the env's core applies it. So a
wrapper placed between ErrorInjection and the env sees every turn of every fault kind, and an
action that runs on a faulty turn earns what it earns on a normal turn.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from budget_envs.registry import registered_ids
from budget_envs.wrappers import ErrorInjection
from contract_helpers import make, policy_action

from budget_envs.core import FAULT_EFFECTS, GENERIC_KINDS, FaultOutcome
from budget_envs.errors import UnknownFaultKind

IDS = registered_ids()


class Recorder(gym.Wrapper):
    """Counts the ``step`` calls that reach it and checks each returns a proper 5-tuple."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0
        self.fault_kinds_seen: list[str | None] = []

    def reset(self, *, seed=None, options=None):
        self.steps = 0
        self.fault_kinds_seen = []
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        out = self.env.step(action)
        assert isinstance(out, tuple) and len(out) == 5
        obs, reward, terminated, truncated, info = out
        assert isinstance(obs, str) and isinstance(reward, float)
        assert isinstance(terminated, bool) and isinstance(truncated, bool)
        assert isinstance(info, dict)
        self.steps += 1
        self.fault_kinds_seen.append(info["fault"]["kind"] if "fault" in info else None)
        return out


def _kinds(env: gym.Env) -> tuple[str, ...]:
    return GENERIC_KINDS + tuple(env.unwrapped.fault_kinds())


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_a_wrapper_under_error_injection_sees_every_faulty_turn(env_id):
    base = make(env_id, budget=None)
    recorder = Recorder(base)
    kinds = _kinds(base)
    assert set(GENERIC_KINDS) <= set(kinds)
    for kind in kinds:
        env = ErrorInjection(recorder, kinds=kind, rate=1.0, seed=0)
        rng = np.random.default_rng(0)
        obs, info = env.reset(seed=0, options={"task_id": 0})
        played = 0
        for _ in range(4):
            obs, reward, terminated, truncated, info = env.step(policy_action(env, info, rng))
            played += 1
            assert recorder.steps == played, (kind, played)
            assert info["fault"]["kind"] == kind and info["fault"]["turn"] == played
            assert info["fault"]["effect"] in FAULT_EFFECTS
            if terminated:
                break
        assert played >= 1
        # The wrapper underneath saw every turn, each one faulty (the core reported the fault).
        assert recorder.fault_kinds_seen == [kind] * played
        assert [f["kind"] for f in info["faults"]] == [kind] * played
    base.close()


def _last_action_state(env: gym.Env) -> tuple[str, object]:
    """Play the oracle until one action from success; return that action and a snapshot."""
    unwrapped = env.unwrapped
    env.reset(seed=0, options={"task_id": 0})
    for _ in range(200):
        assert not unwrapped.done, "the oracle ended the episode before success"
        action = unwrapped.oracle_actions()[0]
        if unwrapped.cost_to_go() == 1:
            return action, unwrapped.snapshot()
        env.step(action)
    raise AssertionError("the oracle did not get within one action of success in 200 turns")


def _signals(out: tuple) -> tuple:
    obs, reward, terminated, truncated, info = out
    return reward, terminated, truncated, info["won"], info["lost"], info.get("score")


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_an_action_that_runs_on_a_faulty_turn_earns_the_normal_reward(env_id):
    env = make(env_id, budget=None)
    unwrapped = env.unwrapped
    action, snap = _last_action_state(env)
    normal = _signals(env.step(action))
    assert normal[0] > 0.0 and normal[1] and normal[3]  # the last action wins
    ran = []
    for kind in _kinds(env):
        unwrapped.restore(snap)
        unwrapped.arm_fault(kind, np.random.default_rng(0))
        out = env.step(action)
        fault = out[4]["fault"]
        assert fault["kind"] == kind and fault["action"] == action
        if fault["executed"] == action:
            ran.append(kind)
            assert _signals(out) == normal, kind
    assert "garble" in ran
    if "stale_page" in _kinds(env):
        assert {"stale_page", "slow_response"} <= set(ran)
    env.close()


def test_webshop_imperfect_purchase_scores_the_same_on_a_faulty_turn():
    env = make("BudgetMix/WebShop-v0", budget=None, level=2)
    shop = env.unwrapped
    partial = []
    for index in range(1, 5):
        env.reset(options={"task_id": f"L2-{index:04d}"})
        item = shop._task.items[0]
        env.step(f"search[{item.title_query}]")
        env.step(f"click[{item.asin.lower()}]")  # the right product, its options not picked
        snap = shop.snapshot()
        normal = _signals(env.step("click[buy now]"))
        normal_purchase = shop.current_info()["purchase"]
        assert 0.0 < normal[0] < 1.0 and normal[5] == normal[0] and normal[4]
        partial.append(normal[0])
        for kind in ("garble", "stale_page", "slow_response"):
            shop.restore(snap)
            shop.arm_fault(kind, np.random.default_rng(index))
            out = env.step("click[buy now]")
            assert out[4]["fault"]["executed"] == "click[buy now]", kind
            assert _signals(out) == normal, kind
            assert out[4]["purchase"] == normal_purchase
        for kind in ("http_error", "drop"):  # the purchase does not run: nothing is bought
            shop.restore(snap)
            shop.arm_fault(kind, np.random.default_rng(index))
            out = env.step("click[buy now]")
            assert out[4]["fault"]["executed"] == "" and out[4]["fault"]["effect"] == "dropped"
            assert out[1] == 0.0 and not out[2] and "purchase" not in out[4]
    assert len(partial) == 4
    env.close()


def test_webshop_purchase_through_error_injection_keeps_its_reward():
    """The visible bug: a purchase on a stale_page / slow_response turn used to earn 0.0."""
    env = make("BudgetMix/WebShop-v0", budget=None, level=2)
    rewards = []
    for kind in ("stale_page", "slow_response", None):
        faulty = ErrorInjection(env, kinds=kind or "drop", at_turn=3 if kind else None, seed=0)
        faulty.reset(options={"task_id": "L2-0001"})
        item = env.unwrapped._task.items[0]
        faulty.step(f"search[{item.title_query}]")
        faulty.step(f"click[{item.asin.lower()}]")
        obs, reward, terminated, truncated, info = faulty.step("click[buy now]")
        assert terminated and 0.0 < reward < 1.0 and reward == info["score"]
        assert [f["kind"] for f in info["faults"]] == ([kind] if kind else [])
        rewards.append(reward)
    assert rewards[0] == rewards[1] == rewards[2]  # the last one is the normal turn
    env.close()


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_perturb_runs_the_action_then_changes_the_world(env_id):
    env = make(env_id, budget=None)
    unwrapped = env.unwrapped
    env.reset(seed=0, options={"task_id": 0})
    if "perturb" not in unwrapped.fault_kinds():  # web shop, tool use: the kind does not exist
        with pytest.raises(UnknownFaultKind, match="'perturb'"):
            unwrapped.arm_fault("perturb", np.random.default_rng(0))
    else:
        action = unwrapped.oracle_actions()[0]
        snap = unwrapped.snapshot()
        plain_obs = env.step(action)[0]
        unwrapped.restore(snap)
        unwrapped.arm_fault("perturb", np.random.default_rng(0))
        obs, _, _, _, info = env.step(action)
        assert info["fault"]["executed"] == action  # the agent's action ran
        assert obs.startswith(plain_obs)  # its own feedback first, then the disturbance
        assert info["fault"]["effect"] in ("world", "none")
    env.close()


def test_fault_outcome_checks_its_effect():
    with pytest.raises(ValueError, match="'exploded'"):
        FaultOutcome("obs", "exploded")


def test_a_fault_armed_on_a_finished_episode_does_nothing():
    env = make("BudgetMixTest/Toy-v0", budget=None)
    unwrapped = env.unwrapped
    env.reset(seed=0)
    while not unwrapped.done:
        env.step(unwrapped.oracle_actions()[0])
    unwrapped.arm_fault("perturb", np.random.default_rng(0))
    obs, reward, terminated, truncated, info = env.step("look")
    assert "fault" not in info and terminated and reward == 0.0
    assert "episode is over" in obs
