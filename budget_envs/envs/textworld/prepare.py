"""Pre-generate TextWorld games into the cache (``budgetmix prepare textworld ...``).

Envs generate a game the first time it is played; preparing a set beforehand keeps the first
episodes fast and lets a cluster share one cache directory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from budget_envs._util import check_int, check_seeds
from budget_envs.envs.textworld import generate as gen
from budget_envs.prepare import PrepareResult, Progress

__all__ = ["PreparedGame", "prepare", "prepare_hook"]

#: Names accepted for ``family`` besides the generator's own (the env ids' spelling).
_ALIASES = {
    "textworld": "custom",
    "coincollector": "coin_collector",
    "treasurehunter": "treasure_hunter",
}


@dataclass(frozen=True)
class PreparedGame:
    """The outcome for one game: its path, or the error that stopped it."""

    family: str
    level: int
    seed: int
    path: Path | None
    error: str | None
    seconds: float
    cached: bool


def _families(family: str) -> list[str]:
    if not isinstance(family, str):
        raise TypeError(f"family must be a str, got {family!r}")
    name = family.strip().lower().replace("-", "_")
    if name == "all":
        return list(gen.FAMILIES)
    name = _ALIASES.get(name.replace("_", ""), name)
    if name not in gen.FAMILIES:
        raise ValueError(f"family must be one of {list(gen.FAMILIES) + ['all']}, got {family!r}")
    return [name]


def prepare(
    family: str,
    levels: Sequence[int] | None = None,
    seeds: int | Sequence[int] = 10,
    cache_dir: str | os.PathLike | None = None,
    progress: Callable[[int, int, PreparedGame], None] | None = None,
    *,
    timeout: float = 300.0,
    jobs: int = 1,
) -> list[PreparedGame]:
    """Generate every (level, seed) game of ``family`` ("all" for every family) into the cache.

    ``levels`` defaults to the family's graded set; ``seeds`` is a count (``0..n-1``, what the
    envs play by default) or a list. ``progress(done, total, record)`` is called after each game.
    Failures are recorded, not raised, so one bad seed does not stop a long run.
    """
    if isinstance(seeds, (list, tuple)):
        seed_list = list(check_seeds("seeds", seeds))
    else:
        seed_list = list(range(check_int("seeds", seeds, lo=1)))
    jobs = check_int("jobs", jobs, lo=1)
    specs = []
    for fam in _families(family):
        fam_levels = gen.family_levels(fam) if levels is None else list(levels)
        for level in fam_levels:
            gen.level_settings(fam, level)  # raises ValueError on a bad level
            specs.extend(gen.GameSpec(fam, level, s) for s in seed_list)

    def one(spec: gen.GameSpec) -> PreparedGame:
        cached = gen.is_cached(spec, cache_dir)
        start = time.perf_counter()
        try:
            path, error = gen.ensure_game(spec, cache_dir, timeout), None
        except gen.GenerationError as exc:
            path, error = None, str(exc)
        return PreparedGame(
            spec.family, spec.level, spec.seed, path, error, time.perf_counter() - start, cached
        )

    results: list[PreparedGame] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for record in pool.map(one, specs):
            results.append(record)
            if progress is not None:
                progress(len(results), len(specs), record)
    return results


def prepare_hook(
    *,
    progress: Progress | None = None,
    family: str = "all",
    levels: Sequence[int] | None = None,
    tasks_per_level: int = 10,
    cache_dir: str | None = None,
    timeout: float = 300.0,
    jobs: int = 0,
) -> PrepareResult:
    """Pre-generate TextWorld games into the cache (the family's prepare hook).

    Args:
        family: custom, coin_collector, treasure_hunter, cooking or all.
        levels: the levels to generate (default: each family's graded set).
        tasks_per_level: games per level (seeds 0..n-1, what the envs play by default).
        cache_dir: where games are kept (default: $BUDGET_ENVS_CACHE/textworld or the user cache).
        timeout: seconds allowed per game.
        jobs: games generated at once (0: one per CPU).
    """
    jobs = check_int("jobs", jobs, lo=0)

    def report(done: int, total: int, record: PreparedGame) -> None:
        if progress is not None:
            state = "failed" if record.error else ("cached" if record.cached else "made")
            progress(done, total, f"{record.family} L{record.level} s{record.seed} {state}")

    results = prepare(
        family,
        levels,
        tasks_per_level,
        cache_dir,
        report,
        timeout=timeout,
        jobs=jobs or max(1, os.cpu_count() or 1),
    )
    failures = tuple(
        f"{r.family} level {r.level} seed {r.seed}: {r.error}" for r in results if r.error
    )
    return PrepareResult(
        ready=len(results) - len(failures),
        total=len(results),
        location=str(gen.cache_root(cache_dir)),
        failures=failures,
    )
