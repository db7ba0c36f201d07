"""``budgetmix export-sft``: oracle (or oracle-eps) demonstrations as chat rows in
``DIR/<split>.jsonl``, for a supervised warm start (:func:`budget_envs.eval.sft.export_sft`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from budget_envs.commands.common import check_env_ids, options_named
from budget_envs.errors import UsageError

__all__ = ["cmd_export_sft"]


def cmd_export_sft(args: argparse.Namespace, out: TextIO) -> int:
    import gymnasium as gym

    from budget_envs.errors import OutDirError, RecordsWriteError
    from budget_envs.eval.sft import export_sft

    check_env_ids([args.env_id])
    if args.tasks < 1:
        raise UsageError(f"--tasks must be at least 1, got {args.tasks}")
    if args.budget is not None and args.budget < 1:
        raise UsageError(f"--budget must be at least 1, got {args.budget}")
    bar: Any = None

    def start(total: int) -> None:
        nonlocal bar
        if not args.quiet:
            from tqdm import tqdm

            bar = tqdm(total=total, desc="export-sft", unit="ep", file=sys.stderr, leave=False)

    def row(_: dict[str, Any]) -> None:
        if bar is not None:
            bar.update(1)

    try:
        result = export_sft(
            args.env_id,
            args.out,
            **options_named(
                args, "tasks", "split", "agent", "budget", "visibility", "env_kwargs", "seed"
            ),
            on_start=start,
            on_row=row,
        )
    except (TypeError, ValueError, OutDirError, gym.error.Error) as exc:
        raise UsageError(str(exc)) from None
    except RecordsWriteError as exc:
        print(f"budgetmix export-sft: {exc}", file=sys.stderr)
        return 1
    finally:
        if bar is not None:
            bar.close()
    print(
        f"{result.rows} episodes written to {result.path} ({result.won} won, "
        f"{result.errors} agent errors left out).",
        file=out,
    )
    return 1 if result.errors else 0
