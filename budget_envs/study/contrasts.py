"""The study's pre-registered statistics, from the budget-hidden records of each family.

Four contrasts per family (:data:`CONTRASTS`, fixed before any record is read), each predicted
> 0 and tested with Holm's step-down correction over the contrasts run in the family; the
headline difference (``fixed_generous - base``); secondary differences (no correction); the
stop-reason mix and whether the budget binds at all; Pass@(K,T); the learning curve.

Every interval comes from one crossed paired bootstrap (:func:`crossed_weights`): the same
evaluation tasks are played under every training seed, so seeds and tasks are crossed factors,
and each resample draws the seeds with replacement and, independently, the tasks with
replacement; a unit (task, seed) counts (times its seed was drawn) x (times its task was drawn).
A hard task drawn once is then hard under every drawn seed, as in the records; the older
hierarchical draw (:func:`hierarchical_weights`: tasks resampled inside each drawn seed) averaged
a task's difficulty over seeds and understated the task variance. Every agent of a comparison
gets the same draws. A statistic pools the drawn units (a ratio of weighted sums,
:class:`Term`). The generator is seeded, so the same records give the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from budget_envs.study.folder import select
from budget_envs.study.spec import BASE, RANDOM, RL, Family, StudySpec, curve_agent

#: Family-wise error rate of each family's four contrasts (Holm), and the two-sided level of
#: every uncorrected interval (headline, secondary rows, levels, Pass@(K,T), curve).
ALPHA = 0.05
CONFIDENCE = 0.95
#: The budget binds in a family when at least this share of the base's or RL's no-fault
#: episodes end by budget at the tight T (the smallest T the contrasts ask about, where the
#: share is largest); a family where it never binds is reported but left out of the claims
#: (the contrasts ask what squeezing T does, which needs a T that bites).
BINDS_AT = 0.10
#: The design wants the base at least this far above random at the generous T (Pass@1).
BASE_MARGIN = 0.10
#: Seed of the bootstrap's generator.
BOOT_SEED = 0
#: Stop reasons in table order (``budget_envs.core.STOP_REASONS``); others follow sorted, and an
#: episode without a reason (an agent error) counts as "error".
REASONS = ("won", "lost", "budget")

#: The per-unit metrics a :class:`Term` can take.
METRICS = ("pass1", "single_step", "recovery")
#: The T a Pass@1 term can name, resolved per family.
BUDGETS = ("tight", "generous", "top")


@dataclass(frozen=True)
class Term:
    """``weight`` x ``metric`` of ``agent``: Pass@1 at the family's ``budget`` (tight,
    generous or top: the grid's largest T), single-step accuracy, or relative recovery."""

    weight: float
    agent: str
    metric: str
    budget: str | None = None

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if (self.metric == "pass1") != (self.budget in BUDGETS):
            raise ValueError(f"a pass1 term needs a budget among {BUDGETS}, got {self!r}")


@dataclass(frozen=True)
class Contrast:
    """A pre-registered contrast: its name, the claim (predicted > 0), how it is computed."""

    name: str
    text: str
    how: str
    terms: tuple[Term, ...]

    @property
    def agents(self) -> list[str]:
        return list(dict.fromkeys(t.agent for t in self.terms))


def _diff(a: str, b: str, metric: str, budget: str | None = None, sign: float = 1.0) -> tuple:
    return (Term(sign, a, metric, budget), Term(-sign, b, metric, budget))


#: The four contrasts of every family (budget hidden), each predicted > 0. RL is
#: ``spec.RL`` (fixed_generous), base is ``spec.BASE``.
CONTRASTS: tuple[Contrast, ...] = (
    Contrast(
        "C1",
        "RL's advantage over base shrinks when T is squeezed",
        "[RL - base Pass@1 at generous T] - [RL - base Pass@1 at tight T]",
        _diff(RL, BASE, "pass1", "generous") + _diff(RL, BASE, "pass1", "tight", -1.0),
    ),
    Contrast(
        "C2",
        "RL gains more in recovery from a fault than in single-step accuracy",
        "[RL - base relative recovery] - [RL - base single-step accuracy]",
        _diff(RL, BASE, "recovery") + _diff(RL, BASE, "single_step", sign=-1.0),
    ),
    Contrast(
        "C3a",
        "mix beats fixed_generous at the tight T",
        "mix - fixed_generous Pass@1 at tight T",
        _diff("mix", "fixed_generous", "pass1", "tight"),
    ),
    Contrast(
        "C3b",
        "mix beats fixed_generous at the generous T",
        "mix - fixed_generous Pass@1 at generous T",
        _diff("mix", "fixed_generous", "pass1", "generous"),
    ),
)


# ---------------------------------------------------------------------- units and their metrics
Unit = tuple[int, str]


@dataclass
class AgentUnits:
    """One agent's numbers per (seed, task) unit, budget hidden."""

    #: First-success turn of each no-fault sample (0: never won).
    first: dict[Unit, list[int]] = field(default_factory=dict)
    #: Probes: (correct, answered).
    probes: dict[Unit, tuple[int, int]] = field(default_factory=dict)
    #: Fault episodes whose fault fired and whose no-fault twin was won: (won too, count).
    recovery: dict[Unit, tuple[int, int]] = field(default_factory=dict)


@dataclass
class FamilyUnits:
    """The budget-hidden numbers of one family, per agent and unit, and the bootstrap draws
    already made (one weight matrix per unit set and number of draws)."""

    family: Family
    agents: dict[str, AgentUnits]
    _weights: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)

    def units(self, agents: Iterable[str]) -> list[Unit]:
        """The units every one of ``agents`` played (sorted by seed, then task)."""
        sets = [set(self.agents[a].first) for a in agents]
        return sorted(set.intersection(*sets)) if sets else []

    def weights(self, units: Sequence[Unit], n_boot: int) -> np.ndarray:
        key = (tuple(units), n_boot)
        if key not in self._weights:
            self._weights[key] = crossed_weights(
                [s for s, _ in units], [t for _, t in units], n_boot, BOOT_SEED
            )
        return self._weights[key]

    def arrays(self, term: Term, units: Sequence[Unit]) -> tuple[np.ndarray, np.ndarray]:
        """Numerator and denominator of ``term``'s metric per unit (unweighted)."""
        a = self.agents[term.agent]
        if term.metric == "pass1":
            t = budget_of(self.family, term.budget)
            num = [np.mean([0 < f <= t for f in a.first[u]]) for u in units]
            return np.asarray(num, dtype=float), np.ones(len(units))
        table = a.probes if term.metric == "single_step" else a.recovery
        pairs = np.array([table.get(u, (0, 0)) for u in units], dtype=float).reshape(-1, 2)
        return pairs[:, 0], pairs[:, 1]


def budget_of(fam: Family, name: str | None) -> int:
    """The T a term's budget names in ``fam``."""
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


def family_units(fam: Family, records: Sequence[Mapping[str, Any]]) -> FamilyUnits:
    """Every agent's per-unit numbers in ``fam``'s budget-hidden records (any agent name,
    learning-curve checkpoints included).

    Relative recovery counts the fault episodes whose fault fired (non-empty ``faults``) and
    whose no-fault twin (same task, seed and sample) was won within the grid's largest T: its
    numerator is how many of them were won too, its denominator how many twins were won (all).
    """
    top = max(fam.eval_budgets)
    mine = [dict(r, _unit=(int(r["study_seed"]), str(r["task_id"]))) for r in records]
    mine = [r for r in mine if r["study_family"] == fam.name and r["study_visibility"] == "hidden"]
    agents: dict[str, AgentUnits] = {}
    twins: dict[tuple, int] = {}
    for r in _episodes(mine):
        if r.get("fault_turn") is None:
            a = agents.setdefault(r["agent"], AgentUnits())
            a.first.setdefault(r["_unit"], []).append(_first(r))
            twins[(r["agent"], r["_unit"], int(r["sample"]))] = _first(r)
    for r in _episodes(mine):
        twin = twins.get((r["agent"], r["_unit"], int(r.get("sample", -1))))
        if r.get("fault_turn") is None or r["agent"] not in agents or not r.get("faults"):
            continue
        if twin is None or not 0 < twin <= top:
            continue
        won, n = agents[r["agent"]].recovery.get(r["_unit"], (0, 0))
        agents[r["agent"]].recovery[r["_unit"]] = (won + int(0 < _first(r) <= top), n + 1)
    for r in mine:
        if r.get("record") != "probe" or r.get("error") or r.get("correct") is None:
            continue
        if r["agent"] in agents:
            right, n = agents[r["agent"]].probes.get(r["_unit"], (0, 0))
            agents[r["agent"]].probes[r["_unit"]] = (right + bool(r["correct"]), n + 1)
    return FamilyUnits(fam, agents)


# ---------------------------------------------------------------------- the bootstrap
def hierarchical_weights(
    unit_seeds: Sequence[int], n_boot: int, seed: int = BOOT_SEED
) -> np.ndarray:
    """How often each unit is drawn in each of ``n_boot`` hierarchical resamples, shape
    ``(n_boot, units)``.

    ``unit_seeds[i]`` is the training seed of unit i. Each resample draws as many seeds as
    there are, with replacement, then for each drawn seed as many of its units as it has, with
    replacement. With one seed the seed level has one outcome and draws nothing, so the draws
    are those of ``rng.integers(0, n, size=(n_boot, n))``: a plain task bootstrap
    (:func:`budget_envs.study.stats.bootstrap` draws the same).
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    unit_seeds = np.asarray(unit_seeds)
    if unit_seeds.ndim != 1 or unit_seeds.size == 0:
        raise ValueError(f"unit_seeds must be a non-empty list, got {unit_seeds.tolist()!r}")
    rng = np.random.default_rng(seed)
    seeds = np.unique(unit_seeds)
    members = [np.flatnonzero(unit_seeds == s) for s in seeds]
    sizes = np.array([len(m) for m in members])
    order = np.concatenate(members)  # units grouped by seed
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n_seeds, width = len(seeds), int(sizes.max())
    if n_seeds == 1:
        picks = np.zeros((n_boot, 1), dtype=np.int64)
    else:
        picks = rng.integers(0, n_seeds, size=(n_boot, n_seeds))
    drawn = sizes[picks][..., None]  # (n_boot, seeds, 1): units of each drawn seed
    tasks = rng.integers(0, np.broadcast_to(drawn, (n_boot, n_seeds, width)))
    keep = np.arange(width) < drawn
    idx = order[(offsets[picks][..., None] + tasks)[keep].reshape(-1)]
    rows = np.broadcast_to(np.arange(n_boot)[:, None, None], keep.shape)[keep]
    counts = np.bincount(rows * unit_seeds.size + idx, minlength=n_boot * unit_seeds.size)
    return counts.reshape(n_boot, unit_seeds.size).astype(float)


def crossed_weights(
    unit_seeds: Sequence[Any], unit_tasks: Sequence[Any], n_boot: int, seed: int = BOOT_SEED
) -> np.ndarray:
    """How often each unit counts in each of ``n_boot`` crossed resamples, shape
    ``(n_boot, units)``: (draws of its seed) x (draws of its task), the seeds drawn with
    replacement as many as there are, the tasks likewise and independently.

    With one seed nothing is drawn at the seed level, and the task draws are those of
    ``rng.integers(0, n, size=(n_boot, n))`` over the tasks in their first-seen order: a plain
    task bootstrap (:func:`budget_envs.study.stats.bootstrap` draws the same). Units that are
    not a full seeds x tasks grid (a seed that missed a task) are weighted the same way; a
    resample that draws none of a statistic's units is left out by the caller.
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    if len(unit_seeds) != len(unit_tasks) or not len(unit_seeds):
        raise ValueError("unit_seeds and unit_tasks must be non-empty and of one length")
    rng = np.random.default_rng(seed)
    seed_ids = {s: i for i, s in enumerate(dict.fromkeys(unit_seeds))}
    task_ids = {t: i for i, t in enumerate(dict.fromkeys(unit_tasks))}
    si = np.array([seed_ids[s] for s in unit_seeds])
    ti = np.array([task_ids[t] for t in unit_tasks])
    n_s, n_t = len(seed_ids), len(task_ids)

    def counts(n: int) -> np.ndarray:
        picks = rng.integers(0, n, size=(n_boot, n))
        rows = np.repeat(np.arange(n_boot), n)
        return np.bincount(rows * n + picks.reshape(-1), minlength=n_boot * n).reshape(n_boot, n)

    seed_counts = np.ones((n_boot, 1), dtype=np.int64) if n_s == 1 else counts(n_s)
    task_counts = counts(n_t)
    return (seed_counts[:, si] * task_counts[:, ti]).astype(float)


@dataclass(frozen=True)
class Draws:
    """A statistic on the records (``value``) and on each resample (``boots``, the finite ones)."""

    value: float
    boots: np.ndarray
    units: int
    seeds: int

    def interval(self, level: float = CONFIDENCE) -> tuple[float, float]:
        """The percentile interval at ``level``."""
        tail = (1.0 - level) / 2.0
        low, high = np.quantile(self.boots, [tail, 1.0 - tail])
        return float(low), float(high)

    @property
    def p(self) -> float:
        """Two-sided bootstrap p-value of "the statistic is 0": twice the smaller share of
        resamples on either side of 0 (0 itself counts on both), at most 1."""
        below = float(np.mean(self.boots <= 0))
        above = float(np.mean(self.boots >= 0))
        return min(1.0, 2.0 * min(below, above))


def draws(
    fu: FamilyUnits, terms: Sequence[Term], n_boot: int, units: Sequence[Unit] | None = None
) -> Draws | str:
    """The statistic ``sum(weight x metric)`` over the units every term's agent played (or
    ``units``), on the records and on each paired resample; a string says why it cannot be
    computed (an agent without records, no unit, a metric without data)."""
    agents = list(dict.fromkeys(t.agent for t in terms))
    missing = [a for a in agents if a not in fu.agents]
    if missing:
        return f"no records of {', '.join(missing)}"
    units = fu.units(agents) if units is None else list(units)
    if not units:
        return f"no (task, seed) unit played by all of {', '.join(agents)}"
    w = fu.weights(units, n_boot)
    value, boots = 0.0, np.zeros(n_boot)
    for term in terms:
        num, den = fu.arrays(term, units)
        if den.sum() == 0:
            what = "no probe records" if term.metric == "single_step" else "no fired fault"
            why = "" if term.metric == "single_step" else " after a won no-fault twin"
            return f"{what}{why} of {term.agent}"
        value += term.weight * num.sum() / den.sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            boots = boots + term.weight * (w @ num) / (w @ den)
    # A resample without any data of a ratio metric has no value: it is left out.
    boots = boots[np.isfinite(boots)]
    if not boots.size:
        return "no resample with data"
    return Draws(float(value), boots, len(units), len({s for s, _ in units}))


# ---------------------------------------------------------------------- Holm
@dataclass(frozen=True)
class HolmStep:
    """A test's place in Holm's step-down: its rank by p-value (1 = smallest), the interval
    level of that rank (``1 - alpha / (m - rank + 1)``), its adjusted p-value, whether the
    procedure rejects it (every smaller p-value rejected and its own below its threshold)."""

    rank: int
    level: float
    adjusted: float
    rejected: bool


def holm(pvalues: Sequence[float], alpha: float = ALPHA) -> list[HolmStep]:
    """Holm's step-down procedure over ``pvalues`` (ties keep their order), one step per
    p-value in the given order."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: (pvalues[i], i))
    out: list[HolmStep | None] = [None] * m
    adjusted, going = 0.0, True
    for rank, i in enumerate(order, 1):
        left = m - rank + 1
        adjusted = max(adjusted, min(1.0, left * pvalues[i]))
        going = going and pvalues[i] <= alpha / left
        out[i] = HolmStep(rank, 1.0 - alpha / left, adjusted, going)
    return [s for s in out if s is not None]


# ---------------------------------------------------------------------- results
#: A contrast's verdict: Holm rejects and the interval lies above 0 / below 0; Holm does not
#: reject (or the interval holds 0); its agents have no records.
VERDICTS = ("supported", "contradicted", "inconclusive", "not run")


@dataclass(frozen=True)
class Binding:
    """Whether the budget binds in a family: the share of no-fault episodes of the base and of
    RL that end by budget at the tight T (None: no records). ``binds`` is None when
    neither has records."""

    family: str
    t: int
    shares: dict[str, float | None]
    binds: bool | None


@dataclass(frozen=True)
class ContrastResult:
    """One pre-registered contrast in one family: the estimate, its Holm interval, the
    adjusted p-value and the verdict (``note`` says why it was not run)."""

    family: str
    name: str
    text: str
    how: str
    verdict: str
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    level: float | None = None
    p: float | None = None
    p_holm: float | None = None
    rank: int | None = None
    tests: int = 0
    units: int = 0
    seeds: int = 0
    note: str = ""
    #: False when the budget does not bind in the family: shown, but not a claim.
    claimed: bool = False


@dataclass(frozen=True)
class PairDiff:
    """``a - b`` of one metric at one T (Pass@1) in a family, with a paired crossed
    interval at ``level`` (no multiplicity correction): a headline or a secondary row."""

    family: str
    kind: str
    a: str
    b: str
    metric: str
    budget: str | None
    t: int | None
    estimate: float | None
    low: float | None
    high: float | None
    level: float
    p: float | None
    units: int
    seeds: int
    note: str = ""


@dataclass(frozen=True)
class Level:
    """One agent's metric in a family, with a crossed-bootstrap interval (None: no data)."""

    family: str
    agent: str
    metric: str
    budget: str | None
    t: int | None
    value: float | None
    low: float | None
    high: float | None
    units: int
    note: str = ""


@dataclass(frozen=True)
class StopMix:
    """The share of each stop reason among an agent's no-fault episodes at T (budget hidden;
    derived at a smaller T, :func:`derived_stop`)."""

    family: str
    agent: str
    t: int
    episodes: int
    shares: dict[str, float]


@dataclass(frozen=True)
class PassK:
    """Pass@(K,T) of an agent (unbiased estimator over its samples), per unit then pooled,
    with a crossed-bootstrap interval."""

    family: str
    agent: str
    k: int
    t: int
    value: float
    low: float
    high: float
    units: int


@dataclass(frozen=True)
class CurvePoint:
    """Pass@1 at the generous T of a checkpoint of the learning curve, with a bootstrap
    interval over the tasks of the curve's seed (None: the checkpoint has no records)."""

    family: str
    seed: int
    agent: str
    steps: int
    t: int
    value: float | None
    low: float | None
    high: float | None
    units: int


@dataclass
class Analysis:
    """Every statistic of :func:`analyse`."""

    contrasts: list[ContrastResult]
    bindings: list[Binding]
    headline: list[PairDiff]
    secondary: list[PairDiff]
    levels: list[Level]
    stops: list[StopMix]
    pass_k: list[PassK]
    curve: list[CurvePoint]


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
    """Per family: does the budget bind at the tight T (:data:`BINDS_AT`)?"""
    out = []
    for fam in spec.families:
        shares: dict[str, float | None] = {}
        for agent in dict.fromkeys([BASE, RL]):
            eps = _clean(records, fam.name, agent)
            stops = [derived_stop(r, fam.tight) for r in eps]
            shares[agent] = stops.count("budget") / len(stops) if stops else None
        known = [s for s in shares.values() if s is not None]
        binds = any(s >= BINDS_AT for s in known) if known else None
        out.append(Binding(fam.name, fam.tight, shares, binds))
    return out


def _contrasts(
    spec: StudySpec, families: Sequence[tuple[FamilyUnits, Binding | None]]
) -> list[ContrastResult]:
    """The four contrasts of every family. Holm's correction runs over every claimed contrast
    of the study together (the families where the budget binds); a family's unclaimed
    contrasts, shown but not claims, are corrected among themselves."""
    got = {
        (fu.family.name, c.name): draws(fu, c.terms, spec.n_boot)
        for fu, _ in families
        for c in CONTRASTS
    }
    binds = {fu.family.name: bool(b and b.binds) for fu, b in families}
    ran = {k: d for k, d in got.items() if isinstance(d, Draws)}
    steps: dict[tuple[str, str], HolmStep] = {}
    groups = [[k for k in ran if binds[k[0]]]]
    groups += [[k for k in ran if k[0] == fu.family.name and not binds[k[0]]] for fu, _ in families]
    for keys in groups:
        steps.update(zip(keys, holm([ran[k].p for k in keys])))
    out = []
    for fu, _ in families:
        fam = fu.family.name
        for c in CONTRASTS:
            d = got[(fam, c.name)]
            if not isinstance(d, Draws):
                out.append(ContrastResult(fam, c.name, c.text, c.how, "not run", note=d))
                continue
            step = steps[(fam, c.name)]
            tests = sum(1 for k in ran if binds[k[0]] == binds[fam] and (binds[fam] or k[0] == fam))
            low, high = d.interval(step.level)
            if step.rejected and low > 0:
                verdict = "supported"
            elif step.rejected and high < 0:
                verdict = "contradicted"
            else:
                verdict = "inconclusive"
            out.append(
                ContrastResult(
                    fam, c.name, c.text, c.how, verdict, d.value, low, high, step.level, d.p,
                    step.adjusted, step.rank, tests, d.units, d.seeds, claimed=binds[fam],
                )
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
    wanted = [("pass1", b) for b in BUDGETS] + [("single_step", None), ("recovery", None)]
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
    """Pass@1 at the generous T of the curve's checkpoints (base at 0 steps, RL's checkpoints,
    RL at its final steps) in the curve's (family, seed); empty without a curve."""
    if spec.curve is None:
        return []
    name, seed = spec.curve
    fam = next((f for f in spec.families if f.name == name), None)
    if fam is None:
        return []
    fu = family_units(fam, [r for r in records if r["study_seed"] == seed])
    points = [(BASE, 0)] if BASE in spec.arms else []
    points += [(curve_agent(RL, fam.steps(i)), fam.steps(i)) for i in spec.curve_points(fam, seed)]
    points += [(RL, fam.steps())]
    out = []
    for agent, steps in points:
        d = draws(fu, [Term(1.0, agent, "pass1", "generous")], spec.n_boot)
        if isinstance(d, Draws):
            cells = (d.value, *d.interval(CONFIDENCE), d.units)
        else:
            cells = (None, None, None, 0)
        out.append(CurvePoint(fam.name, seed, agent, steps, fam.generous, *cells))
    return out


def analyse(spec: StudySpec, records: Sequence[Mapping[str, Any]]) -> Analysis:
    """Every statistic of the study's budget-hidden records, per family of the spec (a family,
    seed or agent without records is reported as missing, never an error)."""
    bindings = budget_binding(spec, records)
    by_family = {b.family: b for b in bindings}
    result = Analysis([], bindings, [], [], [], stop_mix(spec, records), [], [])
    units = [family_units(fam, records) for fam in spec.families]
    result.contrasts = _contrasts(spec, [(fu, by_family.get(fu.family.name)) for fu in units])
    for fu in units:
        for budget in ("generous", "top"):
            result.headline.append(_pair(fu, "headline", RL, BASE, "pass1", budget, spec.n_boot))
        for a, b, budget in _secondary_pairs(spec):
            result.secondary.append(_pair(fu, "secondary", a, b, "pass1", budget, spec.n_boot))
        result.levels += _levels(spec, fu)
        result.pass_k += _pass_k(spec, fu)
    result.curve = learning_curve(spec, records)
    return result
