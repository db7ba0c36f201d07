"""The checks of what a family declares: its hooks, its spaces and its task ids.

Rules of the sections ``rules-hooks`` and ``rules-tasks-and-spaces`` of docs/extending.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import gymnasium as gym
from gymnasium import error

from budget_envs.core import TextAgentEnv

from .checker import _Checker, _need
from .rules import RULES

#: The methods that fill a hook (any one will do); the others are ``_`` plus the rule's name.
_HOOK_NAMES = {
    "hooks.task_ids": ("task_ids",),
    "hooks.oracle_actions": ("_oracle_actions", "oracle_actions"),
    "hooks.cost_to_go": ("_cost_to_go", "cost_to_go"),
}
_PLAIN_HOOKS = ("load", "execute", "goal", "admissible", "oracle_actions", "cost_to_go")


def _check_hooks(ck: _Checker, env: TextAgentEnv) -> None:
    cls = type(env)
    for rule_id in ("hooks.task_ids", *(f"hooks.{n}" for n in _PLAIN_HOOKS), "hooks.state_digest"):
        names = _HOOK_NAMES.get(rule_id, ("_" + rule_id.split(".")[1],))
        hook = RULES[rule_id].what.replace("`", "")
        with ck.rule(rule_id):
            have = any(getattr(cls, n) is not getattr(TextAgentEnv, n) for n in names)
            _need(have, f"the required hook {names[0]} is missing ({hook}): define it on the class")
    with ck.rule("hooks.oracle_exact"):
        exact = getattr(env, "oracle_exact", None)
        _need(isinstance(exact, bool), f"oracle_exact must be True or False, got {exact!r}")


def _check_require_reset(ck: _Checker, fresh: TextAgentEnv) -> None:
    for name in ("oracle_actions", "cost_to_go"):
        with ck.rule("hooks.require_reset"):
            try:
                got = f"returned {getattr(fresh, name)()!r:.80}"
            except error.ResetNeeded:
                continue
            except Exception as exc:
                got = f"raised {type(exc).__name__}: {str(exc)[:120]}"
            fix = f"fill _{name}() and let the core's {name}() check reset"
            _need(False, f"{name}() before reset() {got}, not gymnasium.error.ResetNeeded: {fix}")


def _check_gymnasium(ck: _Checker, build: Callable[..., TextAgentEnv]) -> None:
    from gymnasium.utils.env_checker import check_env

    env = build(render_mode="ansi")
    try:
        with ck.rule("spaces.text"):
            for name in ("observation_space", "action_space"):
                space = getattr(env, name)
                _need(isinstance(space, gym.spaces.Text), f"{name} is {space!r}, not a Text space")
                _need(space.contains("go north") and space.contains(""), f"{name} refuses text")
        with ck.rule("gymnasium.check_env"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_env(env)
    finally:
        env.close()


def _check_tasks(ck: _Checker, env: TextAgentEnv) -> None:
    with ck.rule("tasks.ids"):
        ids = list(env.task_ids)
        _need(ids, "task_ids is empty")
        _need(all(isinstance(t, str) for t in ids), f"task ids must be str, got {ids[:3]!r}")
        _need(len(set(ids)) == len(ids), "task_ids lists a task twice")
        for pick in (0, ids[-1]):
            _, info = env.reset(options={"task_id": pick})
            want = ids[0] if pick == 0 else pick
            _need(info["task_id"] == want, f"options task_id={pick!r} played {info['task_id']!r}")
        for bad, kind in ((len(ids), ValueError), ("no-such-task", ValueError), (1.5, TypeError)):
            try:
                env.reset(options={"task_id": bad})
            except kind as exc:  # a bad index or id is quoted
                _need(kind is TypeError or repr(bad) in str(exc), f"{exc} does not quote {bad!r}")
                continue
            _need(False, f"options task_id={bad!r} was not refused with {kind.__name__}")
    with ck.rule("tasks.level"):
        levels = [env.task_level(t) for t in env.task_ids]
        given = [lv for lv in levels if lv is not None]
        missing = len(levels) - len(given)
        _need(not given or not missing, f"task_level() is None for {missing} of {len(levels)}")
        hash(tuple(given))  # levels group tasks: they must be hashable
