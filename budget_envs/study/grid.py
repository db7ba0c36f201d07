"""Pass@1 of every agent, and every arm's difference from ``fixed_generous``, at each T of a
family's grid, with crossed paired bootstrap intervals (:mod:`budget_envs.study.bootstrap`): the
"Pass@1 against T" and "Difference against the fixed-generous arm" tables and their figures.

Budget hidden, Pass@1 within T comes from the run at the grid's largest T; budget visible, from
the run at T. The units are the (seed, task) pairs of :mod:`budget_envs.study.units`, so the
seeds and the tasks are resampled as crossed factors here as in the contrasts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from budget_envs.study.bootstrap import CONFIDENCE, Draws
from budget_envs.study.spec import StudySpec
from budget_envs.study.stats import Difference
from budget_envs.study.units import FamilyUnits, Term, draws

#: The generous-T arm every other arm is set against in the difference table.
ANCHOR = "fixed_generous"


@dataclass(frozen=True)
class GridSurface:
    """An agent's Pass@1 at each T it has data for (``ts``), shape ``(1, len(ts))`` as a
    Pass@(K,T) surface at K=1, with 95% crossed intervals; ``task_ids`` are its units."""

    agent: str
    ts: list[int]
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    task_ids: list[tuple[int, str]]


def _cells(fu: FamilyUnits, terms_at: dict[int, list[Term]], n_boot: int) -> dict[int, Draws]:
    out = {}
    for t, terms in terms_at.items():
        d = draws(fu, terms, n_boot)
        if isinstance(d, Draws):
            out[t] = d
    return out


def crossed_surfaces(
    spec: StudySpec, units: Mapping[tuple[str, str], FamilyUnits]
) -> dict[tuple[str, str, str], GridSurface]:
    """(family, visibility, agent) -> the agent's Pass@1 against T over its own units."""
    out = {}
    tail = (1.0 - CONFIDENCE) / 2.0
    for (family, vis), fu in units.items():
        fam = fu.family
        for agent in spec.agents:
            if agent not in fu.agents:
                continue
            grid = sorted(fam.eval_budgets)
            got = _cells(fu, {t: [Term(1.0, agent, "pass1", t)] for t in grid}, spec.n_boot)
            if not got:
                continue
            ts = sorted(got)
            bounds = [np.quantile(got[t].boots, [tail, 1.0 - tail]) for t in ts]
            out[(family, vis, agent)] = GridSurface(
                agent,
                ts,
                np.array([[got[t].value for t in ts]]),
                np.array([[b[0] for b in bounds]]),
                np.array([[b[1] for b in bounds]]),
                fu.units([agent]),
            )
    return out


def crossed_differences(
    spec: StudySpec, units: Mapping[tuple[str, str], FamilyUnits]
) -> list[Difference]:
    """Every other arm minus :data:`ANCHOR` at each T, paired over the units both played (none
    when the spec has no such arm; an arm without records is left out)."""
    if ANCHOR not in spec.arms:
        return []
    out = []
    for fam in spec.families:
        for vis in spec.visibilities:
            fu = units.get((fam.name, vis))
            if fu is None or ANCHOR not in fu.agents:
                continue
            for arm in spec.arms:
                if arm == ANCHOR or arm not in fu.agents:
                    continue
                terms = {
                    t: [Term(1.0, arm, "pass1", t), Term(-1.0, ANCHOR, "pass1", t)]
                    for t in sorted(fam.eval_budgets)
                }
                got = _cells(fu, terms, spec.n_boot)
                if not got:
                    continue
                cells = {t: (d.value, *d.interval(CONFIDENCE)) for t, d in sorted(got.items())}
                out.append(Difference(fam.name, vis, arm, cells, len(fu.units([arm, ANCHOR]))))
    return out
