"""The study's plain answers, the best-fixed-arm rows and the power note: the report's
sections that read the contrasts as a whole (:func:`budget_envs.study.contrasts.analyse`).

Every sentence that states a number is written here from the analysis, so the page holds no
number the records do not give.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from budget_envs.study.contrasts import ALPHA, CONTRASTS, POWER
from budget_envs.study.folder import base_record, record_folder
from budget_envs.study.results import Analysis, Binding, ContrastResult
from budget_envs.study.tables import (
    Table,
    _interval,
    _num,
    _pct,
    md_table,
    unclaimed_reason,
)

#: The study's questions (study/PREREGISTRATION.md), by number; 0 is the imitation control.
QUESTIONS = {
    1: "Does RL's advantage over the policy it starts from hold only at a generous T?",
    2: "Is RL's advantage recovery after errors (net of consistency) rather than better "
    "single steps?",
    3: "Does BudgetMix training keep the gain across T better than the best fixed T?",
    0: "Does RL buy more than as many env steps of more imitation would?",
}


def _answer(rows: list[ContrastResult]) -> str:
    """One word for a question from its claimed contrasts' verdicts."""
    verdicts = {r.verdict for r in rows}
    if "supported" in verdicts and "contradicted" in verdicts:
        return "mixed"
    if "supported" in verdicts:
        return "yes, in part" if verdicts - {"supported"} else "yes"
    if "contradicted" in verdicts:
        return "no, in part" if verdicts - {"contradicted"} else "no"
    return "not answered"


def _vis(r: ContrastResult) -> str:
    return "budget visible" if r.visibility != "hidden" else "budget hidden"


def answer_sentence(q: int, analysis: Analysis) -> str:
    """Question ``q`` answered from the claimed contrasts that ran, with each one's verdict,
    Holm interval and family, and the families out of the claims and why."""
    bindings: dict[str, Binding] = {b.family: b for b in analysis.bindings}
    mine = [r for r in analysis.contrasts if r.question == q]
    claimed = [r for r in mine if r.claimed and r.verdict != "not run"]
    out = sorted({r.family for r in mine if not r.claimed})
    left = "; ".join(f"{f} ({unclaimed_reason(bindings.get(f))})" for f in out)
    left = f" Not claimed: {left}." if left else ""
    label = f"Question {q}" if q else "Imitation control"
    if not claimed:
        missing = sorted({r.note for r in mine if r.claimed and r.verdict == "not run"})
        why = f" (not run: {'; '.join(missing)})" if missing else ""
        return f"**{label}: {QUESTIONS[q]}** Not answered: no claimed contrast ran{why}.{left}"
    parts = [
        f"{r.name} in {r.family} ({_vis(r)}) {r.verdict}, "
        f"{_interval(r.estimate, r.low, r.high)} at {_pct(r.level or 0.0)}"
        for r in claimed
    ]
    families = ", ".join(sorted({r.family for r in claimed}))
    return (
        f"**{label}: {QUESTIONS[q]}** {_answer(claimed).capitalize()}: "
        f"{'; '.join(parts)} (Holm-adjusted intervals; covers {families}).{left}"
    )


def answer_table(analysis: Analysis) -> Table:
    """The page's opening: one generated sentence per question, then the imitation control."""
    rows: list[list[Any]] = []
    lines = []
    for q in (1, 2, 3, 0):
        mine = [r for r in analysis.contrasts if r.question == q and r.claimed]
        ran = [r for r in mine if r.verdict != "not run"]
        rows.append([q, _answer(ran) if ran else "not answered", len(ran), len(mine)])
        lines += [f"* {answer_sentence(q, analysis)}"]
    return Table(
        "answers.csv",
        ["question", "answer", "claimed_contrasts_run", "claimed_contrasts"],
        rows,
        [
            "### The questions, answered",
            "",
            "From the claimed contrasts below (a family is claimed when its budget binds and "
            'its base meets its margin over random); "yes" when a claimed contrast is '
            'supported and none contradicted, "in part" when others are inconclusive.',
            "",
            *lines,
            "",
        ],
    )


def best_fixed_table(analysis: Analysis) -> Table:
    """``mix`` minus the better fixed arm at every T (secondary)."""
    rows: list[list[Any]] = []
    md: list[str] = []
    keys = list(dict.fromkeys((b.family, b.visibility) for b in analysis.best_fixed))
    for family, vis in keys:
        page = []
        for b in analysis.best_fixed:
            if (b.family, b.visibility) != (family, vis):
                continue
            rows.append(
                [b.family, b.visibility, b.t, b.better or ""]
                + [_num(v) for v in (b.estimate, b.low, b.high)]
                + [b.units, b.note]
            )
            shown = _interval(b.estimate, b.low, b.high) if not b.note else f"not run ({b.note})"
            page.append([f"T={b.t}", b.better or "-", shown, str(b.units)])
        header = ["T", "better fixed arm", "mix - better [95% interval]", "units"]
        md += [f"**{family}, budget {vis}:**", "", *md_table(header, page), ""]
    return Table(
        "mix_vs_best_fixed.csv",
        ["family", "visibility", "T", "better", "diff", "low", "high", "units", "note"],
        rows,
        [
            "### BudgetMix against the better fixed arm at each T (secondary)",
            "",
            "mix - max(fixed_tight, fixed_generous) in Pass@1 at each T of the grid; the better "
            "fixed arm is chosen inside each resample, so the 95% crossed interval carries the "
            "choice (the column names the one better on the records). No correction.",
            "",
            *md,
        ]
        if analysis.best_fixed
        else [],
    )


def power_table(analysis: Analysis) -> Table:
    """The power note: the minimum detectable difference of every claimed contrast."""
    rows: list[list[Any]] = []
    page = []
    for p in analysis.power:
        rows.append(
            [p.family, p.name]
            + [_num(v) for v in (p.se, p.se_seeds, p.se_tasks)]
            + [p.tests, _num(p.mdd), p.seeds, p.seeds_to, _num(p.projected)]
        )
        page.append(
            [p.family, p.name, f"{p.se:.3f}", f"{p.se_seeds:.3f}", f"{p.se_tasks:.3f}"]
            + [f"{p.mdd:.3f} ({p.seeds})"]
            + [f"{p.projected:.3f} ({p.seeds_to})" if p.projected is not None else "- (1 seed)"]
        )
    header = ["family", "contrast", "se", "se, seeds only", "se, tasks only"]
    header += ["detectable now (seeds)", "detectable at more seeds (seeds)"]
    names = ", ".join(c.name for c in CONTRASTS)
    return Table(
        "power.csv",
        ["family", "contrast", "se", "se_seeds", "se_tasks", "tests", "mdd", "seeds"]
        + ["seeds_to", "mdd_projected"],
        rows,
        [
            "### Power note",
            "",
            f"The smallest true difference each claimed contrast ({names}) detects with "
            f"{_pct(POWER)} power at the first Holm step (two-sided {ALPHA}/m, m the claimed "
            "contrasts): (z(1 - 0.05/2m) + z(0.8)) x se, se the crossed bootstrap's standard "
            "deviation; the seeds-only and tasks-only resamples split it. The last column "
            "projects it to more seeds: the seed part of the variance shrinks with the seed "
            "count, the rest is kept.",
            "",
            *md_table(header, page),
            "",
        ]
        if analysis.power
        else [],
    )


def _demoted(text: str, levels: int = 3) -> list[str]:
    """A Markdown file's lines with every heading ``levels`` deeper (under the page's ###)."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            line = "#" * levels + line
        out.append(line)
    return out


def design_record_table(out: Path) -> Table:
    """The pre-registration and its deviations as the study folder holds them, with the
    pre-registration's sha256 (nothing when the folder has neither)."""
    from budget_envs.study.check import DEVIATIONS, PREREGISTRATION, sha256_file

    pre, dev = out / PREREGISTRATION, out / DEVIATIONS
    folder = record_folder(out)
    md: list[str] = []
    rows = [[p.name, sha256_file(p)] for p in (pre, dev) if p.exists()]
    if pre.exists():
        md += [
            f"### The pre-registration ({folder}/{PREREGISTRATION}, sha256 `{sha256_file(pre)}`)",
            "",
            *_demoted(pre.read_text(encoding="utf-8")),
            "",
        ]
    if dev.exists():
        md += [
            f"### Deviations ({folder}/{DEVIATIONS})",
            "",
            *_demoted(dev.read_text(encoding="utf-8")),
            "",
        ]
    return Table("design_record.csv", ["file", "sha256"], rows, md)


def policy_class(spec_trainer: str, model: str | None, out: Path | None = None) -> str:
    """What a study's policies are, for the side-by-side table: the RLlib study's action
    scorer, or a language model, named by the base record in ``out/base-sft/`` (a small
    decoder from scratch and its size, or the model it fine-tuned) or else by its ``--model``."""
    if spec_trainer == "rllib":
        return "action scorer"
    named = _base_name(base_record(out)) if out is not None else None
    named = named or model
    return f"language model ({named})" if named else "language model"


def _base_name(record: dict[str, Any] | None) -> str | None:
    if record is None:
        return None
    settings = record.get("settings") or {}
    if settings.get("model") == "scratch":
        return f"small decoder, {record['parameters']:,} parameters"
    lora = " with LoRA" if settings.get("lora") else ""
    return f"{settings.get('model')}{lora}" if settings.get("model") else None


def _cell(r: ContrastResult | None, bindings: dict[str, Binding]) -> str:
    if r is None or r.verdict == "not run":
        return "not run" + (f" ({r.note})" if r is not None and r.note else "")
    shown = f"{r.verdict}, {_interval(r.estimate, r.low, r.high)}"
    if not r.claimed:
        return f"not claimed ({unclaimed_reason(bindings.get(r.family))}); measured {shown}"
    return shown


def _counts(r: ContrastResult | None) -> bool:
    return r is not None and r.claimed and r.verdict != "not run"


def comparison_sentence(q: int, a: Analysis, b: Analysis, names: tuple[str, str]) -> str:
    """Whether question ``q`` gets the same answer from the two studies' claimed contrasts."""
    words = []
    for analysis, name in zip((a, b), names):
        ran = [r for r in analysis.contrasts if r.question == q and _counts(r)]
        if not ran:
            label = f"Question {q}" if q else "Imitation control"
            return (
                f"**{label}:** the answers cannot be compared: the {name} study has no "
                "claimed contrast of it that ran."
            )
        words.append(_answer(ran))
    label = f"Question {q}" if q else "Imitation control"
    if words[0] == words[1]:
        return f"**{label}:** the answers agree: {words[0]} for both."
    return f"**{label}:** the answers differ: {words[0]} for the {names[0]}, {words[1]} for the {names[1]}."


def side_by_side_table(a: Analysis, b: Analysis, names: tuple[str, str]) -> Table:
    """Each pre-registered contrast's verdict in two studies (two policy classes) per family,
    and one sentence per question on whether their answers agree."""
    keyed = [{(r.name, r.family): r for r in x.contrasts} for x in (a, b)]
    binds = [{x.family: x for x in y.bindings} for y in (a, b)]
    families = list(dict.fromkeys(r.family for x in (a, b) for r in x.contrasts))
    rows: list[list[Any]] = []
    page = []
    for c in CONTRASTS:
        for family in families:
            ra, rb = (k.get((c.name, family)) for k in keyed)
            if ra is None and rb is None:
                continue
            agree = "-"
            if _counts(ra) and _counts(rb):
                agree = "yes" if ra.verdict == rb.verdict else "no"
            cells = [_cell(ra, binds[0]), _cell(rb, binds[1])]
            rows.append([c.name, family, *cells, agree])
            page.append([c.name, family, *cells, agree])
    header = ["contrast", "family", names[0], names[1], "same verdict"]
    sentences = [f"* {comparison_sentence(q, a, b, names)}" for q in (1, 2, 3, 0)]
    return Table(
        "side_by_side.csv",
        ["contrast", "family", "first", "second", "same_verdict"],
        rows,
        [
            f"### The answers for the {names[0]} and the {names[1]}",
            "",
            "Each study's verdicts as its own page gives them (Holm-adjusted intervals); "
            '"same verdict" compares two claimed contrasts that ran. A different verdict is not '
            "a measured difference between the policy classes: that needs the difference of "
            "the two contrasts with its own interval.",
            "",
            *sentences,
            "",
            *md_table(header, page),
            "",
        ],
    )
