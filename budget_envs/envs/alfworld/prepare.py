"""Generate ALFWorld tasks ahead of time (``budgetmix prepare alfworld``).

Writing a task file takes milliseconds; the first load of a game (Fast Downward's grounding) is the
slow part, and it happens in the process that plays it. ``warm=True`` also loads every written game
once, which checks it end to end (the exact oracle must find a plan) at ~0.2-1 s per game.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from budget_envs._util import cache_root
from budget_envs.envs.alfworld import generate

logger = logging.getLogger(__name__)

__all__ = ["prepare"]


def prepare(
    split: str = "train",
    n: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    progress: Callable[[int, int], None] | None = None,
    *,
    warm: bool = False,
) -> list[str]:
    """Write the first ``n`` generated tasks of ``split``; returns their game file paths.

    ``progress(done, total)`` is called after each task (the CLI draws its progress bar with it).
    """
    if split not in generate.SPLITS:
        raise ValueError(f"split must be one of {generate.SPLITS}, got {split!r}")
    n = generate.DEFAULT_TASKS[split] if n is None else n
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    root = cache_root("alfworld", cache_dir) / generate.GENERATOR_VERSION
    specs = generate.task_specs(split, n)
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
