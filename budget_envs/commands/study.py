"""``budgetmix study``: train the budget arms, evaluate them on unseen tasks, write the page."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TextIO

from budget_envs.commands.common import StageBars, missing_modules, pip_extra
from budget_envs.errors import UsageError

__all__ = ["cmd_study"]


def cmd_study(args: argparse.Namespace, out: TextIO) -> int:
    """``budgetmix study``: train the budget arms, evaluate, compare, write the study page."""
    from budget_envs import study

    saved = Path(args.out) / "study.json"
    if args.report_only and saved.exists():
        spec = study.StudySpec.from_json(json.loads(saved.read_text(encoding="utf-8")))
    else:
        spec = study.quick_spec() if args.quick else study.full_spec()
    if not args.report_only and missing_modules("ray", "torch"):
        raise UsageError(f"the study trains with RLlib: {pip_extra('rllib')}")
    bars = StageBars(enabled=not args.quiet)
    try:
        report = study.run_study(
            spec,
            args.out,
            args.docs,
            report_only=args.report_only,
            progress=bars,
            workers=args.workers,
            figures=not args.no_figures,
            families=args.family,
            visibilities=args.visibility,
            seeds=args.seed,
        )
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        bars.close()
    verdicts = [r.verdict for r in report.contrasts]
    print(
        f"study report in {args.docs} ({len(report.tables)} tables in {Path(args.out) / 'tables'}, "
        f"{len(report.figures)} figures); {len(verdicts) - verdicts.count('not run')} of "
        f"{len(verdicts)} pre-registered contrast(s) run: {verdicts.count('supported')} supported, "
        f"{verdicts.count('contradicted')} contradicted, {verdicts.count('inconclusive')} "
        "inconclusive",
        file=out,
    )
    return 0
