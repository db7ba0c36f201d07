"""ProcessReward: a per-turn progress signal from the oracle's cost-to-go (potential-based)."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["ProcessReward"]


class ProcessReward(gym.Wrapper[str, str, str, str], gym.utils.RecordConstructorArgs):
    """Reward progress toward the goal on every turn, measured by the oracle's cost-to-go.

    The potential of a state is ``phi(s) = -scale * min(cost_to_go(s), max_cost)``; a lost task
    has the potential of ``max_cost`` (as far from success as anything measured) and a won task
    has potential 0. Each turn earns ``phi(s') - phi(s)``: ``+scale`` for a turn that brings the
    goal one turn closer (every oracle move), 0 for a turn without effect (an invalid action), and
    a negative signal for a slip that moves away. Because the signal is a difference of
    potentials (shaping with discount 1), the shaped return of any episode differs from the plain
    return by ``phi(end) - phi(start)`` alone, so the ranking of complete behaviours toward the
    same end state is unchanged, and a truncated episode is credited for the progress it made.

    The signal is kept in ``info["process_reward"]`` on every step (0.0 on reset) and, with
    ``add_to_reward=True``, added to the reward. Needs the env's oracle (``cost_to_go`` on
    ``env.unwrapped``); families whose oracle is a heuristic (``oracle_exact = False``) give a
    heuristic signal. Place it outside the :class:`BudgetWrapper` or inside; faults injected by
    :class:`ErrorInjection` show up as the damage they did.

    Example:
        >>> import gymnasium as gym
        >>> import budget_envs
        >>> from budget_envs.wrappers import ProcessReward
        >>> env = ProcessReward(gym.make("BudgetMix/ToolUse-v0", level=1), scale=0.1)
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_actions()[0])
        >>> info["process_reward"]
        0.1
    """

    def __init__(
        self,
        env: gym.Env,
        scale: float = 0.1,
        add_to_reward: bool = True,
        max_cost: int = 100,
    ) -> None:
        """Wrap ``env``.

        Args:
            env: a BudgetMix env (any wrapper stack over a :class:`TextAgentEnv` with an oracle).
            scale: the signal of one turn of progress.
            add_to_reward: add the signal to the env's reward (else it only goes to ``info``).
            max_cost: cost-to-go values are capped here; a lost task counts as this far away.
        """
        if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
            raise TypeError(f"scale must be a number, got {scale!r}")
        if not math.isfinite(float(scale)) or float(scale) <= 0:
            raise ValueError(f"scale must be a positive finite number, got {scale!r}")
        if not isinstance(add_to_reward, bool):
            raise TypeError(f"add_to_reward must be a bool, got {add_to_reward!r}")
        if isinstance(max_cost, bool) or not isinstance(max_cost, (int, np.integer)):
            raise TypeError(f"max_cost must be an int, got {max_cost!r}")
        if max_cost < 1:
            raise ValueError(f"max_cost must be at least 1, got {max_cost!r}")
        if not callable(getattr(env.unwrapped, "cost_to_go", None)):
            raise TypeError(
                f"ProcessReward needs an env with an oracle (env.unwrapped.cost_to_go()); "
                f"{type(env.unwrapped).__name__} has none"
            )
        gym.utils.RecordConstructorArgs.__init__(
            self, scale=scale, add_to_reward=add_to_reward, max_cost=max_cost
        )
        gym.Wrapper.__init__(self, env)
        self.scale = float(scale)
        self.add_to_reward = add_to_reward
        self.max_cost = int(max_cost)
        self._cost = 0.0
        self._cost_start = 0.0

    def capped_cost(self) -> float:
        """The cost-to-go of the current state, capped at ``max_cost`` (0 once won)."""
        base = self.env.unwrapped
        if getattr(base, "won", False):
            return 0.0
        if getattr(base, "lost", False):
            return float(self.max_cost)
        cost = base.cost_to_go()
        if cost is None or not math.isfinite(float(cost)):
            return float(self.max_cost)
        return min(float(cost), float(self.max_cost))

    def potential(self) -> float:
        """``phi`` of the current state: minus ``scale`` times the capped cost-to-go."""
        return -self.scale * self.capped_cost()

    @property
    def start_potential(self) -> float:
        """``phi`` of the state the current episode started in."""
        return -self.scale * self._cost_start

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Reset the env and measure the starting cost-to-go."""
        obs, info = self.env.reset(seed=seed, options=options)
        self._cost = self._cost_start = self.capped_cost()
        info["process_reward"] = 0.0
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Step and add the drop in cost-to-go of this turn (see the class docstring)."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        cost = self.capped_cost()
        # phi(s') - phi(s) computed from the integer costs, so equal progress gives equal floats.
        signal = self.scale * (self._cost - cost)
        self._cost = cost
        info["process_reward"] = signal
        if self.add_to_reward:
            reward = float(reward) + signal
        return obs, reward, terminated, truncated, info
