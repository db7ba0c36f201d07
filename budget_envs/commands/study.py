"""``budgetmix study``: train the budget arms, evaluate them on unseen tasks, write the page."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from budget_envs.commands.common import StageBars, missing_modules, pip_extra
from budget_envs.errors import UsageError
from budget_envs.integrations.trainers import trainer_entry

if TYPE_CHECKING:
    from budget_envs.study import StudySpec

__all__ = ["cmd_study"]


def _pick_spec(args: argparse.Namespace) -> StudySpec:
    """The spec of ``--quick``, ``--trainer`` and ``--model`` (which needs ``--trainer trl``).

    With TRL the full study has no learning curve (its stage writes no curve checkpoints).
    """
    from budget_envs import study

    if args.trainer != "trl":
        if args.model != "tiny":
            raise UsageError(f"--model {args.model} needs --trainer trl")
        return study.quick_spec() if args.quick else study.full_spec()
    from budget_envs.study.trl_stage import trl_quick_spec

    spec = trl_quick_spec() if args.quick else study.full_spec()
    return replace(spec, trainer="trl", model=args.model, curve=None)


def cmd_study(args: argparse.Namespace, out: TextIO) -> int:
    """``budgetmix study``: train the budget arms, evaluate, compare, write the study page."""
    from budget_envs import study

    saved = Path(args.out) / "study.json"
    if args.report_only and saved.exists():
        spec = study.StudySpec.from_json(json.loads(saved.read_text(encoding="utf-8")))
    else:
        spec = _pick_spec(args)
    entry = trainer_entry(spec.trainer)
    if not args.report_only and missing_modules(*entry.modules):
        raise UsageError(
            f"the study trains with --trainer {entry.name}, which needs the {entry.requires} "
            f"extra: {pip_extra(entry.requires)}"
        )
    from budget_envs.integrations.tracking import check_report_to

    try:
        check_report_to(args.report_to)
    except ValueError as exc:
        raise UsageError(f"--report-to: {exc}") from None
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
            report_to=args.report_to,
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
