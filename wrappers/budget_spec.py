"""Budget specs: how the turn limit T of an episode is drawn.

``parse_budget`` turns what a user writes into a spec object:

==========================  ==================================================
``10``                      fixed T = 10
``(5, 20)``                 uniform integer in [5, 20], both ends included
``[8, 16, 32]``             uniform over the listed values (a two-item list
                            ``[5, 20]`` is a choice of 5 or 20, not a range)
``{8: 1, 32: 3}``           weighted: P(T) proportional to the weight
``LogUniform(4, 64)``       log-uniform integer in [4, 64]
``Schedule({0: 10, 500: 20, 1000: (20, 30)})``  a curriculum over episodes:
                            from episode 500 on, T = 20, and so on
``"10"``, ``"5..20"``,      the same as strings (CLI, JSON), plus
``"8,16,32"``, ``"log:4..64"``
``"4..12:4"``               a choice of 4, 8 or 12 (B is always included)
==========================  ==================================================

Every spec draws from the generator it is given (the wrapper's seeded one), knows its exact
distribution (``pmf``) and its largest value (``t_max``), and compares equal to a spec built from
the same arguments, so ``gymnasium.make(env.spec)`` rebuilds the same wrapper.

JSON has no tuples and no integer keys, so a Python ``(5, 20)`` would come back from JSON as the
two-item list ``[5, 20]``. Each spec therefore has one canonical JSON form (:meth:`BudgetSpec.
to_json`), which :func:`parse_budget` reads back to an equal spec: ``10``, ``"5..20"``,
``[8, 16, 32]``, ``{"8": 1, "32": 3}``, ``"log:4..64"`` and ``{"schedule": {"0": 10, "500":
"20..30"}}``. The BudgetWrapper records this form, so an env spec survives ``EnvSpec.to_json()``
and YAML, Hydra or W&B configs.

Example:
    >>> parse_budget((5, 20)).to_json()
    '5..20'
    >>> parse_budget({8: 1, 32: 3}).to_json()
    {'8': 1, '32': 3}
    >>> parse_budget("log:4..64") == parse_budget(LogUniform(4, 64).to_json())
    True
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "BudgetSpec",
    "Choice",
    "Fixed",
    "LogUniform",
    "MAX_BUDGET",
    "Schedule",
    "Uniform",
    "budget_grid",
    "budget_to_json",
    "parse_budget",
]


#: The largest turn budget any spec may draw: a limit no episode reaches is no limit, and a
#: number like 10**20 is a mistake (use ``budget=None`` for the bare env).
MAX_BUDGET = 10_000


def _turns(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int number of turns, got {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be at least 1 turn, got {value!r}")
    if value > MAX_BUDGET:
        raise ValueError(
            f"{what} must be at most {MAX_BUDGET:,} turns, got {value!r} (budget=None plays "
            "the env without a limit)"
        )
    return int(value)


class BudgetSpec:
    """Base of the budget specs: a distribution over turn limits, possibly changing by episode."""

    def sample(self, rng: np.random.Generator, episode: int = 0) -> int:
        """Draw T for episode number ``episode`` (0-based) from ``rng``."""
        raise NotImplementedError

    def pmf(self, episode: int = 0) -> dict[int, float]:
        """The exact probability of every T at ``episode``."""
        raise NotImplementedError

    @property
    def t_max(self) -> int:
        """The largest T this spec can ever draw."""
        raise NotImplementedError

    @property
    def t_min(self) -> int:
        """The smallest T this spec can ever draw."""
        raise NotImplementedError

    def to_json(self) -> Any:
        """The canonical JSON form: plain JSON values that :func:`parse_budget` reads back to a
        spec that compares equal (and so draws the same T from the same generator)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Fixed(BudgetSpec):
    """Always ``turns``."""

    turns: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "turns", _turns(self.turns, "budget"))

    def sample(self, rng: np.random.Generator, episode: int = 0) -> int:
        return self.turns

    def to_json(self) -> int:
        return self.turns

    def pmf(self, episode: int = 0) -> dict[int, float]:
        return {self.turns: 1.0}

    @property
    def t_max(self) -> int:
        return self.turns

    @property
    def t_min(self) -> int:
        return self.turns


@dataclass(frozen=True)
class Uniform(BudgetSpec):
    """Uniform integer in ``[low, high]``, both included."""

    low: int
    high: int

    def __post_init__(self) -> None:
        low = _turns(self.low, "budget range low end")
        high = _turns(self.high, "budget range high end")
        if high < low:
            raise ValueError(f"budget range (low, high) needs low <= high, got ({low}, {high})")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def sample(self, rng: np.random.Generator, episode: int = 0) -> int:
        return int(rng.integers(self.low, self.high + 1))

    def to_json(self) -> str:
        return f"{self.low}..{self.high}"

    def pmf(self, episode: int = 0) -> dict[int, float]:
        n = self.high - self.low + 1
        return {t: 1.0 / n for t in range(self.low, self.high + 1)}

    @property
    def t_max(self) -> int:
        return self.high

    @property
    def t_min(self) -> int:
        return self.low


@dataclass(frozen=True)
class Choice(BudgetSpec):
    """One of ``values`` with probability proportional to ``weights`` (equal by default)."""

    values: tuple[int, ...]
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        values = tuple(_turns(v, "budget value") for v in self.values)
        if not values:
            raise ValueError("a budget list or mapping needs at least one value, got none")
        if self.weights is None:
            weights = tuple(1.0 for _ in values)
        else:
            weights = tuple(float(w) for w in self.weights)
        if len(weights) != len(values):
            raise ValueError(
                f"budget weights must match the values one to one, got {len(values)} values "
                f"and {len(weights)} weights"
            )
        if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(
                f"budget weights must be finite, non-negative and not all zero, got {weights!r}"
            )
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "weights", weights)
        total = sum(weights)
        cumulative = np.cumsum(np.asarray(weights) / total)
        cumulative[-1] = 1.0
        object.__setattr__(self, "_cumulative", cumulative)

    def sample(self, rng: np.random.Generator, episode: int = 0) -> int:
        index = int(np.searchsorted(self._cumulative, rng.random(), side="right"))
        return self.values[min(index, len(self.values) - 1)]

    def to_json(self) -> list[int] | dict[str, int | float]:
        """``[8, 16, 32]`` when every weight is 1, else ``{"8": 1, "32": 3}`` (keys in order).

        A value listed twice in a weighted choice becomes one key with the summed weight: the
        same pmf, though no longer an equal spec."""
        if all(w == 1.0 for w in self.weights):
            return list(self.values)
        out: dict[str, int | float] = {}
        for v, w in zip(self.values, self.weights):
            out[str(v)] = out.get(str(v), 0.0) + w
        return {k: int(w) if float(w).is_integer() else w for k, w in out.items()}

    def pmf(self, episode: int = 0) -> dict[int, float]:
        total = sum(self.weights)
        out: dict[int, float] = {}
        for v, w in zip(self.values, self.weights):
            out[v] = out.get(v, 0.0) + w / total
        return out

    @property
    def t_max(self) -> int:
        return max(v for v, w in zip(self.values, self.weights) if w > 0)

    @property
    def t_min(self) -> int:
        return min(v for v, w in zip(self.values, self.weights) if w > 0)


@dataclass(frozen=True)
class LogUniform(BudgetSpec):
    """Integer T with log(T) uniform: ``floor(exp(U))``, U uniform on [log low, log(high + 1)).

    So P(T) = log((T + 1) / T) / log((high + 1) / low): short budgets are as common, per octave,
    as long ones.
    """

    low: int
    high: int

    def __post_init__(self) -> None:
        Uniform(self.low, self.high)  # same argument checks
        object.__setattr__(self, "low", int(self.low))
        object.__setattr__(self, "high", int(self.high))

    def sample(self, rng: np.random.Generator, episode: int = 0) -> int:
        u = rng.uniform(math.log(self.low), math.log(self.high + 1))
        return min(max(int(math.exp(u)), self.low), self.high)

    def to_json(self) -> str:
        return f"log:{self.low}..{self.high}"

    def pmf(self, episode: int = 0) -> dict[int, float]:
        z = math.log((self.high + 1) / self.low)
        return {t: math.log((t + 1) / t) / z for t in range(self.low, self.high + 1)}

    @property
    def t_max(self) -> int:
        return self.high

    @property
    def t_min(self) -> int:
        return self.low


@dataclass(frozen=True)
class Schedule(BudgetSpec):
    """A curriculum: ``stages`` maps the first episode of a stage to that stage's spec.

    ``Schedule({0: 10, 200: 20, 400: 30})`` is the stepwise 10 -> 20 -> 30 horizon. Episodes are
    counted per wrapper instance (each sub-env of a vector env counts its own).
    """

    stages: tuple[tuple[int, BudgetSpec], ...]

    def __init__(self, stages: Mapping[int, Any] | Any) -> None:
        items = stages.items() if isinstance(stages, Mapping) else stages
        try:
            pairs = [(start, spec) for start, spec in items]
        except (TypeError, ValueError):
            raise TypeError(
                "Schedule expects {first_episode: budget spec} or [(first_episode, spec), ...], "
                f"got {stages!r}"
            ) from None
        parsed = []
        # JSON object keys are strings: "500" is episode 500.
        pairs = [(int(s) if isinstance(s, str) and s.isdigit() else s, v) for s, v in pairs]
        for start, spec in sorted(pairs, key=lambda p: p[0]):
            if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
                raise ValueError(f"Schedule stage starts must be ints >= 0, got {start!r}")
            parsed.append((int(start), parse_budget(spec)))
        if not parsed or parsed[0][0] != 0:
            raise ValueError(f"a Schedule needs a stage starting at episode 0, got {stages!r}")
        if len({s for s, _ in parsed}) != len(parsed):
            raise ValueError(f"Schedule stage starts must be distinct, got {stages!r}")
        object.__setattr__(self, "stages", tuple(parsed))
        object.__setattr__(self, "_starts", [s for s, _ in parsed])

    def stage(self, episode: int) -> BudgetSpec:
        """The spec in force at ``episode``."""
        index = int(np.searchsorted(self._starts, episode, side="right")) - 1
        return self.stages[index][1]

    def sample(self, rng: np.random.Generator, episode: int = 0) -> int:
        return self.stage(episode).sample(rng, episode)

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {"schedule": {str(start): spec.to_json() for start, spec in self.stages}}

    def pmf(self, episode: int = 0) -> dict[int, float]:
        return self.stage(episode).pmf(episode)

    @property
    def t_max(self) -> int:
        return max(spec.t_max for _, spec in self.stages)

    @property
    def t_min(self) -> int:
        return min(spec.t_min for _, spec in self.stages)


_RANGE = re.compile(r"^\s*(\d+)\s*(?:\.\.|-)\s*(\d+)\s*$")
_STEPPED = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*:\s*(\d+)\s*$")


def _stepped(lo: int, hi: int, step: int, text: str) -> tuple[int, ...]:
    if step < 1 or hi < lo:
        raise ValueError(f"cannot read budget {text!r}: A..B:step needs A <= B and step >= 1")
    values = tuple(range(lo, hi + 1, step))
    return values if values[-1] == hi else values + (hi,)


def _parse_string(text: str) -> BudgetSpec:
    body = text.strip()
    if body.isdigit():
        return Fixed(int(body))
    if body.lower().startswith("log:"):
        m = _RANGE.match(body[4:])
        if m:
            return LogUniform(int(m.group(1)), int(m.group(2)))
    m = _RANGE.match(body)
    if m:
        return Uniform(int(m.group(1)), int(m.group(2)))
    m = _STEPPED.match(body)
    if m:
        values = _stepped(int(m.group(1)), int(m.group(2)), int(m.group(3)), text)
        return Choice(values) if len(values) > 1 else Fixed(values[0])
    parts = [p.strip() for p in body.split(",")]
    if len(parts) > 1 and all(p.isdigit() for p in parts):
        return Choice(tuple(int(p) for p in parts))
    raise ValueError(
        f"cannot read budget {text!r}; expected e.g. '10', '5..20', '4..12:4', '8,16,32' or "
        "'log:4..64'"
    )


def budget_grid(spec: Any) -> list[int]:
    """The budgets an evaluation plays, from the same text a drawn budget takes: ``10`` is
    [10], ``5..8`` is [5, 6, 7, 8], ``4..12:4`` is [4, 8, 12] (B is always included),
    ``8,16,32`` is those. A spec that is only a distribution (weighted, log-uniform, a
    schedule) has no grid: a ValueError says so.

    Example:
        >>> budget_grid("4..12:4"), budget_grid("5..8"), budget_grid([8, 16]), budget_grid(10)
        ([4, 8, 12], [5, 6, 7, 8], [8, 16], [10])
    """
    parsed = parse_budget(spec)
    if isinstance(parsed, Fixed):
        return [parsed.turns]
    if isinstance(parsed, Uniform):
        return list(range(parsed.low, parsed.high + 1))
    if isinstance(parsed, Choice) and len(set(parsed.weights or ())) <= 1:
        return sorted(set(parsed.values))
    raise ValueError(
        f"budget {parsed.to_json()!r} is a distribution drawn per episode (train, play, serve), "
        "not a grid of budgets to evaluate; give values (8,16,32) or a range (4..12, 4..12:4)"
    )


def parse_budget(spec: Any) -> BudgetSpec:
    """Turn a user's budget (see the module table) into a :class:`BudgetSpec`.

    Example:
        >>> from budget_envs.wrappers import parse_budget
        >>> spec = parse_budget("5..20")  # a range, both ends included, like (5, 20)
        >>> spec.t_min, spec.t_max
        (5, 20)
        >>> parse_budget([8, 32]).pmf()  # a list is a choice
        {8: 0.5, 32: 0.5}
        >>> parse_budget({8: 1, 32: 3}).pmf()  # weights
        {8: 0.25, 32: 0.75}
        >>> round(parse_budget("log:4..64").pmf()[4], 3)
        0.08
    """
    if isinstance(spec, BudgetSpec):
        return spec
    if isinstance(spec, bool):
        raise TypeError(f"budget must be a number of turns or a spec, got {spec!r}")
    if isinstance(spec, (int, np.integer)):
        return Fixed(int(spec))
    if isinstance(spec, str):
        return _parse_string(spec)
    if isinstance(spec, tuple):
        if len(spec) != 2:
            raise ValueError(
                f"a budget tuple is an inclusive (low, high) range of 2 ints, got {spec!r}; "
                "use a list for a set of values"
            )
        return Uniform(*spec)
    if isinstance(spec, Mapping):
        if set(spec) == {"log_uniform"}:
            return LogUniform(*spec["log_uniform"])
        if set(spec) == {"schedule"}:
            return Schedule(spec["schedule"])
        if set(spec) == {"uniform"}:
            return Uniform(*spec["uniform"])
        # {T: weight}; JSON (and so the canonical form) spells T as a string: {"8": 1}.
        values = tuple(int(k) if isinstance(k, str) and k.strip().isdigit() else k for k in spec)
        return Choice(values, tuple(spec.values()))
    if isinstance(spec, (list, np.ndarray)) or (
        isinstance(spec, Sequence) and not isinstance(spec, (str, bytes))
    ):
        # Any other sequence (a YAML or OmegaConf list) is a list: a choice, never a range.
        return Choice(tuple(spec))
    raise TypeError(
        "budget must be an int, (low, high), a list of ints, a {T: weight} mapping, "
        f"LogUniform, Schedule or a string such as '5..20'; got {spec!r}"
    )


def budget_to_json(spec: Any) -> Any:
    """The canonical JSON form of any budget :func:`parse_budget` accepts (see the module)."""
    return parse_budget(spec).to_json()
