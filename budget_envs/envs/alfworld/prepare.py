"""Generate ALFWorld tasks ahead of time (``budgetmix prepare alfworld``).

Writing a task file takes milliseconds; the first load of a game (Fast Downward's grounding) is the
slow part, and it happens in the process that plays it. ``warm=True`` also loads every written game
once, which checks it end to end (the exact oracle must find a plan) at ~0.2-1 s per game.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

from budget_envs._util import cache_root, check_int, check_levels
from budget_envs.envs.alfworld import generate
from budget_envs.prepare import PrepareResult, Progress

logger = logging.getLogger(__name__)

__all__ = ["prepare", "prepare_hook"]


def prepare(
    split: str = "train",
    n: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    progress: Callable[[int, int], None] | None = None,
    *,
    warm: bool = False,
    level: int | Sequence[int] | None = None,
    tasks_per_level: int | None = None,
) -> list[str]:
    """Write generated tasks of ``split``; returns their game file paths.

    Either the first ``n`` tasks of the split (over all types), or, with ``level`` and/or
    ``tasks_per_level``, the tasks ``AlfWorldEnv(split=split, level=level,
    tasks_per_level=tasks_per_level)`` plays. ``progress(done, total)`` is called after each
    task (the CLI draws its progress bar with it).
    """
    if split not in generate.SPLITS:
        raise ValueError(f"split must be one of {generate.SPLITS}, got {split!r}")
    if level is not None or tasks_per_level is not None:
        if n is not None:
            raise ValueError(f"pass n= or level=/tasks_per_level=, not both (n={n!r})")
        kinds = check_levels(level, tuple(generate.TASK_TYPES))
        if tasks_per_level is not None:
            tasks_per_level = check_int("tasks_per_level", tasks_per_level, lo=1)
        specs = generate.select_specs(
            split, tuple(generate.TASK_TYPES[k] for k in kinds), tasks_per_level
        )
    else:
        n = check_int("n", generate.DEFAULT_TASKS[split] if n is None else n, lo=1)
        specs = generate.task_specs(split, n)
    root = cache_root("alfworld", cache_dir) / generate.GENERATOR_VERSION
    engine = None
    if warm:
        from budget_envs.envs.alfworld.engine import AlfredEngine  # noqa: PLC0415
        from budget_envs.envs.alfworld.oracle import ModelOracle  # noqa: PLC0415

        engine = AlfredEngine()
    paths = []
    for i, spec in enumerate(specs, 1):
        path = generate.write_task(spec, str(root))
        if engine is not None:
            engine.load(path)
            params = {
                "object_target": spec.object_target,
                "parent_target": spec.parent_target,
                "toggle_target": spec.toggle_target,
            }
            solved = ModelOracle(spec.task_type, params).solve(engine)
            if solved is None or solved[0] < 1:
                raise RuntimeError(f"{path}: the oracle finds no plan for a generated task")
        paths.append(path)
        if progress is not None:
            progress(i, len(specs))
    logger.info("prepared %d %s tasks under %s", len(paths), split, root)
    return paths


def prepare_hook(
    *,
    progress: Progress | None = None,
    split: str = "all",
    level: Sequence[int] | None = None,
    tasks_per_level: int | None = None,
    cache_dir: str | None = None,
    warm: bool = False,
) -> PrepareResult:
    """Write generated ALFWorld tasks into the cache (the family's prepare hook).

    Args:
        split: train, valid_seen, valid_unseen or all.
        level: task type ids 1-6 (default: all six).
        tasks_per_level: tasks of each type (default: the split's default set).
        cache_dir: where tasks are written (default: $BUDGET_ENVS_CACHE/alfworld or the user cache).
        warm: also load and solve every game (checks it end to end; about 0.2-1 s a game).
    """
    splits = generate.SPLITS if split == "all" else (split,)
    if split != "all" and split not in generate.SPLITS:
        raise ValueError(f"split must be one of {generate.SPLITS + ('all',)}, got {split!r}")
    options = {}
    if level is not None or tasks_per_level is not None:
        options = {
            "level": None if level is None else list(level),
            "tasks_per_level": tasks_per_level,
        }
    done = 0
    paths: list[str] = []
    for name in splits:

        def report(i: int, total: int, name: str = name, base: int = done) -> None:
            if progress is not None:
                progress(base + i, base + total, name)

        made = prepare(name, None, cache_dir, report, warm=warm, **options)
        paths += made
        done += len(made)
    return PrepareResult(
        ready=len(paths),
        total=len(paths),
        location=str(cache_root("alfworld", cache_dir) / generate.GENERATOR_VERSION),
    )
