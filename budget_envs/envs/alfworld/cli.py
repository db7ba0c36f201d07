"""``budgetmix prepare alfworld``: the command line over :func:`prepare` (prints, progress bar)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from budget_envs.envs.alfworld import generate
from budget_envs.envs.alfworld.env import default_cache_dir
from budget_envs.envs.alfworld.prepare import prepare

__all__ = ["prepare_main"]


def prepare_main(argv: Sequence[str] | None = None) -> int:
    """``budgetmix prepare alfworld [--split S] [--n N] [--cache-dir D] [--warm]``."""
    parser = argparse.ArgumentParser(
        prog="budgetmix prepare alfworld", description="Generate ALFWorld tasks into the cache."
    )
    parser.add_argument("--split", choices=generate.SPLITS + ("all",), default="all")
    parser.add_argument("--n", type=int, default=None, help="tasks per split (default: all)")
    parser.add_argument("--cache-dir", default=None, help="default: %s" % default_cache_dir())
    parser.add_argument("--warm", action="store_true", help="also load and solve every game")
    args = parser.parse_args(argv)
    splits = generate.SPLITS if args.split == "all" else (args.split,)
    try:
        from tqdm import tqdm  # noqa: PLC0415 (the CLI owns progress bars)
    except ImportError:  # pragma: no cover
        tqdm = None
    for split in splits:
        bar = tqdm(total=args.n or generate.DEFAULT_TASKS[split], desc=split) if tqdm else None

        def progress(done: int, total: int, bar=bar) -> None:
            if bar is not None:
                bar.total = total
                bar.update(done - bar.n)

        paths = prepare(split, args.n, args.cache_dir, progress=progress, warm=args.warm)
        if bar is not None:
            bar.close()
        print(f"{split}: {len(paths)} tasks in {Path(paths[0]).parents[3]}")
    return 0
