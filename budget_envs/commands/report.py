"""``budgetmix report`` (tables and figures of a run) and ``budgetmix compare`` (B - A)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from budget_envs.commands.common import print_few_tasks_warning
from budget_envs.errors import OutDirError, UsageError

__all__ = [
    "KEEP_HELP",
    "add_compare_parser",
    "add_report_options",
    "add_report_parser",
    "cmd_compare",
    "cmd_report",
    "keep_share",
]

KEEP_HELP = (
    "the share of Pass@1 at T_max whose smallest T the report's 'What a turn buys' section "
    "gives, with an interval (default 0.95)"
)


def add_report_parser(sub: Any) -> None:
    """The ``report`` subcommand's arguments."""
    r = sub.add_parser("report", help="tables and figures of a run")
    r.add_argument("run", metavar="RUN")
    r.add_argument("--out", default=None, help="default RUN/report")
    add_report_options(r)


def add_compare_parser(sub: Any) -> None:
    """The ``compare`` subcommand's arguments."""
    c = sub.add_parser("compare", help="difference surface RUN_B - RUN_A")
    c.add_argument("run_a", metavar="RUN_A")
    c.add_argument("run_b", metavar="RUN_B")
    c.add_argument("--agent-a", default=None, help="agent of RUN_A (when it holds several)")
    c.add_argument("--agent-b", default=None, help="agent of RUN_B (when it holds several)")
    c.add_argument("--out", default=None, help="default RUN_B/compare")
    add_report_options(c)


def add_report_options(parser: argparse.ArgumentParser) -> None:
    """The options ``report`` and ``compare`` share: resamples, seed, figures, ``--keep``."""
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-figures", action="store_true")
    parser.add_argument("--keep", type=keep_share, default=0.95, help=KEEP_HELP)


def keep_share(text: str) -> float:
    """``--keep``'s type: a share in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:  # nan fails too
        raise argparse.ArgumentTypeError(f"expected a share in (0, 1], got {text!r}")
    return value


def _records(command: str, run: str) -> list[dict[str, Any]]:
    """The records of ``run``; when there are none, says so on stderr (the caller exits 2)."""
    from budget_envs.eval.runner import load_records

    records = load_records(run)
    if not records:
        print(f"budgetmix {command}: no records in {run}", file=sys.stderr)
    return records


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    import gymnasium as gym

    from budget_envs.eval.report import write_report

    records = _records("report", args.run)
    if not records:
        return 2
    out_dir = Path(args.out) if args.out else Path(args.run) / "report"
    try:
        result = write_report(
            records,
            out_dir,
            n_boot=args.boot,
            seed=args.seed,
            figures=not args.no_figures,
            keep=args.keep,
        )
    except gym.error.DependencyNotInstalled as exc:
        print(f"budgetmix report: {exc}; or pass --no-figures for the tables only", file=sys.stderr)
        return 2
    except OutDirError as exc:  # read-only, not a directory, a full disk: one line
        raise UsageError(str(exc)) from None
    print(result.text, file=out)
    print_few_tasks_warning(records)
    from budget_envs.eval.runner.folder import writer_pid

    pid = writer_pid(args.run)
    if pid is not None:
        who = f"pid {pid}" if pid else "a live process"
        print(
            f"note: {args.run} is still being written ({who}); this report covers the "
            f"{len(records)} records so far",
            file=sys.stderr,
        )
    print(
        f"\nWrote {result.markdown}, {len(result.tables)} CSV tables and "
        f"{len(result.figures)} figures to {out_dir}",
        file=out,
    )
    return 0


def cmd_compare(args: argparse.Namespace, out: TextIO) -> int:
    import gymnasium as gym

    from budget_envs.eval.report import compare_runs

    a = _records("compare", args.run_a)
    b = _records("compare", args.run_b) if a else []
    if not (a and b):
        return 2
    out_dir = Path(args.out) if args.out else Path(args.run_b) / "compare"
    try:
        results = compare_runs(
            a,
            b,
            out_dir,
            agent_a=args.agent_a,
            agent_b=args.agent_b,
            n_boot=args.boot,
            seed=args.seed,
            figures=not args.no_figures,
            keep=args.keep,
        )
    except (ValueError, OutDirError, gym.error.DependencyNotInstalled) as exc:
        print(f"budgetmix compare: {exc}", file=sys.stderr)  # UnknownAgent is a ValueError
        return 2
    if not results:
        print(
            f"budgetmix compare: nothing to compare: no env holds A's "
            f"{args.agent_a or 'agent'} and B's {args.agent_b or 'agent'} with usable episodes "
            "on shared tasks and budgets",
            file=sys.stderr,
        )
        return 2
    for c in results:
        print(c.text, file=out)
    extra = f", {out_dir / 'prefix_difference.csv'}" if any(c.prefix for c in results) else ""
    print(f"Wrote {out_dir / 'compare.md'}, {out_dir / 'difference.csv'}{extra}", file=out)
    return 0
