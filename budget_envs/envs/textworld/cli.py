"""``budgetmix prepare textworld``: the command line over :func:`prepare` (prints, progress bar)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from budget_envs.envs.textworld import generate as gen
from budget_envs.envs.textworld.prepare import PreparedGame, prepare

__all__ = ["prepare_main"]


def prepare_main(argv: Sequence[str] | None = None) -> int:
    """``budgetmix prepare textworld``: generate games with a progress bar."""
    parser = argparse.ArgumentParser(
        prog="budgetmix prepare textworld", description="Pre-generate TextWorld games."
    )
    parser.add_argument(
        "--family",
        default="all",
        help="custom, coin_collector, treasure_hunter, cooking or all (default: all)",
    )
    parser.add_argument("--levels", type=int, nargs="+", default=None, help="default: graded set")
    parser.add_argument("--seeds", type=int, default=10, help="games per level (default: 10)")
    parser.add_argument("--cache-dir", default=None, help="default: $BUDGET_ENVS_CACHE/textworld")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per game")
    parser.add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1))
    args = parser.parse_args(argv)

    from tqdm import tqdm  # the CLI owns progress bars

    bar = tqdm(total=None, desc="textworld games", unit="game")

    def report(done: int, total: int, record: PreparedGame) -> None:
        bar.total = total
        bar.set_postfix_str(f"{record.family} L{record.level} s{record.seed}", refresh=False)
        bar.update(done - bar.n)
        if record.error:
            bar.write(
                f"{record.family} level {record.level} seed {record.seed}: failed: {record.error}"
            )

    try:
        results = prepare(
            args.family,
            args.levels,
            args.seeds,
            args.cache_dir,
            report,
            timeout=args.timeout,
            jobs=args.jobs,
        )
    finally:
        bar.close()
    failed = [r for r in results if r.error]
    ready = len(results) - len(failed)
    print(f"{ready} of {len(results)} games ready in {gen.cache_root(args.cache_dir)}")
    return 1 if failed else 0
