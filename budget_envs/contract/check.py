"""The entry point of the family checker: :func:`check_family` runs every check in order."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from budget_envs.core import TextAgentEnv

from .checker import ContractReport, _Checker
from .episodes import (
    _check_bad_input,
    _check_candidates,
    _check_close,
    _check_determinism,
    _check_oracle,
    _check_snapshots,
)
from .faults import _check_faults
from .hooks import _check_gymnasium, _check_hooks, _check_require_reset, _check_tasks
from .splits import _check_splits

__all__ = ["check_family"]


def _builder(
    env_or_id: Any, env_kwargs: Mapping[str, Any]
) -> tuple[str, Callable[..., TextAgentEnv], TextAgentEnv | None]:
    """The subject's name, a factory of fresh bare envs, and the env given (None if none)."""
    if isinstance(env_or_id, str):
        from budget_envs.registry import entry_for, make_env

        entry = entry_for(env_or_id)

        def build(**extra: Any) -> TextAgentEnv:
            return make_env(entry, budget=None, **{**env_kwargs, **extra}).unwrapped

        return env_or_id, build, None
    given = env_or_id.unwrapped if isinstance(env_or_id, gym.Env) else None
    cls = env_or_id if given is None else type(given)
    if not (isinstance(cls, type) and issubclass(cls, TextAgentEnv)):
        raise TypeError(
            "check_family() takes an env id, a TextAgentEnv subclass or an env whose unwrapped "
            f"env is one, got {env_or_id!r}"
        )
    return cls.__name__, lambda **extra: cls(**{**env_kwargs, **extra}), given


#: The checks that play episodes on the main env, by their main rule.
_PLAYS = (("oracle.wins", _check_oracle), ("candidates.oracle", _check_candidates))
_PLAYS += (("bad_input.turn", _check_bad_input), ("snapshots.round_trip", _check_snapshots))
_PLAYS += (("faults.arm", _check_faults),)


# ---------------------------------------------------------------------- the entry point
def check_family(
    env_or_id: Any,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
    raise_on_fail: bool = True,
) -> ContractReport:
    """Check a family against every rule of :data:`RULES` (docs/extending.md lists them).

    Args:
        env_or_id: a registered id (its row's kwargs apply), a :class:`TextAgentEnv` subclass,
            or an env (wrapped or not) of one. The checker builds fresh bare envs as it needs
            them (a second one for determinism, one per split).
        env_kwargs: constructor keyword arguments of every env the checker builds (keep the
            task lists small: ``{"level": 1, "tasks_per_level": 2}``); ``split`` is added.
        seed: the base of every seed and generator the checks use.
        raise_on_fail: raise :class:`~budget_envs.errors.ContractViolation` at the first broken
            required rule (as Gymnasium's ``check_env`` does); False runs every check and
            returns every finding. Advisory rules warn (:class:`ContractWarning`) either way.

    Returns:
        A :class:`ContractReport`; ``report.ok`` says no required rule is broken.

    Raises:
        ContractViolation: a required rule is broken (``raise_on_fail=True``); the message
            starts with the rule's id, e.g. ``[hooks.goal] MyEnv: the required hook _goal() ->
            str ... is missing: define _goal on the class. See docs/extending.md#rules-hooks``.
        TypeError: ``env_or_id`` is none of the above.
    """
    kwargs = dict(env_kwargs or {})
    subject, build, given = _builder(env_or_id, kwargs)
    ck = _Checker(subject, raise_on_fail)
    env = given if given is not None else build()
    try:
        _check_hooks(ck, env)
        if ck.broken("hooks."):
            ck.not_run.append("the checks that play: a required hook is missing")
            return ck.report()
        fresh = env if given is None else build()
        _check_require_reset(ck, fresh)
        if fresh is not env:
            fresh.close()
        checks = (
            ("gymnasium.check_env", lambda: _check_gymnasium(ck, build)),
            ("tasks.ids", lambda: _check_tasks(ck, env)),
            *((rule, lambda play=play: play(ck, env, seed)) for rule, play in _PLAYS),
            ("determinism.seed", lambda: _check_determinism(ck, env, build, seed)),
            ("splits.ids_disjoint", lambda: _check_splits(ck, env, build, "split" in kwargs)),
            ("lifecycle.close", lambda: _check_close(ck, env if given is None else build())),
        )
        for rule_id, check in checks:
            with ck.rule(rule_id, guard=True):  # a crash between rules breaks the main one
                check()
    finally:
        if given is None:
            env.close()
    return ck.report()
