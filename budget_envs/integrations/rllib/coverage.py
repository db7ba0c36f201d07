"""How much of a family a finite-action policy can play: per-state and per-task coverage.

* :func:`state_ok`: in this state, at least one offered action (``info["candidate_actions"]`` or
  the admissible actions) agrees with ``oracle_actions()`` or lowers ``cost_to_go()`` by one when
  tried on a snapshot.
* :func:`candidate_coverage`: the share of tasks, per level, that a player restricted to the
  offered actions can win: at every turn it plays an offered action that agrees with the oracle
  if there is one, else the offered action with the lowest cost-to-go tried on a snapshot.

Both read the oracle only to measure; the offered actions never come from it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from budget_envs.eval.runner.episode import agrees
from budget_envs.integrations.rllib.features import offered_actions

__all__ = ["best_offered", "candidate_coverage", "state_ok"]


def best_offered(env: gym.Env, info: Mapping[str, Any]) -> tuple[str | None, bool]:
    """``(action, optimal)``: an offered action the oracle plays, else the offered action with
    the lowest cost-to-go on a snapshot; ``optimal`` says whether it lowers the cost by one."""
    base = env.unwrapped
    offered = offered_actions(info)
    if not offered:
        return None, False
    best = base.oracle_actions()
    for action in offered:
        if agrees(action, best):
            return action, True
    now = base.cost_to_go()
    snap = base.snapshot()
    choice, cost = None, None
    for action in offered:
        base.step(action)
        after = 0 if base.won else base.cost_to_go()
        base.restore(snap)
        if cost is None or after < cost:
            choice, cost = action, after
    return choice, cost is not None and cost == now - 1


def state_ok(env: gym.Env, info: Mapping[str, Any]) -> bool:
    """Whether some offered action is optimal in the current state (see the module doc)."""
    return best_offered(env, info)[1]


def candidate_coverage(
    env_id: str,
    *,
    levels: Sequence[int],
    tasks: int,
    max_turns: int = 60,
    env_kwargs: Mapping[str, Any] | None = None,
) -> dict[int, float]:
    """Share of the first ``tasks`` tasks of each level won by the offered-actions-only player."""
    import budget_envs  # noqa: F401

    out: dict[int, float] = {}
    for level in levels:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make(env_id, budget=None, level=level, **dict(env_kwargs or {}))
        won = 0
        try:
            for index in range(tasks):
                _, info = env.reset(seed=index, options={"task_id": index})
                for _ in range(max_turns):
                    action, _ = best_offered(env, info)
                    if action is None:
                        break
                    _, _, terminated, _, info = env.step(action)
                    if terminated:
                        break
                won += bool(info.get("won"))
        finally:
            env.close()
        out[int(level)] = won / tasks
    return out
