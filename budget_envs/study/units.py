"""The study's (seed, task) units: each agent's numbers per unit, and a statistic over them.

A :class:`Term` is ``weight`` x a metric of an agent; :func:`family_units` reads every agent's
per-unit numbers from a family's records of one visibility, and :func:`draws` computes a sum of terms
on the records and on each paired resample of :mod:`budget_envs.study.bootstrap` (every agent of
a comparison gets the same draws; a statistic pools the drawn units, a ratio of weighted sums).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from budget_envs.study.bootstrap import BOOT_SEED, FACTORS, Draws, crossed_weights
from budget_envs.study.spec import Family

#: The per-unit metrics a :class:`Term` can take. ``single_step`` is single-step accuracy on
#: oracle-prefix states, ``offpath`` on states off the oracle's path (after a slip).
#: ``consistency`` is the baseline of
#: ``recovery`` (another no-fault sample of the same won unit wins); ``net_recovery`` is
#: ``recovery - consistency`` over the same fault episodes (a difference in probability).
METRICS = ("pass1", "single_step", "offpath", "recovery", "consistency", "net_recovery")
#: The T a Pass@1 term can name, resolved per family.
BUDGETS = ("tight", "generous", "top")


@dataclass(frozen=True)
class Term:
    """``weight`` x ``metric`` of ``agent``: Pass@1 at the family's ``budget`` (tight,
    generous or top: the grid's largest T; or a T of the grid as an int), single-step accuracy,
    relative recovery, its consistency baseline, or recovery net of consistency."""

    weight: float
    agent: str
    metric: str
    budget: str | int | None = None

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
        named = self.budget in BUDGETS or (
            isinstance(self.budget, int) and not isinstance(self.budget, bool) and self.budget > 0
        )
        if (self.metric == "pass1") != named:
            raise ValueError(f"a pass1 term needs a budget among {BUDGETS} or a T, got {self!r}")


Unit = tuple[int, str]


@dataclass
class AgentUnits:
    """One agent's numbers per (seed, task) unit of one visibility."""

    #: First-success turn of each no-fault sample (0: never won); budget visible: of the
    #: episodes played at the grid's largest T.
    first: dict[Unit, list[int]] = field(default_factory=dict)
    #: Budget visible only (an episode per T): T -> unit -> first-success turns.
    by_budget: dict[int, dict[Unit, list[int]]] = field(default_factory=dict)
    #: Oracle-prefix probes: (correct, answered).
    probes: dict[Unit, tuple[int, int]] = field(default_factory=dict)
    #: Off-path probes (the state after a slip): (correct, answered).
    offpath: dict[Unit, tuple[int, int]] = field(default_factory=dict)
    #: Fault episodes whose fault fired and whose no-fault twin was won: (won too, count).
    recovery: dict[Unit, tuple[int, int]] = field(default_factory=dict)
    #: The same fault episodes (those with another no-fault sample of the unit): (sum over
    #: them of the share of the unit's other no-fault samples won, count).
    consistency: dict[Unit, tuple[float, int]] = field(default_factory=dict)
    #: The same fault episodes: (sum of won-after-fault minus that share, count).
    net: dict[Unit, tuple[float, int]] = field(default_factory=dict)


@dataclass
class FamilyUnits:
    """The numbers of one family and visibility, per agent and unit, and the bootstrap draws
    already made (one weight matrix per unit set, number of draws and resampled factors)."""

    family: Family
    agents: dict[str, AgentUnits]
    visibility: str = "hidden"
    _weights: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)

    def units(self, agents: Iterable[str]) -> list[Unit]:
        """The units every one of ``agents`` played (sorted by seed, then task)."""
        sets = [set(self.agents[a].first) for a in agents]
        return sorted(set.intersection(*sets)) if sets else []

    def weights(
        self, units: Sequence[Unit], n_boot: int, factors: tuple[str, ...] = FACTORS
    ) -> np.ndarray:
        key = (tuple(units), n_boot, factors)
        if key not in self._weights:
            self._weights[key] = crossed_weights(
                [s for s, _ in units], [t for _, t in units], n_boot, BOOT_SEED, factors=factors
            )
        return self._weights[key]

    def arrays(self, term: Term, units: Sequence[Unit]) -> tuple[np.ndarray, np.ndarray]:
        """Numerator and denominator of ``term``'s metric per unit (unweighted)."""
        a = self.agents[term.agent]
        if term.metric == "pass1":
            t = budget_of(self.family, term.budget)
            if self.visibility == "hidden":
                num = [np.mean([0 < f <= t for f in a.first[u]]) for u in units]
            else:  # an episode per T: missing T of a unit counts as no data
                at = a.by_budget.get(t, {})
                cells = [at.get(u, []) for u in units]
                num = [np.mean([0 < f <= t for f in c]) if c else 0.0 for c in cells]
                return np.asarray(num, dtype=float), np.array([1.0 if c else 0.0 for c in cells])
            return np.asarray(num, dtype=float), np.ones(len(units))
        table = {
            "single_step": a.probes,
            "offpath": a.offpath,
            "recovery": a.recovery,
            "consistency": a.consistency,
            "net_recovery": a.net,
        }[term.metric]
        pairs = np.array([table.get(u, (0, 0)) for u in units], dtype=float).reshape(-1, 2)
        return pairs[:, 0], pairs[:, 1]


def budget_of(fam: Family, name: str | int | None) -> int:
    """The T a term's budget names in ``fam`` (an int is that T)."""
    if isinstance(name, int) and not isinstance(name, bool):
        return name
    if name == "tight":
        return fam.tight
    if name == "generous":
        return fam.generous
    if name == "top":
        return max(fam.eval_budgets)
    raise ValueError(f"budget must be one of {BUDGETS}, got {name!r}")


def _first(r: Mapping[str, Any]) -> int:
    fs = r.get("first_success_turn")
    return int(fs) if fs is not None else 0


def _episodes(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("record", "episode") == "episode" and not r.get("error")]


def family_units(
    fam: Family, records: Sequence[Mapping[str, Any]], visibility: str = "hidden"
) -> FamilyUnits:
    """Every agent's per-unit numbers in ``fam``'s records of ``visibility`` (any agent name,
    learning-curve checkpoints included).

    Relative recovery counts the fault episodes whose fault fired (non-empty ``faults``) and
    whose no-fault twin (same task, seed and sample) was won within the grid's largest T: its
    numerator is how many of them were won too, its denominator how many twins were won (all).
    Its consistency baseline, over those of them whose unit has another no-fault sample, is the
    share of the unit's other no-fault samples won within that T (the rate at which a task the
    agent has already won is won again without a fault); net recovery is won-after-fault minus
    that share, episode by episode, so both are probabilities over the same episodes.
    """
    top = max(fam.eval_budgets)
    mine = [dict(r, _unit=(int(r["study_seed"]), str(r["task_id"]))) for r in records]
    mine = [
        r for r in mine if r["study_family"] == fam.name and r["study_visibility"] == visibility
    ]
    agents: dict[str, AgentUnits] = {}
    twins: dict[tuple, int] = {}
    samples: dict[tuple, dict[int, int]] = {}
    for r in _episodes(mine):
        if r.get("fault_turn") is not None:
            continue
        a = agents.setdefault(r["agent"], AgentUnits())
        if visibility != "hidden":
            t = int(r["budget"])
            a.by_budget.setdefault(t, {}).setdefault(r["_unit"], []).append(_first(r))
            if t != top:
                continue
        a.first.setdefault(r["_unit"], []).append(_first(r))
        twins[(r["agent"], r["_unit"], int(r["sample"]))] = _first(r)
        samples.setdefault((r["agent"], r["_unit"]), {})[int(r["sample"])] = _first(r)
    for r in _episodes(mine):
        twin = twins.get((r["agent"], r["_unit"], int(r.get("sample", -1))))
        if r.get("fault_turn") is None or r["agent"] not in agents or not r.get("faults"):
            continue
        if twin is None or not 0 < twin <= top:
            continue
        a = agents[r["agent"]]
        won = int(0 < _first(r) <= top)
        hits, n = a.recovery.get(r["_unit"], (0, 0))
        a.recovery[r["_unit"]] = (hits + won, n + 1)
        others = [f for s, f in samples[(r["agent"], r["_unit"])].items() if s != int(r["sample"])]
        if others:
            share = float(np.mean([0 < f <= top for f in others]))
            c, n = a.consistency.get(r["_unit"], (0.0, 0))
            a.consistency[r["_unit"]] = (c + share, n + 1)
            d, n = a.net.get(r["_unit"], (0.0, 0))
            a.net[r["_unit"]] = (d + won - share, n + 1)
    for r in mine:
        if r.get("record") != "probe" or r.get("error") or r.get("correct") is None:
            continue
        if r["agent"] in agents:
            a = agents[r["agent"]]
            table = a.probes if r.get("fault") is None else a.offpath
            right, n = table.get(r["_unit"], (0, 0))
            table[r["_unit"]] = (right + bool(r["correct"]), n + 1)
    return FamilyUnits(fam, agents, visibility)


def draws(
    fu: FamilyUnits,
    terms: Sequence[Term],
    n_boot: int,
    units: Sequence[Unit] | None = None,
    factors: tuple[str, ...] = FACTORS,
) -> Draws | str:
    """The statistic ``sum(weight x metric)`` over the units every term's agent played (or
    ``units``), on the records and on each paired resample (``factors``: the crossed factors
    resampled, both by default); a string says why it cannot be computed (an agent without
    records, no unit, a metric without data)."""
    agents = list(dict.fromkeys(t.agent for t in terms))
    missing = [a for a in agents if a not in fu.agents]
    if missing:
        return f"no records of {', '.join(missing)}"
    units = fu.units(agents) if units is None else list(units)
    if not units:
        return f"no (task, seed) unit played by all of {', '.join(agents)}"
    w = fu.weights(units, n_boot, factors)
    value, boots = 0.0, np.zeros(n_boot)
    for term in terms:
        num, den = fu.arrays(term, units)
        if den.sum() == 0:
            if term.metric == "pass1":
                return f"no episode of {term.agent} at T={budget_of(fu.family, term.budget)}"
            probe = term.metric in ("single_step", "offpath")
            kind = "off-path " if term.metric == "offpath" else ""
            what = f"no {kind}probe records" if probe else "no fired fault"
            why = "" if probe else " after a won no-fault twin"
            return f"{what}{why} of {term.agent}"
        value += term.weight * num.sum() / den.sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            boots = boots + term.weight * (w @ num) / (w @ den)
    # A resample without any data of a ratio metric has no value: it is left out.
    boots = boots[np.isfinite(boots)]
    if not boots.size:
        return "no resample with data"
    return Draws(float(value), boots, len(units), len({s for s, _ in units}))
