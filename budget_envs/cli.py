"""The ``budgetmix`` command line: list, play, eval, report, compare, demo, train, study, prepare,
serve, serve-web, export-webshop, export-sft.

This module only parses the arguments and dispatches: each command's work is ``cmd_<name>`` in
its module of :mod:`budget_envs.commands`, beside its arguments (``add_<name>_parser``; the demo's
computations are :mod:`budget_envs.demo`).
Those modules are the only ones in the package that print or draw progress bars.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TextIO

from budget_envs.commands.demo import add_demo_parser, cmd_demo
from budget_envs.commands.eval import add_eval_parser, cmd_eval
from budget_envs.commands.export_sft import add_export_sft_parser, cmd_export_sft
from budget_envs.commands.listing import cmd_list
from budget_envs.commands.play import add_play_parser, cmd_play
from budget_envs.commands.prepare import add_prepare_parser, cmd_prepare
from budget_envs.commands.prepare import hook_parser as _hook_parser  # noqa: F401  (tests)
from budget_envs.commands.report import (
    add_compare_parser,
    add_report_parser,
    cmd_compare,
    cmd_report,
)
from budget_envs.commands.serve import (
    add_dispatch_parsers,
    add_serve_parser,
    cmd_export_webshop,
    cmd_serve,
    cmd_serve_web,
)
from budget_envs.commands.serve import dispatch as _dispatch  # noqa: F401  (tests)
from budget_envs.commands.study import add_study_parser, cmd_study
from budget_envs.commands.train import add_train_parser, cmd_train
from budget_envs.commands.view import add_view_parser, cmd_view
from budget_envs.errors import UsageError

__all__ = ["main"]

#: The work of each subcommand, by its name (``play`` also reads stdin).
HANDLERS = {
    "list": cmd_list,
    "eval": cmd_eval,
    "report": cmd_report,
    "compare": cmd_compare,
    "prepare": cmd_prepare,
    "serve-web": cmd_serve_web,
    "export-webshop": cmd_export_webshop,
    "demo": cmd_demo,
    "serve": cmd_serve,
    "train": cmd_train,
    "study": cmd_study,
    "export-sft": cmd_export_sft,
    "view": cmd_view,
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("budget-envs")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    """The ``budgetmix`` parser: its own flags, then each subcommand's, added by its module."""
    p = argparse.ArgumentParser(
        prog="budgetmix", description="BudgetMix: text-agent envs under a turn budget."
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the registered env ids")
    # The order of these calls is the order ``budgetmix --help`` lists the commands in.
    add_eval_parser(sub)
    add_export_sft_parser(sub)
    add_report_parser(sub)
    add_view_parser(sub)
    add_compare_parser(sub)
    add_play_parser(sub)
    add_prepare_parser(sub)
    add_dispatch_parsers(sub)
    add_serve_parser(sub)
    add_train_parser(sub)
    add_study_parser(sub)
    add_demo_parser(sub)
    return p


def main(
    argv: Sequence[str] | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    """Entry point of the ``budgetmix`` script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # The dispatchers hand everything after their name to the family's own parser (--help too).
    if (
        argv
        and argv[0] in ("serve-web", "export-webshop")
        or (argv[:1] == ["prepare"] and len(argv) > 1 and not argv[1].startswith("-"))
    ):
        head = 2 if argv[0] == "prepare" else 1
        args = argparse.Namespace(
            command=argv[0], family=argv[1] if head == 2 else None, rest=argv[head:], verbose=False
        )
    else:
        args = build_parser().parse_args(argv)
    out = stdout or sys.stdout
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    import budget_envs  # noqa: F401  (registers the ids)

    try:
        if args.command == "play":
            return cmd_play(args, out, stdin or sys.stdin)
        return HANDLERS[args.command](args, out)
    except UsageError as exc:
        print(f"budgetmix {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
