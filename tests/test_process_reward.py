"""ProcessReward: potential-based progress signal from the oracle's cost-to-go."""

from __future__ import annotations

import itertools
import warnings

import gymnasium as gym
import numpy as np
import pytest
from budget_envs.registry import registered_ids
from budget_envs.wrappers import BudgetWrapper, ProcessReward
from toy_env import ToyEnv

TOY = "BudgetMixTest/Toy-v0"
SCALE = 0.25


def _exact_ids():
    """Registered ids whose oracle is exact (toy first); product ids join as they are registered."""
    return [i for i in registered_ids() if not i.startswith("BudgetMixTest/") or i == TOY]


def _make(env_id, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(env_id, **kwargs)


def _exact(env) -> bool:
    return bool(getattr(env.unwrapped, "oracle_exact", False))


#: Ids whose first tasks have a heuristic oracle (TextWorld's policy, not a shortest path). Every
#: other id must give an exact oracle on its first tasks; a new heuristic id is added here.
HEURISTIC_FIRST_TASKS = {"BudgetMix/TextWorld-Cooking-v0"}


@pytest.mark.parametrize("env_id", _exact_ids())
def test_oracle_trajectory_earns_equal_signal(env_id):
    """Exact oracle: every turn of its path earns exactly ``scale``; heuristic: the sum telescopes."""
    env = ProcessReward(_make(env_id, budget=200), scale=SCALE)
    for task in range(2):  # the first tasks: small games, shared with the contract tests
        obs, info = env.reset(seed=task, options={"task_id": task})
        # Exactness is known only once the task is loaded (TextWorld and ALFWorld set it per game).
        assert _exact(env) == (env_id not in HEURISTIC_FIRST_TASKS), (env_id, info["task_id"])
        assert info["process_reward"] == 0.0
        start_cost = env.unwrapped.cost_to_go()
        assert 0 < start_cost < 200
        signals, rewards = [], []
        terminated = truncated = False
        while not (terminated or truncated):
            action = env.unwrapped.oracle_actions()[0]
            obs, reward, terminated, truncated, info = env.step(action)
            signals.append(info["process_reward"])
            rewards.append(reward)
        assert terminated and info["won"], (env_id, info["task_id"])
        # Any winning path: the signals telescope to phi(end) - phi(start) = scale * start cost.
        assert sum(signals) == pytest.approx(SCALE * start_cost)
        if _exact(env):
            assert len(signals) == start_cost
            assert signals == [SCALE] * start_cost  # bit-equal, every turn
            assert sum(rewards) == pytest.approx(1.0 + SCALE * start_cost)


def _slip_signals(env_id, task_seeds, fault_seeds, at_turns=(1,), **kwargs):
    """(process_reward, cost_before, cost_after) of slips injected on the oracle's path."""
    out = []
    for seed, fault_seed, at_turn in itertools.product(task_seeds, fault_seeds, at_turns):
        env = ProcessReward(
            _make(
                env_id,
                budget=50,
                faults={"kinds": "slip", "at_turn": at_turn, "seed": fault_seed},
                **kwargs,
            ),
            scale=SCALE,
        )
        env.reset(seed=seed)
        info = {}
        for _ in range(at_turn):
            best = env.unwrapped.oracle_actions()
            if not best:
                break
            _, _, terminated, truncated, info = env.step(best[0])
            if terminated or truncated:
                break
        fault = info.get("fault")
        if fault is None or fault["executed"] == "" or fault["cost_before"] < 0:
            continue
        if info["lost"]:
            continue
        out.append((info["process_reward"], fault["cost_before"], fault["cost_after"]))
    return out


@pytest.mark.parametrize("env_id", _exact_ids())
def test_slip_signal_is_minus_the_damage(env_id):
    """A slip injected by ErrorInjection earns scale x (cost before - cost after)."""
    signals = _slip_signals(env_id, task_seeds=range(2), fault_seeds=range(2))
    assert signals, f"no slip fired on {env_id}'s oracle path"
    for signal, before, after in signals:
        assert signal == pytest.approx(SCALE * (min(before, 100) - min(after, 100)))


@pytest.mark.parametrize(
    "env_id,kwargs",
    [(TOY, {}), ("BudgetMix/TextWorld-v0", {"level": 1, "seeds": 4})],
    ids=["toy", "textworld"],
)
def test_slip_earns_negative_signal(env_id, kwargs):
    signals = _slip_signals(
        env_id, task_seeds=range(4), fault_seeds=range(3), at_turns=(1, 2, 3), **kwargs
    )
    assert signals
    negatives = [(s, before, after) for s, before, after in signals if after > before]
    assert negatives, f"no slip moved away from the goal: {signals}"
    assert all(s == -SCALE * (after - before) for s, before, after in negatives)
    assert all(s < 0 for s, _, _ in negatives)


@pytest.mark.parametrize("env_id", _exact_ids())
def test_shaped_minus_plain_is_potential_difference(env_id):
    """Any episode (random policy, invalid turns, losses, truncation): the sums telescope."""
    shaped_env = ProcessReward(_make(env_id, budget=(3, 15)), scale=SCALE)
    rng = np.random.default_rng(0)
    for seed in range(12 if env_id == TOY else 3):
        obs, info = shaped_env.reset(seed=seed)
        phi0 = shaped_env.potential()
        assert phi0 == shaped_env.start_potential
        shaped = plain = 0.0
        while True:
            options = info["admissible_actions"] + ["", "dance wildly"]
            action = options[int(rng.integers(len(options)))]
            obs, reward, terminated, truncated, info = shaped_env.step(action)
            shaped += reward
            plain += reward - info["process_reward"]
            if terminated or truncated:
                break
        assert shaped - plain == pytest.approx(shaped_env.potential() - phi0)


def test_offset_depends_only_on_start_and_end():
    """A direct and a roundabout winning path from one start: same shaped return, 1 - phi(start)."""
    env = ProcessReward(BudgetWrapper(ToyEnv(), budget=100), scale=SCALE)
    env.reset(seed=3)
    base = env.unwrapped
    start = base.snapshot()
    totals = []
    for detour in (0, 2):
        base.restore(start)
        env._cost = env._cost_start
        total = 0.0
        for _ in range(detour):  # wander off with moves the oracle would not make
            best = base.oracle_actions()
            allowed = base.current_info()["admissible_actions"]
            away = [a for a in ("go east", "go west") if a in allowed and a not in best]
            _, r, *_ = env.step(away[0] if away else "look")
            total += r
        while True:
            _, r, terminated, _, info = env.step(base.oracle_actions()[0])
            total += r
            if terminated:
                break
        totals.append(total)
    assert totals[0] == pytest.approx(totals[1])
    assert totals[0] == pytest.approx(1.0 - env.start_potential)


def test_argument_checks():
    with pytest.raises(ValueError, match="-1"):
        ProcessReward(ToyEnv(), scale=-1)
    with pytest.raises(TypeError, match="'yes'"):
        ProcessReward(ToyEnv(), add_to_reward="yes")
    with pytest.raises(ValueError, match="0"):
        ProcessReward(ToyEnv(), max_cost=0)

    class NoOracle(gym.Env):
        observation_space = action_space = gym.spaces.Discrete(2)

    with pytest.raises(TypeError, match="oracle"):
        ProcessReward(NoOracle())


def test_lost_counts_as_max_cost():
    env = ProcessReward(BudgetWrapper(ToyEnv(), budget=100), scale=1.0, max_cost=30)
    env.reset(seed=1)
    base = env.unwrapped
    while base.room < base.length - 1:
        env.step("go east")
    cost = base.cost_to_go()
    _, reward, terminated, _, info = env.step("smash door")
    assert terminated and info["lost"]
    assert info["process_reward"] == cost - 30
    assert reward == info["process_reward"]


def test_spec_rebuilds_stack():
    env = ProcessReward(_make(TOY, budget=7), scale=0.5, add_to_reward=False)
    rebuilt = gym.make(env.spec)
    assert isinstance(rebuilt, ProcessReward)
    assert rebuilt.scale == 0.5 and rebuilt.add_to_reward is False
