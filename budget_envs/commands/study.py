"""``budgetmix study``: train the budget arms, evaluate them on unseen tasks, write the page."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from budget_envs.commands.common import StageBars, missing_modules, pip_extra
from budget_envs.commands.train import REPORT_TO_HELP
from budget_envs.errors import UsageError
from budget_envs.integrations import trainers
from budget_envs.integrations.trainers import trainer_entry

if TYPE_CHECKING:
    from budget_envs.study import StudySpec

__all__ = ["add_study_parser", "cmd_study"]


def add_study_parser(sub: Any) -> None:
    """The ``study`` subcommand's arguments."""
    st = sub.add_parser(
        "study", help="train the budget arms, evaluate them on unseen tasks, write the report"
    )
    st.add_argument("--quick", action="store_true", help="the few-minute pipeline check")
    st.add_argument(
        "--report-only",
        action="store_true",
        help="regenerate tables and figures from DIR/records (no training, no episodes)",
    )
    st.add_argument("--out", default="study", metavar="DIR", help="study folder (default study)")
    st.add_argument(
        "--docs", default="docs/study.md", metavar="PATH", help="page to write (docs/study.md)"
    )
    st.add_argument("--workers", type=int, default=2, help="processes / Ray CPUs (default 2)")
    st.add_argument(
        "--trainer",
        choices=trainers.study_trainers(),
        default=trainers.study_trainers()[0],
        help="; ".join(f"{e.name}: {e.description}" for e in trainers.TRAINER_TABLE if e.study),
    )
    st.add_argument(
        "--model",
        default="tiny",
        metavar="NAME",
        help="(trl only) tiny (default: the offline tiny model, warm-started on oracle episodes), "
        "a folder `budgetmix train --trainer sft` wrote (base; the CPU-sized language-model "
        "study, with the imitation arm) or a Hugging Face model name or path (used as it is "
        "for base; GRPO from it)",
    )
    st.add_argument(
        "--device",
        default=None,
        metavar="DEVICE",
        help="(trl only) where the language-model arms play: cuda runs the full design (the GPU "
        "spec); default the CPU (with an SFT folder as --model: the CPU-sized study)",
    )
    st.add_argument(
        "--family",
        action="append",
        default=None,
        metavar="NAME",
        help="train and evaluate only this family (repeatable; the report covers all records)",
    )
    st.add_argument(
        "--visibility",
        action="append",
        default=None,
        choices=["hidden", "remaining"],
        help="train and evaluate only the arms with this budget visibility (repeatable)",
    )
    st.add_argument(
        "--seed",
        action="append",
        type=int,
        default=None,
        help="train and evaluate only this training seed (repeatable)",
    )
    st.add_argument(
        "--check",
        action="store_true",
        help="verify the design from DIR (study.json, records, train.json per policy, "
        "PREREGISTRATION.md and DEVIATIONS.md): sizes, pairing, unseen tasks, shared start, "
        "env steps; exit 1 on a problem",
    )
    st.add_argument(
        "--compare-with",
        default=None,
        metavar="DIR",
        help="another study folder: its verdicts go beside these on the page, one row per "
        "contrast and family, and one sentence per question on whether the answers agree "
        "(e.g. --trainer trl --compare-with study)",
    )
    st.add_argument("--no-figures", action="store_true")
    st.add_argument("--quiet", action="store_true", help="no progress bars")
    st.add_argument("--report-to", default="none", metavar="TOOLS", help=REPORT_TO_HELP)


def _pick_spec(args: argparse.Namespace) -> StudySpec:
    """The spec of ``--quick``, ``--trainer``, ``--model`` and ``--device`` (the last two need
    ``--trainer trl``).

    With TRL the full study has no learning curve (its stage writes no curve checkpoints); an
    SFT folder as ``--model`` on the CPU gets :func:`~budget_envs.study.trl_stage.lm_cpu_spec`,
    anything else (a Hub model, or ``--device cuda``) the full design.
    """
    from budget_envs import study

    device = None if args.device in (None, "", "cpu") else str(args.device)
    if args.trainer != "trl":
        for flag, value in (("--model", args.model != "tiny"), ("--device", device)):
            if value:
                raise UsageError(f"{flag} needs --trainer trl")
        return study.quick_spec() if args.quick else study.full_spec()
    from budget_envs.integrations.trl.training import _sft_settings
    from budget_envs.study.trl_stage import lm_cpu_spec, trl_quick_spec

    # the imitation arm is more SFT, so it needs a base that --trainer sft wrote
    sft = _sft_settings(args.model) is not None
    if args.quick:
        spec = trl_quick_spec()
    else:
        spec = lm_cpu_spec() if sft and device is None else study.full_spec()
    arms = [a for a in spec.arms if a != study.IMITATION or sft]
    return replace(spec, trainer="trl", model=args.model, curve=None, arms=arms, device=device)


def _check(saved: Path, out: TextIO) -> int:
    """``budgetmix study --check``: the design verified from the folder of ``saved``."""
    from budget_envs import study
    from budget_envs.study.check import check_study

    if not saved.exists():
        raise UsageError(f"--check: no study.json in {saved.parent}")
    spec = study.StudySpec.from_json(json.loads(saved.read_text(encoding="utf-8")))
    report = check_study(spec, saved.parent)
    for title, lines in (
        ("passed", report.passed),
        ("deviations listed in DEVIATIONS.md", report.deviations),
        ("pending cells", report.pending),
        ("problems", report.problems),
    ):
        out.write(f"{title} ({len(lines)}):\n")
        out.writelines(f"  {line}\n" for line in lines)
    verdict = "ok" if report.ok else f"{len(report.problems)} problem(s)"
    out.write(
        f"study check: {verdict}; "
        f"{sum(line.endswith('(as designed)') for line in report.passed)} cell(s) as designed, "
        f"{len(report.deviations)} listed deviation(s), {len(report.pending)} pending cell(s)\n"
    )
    return 0 if report.ok else 1


def cmd_study(args: argparse.Namespace, out: TextIO) -> int:
    """``budgetmix study``: train the budget arms, evaluate, compare, write the study page."""
    from budget_envs import study

    saved = Path(args.out) / "study.json"
    if args.check:
        return _check(saved, out)
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
            compare_with=args.compare_with,
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
