"""The whole study in one call: :func:`run_study` is what ``budgetmix study`` runs."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from budget_envs.study.folder import load_study_records
from budget_envs.study.page import StudyReport, write_study_report
from budget_envs.study.spec import StudySpec
from budget_envs.study.stages import Progress, compare_stage, eval_stage, train_stage


def same_study(saved: StudySpec, spec: StudySpec) -> bool:
    """Whether ``spec`` is the study ``saved`` describes, perhaps with families added after it."""
    names = [f.name for f in saved.families]
    kept = [f for f in spec.families if f.name in names]
    return [f.name for f in kept] == names and replace(spec, families=kept) == saved


def run_study(
    spec: StudySpec,
    out: str | os.PathLike,
    docs: str | os.PathLike,
    *,
    report_only: bool = False,
    progress: Progress | None = None,
    workers: int = 2,
    figures: bool = True,
    families: Sequence[str] | None = None,
    visibilities: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    report_to: str | None = None,
    compare_with: str | os.PathLike | None = None,
) -> StudyReport:
    """Train, evaluate, compare and report (or, with ``report_only``, report from the records).

    ``progress(stage, done, total)`` reports the long stages (the CLI draws bars with it).
    ``families``, ``visibilities`` and ``seeds`` limit training and evaluation to those, so
    several processes (or machines sharing the folder) can run parts of a study side by side;
    the report covers every record that is there. ``compare_with``: another study's folder,
    whose verdicts the page puts beside these (:func:`~budget_envs.study.verdicts.side_by_side_table`).
    """
    stage_spec = replace(spec, curve=None)  # the curves are put back below, those kept
    for name, wanted, known in (
        ("families", families, [f.name for f in spec.families]),
        ("visibilities", visibilities, list(spec.visibilities)),
        ("seeds", seeds, list(spec.seeds)),
    ):
        if wanted is not None and (not wanted or any(w not in known for w in wanted)):
            raise ValueError(f"{name} must be among {known}, got {list(wanted)!r}")
    if families is not None:
        stage_spec = replace(stage_spec, families=[f for f in spec.families if f.name in families])
    if visibilities is not None:
        stage_spec = replace(
            stage_spec, visibilities=[v for v in spec.visibilities if v in visibilities]
        )
    if seeds is not None:
        visible = spec.visible_seeds
        stage_spec = replace(
            stage_spec,
            seeds=[s for s in spec.seeds if s in seeds],
            visible_seeds=None if visible is None else [s for s in visible if s in seeds],
        )
    kept = [
        [f, s]
        for f, s in spec.curves
        if f in [x.name for x in stage_spec.families] and s in stage_spec.seeds
    ]
    stage_spec = replace(stage_spec, curve=kept or None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "study.json"
    text = json.dumps(spec.to_json(), indent=2) + "\n"
    # Compared as specs, not text: a folder written before a field was added still matches,
    # and so does one whose study has since gained a family (its records stay valid).
    if saved.exists() and not same_study(
        StudySpec.from_json(json.loads(saved.read_text("utf-8"))), spec
    ):
        raise ValueError(
            f"{out} holds another study ({saved}); use another --out or the same options"
        )
    saved.write_text(text, encoding="utf-8")
    if not report_only:
        train_stage(stage_spec, out, progress=progress, num_cpus=workers, report_to=report_to)
        eval_stage(stage_spec, out, progress=progress, workers=workers)
    records = load_study_records(out)
    compare_stage(spec, out, records, figures=figures)
    return write_study_report(
        spec, out, docs, records=records, figures=figures, compare_with=compare_with
    )
