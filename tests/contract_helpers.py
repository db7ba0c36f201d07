"""Helpers shared by the contract tests and the subprocesses they start."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np

TOY_ID = "BudgetMixTest/Toy-v0"

#: Small settings of each family for a quick episode (a family not named here gets none).
QUICK_KWARGS = {
    "ALFWorld": {"level": 1, "tasks_per_level": 2, "max_receptacles": 12},
    "TextWorld": {"level": 1},
    "WebShop": {"level": 1},
    "ToolUse": {"level": 1},
}


def family_ids() -> list[tuple[str, str]]:
    """(family, its first registered id) for every family of the registry."""
    from budget_envs.registry import families

    return [(name, rows[0].id) for name, rows in families().items()]


def register_toy() -> None:
    """Register the toy env (tests only) under TOY_ID."""
    from budget_envs.registry import EnvEntry, register_env
    from toy_env import ToyEnv

    register_env(
        EnvEntry(
            id=TOY_ID,
            entry_point=ToyEnv,
            default_budget=12,
            description="Toy corridor (tests only)",
        )
    )


def make(env_id, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make(env_id, **kwargs)


def policy_action(env, info, rng):
    """A seeded mix of oracle moves and random admissible actions (a stable, varied transcript)."""
    unwrapped = env.unwrapped
    if rng.random() < 0.7:
        best = unwrapped.oracle_actions()
        if best:
            return best[0]
    if hasattr(unwrapped, "sample_action"):
        return unwrapped.sample_action(rng)
    options = info["admissible_actions"] or ["look"]
    return options[int(rng.integers(len(options)))]


def transcript(env, seed, turns=8, options=None):
    """Observations, actions and signals of a seeded episode (``env`` may be an id)."""
    if isinstance(env, str):
        env = make(env)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed, options=options)
    lines = [obs, info["task_id"]]
    for _ in range(turns):
        action = policy_action(env, info, rng)
        obs, reward, terminated, truncated, info = env.step(action)
        lines += [action, obs, repr(float(reward)), repr(bool(terminated)), repr(bool(truncated))]
        if terminated or truncated:
            break
    return lines


class FirstTasks(gym.Wrapper):
    """Cycle resets through the first two tasks (keeps game generation small in vector tests)."""

    def __init__(self, env):
        super().__init__(env)
        self._count = 0

    def reset(self, *, seed=None, options=None):
        options = dict(options or {})
        options.setdefault("task_id", self._count % 2)
        self._count += 1
        return self.env.reset(seed=seed, options=options)
