"""The study's report: its tables (markdown and CSV) and the generated section of its page.

:func:`write_study_report` reads the compressed records only, so ``budgetmix study
--report-only`` regenerates every table and figure without training.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs.study.figures import draw_figures
from budget_envs.study.folder import load_study_records
from budget_envs.study.spec import RANDOM, StudySpec
from budget_envs.study.stats import LearningRow, agent_surfaces, learning_status, won_turns

#: Where the generated part of the study page starts and ends.
BEGIN = "<!-- study-results:begin (written by `budgetmix study`; do not edit) -->"
END = "<!-- study-results:end -->"


def _ci(mean: float, low: float, high: float, sign: bool = False) -> str:
    f = "{:+.3f}" if sign else "{:.3f}"
    return f"{f.format(mean)} [{f.format(low)}, {f.format(high)}]"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path


@dataclass
class StudyReport:
    """What :func:`write_study_report` wrote."""

    markdown: str
    tables: list[Path]
    figures: list[Path]
    learning: list[LearningRow]


def write_study_report(
    spec: StudySpec,
    out: str | os.PathLike,
    docs: str | os.PathLike,
    *,
    records: Sequence[dict[str, Any]] | None = None,
    figures: bool = True,
) -> StudyReport:
    """Tables (``out/tables/``) and figures (``<docs folder>/img/study/``) from the records, and
    the generated section of ``docs`` between its study markers (the file is created when
    missing; the text around the markers is kept). Tables hold no times and no paths, so the
    same records give the same bytes."""
    from budget_envs.eval.metrics import recovery_table, single_step_accuracy

    out = Path(out)
    records = load_study_records(out) if records is None else list(records)
    tables_dir = out / "tables"
    tables_dir.mkdir(parents=True, exist_ok=True)
    surfaces = agent_surfaces(records, spec.n_boot)
    tables: list[Path] = []
    md: list[str] = []
    agents = [*spec.arms, RANDOM, *spec.references]

    # ---- Pass@1 vs T
    md += ["### Pass@1 against T", ""]
    csv_rows: list[list[Any]] = []
    for fam in spec.families:
        for vis in spec.visibilities:
            grid = sorted(fam.eval_budgets)
            rows = []
            for agent in agents:
                s = surfaces.get((fam.name, vis, agent))
                if s is None:
                    continue
                cells = []
                for t in grid:
                    if t not in s.ts:
                        cells.append("-")
                        continue
                    j = s.ts.index(t)
                    cells.append(_ci(s.mean[0, j], s.low[0, j], s.high[0, j]))
                    csv_rows.append(
                        [fam.name, vis, agent, t, f"{s.mean[0, j]:.6f}", f"{s.low[0, j]:.6f}"]
                        + [f"{s.high[0, j]:.6f}", len(s.task_ids)]
                    )
                rows.append([agent, *cells])
            if rows:
                units = (
                    len(surfaces[(fam.name, vis, RANDOM)].task_ids)
                    if (
                        fam.name,
                        vis,
                        RANDOM,
                    )
                    in surfaces
                    else 0
                )
                md += [
                    f"**{fam.name}, budget {vis}** (tight T={fam.tight}, generous "
                    f"T={fam.generous}; {units} task x seed units, 95% bootstrap intervals):",
                    "",
                    *_md_table(["arm", *[f"T={t}" for t in grid]], rows),
                    "",
                ]
    tables.append(
        _write_csv(
            tables_dir / "pass1_vs_t.csv",
            ["family", "visibility", "arm", "T", "pass1", "low", "high", "units"],
            csv_rows,
        )
    )

    # ---- turns to success: is an arm faster where it wins?
    md += [
        "### Turns to success against T",
        "",
        "Mean turns of the episodes won within T (no fault), and how many were won: an arm "
        "trained at a tight T that wins in fewer turns has learned speed, not only success.",
        "",
    ]
    tts_rows: list[list[Any]] = []
    for fam in spec.families:
        for vis in spec.visibilities:
            grid = sorted(fam.eval_budgets)
            rows = []
            for agent in agents:
                cells = []
                for t in grid:
                    won = won_turns(records, fam.name, vis, agent, t, grid[-1])
                    if won is None:
                        cells.append("-")
                        continue
                    mean = float(np.mean(won)) if won else None
                    cells.append("-" if mean is None else f"{mean:.2f} ({len(won)})")
                    tts_rows.append(
                        [fam.name, vis, agent, t, "" if mean is None else f"{mean:.6f}", len(won)]
                    )
                if any(c != "-" for c in cells):
                    rows.append([agent, *cells])
            if rows:
                md += [
                    f"**{fam.name}, budget {vis}:**",
                    "",
                    *_md_table(["arm", *[f"T={t}" for t in grid]], rows),
                    "",
                ]
    tables.append(
        _write_csv(
            tables_dir / "turns_to_success.csv",
            ["family", "visibility", "arm", "T", "mean_turns", "won"],
            tts_rows,
        )
    )

    # ---- learning status
    learning = learning_status(spec, records, surfaces)
    rows = [
        [
            r.family,
            r.visibility,
            r.arm,
            r.budgets,
            f"{r.arm_pass:.3f}",
            f"{r.random_pass:.3f}",
            _ci(r.diff, r.low, r.high, sign=True),
            "learned" if r.learned else "**not learned**",
        ]
        for r in learning
    ]
    md += [
        "### Learning status: each arm against random on its own training budget",
        "",
        *_md_table(
            ["family", "budget", "arm", "T", "arm Pass@1", "random", "arm - random", "status"],
            rows,
        ),
        "",
    ]
    tables.append(
        _write_csv(
            tables_dir / "learning_status.csv",
            ["family", "visibility", "arm", "budgets", "arm_pass1", "random_pass1"]
            + ["diff", "low", "high", "units", "learned"],
            [
                [r.family, r.visibility, r.arm, r.budgets, f"{r.arm_pass:.6f}"]
                + [f"{r.random_pass:.6f}", f"{r.diff:.6f}", f"{r.low:.6f}", f"{r.high:.6f}"]
                + [r.units, r.learned]
                for r in learning
            ],
        )
    )

    # ---- differences against fixed generous
    from budget_envs.eval.report import compare_runs

    diffs: list[list[Any]] = []
    heat: dict[tuple[str, str], dict[str, list[tuple[int, float, float, float]]]] = {}
    if "fixed_generous" in spec.arms:
        md += ["### Difference against the fixed-generous arm (Pass@1, B - A)", ""]
        for fam in spec.families:
            for vis in spec.visibilities:
                mine = [
                    r
                    for r in records
                    if r["study_family"] == fam.name and r["study_visibility"] == vis
                ]
                grid = sorted(fam.eval_budgets)
                rows = []
                for arm in spec.arms:
                    if arm == "fixed_generous" or not mine:
                        continue
                    comps = compare_runs(
                        mine,
                        mine,
                        None,
                        agent_a="fixed_generous",
                        agent_b=arm,
                        n_boot=spec.n_boot,
                        seed=0,
                        figures=False,
                    )
                    if not comps:
                        continue
                    c = comps[0]
                    cells = []
                    for t in grid:
                        if t not in c.ts:
                            cells.append("-")
                            continue
                        j = c.ts.index(t)
                        d, lo, hi = float(c.diff[0, j]), float(c.low[0, j]), float(c.high[0, j])
                        cells.append(_ci(d, lo, hi, sign=True))
                        diffs.append(
                            [fam.name, vis, arm, t, f"{d:.6f}", f"{lo:.6f}", f"{hi:.6f}", c.tasks]
                        )
                        heat.setdefault((fam.name, vis), {}).setdefault(arm, []).append(
                            (t, d, lo, hi)
                        )
                    rows.append([f"{arm} - fixed_generous", *cells])
                if rows:
                    md += [
                        f"**{fam.name}, budget {vis}:**",
                        "",
                        *_md_table(["B - A", *[f"T={t}" for t in grid]], rows),
                        "",
                    ]
    tables.append(
        _write_csv(
            tables_dir / "difference_vs_generous.csv",
            ["family", "visibility", "arm", "T", "diff", "low", "high", "units"],
            diffs,
        )
    )

    # ---- single step vs recovery
    rec_rows: list[list[Any]] = []
    md_rows = []
    scatter: dict[tuple[str, str], list[tuple[str, float | None, float | None]]] = {}
    for fam in spec.families:
        for vis in spec.visibilities:
            for agent in agents:
                mine = [
                    r
                    for r in records
                    if r["study_family"] == fam.name
                    and r["study_visibility"] == vis
                    and r["agent"] == agent
                ]
                if not mine:
                    continue
                acc = single_step_accuracy(mine)
                top = max(fam.eval_budgets)  # faults run at the grid's largest T only
                rec = [row for row in recovery_table(mine, [top]) if row.budget == top]
                succ = float(np.mean([r.success for r in rec])) if rec else None
                base = rec[0].baseline_success if rec else None
                by_turn = "; ".join(f"t={r.fault_turn}: {r.success:.3f}" for r in rec) or "-"
                md_rows.append(
                    [
                        fam.name,
                        vis,
                        agent,
                        "-" if acc["prefix"] is None else f"{acc['prefix']:.3f}",
                        str(acc["prefix_states"]),
                        "-" if acc["on_policy"] is None else f"{acc['on_policy']:.3f}",
                        "-" if base is None else f"{base:.3f}",
                        "-" if succ is None else f"{succ:.3f}",
                        by_turn,
                    ]
                )
                rec_rows.append(
                    [fam.name, vis, agent, acc["prefix"], acc["prefix_states"], acc["on_policy"]]
                    + [base, succ]
                    + [by_turn]
                )
                scatter.setdefault((fam.name, vis), []).append((agent, acc["prefix"], succ))
    md += [
        "### Single-step accuracy against recovery",
        "",
        "Single step: share of oracle-prefix states where the agent picked an oracle action "
        "(budget-hidden runs only: the probes hide the budget), and the share of the agent's own "
        "turns that were oracle actions (on policy). "
        "Recovery: success within the grid's largest T (above generous) after one fault (slip "
        "or drop) at turn t, against no fault at the same T.",
        "",
        *_md_table(
            ["family", "budget", "agent", "single step", "states", "on policy", "no fault"]
            + ["after a fault"]
            + ["by fault turn"],
            md_rows,
        ),
        "",
    ]
    tables.append(
        _write_csv(
            tables_dir / "single_step_recovery.csv",
            ["family", "visibility", "agent", "single_step", "states", "on_policy", "no_fault"]
            + ["after_fault", "by_turn"],
            [[_num(v) for v in row] for row in rec_rows],
        )
    )

    # ---- figures
    figs: list[Path] = []
    img = Path(docs).parent / "img" / "study"
    if figures:
        figs = draw_figures(spec, surfaces, heat, scatter, img)
    if figs:
        md += ["### Figures", ""]
        for f in figs:
            md += [f"![{f.stem}]({os.path.relpath(f, Path(docs).parent)})", ""]
    text = "\n".join(md).rstrip() + "\n"
    (tables_dir / "study_results.md").write_text(text, encoding="utf-8")
    tables.append(tables_dir / "study_results.md")
    splice(Path(docs), text)
    return StudyReport(markdown=text, tables=tables, figures=figs, learning=learning)


def _num(v: Any) -> Any:
    return f"{v:.6f}" if isinstance(v, float) else ("" if v is None else v)


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
