"""The env builder the trainer integrations share (TRL, RLlib): no trainer dependency here.

``budget`` means what it means for ``gymnasium.make``: omitted, the id's default budget; ``None``,
the bare env (no :class:`~budget_envs.wrappers.BudgetWrapper`, so nothing ever truncates: use it
only with a trainer-side length limit); anything else, a budget spec.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from budget_envs.registry import DEFAULT_BUDGET

__all__ = [
    "DEFAULT_BUDGET",
    "check_trained_visibility",
    "env_and_maker",
    "make_env",
    "make_env_like",
]


def make_env(
    env_id: str,
    *,
    budget: Any = DEFAULT_BUDGET,
    visibility: str = "hidden",
    faults: Any = None,
    process_reward: float | None = None,
    process_max_cost: int = 100,
    **env_kwargs: Any,
) -> gym.Env:
    """``gymnasium.make(env_id, ...)``, optionally wrapped in :class:`ProcessReward`.

    Args:
        env_id: a registered id.
        budget: omitted for the id's default budget, ``None`` for the bare env, else a spec.
        visibility, faults: the wrapper options of ``gymnasium.make``.
        process_reward: the ``scale`` of the progress signal added to the reward, or None for
            the plain reward.
        process_max_cost: its ``max_cost`` (see :class:`ProcessReward`).
        env_kwargs: constructor kwargs of the env.

    Example:
        >>> from budget_envs.integrations.common import make_env
        >>> make_env("BudgetMix/ToolUse-v0").reset(seed=0)[1]["budget"]["limit"]
        40
        >>> "budget" in make_env("BudgetMix/ToolUse-v0", budget=None).reset(seed=0)[1]
        False
    """
    import budget_envs  # noqa: F401  (registers the ids)
    from budget_envs.wrappers import ProcessReward

    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id must be a non-empty str, got {env_id!r}")
    kwargs: dict[str, Any] = dict(env_kwargs, visibility=visibility)
    if budget is not DEFAULT_BUDGET:
        kwargs["budget"] = budget
    if faults is not None:
        kwargs["faults"] = faults
    with warnings.catch_warnings():
        # Gymnasium's checker warns about Text spaces it cannot sample meaningfully.
        warnings.simplefilter("ignore", UserWarning)
        env = gym.make(env_id, **kwargs)
    if process_reward is not None:
        env = ProcessReward(
            env, scale=process_reward, add_to_reward=True, max_cost=process_max_cost
        )
    return env


def env_and_maker(
    env: str | gym.Env, *, env_kwargs: dict[str, Any] | None = None, **options: Any
) -> tuple[gym.Env, Callable[[], gym.Env]]:
    """The env a trainer integration plays, and a maker of fresh ones like it.

    ``env`` is an id, built by :func:`make_env` with ``options`` (its keywords: ``budget``,
    ``visibility``, ``faults``, ``process_reward``, ``process_max_cost``) and the constructor
    kwargs ``env_kwargs``, as the maker builds it again; or a ready env, played as it is (the
    options aside), whose maker is :func:`make_env_like` of it (which needs its spec).

    Example:
        >>> from budget_envs.integrations.common import env_and_maker
        >>> env, make = env_and_maker("BudgetMix/ToolUse-v0", budget=7)
        >>> make().reset(seed=0)[1]["budget"]["limit"], env is make()
        (7, False)
    """
    if isinstance(env, str):
        env_id = env

        def make() -> gym.Env:
            return make_env(env_id, **options, **(env_kwargs or {}))

        return make(), make
    if not isinstance(env, gym.Env):
        raise TypeError(f"env must be an env id or a gymnasium.Env, got {env!r}")
    template = env
    return env, lambda: make_env_like(template)


def make_env_like(env: gym.Env) -> gym.Env:
    """A fresh env with the same spec (id, wrappers, kwargs) as ``env``."""
    if env.spec is None:
        raise ValueError("the env has no spec to rebuild it from; pass an env id instead")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return gym.make(env.spec)


def check_trained_visibility(name: str, trained: Any, info: Any) -> None:
    """Refuse an episode whose budget visibility differs from the training's: the runner hands
    agents ``info["budget"]`` exactly when the budget is shown, so a policy trained budget-hidden
    must not see it, and one trained with it shown is meaningless without it."""
    from budget_envs.errors import AgentError

    shown = "budget" in info
    if (trained != "hidden") != shown:
        raise AgentError(
            f"{name} was trained with visibility={trained!r} but this evaluation "
            f"{'shows' if shown else 'hides'} the budget; evaluate with --visibility "
            f"{trained} (or pass check_visibility=false)"
        )
