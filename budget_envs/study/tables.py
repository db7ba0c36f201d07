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

from budget_envs.study.contrasts import (
    ALPHA,
    BASE_MARGIN,
    BINDS_AT,
    CONTRASTS,
    REASONS,
    Analysis,
    Binding,
    ContrastResult,
    PairDiff,
)
from budget_envs.study.spec import BASE, RANDOM, RL, Family, StudySpec
from budget_envs.study.stats import Difference, StepRecovery, won_turns


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
            f"T={fam.generous}; {units} task x seed units, 95% crossed-bootstrap intervals):"
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
            "trained at a tight T that wins in fewer turns is faster, not only more successful.",
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
    title = [
        "### Difference against the fixed-generous arm (Pass@1, B - A)",
        "",
        "Paired over the task x seed units both arms played, 95% crossed-bootstrap intervals.",
        "",
    ]
    return Table(
        "difference_vs_generous.csv",
        ["family", "visibility", "arm", "T", "diff", "low", "high", "units"],
        rows,
        [*title, *md] if "fixed_generous" in spec.arms else [],
    )


# ---------------------------------------------------------------------- one row per arm or agent
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


# ---------------------------------------------------------------------- the pre-registered tests
def _pct(level: float) -> str:
    """A level as a percentage without trailing zeros: 98.75%, 98.33%, 97.5%, 95%."""
    return f"{100 * level:.2f}".rstrip("0").rstrip(".") + "%"


def _signed(v: float | None) -> str:
    return "-" if v is None else f"{v:+.3f}"


def _interval(estimate: float | None, low: float | None, high: float | None) -> str:
    if estimate is None or low is None or high is None:
        return "-"
    return ci(estimate, low, high, sign=True)


def _share(v: float | None) -> str:
    return "no records" if v is None else f"{100 * v:.0f}%"


def binding_sentence(b: Binding) -> str:
    """Whether a family is claimed, in words: the budget binds, the base meets its margin."""
    shares = ", ".join(f"{agent} {_share(v)}" for agent, v in b.shares.items())
    if b.binds is None:
        return (
            f"Claims, {b.family}: unknown (no no-fault episodes of "
            f"{' or '.join(b.shares)}): its contrasts are left out of the claims."
        )
    bind = (
        f"at the tight T={b.t}, the no-fault episodes that end by budget: {shares} "
        f"(threshold {_pct(BINDS_AT)}): the budget {'binds' if b.binds else 'never binds'}"
    )
    if b.margin is None:
        margin = "the base's margin over random is unknown (no records of one of them)"
    else:
        margin = (
            f"the base's margin over random at the generous T is {b.margin:+.3f} (the design "
            f"wants at least +{BASE_MARGIN:.2f}): {'met' if b.margin_met else 'not met'}"
        )
    end = "its contrasts are claims" if b.claimed else "its contrasts are left out of the claims"
    return f"Claims, {b.family}: {bind}; {margin}; so {end}."


def unclaimed_reason(b: Binding | None) -> str:
    """Why a family's contrasts are not claims."""
    if b is None or b.binds is None:
        return "no records to tell whether the budget binds"
    if not b.binds:
        return f"the budget does not bind in {b.family}"
    return f"the base misses its margin over random in {b.family}"


def contrast_sentence(r: ContrastResult, binding: Binding | None = None) -> str:
    """One contrast's result in words, built from its row of the contrast table."""
    head = f"{r.name} ({r.text}), {r.family}"
    if r.verdict == "not run" or r.level is None:
        return f"{head}: not run ({r.note})."
    interval = f"{_interval(r.estimate, r.low, r.high)} (Holm-adjusted {_pct(r.level)} interval)"
    if not r.claimed:
        return (
            f"{head}: not a claim ({unclaimed_reason(binding)}); "
            f"measured {interval}, {r.verdict} by the test."
        )
    return f"{head}: {r.verdict}: {interval}."


def contrast_table(analysis: Analysis, folder: str = "study") -> Table:
    """The four pre-registered contrasts per family: estimate, Holm interval, adjusted p,
    verdict; then one sentence per contrast and the budget-binding check."""
    definitions = [f"* **{c.name}** ({c.text}): {c.how}, predicted > 0." for c in CONTRASTS]
    header = ["contrast", "estimate [Holm interval]", "level", "p", "Holm p", "seeds", "verdict"]
    md: list[str] = []
    rows: list[list[Any]] = []
    bindings = {b.family: b for b in analysis.bindings}
    for family in dict.fromkeys(r.family for r in analysis.contrasts):
        mine = [r for r in analysis.contrasts if r.family == family]
        page = []
        for r in mine:
            ran = r.verdict != "not run"
            page.append(
                [
                    r.name,
                    _interval(r.estimate, r.low, r.high),
                    _pct(r.level) if r.level is not None else "-",
                    f"{r.p:.4f}" if r.p is not None else "-",
                    f"{r.p_holm:.4f}" if r.p_holm is not None else "-",
                    str(r.seeds) if ran else "-",
                    r.verdict if ran else f"not run ({r.note})",
                ]
            )
            rows.append(
                [r.family, r.name, r.verdict]
                + [_num(v) for v in (r.estimate, r.low, r.high, r.level, r.p, r.p_holm)]
                + [_num(r.rank), r.tests, r.units, r.seeds, r.claimed, r.note]
            )
        tested = mine[0].tests if mine else 0
        units = max((r.units for r in mine), default=0)
        seeds = max((r.seeds for r in mine), default=0)
        md += [
            f"**{family}** (Holm over the {tested} "
            f"{'claimed contrasts of the study' if mine and mine[0].claimed else 'contrast(s) run here'}; "
            f"{units} task x seed units over {seeds} seed(s)):",
            "",
            *md_table(header, page),
            "",
        ]
        if family in bindings:
            md += [binding_sentence(bindings[family]), ""]
        md += [f"* {contrast_sentence(r, bindings.get(family))}" for r in mine] + [""]
    return Table(
        "contrasts.csv",
        ["family", "contrast", "verdict", "estimate", "low", "high", "level", "p", "p_holm"]
        + ["rank", "tests", "units", "seeds", "claimed", "note"],
        rows,
        [
            "### Pre-registered contrasts",
            "",
            f"As {folder}/PREREGISTRATION.md states them (its deviations: {folder}/DEVIATIONS.md); RL "
            "is the fixed_generous arm, base the imitation checkpoint every arm starts from; "
            "budget hidden unless the row says visible, Pass@1 within T (budget hidden: from "
            "the run at the grid's largest T; visible: from the run at T):",
            "",
            *definitions,
            "",
            "Relative recovery: success within the grid's largest T after one fault, over the "
            "fault episodes whose fault fired and whose no-fault twin (same task, seed and "
            "sample) was won. Consistency: over the same episodes, the share of the unit's "
            "other no-fault samples won (how often a task the agent has won is won again "
            "without a fault). Net recovery: relative recovery minus consistency, episode by "
            "episode, a difference in probability. Single-step accuracy: share of "
            "oracle-prefix probe states where the agent picked an oracle action. "
            "Intervals: crossed paired bootstrap (the training seeds and, independently, the "
            "evaluation tasks drawn with replacement, a task drawn once counting under every "
            "drawn seed; the same draws for every arm), percentile interval at the Holm level "
            f"of the contrast's rank (1 - {ALPHA}/(m - rank + 1)); p: two-sided bootstrap "
            "p-value. Holm runs over every claimed contrast of the study together (a family "
            "not claimed: over its own). "
            f"Supported: Holm rejects at study-wise {ALPHA} and the interval lies "
            "above 0; contradicted: below 0; otherwise inconclusive. A family where the budget "
            f"never binds (fewer than {_pct(BINDS_AT)} of the base's and RL's no-fault episodes "
            "end by budget at the tight T) or whose base is less than "
            f"{BASE_MARGIN:.2f} above random in Pass@1 at the generous T is reported but not "
            "claimed.",
            "",
            *md,
        ],
    )


def _pair_rows(diffs: Sequence[PairDiff]) -> tuple[list[list[Any]], list[list[str]]]:
    rows, page = [], []
    for d in diffs:
        at = f"{d.budget} T={d.t}" if d.t is not None else "-"
        rows.append(
            [d.family, d.kind, d.a, d.b, d.metric, d.budget or "", _num(d.t)]
            + [_num(v) for v in (d.estimate, d.low, d.high, d.level, d.p)]
            + [d.units, d.seeds, d.note]
        )
        shown = _interval(d.estimate, d.low, d.high) if not d.note else f"not run ({d.note})"
        page.append([d.family, f"{d.a} - {d.b}", at, shown, str(d.units), str(d.seeds)])
    return rows, page


_PAIR_CSV = ["family", "kind", "a", "b", "metric", "budget", "T", "diff", "low", "high", "level"]
_PAIR_CSV += ["p", "units", "seeds", "note"]
_PAIR_PAGE = ["family", "difference", "at", "Pass@1 diff [95% interval]", "units", "seeds"]


def headline_table(analysis: Analysis) -> Table:
    """The headline test: fixed_generous - base, Pass@1, at the generous and the largest T."""
    rows, page = _pair_rows(analysis.headline)
    sentences = []
    for family in dict.fromkeys(d.family for d in analysis.headline):
        mine = [d for d in analysis.headline if d.family == family]
        done = [d for d in mine if not d.note]
        if not done:
            sentences.append(f"* Headline, {family}: not run ({mine[0].note}).")
            continue
        cells = " and ".join(
            f"{_interval(d.estimate, d.low, d.high)} at T={d.t} ({d.budget})" for d in done
        )
        sentences.append(
            f"* Headline, {family}: {done[0].a} - {done[0].b}, Pass@1 (budget hidden): {cells} "
            f"(95% crossed-bootstrap intervals, {done[0].units} task x seed units over "
            f"{done[0].seeds} seed(s))."
        )
    return Table(
        "headline.csv",
        _PAIR_CSV,
        rows,
        [
            f"### Headline: {RL} - {BASE} (Pass@1, budget hidden)",
            "",
            *md_table(_PAIR_PAGE, page),
            "",
            *sentences,
            "",
        ],
    )


def secondary_table(analysis: Analysis) -> Table:
    """The secondary differences (no correction) and the base's level against random and the
    references."""
    rows, page = _pair_rows(analysis.secondary)
    sentences = []
    for d in analysis.secondary:
        if (d.a, d.b) != (BASE, RANDOM) or d.estimate is None:
            continue
        met = "met" if d.estimate >= BASE_MARGIN else "not met"
        sentences.append(
            f"* Base level, {d.family}: {BASE} - {RANDOM} at the generous T={d.t} is "
            f"{_interval(d.estimate, d.low, d.high)}; the design wants at least "
            f"+{BASE_MARGIN:.2f}: {met}."
        )
    return Table(
        "secondary.csv",
        _PAIR_CSV,
        rows,
        [
            "### Secondary differences (Pass@1, budget hidden; no correction)",
            "",
            "Secondary: not pre-registered tests, no multiplicity correction, 95% crossed-bootstrap "
            "paired intervals. The base's level: the design wants it at least "
            f"{BASE_MARGIN:.2f} above random and well below the oracle.",
            "",
            *md_table(_PAIR_PAGE, page),
            "",
            *sentences,
            *([""] if sentences else []),
        ],
    )


_METRIC_NAMES = {
    "pass1": "Pass@1",
    "single_step": "single step",
    "offpath": "single step off path",
    "recovery": "relative recovery",
    "consistency": "consistency",
    "net_recovery": "net recovery",
}


def levels_table(spec: StudySpec, analysis: Analysis) -> Table:
    """Each agent's Pass@1 at the tight, generous and largest T, single-step accuracy and
    relative recovery (the terms of the contrasts), with 95% crossed-bootstrap intervals."""
    rows, md = [], []
    for fam in spec.families:
        mine = [lv for lv in analysis.levels if lv.family == fam.name]
        kinds = list(dict.fromkeys((lv.metric, lv.budget, lv.t) for lv in mine))
        header = ["agent"] + [
            f"{_METRIC_NAMES[m]}" + (f" ({b} T={t})" if t is not None else "") for m, b, t in kinds
        ]
        page = []
        for agent in dict.fromkeys(lv.agent for lv in mine):
            cells = {(lv.metric, lv.budget, lv.t): lv for lv in mine if lv.agent == agent}
            if all(lv.value is None for lv in cells.values()):
                continue
            texts = []
            for key in kinds:
                lv = cells[key]
                texts.append("-" if lv.value is None else ci(lv.value, lv.low, lv.high))
                rows.append(
                    [fam.name, agent, lv.metric, lv.budget or "", _num(lv.t)]
                    + [_num(v) for v in (lv.value, lv.low, lv.high)]
                    + [lv.units, lv.note]
                )
            page.append([agent, *texts])
        if page:
            md += [f"**{fam.name}, budget hidden:**", "", *md_table(header, page), ""]
    return Table(
        "levels.csv",
        ["family", "agent", "metric", "budget", "T", "value", "low", "high", "units", "note"],
        rows,
        [
            "### The contrasts' terms per agent",
            "",
            "Pass@1 at the family's tight, generous and largest T, single-step accuracy, "
            "relative recovery, its consistency baseline and net recovery, each with a 95% "
            "crossed bootstrap interval.",
            "",
            *md,
        ],
    )


def _hidden_only(
    lines: Callable[[Family, list[int]], Iterable[Line]],
) -> Callable[[Family, str, list[int]], Iterable[Line]]:
    def only(fam: Family, vis: str, grid: list[int]) -> Iterable[Line]:
        return lines(fam, grid) if vis == "hidden" else []

    return only


def stop_table(spec: StudySpec, analysis: Analysis) -> Table:
    """The stop-reason mix of each agent against T (budget hidden)."""
    reasons = list(dict.fromkeys([*REASONS, *(n for s in analysis.stops for n in s.shares)]))

    def lines(fam: Family, grid: list[int]) -> Iterable[Line]:
        for agent in spec.agents:
            cells: dict[int, Cell] = {}
            for s in analysis.stops:
                if (s.family, s.agent) == (fam.name, agent):
                    shares = [s.shares.get(n, 0.0) for n in reasons]
                    text = "/".join(f"{v:.2f}" for v in shares[: len(REASONS)])
                    extra = [
                        f"{n} {s.shares[n]:.2f}" for n in reasons[len(REASONS) :] if s.shares.get(n)
                    ]
                    text += "".join(f" ({e})" for e in extra)
                    cells[s.t] = (text, [s.episodes, *(f"{v:.6f}" for v in shares)])
            yield Line(agent, agent, cells)

    md, rows = over_budgets(spec, "agent", _hidden_only(lines), _family_caption, keep_blank=False)
    return Table(
        "stop_reasons.csv",
        ["family", "visibility", "agent", "T", "episodes", *reasons],
        rows,
        [
            "### How episodes end against T",
            "",
            f"Share of no-fault episodes that end {'/'.join(REASONS)} at each T (budget hidden: "
            "the run at the grid's largest T, cut at T: an episode not won by T and still "
            "running after turn T ends by budget; one that ended earlier keeps its own reason).",
            "",
            *md,
        ],
    )


def pass_k_table(spec: StudySpec, analysis: Analysis) -> Table:
    """Pass@(K,T) of each agent against T, K the family's samples per task (budget hidden)."""

    def lines(fam: Family, grid: list[int]) -> Iterable[Line]:
        for agent in spec.agents:
            cells: dict[int, Cell] = {}
            for p in analysis.pass_k:
                if (p.family, p.agent) == (fam.name, agent):
                    values = [p.k, *(f"{v:.6f}" for v in (p.value, p.low, p.high)), p.units]
                    cells[p.t] = (ci(p.value, p.low, p.high), values)
            yield Line(agent, agent, cells)

    def caption(fam: Family, vis: str) -> str:
        return f"**{fam.name}, budget hidden** (K={fam.eval_samples}):"

    md, rows = over_budgets(spec, "agent", _hidden_only(lines), caption, keep_blank=False)
    return Table(
        "pass_k_vs_t.csv",
        ["family", "visibility", "agent", "T", "k", "pass_k", "low", "high", "units"],
        rows,
        [
            "### Pass@(K,T) against T",
            "",
            "The unbiased Pass@(K,T) over each task's samples (K = the samples per task), "
            "averaged over task x seed units, with 95% crossed bootstrap intervals.",
            "",
            *md,
        ],
    )


def curve_table(analysis: Analysis) -> Table:
    """Pass@1 at the generous T of the learning curve's checkpoints."""
    rows, page = [], []
    for c in analysis.curve:
        rows.append(
            [c.family, c.seed, c.agent, c.steps, c.t]
            + [_num(v) for v in (c.value, c.low, c.high)]
            + [c.units]
        )
        shown = "not run" if c.value is None else ci(c.value, c.low, c.high)
        page.append([c.agent, str(c.steps), shown, str(c.units)])
    md: list[str] = []
    for family, seed in dict.fromkeys((c.family, c.seed) for c in analysis.curve):
        mine = [
            (c, row) for c, row in zip(analysis.curve, page) if (c.family, c.seed) == (family, seed)
        ]
        c = mine[0][0]
        md += [
            f"**{c.family}, seed {c.seed}, budget hidden** (Pass@1 at the generous T={c.t}, "
            "95% bootstrap intervals over tasks):",
            "",
            *md_table(["checkpoint", "env steps", "Pass@1", "tasks"], [row for _, row in mine]),
            "",
        ]
    return Table(
        "learning_curve.csv",
        ["family", "seed", "agent", "steps", "T", "pass1", "low", "high", "units"],
        rows,
        ["### Learning curve", "", *md] if md else [],
    )
