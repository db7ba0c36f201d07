"""Per-step overhead of BudgetWrapper and ErrorInjection against Gymnasium's TimeLimit.

All three wrap the same trivial env; the reported figure is each wrapper's overhead over the bare
step divided by TimeLimit's overhead (goal: at most 3x).
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from budget_envs.wrappers import BudgetWrapper, ErrorInjection
from gymnasium.wrappers import TimeLimit

from budget_envs.core import text_space

CALLS = 2000
FAR = 10**9


class Trivial(gym.Env[str, str]):
    """Does nothing, as fast as possible, so only the wrapper's cost shows."""

    def __init__(self) -> None:
        self.observation_space = text_space(64)
        self.action_space = text_space(64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "start", {}

    def step(self, action):
        return "ok", 0.0, False, False, {}

    # The fault protocol ErrorInjection checks for; no fault ever fires in these benchmarks.
    def fault_kinds(self):
        return ()

    def fault_cells(self):
        return {"slip": ("explicit", "transient")}

    def arm_fault(self, kind, rng=None):
        pass


def _stack(kind: str) -> gym.Env:
    env = Trivial()
    if kind == "bare":
        return env
    if kind == "timelimit":
        return TimeLimit(env, max_episode_steps=FAR)
    if kind == "budget":
        return BudgetWrapper(env, budget=FAR)
    if kind == "faults":
        return ErrorInjection(env, kinds="drop", at_turn=FAR, seed=0)
    if kind == "faults-rate":
        return ErrorInjection(env, kinds="drop", rate=1e-12, seed=0)
    raise ValueError(kind)


CASES = [
    ("bare", "budget-hidden-step", "bare"),
    ("timelimit", "budget-hidden-step", "baseline"),
    ("budget", "budget-hidden-step", "ours"),
    ("bare", "faults-none-due-step", "bare"),
    ("timelimit", "faults-none-due-step", "baseline"),
    ("faults", "faults-none-due-step", "ours"),
    ("bare", "faults-rate-none-due-step", "bare"),
    ("timelimit", "faults-rate-none-due-step", "baseline"),
    ("faults-rate", "faults-rate-none-due-step", "ours"),
]


@pytest.mark.parametrize("kind, compare, role", CASES, ids=[f"{c}:{k}" for k, c, _ in CASES])
def test_step_overhead(benchmark, kind, compare, role):
    env = _stack(kind)
    env.reset(seed=0)
    step = env.step
    benchmark.group = compare
    benchmark.extra_info.update(
        compare=compare, role=role, calls=CALLS, goal="<= 3x TimeLimit overhead"
    )

    def run():
        for _ in range(CALLS):
            step("go")

    benchmark.pedantic(run, rounds=60, warmup_rounds=3)
