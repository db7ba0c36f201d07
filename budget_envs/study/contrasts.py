"""The study's pre-registered statistics, from the budget-hidden records of each family.

Four contrasts per family (:data:`CONTRASTS`, fixed before any record is read), each predicted
> 0 and tested with Holm's step-down correction over the contrasts run in the family; the
headline difference (``fixed_generous - base``); secondary differences (no correction); the
stop-reason mix and whether the budget binds at all; Pass@(K,T); the learning curve.

The statistics pool (seed, task) units (:mod:`budget_envs.study.units`); every interval comes
from one crossed paired bootstrap (:mod:`budget_envs.study.bootstrap`), and the contrasts are
corrected with Holm's step-down (:mod:`budget_envs.study.holm`). The results are the records of
:mod:`budget_envs.study.results`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from budget_envs.study.bootstrap import CONFIDENCE, FACTORS, Draws
from budget_envs.study.bootstrap import crossed_weights as crossed_weights
from budget_envs.study.bootstrap import hierarchical_weights as hierarchical_weights
from budget_envs.study.folder import select
from budget_envs.study.holm import ALPHA as ALPHA
from budget_envs.study.holm import HolmStep, holm
from budget_envs.study.results import (
    Analysis,
    BestFixed,
    Binding,
    ContrastResult,
    CurvePoint,
    Level,
    PairDiff,
    PassK,
    Power,
    StopMix,
)
from budget_envs.study.spec import BASE, IMITATION, RANDOM, RL, StudySpec, curve_agent
from budget_envs.study.units import (
    BUDGETS,
    FamilyUnits,
    Term,
    _episodes,
    _first,
    budget_of,
    draws,
    family_units,
)

#: The budget binds in a family when at least this share of the base's or RL's no-fault
#: episodes end by budget at the tight T (the smallest T the contrasts ask about, where the
#: share is largest); a family where it never binds is reported but left out of the claims
#: (the contrasts ask what squeezing T does, which needs a T that bites).
BINDS_AT = 0.10
#: The design wants the base at least this far above random at the generous T (Pass@1).
BASE_MARGIN = 0.10
#: Stop reasons in table order (``budget_envs.core.STOP_REASONS``); others follow sorted, and an
#: episode without a reason (an agent error) counts as "error".
REASONS = ("won", "lost", "budget")


@dataclass(frozen=True)
class Contrast:
    """A pre-registered contrast: its name, the claim (predicted > 0), how it is computed, the
    question it answers (1-3, or 0 for the imitation control) and the visibility of its
    records."""

    name: str
    text: str
    how: str
    terms: tuple[Term, ...]
    question: int = 0
    visibility: str = "hidden"

    @property
    def agents(self) -> list[str]:
        return list(dict.fromkeys(t.agent for t in self.terms))


def _diff(a: str, b: str, metric: str, budget: str | None = None, sign: float = 1.0) -> tuple:
    return (Term(sign, a, metric, budget), Term(-sign, b, metric, budget))


#: The arms ``mix`` is measured against at each T of the grid (the better one per resample).
FIXED = ("fixed_tight", "fixed_generous")

#: The contrasts of every family (study/PREREGISTRATION.md), each predicted > 0. RL is
#: ``spec.RL`` (fixed_generous), base is ``spec.BASE``. C3c and C3d are the budget-visible
#: (``remaining``) rows of question 3, co-primary with C3a and C3b; C4 is the imitation control.
CONTRASTS: tuple[Contrast, ...] = (
    Contrast(
        "C1",
        "RL's advantage over base shrinks when T is squeezed",
        "[RL - base Pass@1 at generous T] - [RL - base Pass@1 at tight T]",
        _diff(RL, BASE, "pass1", "generous") + _diff(RL, BASE, "pass1", "tight", -1.0),
        1,
    ),
    Contrast(
        "C2",
        "RL gains more in recovery from a fault, net of consistency, than in single-step accuracy",
        "[RL - base net recovery] - [RL - base single-step accuracy]",
        _diff(RL, BASE, "net_recovery") + _diff(RL, BASE, "single_step", sign=-1.0),
        2,
    ),
    Contrast(
        "C2o",
        "RL gains more in recovery, net of consistency, than in single steps off the oracle's path",
        "[RL - base net recovery] - [RL - base single-step accuracy off path]",
        _diff(RL, BASE, "net_recovery") + _diff(RL, BASE, "offpath", sign=-1.0),
        2,
    ),
    Contrast(
        "C3a",
        "mix beats fixed_tight at the tight T (budget hidden)",
        "mix - fixed_tight Pass@1 at tight T",
        _diff("mix", "fixed_tight", "pass1", "tight"),
        3,
    ),
    Contrast(
        "C3b",
        "mix beats fixed_generous at the generous T (budget hidden)",
        "mix - fixed_generous Pass@1 at generous T",
        _diff("mix", "fixed_generous", "pass1", "generous"),
        3,
    ),
    Contrast(
        "C3c",
        "mix beats fixed_tight at the tight T (budget visible)",
        "mix - fixed_tight Pass@1 at tight T, budget visible",
        _diff("mix", "fixed_tight", "pass1", "tight"),
        3,
        "remaining",
    ),
    Contrast(
        "C3d",
        "mix beats fixed_generous at the generous T (budget visible)",
        "mix - fixed_generous Pass@1 at generous T, budget visible",
        _diff("mix", "fixed_generous", "pass1", "generous"),
        3,
        "remaining",
    ),
    Contrast(
        "C4",
        "RL beats as many env steps of more imitation at the generous T",
        f"RL - {IMITATION} Pass@1 at generous T",
        _diff(RL, IMITATION, "pass1", "generous"),
        0,
    ),
)


# ---------------------------------------------------------------------- the statistics
def derived_stop(record: Mapping[str, Any], t: int) -> str:
    """Why a budget-hidden episode (played once at the grid's largest T) ends under budget
    ``t``: "won" when its first success came by turn t; "budget" when it was still running
    after turn t; otherwise its own stop reason (an episode that ended on its own at or before
    turn t; "error" when it has none)."""
    fs = _first(record)
    if 0 < fs <= t:
        return "won"
    if int(record["turns"]) > t:
        return "budget"
    return str(record.get("stop_reason") or "error")


def _clean(records: Sequence[Mapping[str, Any]], family: str, agent: str) -> list:
    eps = _episodes(select(records, family, "hidden", agent))  # type: ignore[arg-type]
    return [r for r in eps if r.get("fault_turn") is None]


def stop_mix(spec: StudySpec, records: Sequence[Mapping[str, Any]]) -> list[StopMix]:
    """The stop-reason mix of every agent of the spec at each T of the grid, per family."""
    out = []
    for fam in spec.families:
        for agent in spec.agents:
            eps = _clean(records, fam.name, agent)
            if not eps:
                continue
            for t in sorted(fam.eval_budgets):
                stops = [derived_stop(r, t) for r in eps]
                names = [*REASONS, *sorted(set(stops) - set(REASONS))]
                shares = {n: stops.count(n) / len(stops) for n in names}
                out.append(StopMix(fam.name, agent, t, len(stops), shares))
    return out


def budget_binding(spec: StudySpec, records: Sequence[Mapping[str, Any]]) -> list[Binding]:
    """Per family: does the budget bind at the tight T (:data:`BINDS_AT`), and does the base
    meet its margin over random at the generous T (:data:`BASE_MARGIN`)? A family is claimed
    only when both hold."""
    out = []
    for fam in spec.families:
        shares: dict[str, float | None] = {}
        for agent in dict.fromkeys([BASE, RL]):
            eps = _clean(records, fam.name, agent)
            stops = [derived_stop(r, fam.tight) for r in eps]
            shares[agent] = stops.count("budget") / len(stops) if stops else None
        known = [s for s in shares.values() if s is not None]
        binds = any(s >= BINDS_AT for s in known) if known else None
        fu = family_units(fam, [r for r in records if r["study_family"] == fam.name])
        d = draws(fu, _diff(BASE, RANDOM, "pass1", "generous"), 1)
        margin = d.value if isinstance(d, Draws) else None
        met = None if margin is None else margin >= BASE_MARGIN - 1e-12
        out.append(Binding(fam.name, fam.tight, shares, binds, margin, met))
    return out


Units = Mapping[tuple[str, str], FamilyUnits]


def _verdict(d: Draws, step: HolmStep) -> tuple[str, float, float]:
    low, high = d.interval(step.level)
    if step.rejected and low > 0:
        return "supported", low, high
    if step.rejected and high < 0:
        return "contradicted", low, high
    return "inconclusive", low, high


def _contrasts(
    spec: StudySpec, units: Units, bindings: Mapping[str, Binding]
) -> list[ContrastResult]:
    """Every contrast of every family. Holm's correction runs over every claimed contrast of
    the study together (the families that bind and whose base meets its margin); a family's
    unclaimed contrasts, shown but not claims, are corrected among themselves."""
    got: dict[tuple[str, str], Draws | str] = {}
    for fam in spec.families:
        for c in CONTRASTS:
            fu = units.get((fam.name, c.visibility))
            got[(fam.name, c.name)] = (
                draws(fu, c.terms, spec.n_boot) if fu is not None
                else f"the spec has no budget-{c.visibility} runs"
            )  # fmt: skip
    claimed = {
        f.name: bool(bindings.get(f.name) and bindings[f.name].claimed) for f in spec.families
    }
    ran = {k: d for k, d in got.items() if isinstance(d, Draws)}
    steps: dict[tuple[str, str], HolmStep] = {}
    groups = [[k for k in ran if claimed[k[0]]]]
    groups += [[k for k in ran if k[0] == f.name and not claimed[k[0]]] for f in spec.families]
    for keys in groups:
        steps.update(zip(keys, holm([ran[k].p for k in keys])))
    out = []
    for fam in spec.families:
        mine = claimed[fam.name]
        tests = sum(1 for k in ran if claimed[k[0]] == mine and (mine or k[0] == fam.name))
        for c in CONTRASTS:
            head = (fam.name, c.name, c.text, c.how)
            tail = dict(claimed=mine, question=c.question, visibility=c.visibility)
            d = got[(fam.name, c.name)]
            if not isinstance(d, Draws):
                out.append(ContrastResult(*head, "not run", note=d, **tail))
                continue
            step = steps[(fam.name, c.name)]
            verdict, low, high = _verdict(d, step)
            out.append(
                ContrastResult(
                    *head, verdict, d.value, low, high, step.level, d.p, step.adjusted, step.rank,
                    tests, d.units, d.seeds, **tail,
                )
            )  # fmt: skip
    return out


def best_fixed(spec: StudySpec, units: Units) -> list[BestFixed]:
    """``mix`` minus the better of :data:`FIXED` at every T of each family's grid, per
    visibility: the better arm is chosen inside each resample (and on the records for the
    estimate), so the interval carries the choice."""
    out = []
    for fam in spec.families:
        for vis in spec.visibilities:
            fu = units.get((fam.name, vis))
            if fu is None:
                continue
            arms = ["mix", *FIXED]
            lacking = [a for a in arms if a not in fu.agents]
            for t in sorted(fam.eval_budgets):
                if lacking:
                    note = f"no records of {', '.join(lacking)}"
                    out.append(BestFixed(fam.name, vis, t, None, None, None, None, 0, note))
                    continue
                each = [draws(fu, [Term(1.0, a, "pass1", t)], spec.n_boot) for a in arms]
                bad = [d for d in each if not isinstance(d, Draws) or d.boots.size != spec.n_boot]
                if bad:
                    note = bad[0] if isinstance(bad[0], str) else "a resample without data"
                    out.append(BestFixed(fam.name, vis, t, None, None, None, None, 0, note))
                    continue
                mix, tight, generous = each  # type: ignore[misc]
                better = FIXED[int(generous.value > tight.value)]
                value = mix.value - max(tight.value, generous.value)
                boots = mix.boots - np.maximum(tight.boots, generous.boots)
                tail = (1.0 - CONFIDENCE) / 2.0
                low, high = np.quantile(boots, [tail, 1.0 - tail])
                out.append(
                    BestFixed(fam.name, vis, t, value, float(low), float(high), better, mix.units)
                )
    return out


#: Power of the power note, and the seed count it projects to.
POWER = 0.80
SEEDS_TO = 8


def power_note(spec: StudySpec, units: Units, results: Sequence[ContrastResult]) -> list[Power]:
    """For every claimed contrast that ran: the smallest true difference its test detects
    with :data:`POWER` at the first Holm step (two-sided level ``ALPHA / m``), from the crossed
    bootstrap's standard error, ``(z(1 - ALPHA / 2m) + z(POWER)) x se``; the standard error
    split into a seeds-only and a tasks-only resample; and the same at :data:`SEEDS_TO` seeds:
    the seed part of the variance scaled by seeds / SEEDS_TO, the rest (tasks and their
    interaction with seeds) kept, at least the task part (None on one seed, which says nothing
    of the variance between seeds)."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    by = {(c.name): c for c in CONTRASTS}
    out = []
    for r in results:
        if not r.claimed or r.verdict == "not run":
            continue
        c = by[r.name]
        fu = units[(r.family, c.visibility)]
        se = [
            float(np.std(d.boots)) if isinstance(d, Draws) else float("nan")
            for d in (draws(fu, c.terms, spec.n_boot, factors=f) for f in (FACTORS, ("seeds",), ("tasks",)))
        ]  # fmt: skip
        k = z(1.0 - ALPHA / (2 * r.tests)) + z(POWER)
        shrink = se[1] ** 2 * (1.0 - r.seeds / SEEDS_TO)  # the seed part at SEEDS_TO seeds
        # one seed tells nothing of the variance between seeds: no projection
        projected = (
            k * float(np.sqrt(max(se[0] ** 2 - shrink, se[2] ** 2))) if r.seeds > 1 else None
        )
        out.append(
            Power(r.family, r.name, se[0], se[1], se[2], r.tests, k * se[0], r.seeds, SEEDS_TO, projected)
        )  # fmt: skip
    return out


def _pair(
    fu: FamilyUnits, kind: str, a: str, b: str, metric: str, budget: str | None, n_boot: int
) -> PairDiff:
    t = budget_of(fu.family, budget) if budget else None
    d = draws(fu, _diff(a, b, metric, budget), n_boot)
    head = (fu.family.name, kind, a, b, metric, budget, t)
    if not isinstance(d, Draws):
        return PairDiff(*head, None, None, None, CONFIDENCE, None, 0, 0, note=d)
    return PairDiff(*head, d.value, *d.interval(CONFIDENCE), CONFIDENCE, d.p, d.units, d.seeds)


def _secondary_pairs(spec: StudySpec) -> list[tuple[str, str, str]]:
    """(a, b, budget) of the secondary rows, in order, without repeats."""
    rows = []
    for a, b in ((RL, BASE), ("process", BASE), ("process", RL)):
        rows += [(a, b, "tight"), (a, b, "generous")]
    rows += [(arm, BASE, "generous") for arm in spec.arms if arm != BASE]
    rows += [(BASE, RANDOM, "generous")]
    rows += [(ref, BASE, "generous") for ref in spec.references]
    return list(dict.fromkeys(rows))


def _levels(spec: StudySpec, fu: FamilyUnits) -> list[Level]:
    out = []
    wanted = [("pass1", b) for b in BUDGETS] + [
        (m, None) for m in ("single_step", "offpath", "recovery", "consistency", "net_recovery")
    ]
    for agent in spec.agents:
        for metric, budget in wanted:
            t = budget_of(fu.family, budget) if budget else None
            d = draws(fu, [Term(1.0, agent, metric, budget)], spec.n_boot)
            head = (fu.family.name, agent, metric, budget, t)
            if isinstance(d, Draws):
                out.append(Level(*head, d.value, *d.interval(CONFIDENCE), d.units))
            else:
                out.append(Level(*head, None, None, None, 0, note=d))
    return out


def _pass_k(spec: StudySpec, fu: FamilyUnits) -> list[PassK]:
    from budget_envs.eval.metrics import pass_at_kt_per_task

    fam = fu.family
    grid = sorted(fam.eval_budgets)
    out = []
    for agent in spec.agents:
        a = fu.agents.get(agent)
        if a is None:
            continue
        # K is the family's sample count; a unit with fewer samples has no unbiased estimate.
        k = fam.eval_samples
        units = [u for u in sorted(a.first) if len(a.first[u]) >= k]
        if not units:
            continue
        width = max(len(a.first[u]) for u in units)
        fs = np.full((len(units), width), -1, dtype=np.int64)  # -1: no such sample
        for i, u in enumerate(units):
            fs[i, : len(a.first[u])] = a.first[u]
        per = pass_at_kt_per_task(fs, [k], grid)[:, 0, :]  # (units, T)
        w = fu.weights(units, spec.n_boot)
        boots = w @ per / w.sum(axis=1, keepdims=True)
        tail = (1.0 - CONFIDENCE) / 2.0
        low, high = np.quantile(boots, [tail, 1.0 - tail], axis=0)
        for j, t in enumerate(grid):
            value = float(per[:, j].mean())
            out.append(
                PassK(fam.name, agent, k, t, value, float(low[j]), float(high[j]), len(units))
            )
    return out


def learning_curve(spec: StudySpec, records: Sequence[Mapping[str, Any]]) -> list[CurvePoint]:
    """Pass@1 at the generous T of each curve's checkpoints (base at 0 steps, RL's checkpoints,
    RL at its final steps), per (family, seed) of the spec's curves; empty without one."""
    out = []
    for name, seed in spec.curves:
        fam = next((f for f in spec.families if f.name == name), None)
        if fam is None:
            continue
        fu = family_units(fam, [r for r in records if r["study_seed"] == seed])
        points = [(BASE, 0)] if BASE in spec.arms else []
        points += [
            (curve_agent(RL, fam.steps(i)), fam.steps(i)) for i in spec.curve_points(fam, seed)
        ]
        points += [(RL, fam.steps())]
        for agent, steps in points:
            d = draws(fu, [Term(1.0, agent, "pass1", "generous")], spec.n_boot)
            if isinstance(d, Draws):
                cells = (d.value, *d.interval(CONFIDENCE), d.units)
            else:
                cells = (None, None, None, 0)
            out.append(CurvePoint(fam.name, seed, agent, steps, fam.generous, *cells))
    return out


def analyse(spec: StudySpec, records: Sequence[Mapping[str, Any]]) -> Analysis:
    """Every statistic of the study's records, per family of the spec (a family, seed or agent
    without records is reported as missing, never an error)."""
    bindings = budget_binding(spec, records)
    result = Analysis([], bindings, [], [], [], stop_mix(spec, records), [], [])
    units = {
        (fam.name, vis): family_units(fam, records, vis)
        for fam in spec.families
        for vis in spec.visibilities
    }
    result.units = units
    result.contrasts = _contrasts(spec, units, {b.family: b for b in bindings})
    for fam in spec.families:
        fu = units.get((fam.name, "hidden")) or family_units(fam, records)
        for budget in ("generous", "top"):
            result.headline.append(_pair(fu, "headline", RL, BASE, "pass1", budget, spec.n_boot))
        for a, b, budget in _secondary_pairs(spec):
            result.secondary.append(_pair(fu, "secondary", a, b, "pass1", budget, spec.n_boot))
        result.levels += _levels(spec, fu)
        result.pass_k += _pass_k(spec, fu)
    result.best_fixed = best_fixed(spec, units)
    result.power = power_note(spec, units, result.contrasts)
    result.curve = learning_curve(spec, records)
    return result
