"""The study's report: its tables, its figures and the generated section of its page.

:func:`write_study_report` reads the compressed records only, so ``budgetmix study
--report-only`` regenerates every table and figure without training.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budget_envs.study.compute import compute_table
from budget_envs.study.contrasts import ContrastResult, analyse
from budget_envs.study.figures import draw_figures
from budget_envs.study.folder import load_study_records, record_folder
from budget_envs.study.grid import crossed_differences, crossed_surfaces
from budget_envs.study.spec import StudySpec
from budget_envs.study.stats import step_recovery
from budget_envs.study.tables import (
    contrast_table,
    curve_table,
    difference_table,
    headline_table,
    levels_table,
    pass1_table,
    pass_k_table,
    secondary_table,
    step_recovery_table,
    stop_table,
    turns_table,
)
from budget_envs.study.verdicts import (
    answer_table,
    best_fixed_table,
    design_record_table,
    policy_class,
    power_table,
    side_by_side_table,
)

#: Where the generated part of the study page starts and ends.
BEGIN = "<!-- study-results:begin (written by `budgetmix study`; do not edit) -->"
END = "<!-- study-results:end -->"


@dataclass
class StudyReport:
    """What :func:`write_study_report` wrote; ``contrasts`` are the pre-registered contrasts of
    every family (:func:`budget_envs.study.contrasts.analyse`), run or not."""

    markdown: str
    tables: list[Path]
    figures: list[Path]
    contrasts: list[ContrastResult]


def write_study_report(
    spec: StudySpec,
    out: str | os.PathLike,
    docs: str | os.PathLike,
    *,
    records: Sequence[dict[str, Any]] | None = None,
    figures: bool = True,
    compare_with: str | os.PathLike | None = None,
) -> StudyReport:
    """Tables (``out/tables/``) and figures (``<docs folder>/img/<docs stem>/``) from the records, and
    the generated section of ``docs`` between its study markers (the file is created when
    missing; the text around the markers is kept). Tables hold no times and no paths, so the
    same records give the same bytes. ``compare_with``: another study's folder (its
    ``study.json`` and records), whose verdicts go beside these in a side-by-side table after
    the answers."""
    out = Path(out)
    records = load_study_records(out) if records is None else list(records)
    tables_dir = out / "tables"
    tables_dir.mkdir(parents=True, exist_ok=True)
    analysis = analyse(spec, records)
    surfaces = crossed_surfaces(spec, analysis.units)
    diffs = crossed_differences(spec, analysis.units)
    steps = step_recovery(spec, records)
    sections = [
        answer_table(analysis),
        *_side_by_side(spec, out, analysis, compare_with),
        contrast_table(analysis, record_folder(out)),
        power_table(analysis),
        headline_table(analysis),
        stop_table(spec, analysis),
        secondary_table(analysis),
        best_fixed_table(analysis),
        levels_table(spec, analysis),
        pass1_table(spec, surfaces),
        pass_k_table(spec, analysis),
        curve_table(analysis),
        turns_table(spec, records),
        difference_table(spec, diffs),
        step_recovery_table(steps),
        compute_table(spec, out, records),
    ]
    tables = [table.write(tables_dir) for table in sections]
    md = [line for table in sections for line in table.markdown]

    figs: list[Path] = []
    img = Path(docs).parent / "img" / Path(docs).stem  # docs/study.md: docs/img/study
    if figures:
        figs = draw_figures(spec, surfaces, diffs, steps, img, analysis.curve)
    if figs:
        md += ["### Figures", ""]
        for f in figs:
            md += [f"![{f.stem}]({os.path.relpath(f, Path(docs).parent)})", ""]
    record = design_record_table(out)
    tables.append(record.write(tables_dir))
    md += record.markdown
    text = "\n".join(md).rstrip() + "\n"
    (tables_dir / "study_results.md").write_text(text, encoding="utf-8")
    tables.append(tables_dir / "study_results.md")
    splice(Path(docs), text)
    return StudyReport(markdown=text, tables=tables, figures=figs, contrasts=analysis.contrasts)


def _side_by_side(
    spec: StudySpec, out: Path, analysis: Any, other: str | os.PathLike | None
) -> list[Any]:
    """The side-by-side table against the study in folder ``other`` (none without one)."""
    import json

    if other is None:
        return []
    saved = Path(other) / "study.json"
    if not saved.is_file():
        raise FileNotFoundError(f"{other} holds no study (no study.json) to compare with")
    their = StudySpec.from_json(json.loads(saved.read_text(encoding="utf-8")))
    theirs = analyse(their, load_study_records(other))
    names = (
        policy_class(their.trainer, their.model, Path(other)),
        policy_class(spec.trainer, spec.model, out),
    )
    if names[0] == names[1]:
        names = (f"{names[0]} in {Path(other).name}", f"{names[1]} here")
    return [side_by_side_table(theirs, analysis, names)]


def splice(path: Path, text: str) -> None:
    """Put ``text`` between the study markers of ``path`` (created with a title if missing)."""
    if path.exists():
        page = path.read_text(encoding="utf-8")
        if BEGIN not in page or END not in page:
            raise ValueError(f"{path} has no study markers ({BEGIN!r} ... {END!r})")
        head, rest = page.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        head, tail = "# BudgetMix study\n\n", "\n"
    path.write_text(f"{head}{BEGIN}\n\n{text}\n{END}{tail}", encoding="utf-8")
