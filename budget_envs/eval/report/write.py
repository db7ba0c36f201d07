"""A run's report: ``report.md`` with its CSV tables and PNG figures (:func:`write_report`)."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs.eval.metrics import recovery_table, single_step_accuracy
from budget_envs.eval.outdir import ensure_dir, folder_errors
from budget_envs.eval.report.budget import (
    DEFAULT_KEEP,
    budget_answers,
    budget_curve_rows,
    budget_figure,
    budget_markdown,
    check_keep,
)
from budget_envs.eval.report.figures import surface_figures
from budget_envs.eval.report.surfaces import GroupSurface, group_surfaces, groups, label
from budget_envs.eval.report.tables import (
    fmt,
    grid_cells,
    prefix_markdown,
    recovery_by_cell_markdown,
    write_dicts,
)

__all__ = ["ReportResult", "write_report"]


@dataclass
class ReportResult:
    """Files a report wrote."""

    out_dir: Path
    markdown: Path
    tables: list[Path]
    figures: list[Path]
    text: str


def write_report(
    records: Sequence[dict[str, Any]],
    out_dir: str | os.PathLike[str],
    *,
    title: str = "BudgetMix evaluation",
    n_boot: int = 1000,
    seed: int = 0,
    figures: bool = True,
    keep: float = DEFAULT_KEEP,
) -> ReportResult:
    """Write ``report.md``, CSV tables and PNG figures for ``records`` into ``out_dir``.

    ``keep``: the share of Pass@1 at T_max whose smallest T the "What a turn buys" section
    gives (:mod:`~budget_envs.eval.report.budget`; ``budget_curve.csv``).

    A folder that cannot take them (read-only, not a directory, a full disk) raises
    :class:`~budget_envs.errors.OutDirError`, one line naming it.
    """
    keep = check_keep(keep)
    out = ensure_dir(out_dir, "write the report to")
    with folder_errors("write the report to", out):
        return _write_report(
            records, out, title=title, n_boot=n_boot, seed=seed, figures=figures, keep=keep
        )


def _write_report(
    records: Sequence[dict[str, Any]],
    out: Path,
    *,
    title: str,
    n_boot: int,
    seed: int,
    figures: bool,
    keep: float,
) -> ReportResult:
    """:func:`write_report` into a folder that exists: every section, table and figure."""
    surfaces = group_surfaces(records, n_boot=n_boot, seed=seed)
    tables: list[Path] = [_surface_csv(surfaces, out)]
    figs: list[Path] = []
    errors = [r for r in records if r.get("error")]
    md: list[str] = [f"# {title}", ""]
    md += _summary_section(records, surfaces, errors, out, tables)
    md += _by_budget_section(surfaces)

    # ---- what a turn buys
    answers = budget_answers(surfaces, records, keep=keep, n_boot=n_boot, seed=seed)
    if answers:
        md += budget_markdown(answers, keep)
        tables.append(write_dicts(out / "budget_curve.csv", budget_curve_rows(answers)))

    acc_md, acc_rows = _single_step_section(records, out, tables)
    rec_md, rec_rows = _recovery_section(records, out, tables)
    md += acc_md + rec_md

    cell_md, cell_rows = recovery_by_cell_markdown(records)
    if cell_rows:
        md += cell_md
        tables.append(write_dicts(out / "recovery_by_cell.csv", cell_rows))
    prefix_md, prefix_rows = prefix_markdown(records)
    if prefix_rows:
        md += prefix_md
        tables.append(write_dicts(out / "prefix_recovery.csv", prefix_rows))
    md += _errors_section(errors)

    if figures and surfaces:
        figs += surface_figures(surfaces, acc_rows, rec_rows, out)
        curve = budget_figure(answers, out, "budget_curve")
        figs += [curve] if curve is not None else []
        md += ["## Figures", ""] + [f"![{p.stem}]({p.name})" for p in figs] + [""]

    text = "\n".join(md)
    md_path = out / "report.md"
    md_path.write_text(text, encoding="utf-8")
    return ReportResult(out_dir=out, markdown=md_path, tables=tables, figures=figs, text=text)


def _surface_csv(surfaces: list[GroupSurface], out: Path) -> Path:
    """The Pass@(K,T) surfaces as one long CSV, ``pass_at_kt.csv``."""
    path = out / "pass_at_kt.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["env_id", "agent", "visibility", "K", "T", "pass", "low", "high", "tasks"])
        for s in surfaces:
            for k, t, mean, low, high, _ in grid_cells(s.ks, s.ts, s.mean, s.low, s.high):
                w.writerow(
                    [s.env_id, s.agent, s.visibility, k, t, mean, low, high, len(s.task_ids)]
                )
    return path


def _summary_section(
    records: Sequence[dict[str, Any]],
    surfaces: list[GroupSurface],
    errors: list[dict[str, Any]],
    out: Path,
    tables: list[Path],
) -> list[str]:
    """The record counts and the Pass@(K,T) summary table (``summary.csv`` joins ``tables``)."""
    episodes = [r for r in records if r.get("record", "episode") == "episode"]
    md = [
        f"{len(episodes)} episodes, {sum(1 for r in records if r.get('record') == 'probe')} "
        f"single-step probes, {sum(1 for r in records if r.get('record') == 'prefix')} prefix "
        f"probes, {len(errors)} errors.",
        "",
        "Every episode, turn by turn: `budgetmix view RUN` writes the trajectory viewer, "
        "[RUN/view/index.html](../view/index.html).",
        "",
        "## Pass@(K,T)",
        "",
        "95% bootstrap intervals over tasks. Budget-hidden runs derive every T from one run at "
        "T_max; budget-visible runs show only the T they ran.",
        "",
        "| env | agent | tasks | n | T_max | Pass@(1,T_max) | Pass@(n,T_max) | T for half of Pass@1 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary_rows = []
    for s in surfaces:
        top1 = s.mean[0, -1]
        half = None
        if top1 > 0 and s.visibility == "hidden":
            reach = np.flatnonzero(s.mean[0] >= top1 / 2)
            half = s.ts[int(reach[0])] if reach.size else None
        row = {
            "env_id": s.env_id,
            "agent": s.label,
            "tasks": len(s.task_ids),
            "n": s.ks[-1],
            "T_max": s.ts[-1],
            "pass1": top1,
            "pass1_low": s.low[0, -1],
            "pass1_high": s.high[0, -1],
            "passn": s.mean[-1, -1],
            "half_T": half,
        }
        summary_rows.append(row)
        md.append(
            f"| {s.env_id} | {s.label} | {len(s.task_ids)} | {s.ks[-1]} | {s.ts[-1]} | "
            f"{top1:.3f} [{s.low[0, -1]:.3f}, {s.high[0, -1]:.3f}] | {s.mean[-1, -1]:.3f} | "
            f"{'-' if half is None else half} |"
        )
        for note in s.notes:
            md.append(f"|  | note: {note} | | | | | | |")
    tables.append(write_dicts(out / "summary.csv", summary_rows))
    return md


def _by_budget_section(surfaces: list[GroupSurface]) -> list[str]:
    """Pass@(1,T) of every agent at a few budgets, one table per env."""
    md = ["", "### Pass@(1,T) by budget", ""]
    for env_id in sorted({s.env_id for s in surfaces}):
        group = [s for s in surfaces if s.env_id == env_id]
        ts = sorted(set().union(*[set(s.ts) for s in group]))
        shown = sorted({ts[int(round(i))] for i in np.linspace(0, len(ts) - 1, min(len(ts), 6))})
        md += [
            f"**{env_id}**",
            "",
            "| agent | " + " | ".join(f"T={t}" for t in shown) + " |",
            "|---|" + "---|" * len(shown),
        ]
        for s in group:
            cells = [f"{s.mean[0, s.ts.index(t)]:.2f}" if t in s.ts else "n/a" for t in shown]
            md.append(f"| {s.label} | " + " | ".join(cells) + " |")
        md.append("")
    return md


def _single_step_section(
    records: Sequence[dict[str, Any]], out: Path, tables: list[Path]
) -> tuple[list[str], list[dict[str, Any]]]:
    """The single-step accuracy section and its rows (``single_step.csv`` joins ``tables``)."""
    acc_rows = []
    for (env_id, agent, vis), recs in sorted(groups(records, kind=None).items()):
        acc = single_step_accuracy(recs)
        if acc["on_policy"] is None and acc["prefix"] is None and acc["offpath"] is None:
            continue
        acc_rows.append({"env_id": env_id, "agent": label(agent, vis), "visibility": vis, **acc})
    if not acc_rows:
        return [], acc_rows
    md = [
        "## Single-step accuracy",
        "",
        "Share of turns whose action is an oracle action: on the agent's own trajectories "
        "(on-policy), from oracle-prefix states (the oracle plays t turns, the agent "
        "picks one action; progress = the action lowered the oracle cost-to-go) and off the "
        "oracle's path (the same after one more oracle action that a slip replaced).",
        "",
        "| env | agent | on-policy | turns | oracle-prefix | states | prefix progress "
        "| off path | states |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in acc_rows:
        md.append(
            f"| {r['env_id']} | {r['agent']} | {fmt(r['on_policy'])} | {r['on_policy_turns']} | "
            f"{fmt(r['prefix'])} | {r['prefix_states']} | {fmt(r['prefix_progress'])} | "
            f"{fmt(r['offpath'])} | {r['offpath_states']} |"
        )
    tables.append(write_dicts(out / "single_step.csv", acc_rows))
    md.append("")
    return md, acc_rows


def _recovery_section(
    records: Sequence[dict[str, Any]], out: Path, tables: list[Path]
) -> tuple[list[str], list[dict[str, Any]]]:
    """The recovery section and its rows (``recovery.csv`` joins ``tables``)."""
    rec_rows = []
    for (env_id, agent, vis), recs in sorted(groups(records).items()):
        fault_budgets = [int(r["budget"]) for r in recs if r.get("fault_turn") is not None]
        if not fault_budgets:
            continue
        t_max = max(fault_budgets)
        # Hidden runs give recovery at tighter budgets too, where it is not saturated.
        budgets = (
            sorted({max(1, t_max // 4), max(1, t_max // 2), t_max}) if vis == "hidden" else [t_max]
        )
        for row in recovery_table(recs, budgets=budgets):
            rec_rows.append(
                {"env_id": env_id, "agent": label(agent, vis), "visibility": vis, **asdict(row)}
            )
    if not rec_rows:
        return [], rec_rows
    md = [
        "## Recovery",
        "",
        "Success within the budget after one fault at turn t, against no fault at the same "
        "T; damage = oracle cost-to-go the fault added; extra turns = first-success turn "
        "with the fault minus without it (tasks solved both ways).",
        "",
        "| env | agent | fault turn | T | episodes | fired | success | no-fault success | damage | extra turns | unrecoverable |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rec_rows:
        md.append(
            f"| {r['env_id']} | {r['agent']} | {r['fault_turn']} | {r['budget']} | {r['episodes']} | "
            f"{r['fired']:.2f} | {r['success']:.3f} | {fmt(r['baseline_success'])} | "
            f"{fmt(r['damage'], 2)} | {fmt(r['extra_turns'], 2)} | {r['unrecoverable']} |"
        )
    tables.append(write_dicts(out / "recovery.csv", rec_rows))
    md.append("")
    return md, rec_rows


def _errors_section(errors: list[dict[str, Any]]) -> list[str]:
    """The first 20 records that ended in an error, one line each (nothing without errors)."""
    if not errors:
        return []
    md = [
        "## Errors",
        "",
        "Episodes that ended in an agent or endpoint error (not counted as failures):",
        "",
    ]
    for r in errors[:20]:
        md.append(
            f"- {r['env_id']} {r['agent']} {r['task_id']} sample {r.get('sample', '-')}: {r['error'][:200]}"
        )
    md.append("")
    return md
