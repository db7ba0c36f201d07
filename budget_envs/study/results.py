"""The records of the study's analysis: one dataclass per kind of statistic the report shows."""

from __future__ import annotations

from dataclasses import dataclass, field

#: A contrast's verdict: Holm rejects and the interval lies above 0 / below 0; Holm does not
#: reject (or the interval holds 0); its agents have no records.
VERDICTS = ("supported", "contradicted", "inconclusive", "not run")


@dataclass(frozen=True)
class Binding:
    """Whether a family's contrasts are claims: the share of no-fault episodes of the base and
    of RL that end by budget at the tight T (None: no records; ``binds`` is None when neither
    has records), and the base's margin over random in Pass@1 at the generous T (``margin``;
    None: no records of one of them), which must reach ``BASE_MARGIN``."""

    family: str
    t: int
    shares: dict[str, float | None]
    binds: bool | None
    margin: float | None = None
    margin_met: bool | None = None

    @property
    def claimed(self) -> bool:
        """The family's contrasts are claims: the budget binds and the base meets its margin."""
        return bool(self.binds) and bool(self.margin_met)


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
    #: False when the family is out of the claims (the budget does not bind, or the base
    #: misses its margin over random): shown, but not a claim.
    claimed: bool = False
    #: The question it answers (1-3; 0: the imitation control) and its records' visibility.
    question: int = 0
    visibility: str = "hidden"


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
class BestFixed:
    """``mix`` minus the better of the fixed arms at one T of a family's grid (the better one
    chosen inside each resample), with a 95% crossed interval; secondary."""

    family: str
    visibility: str
    t: int
    estimate: float | None
    low: float | None
    high: float | None
    better: str | None
    units: int
    note: str = ""


@dataclass(frozen=True)
class Power:
    """The minimum difference a claimed contrast detects with 80% power at the first Holm
    step, from its crossed-bootstrap standard error (``se``), split into its seed and task
    parts; ``projected`` is the same at ``seeds_to`` seeds (task part as it is; None from one
    seed)."""

    family: str
    name: str
    se: float
    se_seeds: float
    se_tasks: float
    tests: int
    mdd: float
    seeds: int
    seeds_to: int
    projected: float | None


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
    best_fixed: list[BestFixed] = field(default_factory=list)
    power: list[Power] = field(default_factory=list)
    #: (family, visibility) -> its per-unit numbers (the grid tables draw from them too).
    units: dict = field(default_factory=dict, repr=False)
