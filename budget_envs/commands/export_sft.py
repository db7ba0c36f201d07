"""``budgetmix export-sft``: oracle (or oracle-eps) demonstrations as chat rows in
``DIR/<split>.jsonl``, for a supervised warm start (:func:`budget_envs.eval.sft.export_sft`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from budget_envs.commands.args import json_dict
from budget_envs.commands.common import check_env_ids, options_named
from budget_envs.errors import UsageError

__all__ = ["EXPORT_FORMAT_HELP", "add_export_sft_parser", "cmd_export_sft"]

#: ``--format``'s help.
EXPORT_FORMAT_HELP = (
    "chat (default): transcript rows of chat messages; lm: rows rendered as the lm agent plays, "
    "the offered actions listed (what budgetmix train --trainer sft reads: "
    '--sft-kwargs \'{"data": "DIR/train.jsonl"}\')'
)


def add_export_sft_parser(sub: Any) -> None:
    """The ``export-sft`` subcommand's arguments."""
    x = sub.add_parser("export-sft", help="oracle demonstrations as chat rows, DIR/SPLIT.jsonl")
    x.add_argument("env_id", metavar="ENV_ID")
    x.add_argument("--tasks", type=int, required=True, help="N tasks, spread over the levels")
    x.add_argument("--out", required=True, metavar="DIR", help="folder of SPLIT.jsonl")
    x.add_argument("--split", default="train", choices=("train", "valid", "test", "test_unseen"))
    x.add_argument(
        "--agent",
        default="oracle",
        help="oracle (default), oracle-eps (epsilon 0.3 random turns), oracle-eps0.1, or any "
        "eval agent spec",
    )
    x.add_argument("--budget", type=int, default=None, help="turn budget (default: the env's)")
    x.add_argument("--visibility", default="hidden", help="hidden, remaining, final_warning")
    x.add_argument("--env-kwargs", type=json_dict, default=None, help="JSON constructor kwargs")
    x.add_argument("--seed", type=int, default=0)
    x.add_argument("--quiet", action="store_true", help="no progress bar")
    x.add_argument("--format", default="chat", choices=("chat", "lm"), help=EXPORT_FORMAT_HELP)


def _write_lm_rows(args: argparse.Namespace, folder: Any, explore: float) -> tuple[list, Any]:
    import os
    import tempfile

    from budget_envs.integrations.lm.sft import demonstrations

    target = folder / f"{args.split}.jsonl"
    bar: Any = None
    if not args.quiet:
        from tqdm import tqdm

        bar = tqdm(total=args.tasks, desc="export-sft", unit="ep", file=sys.stderr, leave=False)
    kwargs = {**(args.env_kwargs or {}), "split": args.split}
    budget = {} if args.budget is None else {"budget": args.budget}
    try:
        rows = demonstrations(
            args.env_id,
            episodes=args.tasks,
            visibility=args.visibility,
            env_kwargs=kwargs,
            seed=args.seed,
            explore=explore,
            on_row=(lambda _row: bar.update(1)) if bar is not None else None,
            **budget,
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        if bar is not None:
            bar.close()
    # A temp file of its own, then one rename.
    fd, tmp = tempfile.mkstemp(prefix=f".{args.split}-", suffix=".jsonl", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
    os.replace(tmp, target)
    return rows, target


def _export_lm(args: argparse.Namespace, out: TextIO) -> int:
    """``--format lm``: demonstration rows of :func:`budget_envs.integrations.lm.sft.demonstrations`
    (oracle, with ``oracle-eps[E]``'s share of random turns carrying no loss)."""
    from pathlib import Path

    from budget_envs.errors import RunInUse
    from budget_envs.eval.runner.folder import RunLock
    from budget_envs.eval.sft import sft_agent_spec

    spec = sft_agent_spec(args.agent)
    if spec == "oracle":
        explore = 0.0
    elif spec.startswith("oracle:epsilon="):
        explore = float(spec.partition("=")[2])
    else:
        raise UsageError(
            f"--format lm plays the oracle (oracle or oracle-eps[E]), not {args.agent!r}"
        )
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        lock = RunLock(folder)
        lock.acquire()  # eval's writer lock: a second export into this folder is refused
    except RunInUse as exc:
        raise UsageError(str(exc)) from None
    try:
        rows, target = _write_lm_rows(args, folder, explore)
    finally:
        lock.release()
    won = sum(1 for r in rows if r["won"])
    print(f"{len(rows)} episodes written to {target} ({won} won; lm format).", file=out)
    return 0


def cmd_export_sft(args: argparse.Namespace, out: TextIO) -> int:
    import gymnasium as gym

    from budget_envs.errors import OutDirError, RecordsWriteError
    from budget_envs.eval.sft import export_sft

    check_env_ids([args.env_id])
    if args.tasks < 1:
        raise UsageError(f"--tasks must be at least 1, got {args.tasks}")
    if args.budget is not None and args.budget < 1:
        raise UsageError(f"--budget must be at least 1, got {args.budget}")
    if getattr(args, "format", "chat") == "lm":
        return _export_lm(args, out)
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
