"""Holm's step-down correction over the pre-registered contrasts of the study."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Family-wise error rate of each family's four contrasts (Holm).
ALPHA = 0.05


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
