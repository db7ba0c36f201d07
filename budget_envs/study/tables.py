"""The report's tables: each one a section of the study page and a CSV file of ``tables/``.

They format the numbers of :mod:`budget_envs.study.stats` and hold no times and no paths, so
the same records give the same bytes. Three are tables over T (a page table per family and
visibility, a column per T of the family's grid), built by one function.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs.study.spec import RANDOM, Family, StudySpec
from budget_envs.study.stats import Difference, LearningRow, StepRecovery, won_turns


@dataclass
class Table:
    """One table of the report: its lines on the page and its CSV file."""

    file: str
    header: list[str]
    rows: list[list[Any]]
    markdown: list[str]

    def write(self, folder: Path) -> Path:
        """Write the CSV file into ``folder`` (``\\n`` line ends on every platform)."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.header)
        w.writerows(self.rows)
        path = folder / self.file
        path.write_text(buf.getvalue(), encoding="utf-8")
        return path


def ci(mean: float, low: float, high: float, sign: bool = False) -> str:
    """``mean [low, high]`` with three decimals (signed for a difference)."""
    f = "{:+.3f}" if sign else "{:.3f}"
    return f"{f.format(mean)} [{f.format(low)}, {f.format(high)}]"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table's lines."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _f3(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _num(v: Any) -> Any:
    return f"{v:.6f}" if isinstance(v, float) else ("" if v is None else v)


# ---------------------------------------------------------------------- tables over T
#: A cell of a table over T: its text on the page and its CSV values after
#: (family, visibility, name, T).
Cell = tuple[str, list[Any]]


@dataclass
class Line:
    """A row of a table over T: its name in the CSV, its label on the page, its cells."""

    name: str
    label: str
    #: T -> cell; a T without one shows "-" and has no CSV row.
    cells: dict[int, Cell]


def over_budgets(
    spec: StudySpec,
    corner: str,
    lines: Callable[[Family, str, list[int]], Iterable[Line]],
    caption: Callable[[Family, str], str],
    *,
    keep_blank: bool = True,
) -> tuple[list[str], list[list[Any]]]:
    """The page tables (one per family and visibility with rows) and the CSV rows of a table
    over T. ``lines(family, visibility, grid)`` gives the rows; without ``keep_blank`` a row
    whose cells all show "-" is left off the page (its CSV rows stay)."""
    md: list[str] = []
    csv_rows: list[list[Any]] = []
    for fam in spec.families:
        for vis in spec.visibilities:
            grid = sorted(fam.eval_budgets)
            rows = []
            for line in lines(fam, vis, grid):
                cells = [line.cells.get(t) for t in grid]
                csv_rows += [[fam.name, vis, line.name, t, *c[1]] for t, c in zip(grid, cells) if c]
                texts = [c[0] if c else "-" for c in cells]
                if keep_blank or any(text != "-" for text in texts):
                    rows.append([line.label, *texts])
            if rows:
                header = [corner, *[f"T={t}" for t in grid]]
                md += [caption(fam, vis), "", *md_table(header, rows), ""]
    return md, csv_rows


def _family_caption(fam: Family, vis: str) -> str:
    return f"**{fam.name}, budget {vis}:**"


def pass1_table(spec: StudySpec, surfaces: Mapping[tuple, Any]) -> Table:
    """Pass@1 of every agent against T, with its bootstrap interval."""

    def lines(fam: Family, vis: str, grid: list[int]) -> Iterable[Line]:
        for agent in spec.agents:
            s = surfaces.get((fam.name, vis, agent))
            if s is None:
                continue
            cells = {}
            for t in grid:
                if t in s.ts:
                    j = s.ts.index(t)
                    mean, low, high = s.mean[0, j], s.low[0, j], s.high[0, j]
                    values = [f"{mean:.6f}", f"{low:.6f}", f"{high:.6f}", len(s.task_ids)]
                    cells[t] = (ci(mean, low, high), values)
            yield Line(agent, agent, cells)

    def caption(fam: Family, vis: str) -> str:
        base = surfaces.get((fam.name, vis, RANDOM))
        units = 0 if base is None else len(base.task_ids)
        return (
            f"**{fam.name}, budget {vis}** (tight T={fam.tight}, generous "
            f"T={fam.generous}; {units} task x seed units, 95% bootstrap intervals):"
        )

    md, rows = over_budgets(spec, "arm", lines, caption)
    return Table(
        "pass1_vs_t.csv",
        ["family", "visibility", "arm", "T", "pass1", "low", "high", "units"],
        rows,
        ["### Pass@1 against T", "", *md],
    )


def turns_table(spec: StudySpec, records: Sequence[dict[str, Any]]) -> Table:
    """Mean turns of the episodes won within T, and how many: is an arm faster where it wins?"""

    def lines(fam: Family, vis: str, grid: list[int]) -> Iterable[Line]:
        for agent in spec.agents:
            cells: dict[int, Cell] = {}
            for t in grid:
                won = won_turns(records, fam.name, vis, agent, t, grid[-1])
                if won is None:
                    continue
                if not won:
                    cells[t] = ("-", ["", 0])
                    continue
                mean = float(np.mean(won))
                cells[t] = (f"{mean:.2f} ({len(won)})", [f"{mean:.6f}", len(won)])
            yield Line(agent, agent, cells)

    md, rows = over_budgets(spec, "arm", lines, _family_caption, keep_blank=False)
    return Table(
        "turns_to_success.csv",
        ["family", "visibility", "arm", "T", "mean_turns", "won"],
        rows,
        [
            "### Turns to success against T",
            "",
            "Mean turns of the episodes won within T (no fault), and how many were won: an arm "
            "trained at a tight T that wins in fewer turns has learned speed, not only success.",
            "",
            *md,
        ],
    )


def difference_table(spec: StudySpec, diffs: Sequence[Difference]) -> Table:
    """Each arm's Pass@1 minus the fixed-generous arm's against T (empty without that arm)."""

    def lines(fam: Family, vis: str, grid: list[int]) -> Iterable[Line]:
        for d in diffs:
            if (d.family, d.visibility) == (fam.name, vis):
                cells = {
                    t: (ci(*cell, sign=True), [*(f"{v:.6f}" for v in cell), d.units])
                    for t, cell in d.cells.items()
                }
                yield Line(d.arm, f"{d.arm} - fixed_generous", cells)

    md, rows = over_budgets(spec, "B - A", lines, _family_caption)
    title = ["### Difference against the fixed-generous arm (Pass@1, B - A)", ""]
    return Table(
        "difference_vs_generous.csv",
        ["family", "visibility", "arm", "T", "diff", "low", "high", "units"],
        rows,
        [*title, *md] if "fixed_generous" in spec.arms else [],
    )


# ---------------------------------------------------------------------- one row per arm or agent
def learning_table(learning: Sequence[LearningRow]) -> Table:
    """Each arm against random on its own training budget."""
    page = [
        [r.family, r.visibility, r.arm, r.budgets, f"{r.arm_pass:.3f}", f"{r.random_pass:.3f}"]
        + [ci(r.diff, r.low, r.high, sign=True), "learned" if r.learned else "**not learned**"]
        for r in learning
    ]
    header = ["family", "budget", "arm", "T", "arm Pass@1", "random", "arm - random", "status"]
    return Table(
        "learning_status.csv",
        ["family", "visibility", "arm", "budgets", "arm_pass1", "random_pass1"]
        + ["diff", "low", "high", "units", "learned"],
        [
            [r.family, r.visibility, r.arm, r.budgets]
            + [f"{v:.6f}" for v in (r.arm_pass, r.random_pass, r.diff, r.low, r.high)]
            + [r.units, r.learned]
            for r in learning
        ],
        [
            "### Learning status: each arm against random on its own training budget",
            "",
            *md_table(header, page),
            "",
        ],
    )


def step_recovery_table(steps: Sequence[StepRecovery]) -> Table:
    """Single-step accuracy beside success after one fault, per agent."""
    rows = []
    page = []
    for s in steps:
        by_turn = "; ".join(f"t={turn}: {success:.3f}" for turn, success in s.by_turn) or "-"
        head = [s.family, s.visibility, s.agent]
        rates = [s.single_step, s.states, s.on_policy, s.no_fault, s.after_fault]
        rows.append([_num(v) for v in [*head, *rates, by_turn]])
        page.append([*head, _f3(s.single_step), str(s.states), _f3(s.on_policy)])
        page[-1] += [_f3(s.no_fault), _f3(s.after_fault), by_turn]
    header = ["family", "budget", "agent", "single step", "states", "on policy", "no fault"]
    return Table(
        "single_step_recovery.csv",
        ["family", "visibility", "agent", "single_step", "states", "on_policy", "no_fault"]
        + ["after_fault", "by_turn"],
        rows,
        [
            "### Single-step accuracy against recovery",
            "",
            "Single step: share of oracle-prefix states where the agent picked an oracle action "
            "(budget-hidden runs only: the probes hide the budget), and the share of the agent's "
            "own turns that were oracle actions (on policy). "
            "Recovery: success within the grid's largest T (above generous) after one fault "
            "(slip or drop) at turn t, against no fault at the same T.",
            "",
            *md_table([*header, "after a fault", "by fault turn"], page),
            "",
        ],
    )
