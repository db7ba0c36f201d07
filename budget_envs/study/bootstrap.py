"""The study's crossed paired bootstrap: the resample weights and a statistic's draws.

Every interval of :mod:`budget_envs.study.contrasts` comes from one crossed paired bootstrap
(:func:`crossed_weights`): the same evaluation tasks are played under every training seed, so
seeds and tasks are crossed factors, and each resample draws the seeds with replacement and,
independently, the tasks with replacement; a unit (task, seed) counts (times its seed was drawn)
x (times its task was drawn). A hard task drawn once is then hard under every drawn seed, as in
the records; the older hierarchical draw (:func:`hierarchical_weights`: tasks resampled inside
each drawn seed) averaged a task's difficulty over seeds and understated the task variance. The
generator is seeded, so the same records give the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The two-sided level of every uncorrected interval (headline, secondary rows, levels,
#: Pass@(K,T), curve).
CONFIDENCE = 0.95
#: Seed of the bootstrap's generator.
BOOT_SEED = 0
#: The crossed factors a resample draws: both, or one of them alone (the other held as it
#: is), which splits an interval's variance into its seed and task parts (the power note).
FACTORS = ("seeds", "tasks")


def hierarchical_weights(
    unit_seeds: Sequence[int], n_boot: int, seed: int = BOOT_SEED
) -> np.ndarray:
    """How often each unit is drawn in each of ``n_boot`` hierarchical resamples, shape
    ``(n_boot, units)``.

    ``unit_seeds[i]`` is the training seed of unit i. Each resample draws as many seeds as
    there are, with replacement, then for each drawn seed as many of its units as it has, with
    replacement. With one seed the seed level has one outcome and draws nothing, so the draws
    are those of ``rng.integers(0, n, size=(n_boot, n))``: a plain task bootstrap
    (:func:`budget_envs.study.stats.bootstrap` draws the same).
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    unit_seeds = np.asarray(unit_seeds)
    if unit_seeds.ndim != 1 or unit_seeds.size == 0:
        raise ValueError(f"unit_seeds must be a non-empty list, got {unit_seeds.tolist()!r}")
    rng = np.random.default_rng(seed)
    seeds = np.unique(unit_seeds)
    members = [np.flatnonzero(unit_seeds == s) for s in seeds]
    sizes = np.array([len(m) for m in members])
    order = np.concatenate(members)  # units grouped by seed
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n_seeds, width = len(seeds), int(sizes.max())
    if n_seeds == 1:
        picks = np.zeros((n_boot, 1), dtype=np.int64)
    else:
        picks = rng.integers(0, n_seeds, size=(n_boot, n_seeds))
    drawn = sizes[picks][..., None]  # (n_boot, seeds, 1): units of each drawn seed
    tasks = rng.integers(0, np.broadcast_to(drawn, (n_boot, n_seeds, width)))
    keep = np.arange(width) < drawn
    idx = order[(offsets[picks][..., None] + tasks)[keep].reshape(-1)]
    rows = np.broadcast_to(np.arange(n_boot)[:, None, None], keep.shape)[keep]
    counts = np.bincount(rows * unit_seeds.size + idx, minlength=n_boot * unit_seeds.size)
    return counts.reshape(n_boot, unit_seeds.size).astype(float)


def crossed_weights(
    unit_seeds: Sequence[Any],
    unit_tasks: Sequence[Any],
    n_boot: int,
    seed: int = BOOT_SEED,
    *,
    factors: Sequence[str] = FACTORS,
) -> np.ndarray:
    """How often each unit counts in each of ``n_boot`` crossed resamples, shape
    ``(n_boot, units)``: (draws of its seed) x (draws of its task), the seeds drawn with
    replacement as many as there are, the tasks likewise and independently.

    With one seed nothing is drawn at the seed level, and the task draws are those of
    ``rng.integers(0, n, size=(n_boot, n))`` over the tasks in their first-seen order: a plain
    task bootstrap (:func:`budget_envs.study.stats.bootstrap` draws the same). Units that are
    not a full seeds x tasks grid (a seed that missed a task) are weighted the same way; a
    resample that draws none of a statistic's units is left out by the caller. ``factors``
    names the factors drawn; one left out counts once per resample (the seeds alone, or the
    tasks alone).
    """
    bad = [f for f in factors if f not in FACTORS]
    if bad or not factors:
        raise ValueError(f"factors must be among {FACTORS}, got {list(factors)!r}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    if len(unit_seeds) != len(unit_tasks) or not len(unit_seeds):
        raise ValueError("unit_seeds and unit_tasks must be non-empty and of one length")
    rng = np.random.default_rng(seed)
    seed_ids = {s: i for i, s in enumerate(dict.fromkeys(unit_seeds))}
    task_ids = {t: i for i, t in enumerate(dict.fromkeys(unit_tasks))}
    si = np.array([seed_ids[s] for s in unit_seeds])
    ti = np.array([task_ids[t] for t in unit_tasks])
    n_s, n_t = len(seed_ids), len(task_ids)

    def counts(n: int) -> np.ndarray:
        picks = rng.integers(0, n, size=(n_boot, n))
        rows = np.repeat(np.arange(n_boot), n)
        return np.bincount(rows * n + picks.reshape(-1), minlength=n_boot * n).reshape(n_boot, n)

    if n_s == 1 or "seeds" not in factors:
        seed_counts = np.ones((n_boot, n_s), dtype=np.int64)
    else:
        seed_counts = counts(n_s)
    task_counts = counts(n_t) if "tasks" in factors else np.ones((n_boot, n_t), dtype=np.int64)
    return (seed_counts[:, si] * task_counts[:, ti]).astype(float)


@dataclass(frozen=True)
class Draws:
    """A statistic on the records (``value``) and on each resample (``boots``, the finite ones)."""

    value: float
    boots: np.ndarray
    units: int
    seeds: int

    def interval(self, level: float = CONFIDENCE) -> tuple[float, float]:
        """The percentile interval at ``level``."""
        tail = (1.0 - level) / 2.0
        low, high = np.quantile(self.boots, [tail, 1.0 - tail])
        return float(low), float(high)

    @property
    def p(self) -> float:
        """Two-sided bootstrap p-value of "the statistic is 0": twice the smaller share of
        resamples on either side of 0 (0 itself counts on both), at most 1."""
        below = float(np.mean(self.boots <= 0))
        above = float(np.mean(self.boots >= 0))
        return min(1.0, 2.0 * min(below, above))
