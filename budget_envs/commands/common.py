"""What several ``budgetmix`` commands share: id checks, warnings, progress bars, install hints."""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import sys
from argparse import Namespace
from collections.abc import Sequence
from typing import Any

from budget_envs.errors import UsageError

__all__ = [
    "MIN_TASKS_FOR_INTERVALS",
    "Progress",
    "StageBars",
    "check_env_ids",
    "options_named",
    "few_tasks_warning",
    "in_ci",
    "missing_modules",
    "parse_faults",
    "pip_extra",
    "print_few_tasks_warning",
    "run_with_bar",
]

#: Below this many tasks, a bootstrap interval over tasks says little (a 3-task run of a perfect
#: agent prints [1.000, 1.000]).
MIN_TASKS_FOR_INTERVALS = 10


def check_env_ids(env_ids: Sequence[str]) -> None:
    """Raise :class:`UsageError` naming the closest registered id for an unknown one."""
    from budget_envs.registry import registered_ids

    known = registered_ids()
    for env_id in env_ids:
        if env_id in known:
            continue
        by_lower = {k.lower(): k for k in known}
        by_name = {k.split("/")[-1].lower(): k for k in known}
        guess = by_lower.get(env_id.lower()) or by_name.get(env_id.split("/")[-1].lower())
        if guess is None:
            close = difflib.get_close_matches(env_id, known, n=1, cutoff=0.6)
            guess = close[0] if close else None
        hint = f"; did you mean {guess!r}?" if guess else ""
        raise UsageError(
            f"unknown env id {env_id!r}{hint} (`budgetmix list` shows every registered id)"
        )


def in_ci() -> bool:
    """Whether ``CI`` is set to a true value (the demo is strict there)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def few_tasks_warning(records: Sequence[Any]) -> str | None:
    """A warning line when fewer than 10 tasks back the intervals of some env, else None."""
    tasks: dict[str, set[str]] = {}
    for r in records:
        if r.get("record", "episode") == "episode":
            tasks.setdefault(r["env_id"], set()).add(r["task_id"])
    few = {env: len(ids) for env, ids in tasks.items() if len(ids) < MIN_TASKS_FOR_INTERVALS}
    if not few:
        return None
    which = ", ".join(f"{env}: {n}" for env, n in sorted(few.items()))
    return (
        f"warning: fewer than {MIN_TASKS_FOR_INTERVALS} tasks back the confidence intervals "
        f"({which}); the bootstrap over so few tasks is not reliable, use --tasks "
        f"{MIN_TASKS_FOR_INTERVALS} or more"
    )


def print_few_tasks_warning(records: Sequence[Any]) -> None:
    """:func:`few_tasks_warning` on stderr, when there is one."""
    warning = few_tasks_warning(records)
    if warning:
        print(warning, file=sys.stderr)


def parse_faults(text: str) -> Any:
    """The ``faults=`` of ``gymnasium.make`` from ``--faults``: kinds ``a,b`` or a JSON object
    of ErrorInjection arguments (``{"kinds": ["slip"], "rate": 0.2}``).

    >>> parse_faults("slip, drop")
    ['slip', 'drop']
    >>> parse_faults('{"kinds": ["slip"], "at_turn": 2}')
    {'kinds': ['slip'], 'at_turn': 2}
    """
    from budget_envs.wrappers.fault_spec import parse_faults as fault_spec

    text = text.strip()
    if text[:1] in "{[":
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"bad --faults {text!r}: not JSON ({exc})") from None
    else:
        value = [kind.strip() for kind in text.split(",") if kind.strip()]
    try:
        fault_spec(value)
    except TypeError as exc:
        raise UsageError(f"bad --faults {text!r}: {exc}") from None
    return value


def missing_modules(*names: str) -> list[str]:
    """The modules of ``names`` this install cannot import (looked up, not imported).

    >>> missing_modules("json", "no_such_module_xyz")
    ['no_such_module_xyz']
    """
    return [name for name in names if importlib.util.find_spec(name) is None]


def pip_extra(extra: str) -> str:
    """The install line of a pip extra: budget-envs is on no package index, so from a clone.

    >>> pip_extra("rllib")
    'pip install -e ".[rllib]" (in a clone of budget-envs)'
    """
    return f'pip install -e ".[{extra}]" (in a clone of budget-envs)'


def options_named(args: Namespace, *names: str) -> dict[str, Any]:
    """The parsed options ``names`` as keyword arguments of the same names, for a library call
    whose parameters the command's options are named after (``--max-turns`` is ``max_turns=``).

    >>> options_named(Namespace(tasks=3, seed=0, quiet=True), "tasks", "seed")
    {'tasks': 3, 'seed': 0}
    """
    return {name: getattr(args, name) for name in names}


def run_with_bar(plan: Any, out_dir: Any, desc: str, *, quiet: bool, **options: Any) -> Any:
    """:func:`budget_envs.eval.runner.run_plan` of ``plan`` into ``out_dir`` with a
    :class:`Progress` bar titled ``desc`` on stderr (none when ``quiet``), closed however the run
    ends; ``options`` are ``run_plan``'s own (``workers``, ``resume``...)."""
    from budget_envs.eval.runner import run_plan

    progress = Progress(desc, enabled=not quiet)
    try:
        return run_plan(
            plan, out_dir, on_start=progress.start, on_record=progress.record, **options
        )
    finally:
        progress.close()


class Progress:
    """tqdm progress hooks for :func:`budget_envs.eval.runner.run_plan`."""

    def __init__(self, desc: str, enabled: bool = True) -> None:
        self.desc = desc
        self.enabled = enabled
        self.bar: Any = None
        self.errors = 0

    def start(self, total: int, skipped: int) -> None:
        """Open a bar for a phase of the run (a second call: the prefix probes)."""
        if not self.enabled:
            return
        from tqdm import tqdm

        desc, unit = self.desc, "ep"
        if self.bar is not None:
            self.bar.close()
            desc, unit = f"{self.desc} prefix probes", "probe"
        self.bar = tqdm(
            total=total, initial=skipped, desc=desc, unit=unit, file=sys.stderr, leave=False
        )

    def record(self, rec: Any) -> None:
        if rec.error:
            self.errors += 1
        if self.bar is not None:
            self.bar.update(1)
            if self.errors:
                self.bar.set_postfix(errors=self.errors)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class StageBars:
    """tqdm bars for a ``progress(stage, done, total)`` hook: one bar per stage.

    ``label`` formats a stage's bar title; a stage's unit is ``units[stage]``, else ``unit``
    (tqdm's own when None). The study's stages and the RLlib warm start's both report this way.
    """

    def __init__(
        self,
        enabled: bool = True,
        *,
        label: str = "{}",
        units: dict[str, str] | None = None,
        unit: str | None = None,
    ) -> None:
        self.enabled = enabled
        self.label = label
        self.units = units or {}
        self.unit = unit
        self.bars: dict[str, Any] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        bar = self.bars.get(stage)
        if bar is None:
            from tqdm import tqdm

            unit = self.units.get(stage, self.unit)
            bar = self.bars[stage] = tqdm(
                total=total,
                desc=self.label.format(stage),
                file=sys.stderr,
                **({"unit": unit} if unit else {}),
            )
        bar.total = total
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
