"""The study's figures, per family and visibility: Pass@1 against T, the difference against the
fixed-generous arm as a heatmap, single step against recovery; and the learning curve
(matplotlib loads when they are drawn)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs.study.contrasts import CurvePoint
from budget_envs.study.spec import Family, StudySpec
from budget_envs.study.stats import Difference, StepRecovery


def draw_figures(
    spec: StudySpec,
    surfaces: Mapping[tuple, Any],
    diffs: Sequence[Difference],
    steps: Sequence[StepRecovery],
    img: Path,
    curve: Sequence[CurvePoint] = (),
) -> list[Path]:
    """Draw the figures of every family and visibility with records, and the learning curve
    when it has a point, into ``img``."""
    from budget_envs._util import import_optional

    Figure = import_optional("matplotlib.figure", extra="plots", what="figures").Figure
    img.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    for fam in spec.families:
        for vis in spec.visibilities:
            curves = [(a, surfaces.get((fam.name, vis, a))) for a in spec.agents]
            curves = [(a, s) for a, s in curves if s is not None]
            if not curves:
                continue
            here = [d for d in diffs if (d.family, d.visibility) == (fam.name, vis) and d.cells]
            points = [
                (s.agent, s.single_step, s.after_fault)
                for s in steps
                if (s.family, s.visibility) == (fam.name, vis)
                and s.single_step is not None
                and s.after_fault is not None
            ]
            drawn = [("pass1", _pass1(Figure, fam, vis, curves))]
            if here:
                drawn.append(("diff", _heatmap(Figure, fam.name, vis, here)))
            if points:
                drawn.append(("step_recovery", _step_recovery(Figure, fam.name, vis, points)))
            for stem, fig in drawn:
                fig.tight_layout()
                path = img / f"{stem}_{fam.name}_{vis}.png"
                fig.savefig(path, dpi=110)
                out.append(path)
    drawn_curve = [p for p in curve if p.value is not None]
    for family in dict.fromkeys(p.family for p in drawn_curve):
        fig = _curve(Figure, [p for p in drawn_curve if p.family == family])
        fig.tight_layout()
        path = img / f"learning_curve_{family}.png"
        fig.savefig(path, dpi=110)
        out.append(path)
    return out


def _curve(Figure: Any, points: list[CurvePoint]) -> Any:
    """One family's learning curves, a line per seed."""
    fig = Figure(figsize=(5, 3.5))
    ax = fig.subplots()
    seeds = list(dict.fromkeys(p.seed for p in points))
    for seed in seeds:
        mine = [p for p in points if p.seed == seed]
        ax.errorbar(
            [p.steps for p in mine],
            [p.value for p in mine],
            yerr=[[p.value - p.low for p in mine], [p.high - p.value for p in mine]],
            marker="o",
            capsize=3,
            label=f"seed {seed}",
        )
    p = points[0]
    ax.set(xlabel="env steps of PPO", ylabel=f"Pass@1 at T={p.t}", ylim=(-0.02, 1.05))
    which = f"seed {p.seed}" if len(seeds) == 1 else f"{len(seeds)} seeds"
    ax.set_title(f"{p.family}, {which}: learning curve (budget hidden)", fontsize=9)
    if len(seeds) > 1:
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig


def _pass1(Figure: Any, fam: Family, vis: str, curves: list[tuple[str, Any]]) -> Any:
    fig = Figure(figsize=(7.6, 4))
    ax = fig.subplots()
    for agent, s in curves:
        ax.plot(s.ts, s.mean[0], marker="." if vis != "hidden" else None, label=agent)
        ax.fill_between(s.ts, s.low[0], s.high[0], alpha=0.15)
    for t, name in ((fam.tight, "tight"), (fam.generous, "generous")):
        ax.axvline(t, color="grey", ls=":", lw=1)
        # Above the plot area (x in data, y in axes units): never under the legend or a curve.
        ax.text(
            t, 1.0, name, fontsize=7, ha="center", va="bottom", transform=ax.get_xaxis_transform()
        )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="turn budget T", ylabel="Pass@1", ylim=(-0.02, 1.05))
    ax.set_title(f"{fam.name}, budget {vis}: Pass@1 against T", fontsize=9, pad=12)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3)
    return fig


def _heatmap(Figure: Any, family: str, vis: str, diffs: list[Difference]) -> Any:
    arms = [d.arm for d in diffs]
    ts = sorted({t for d in diffs for t in d.cells})
    m = np.full((len(arms), len(ts)), np.nan)
    for i, d in enumerate(diffs):
        for t, (diff, _low, _high) in d.cells.items():
            m[i, ts.index(t)] = diff
    fig = Figure(figsize=(1.2 + 0.8 * len(ts), 1.2 + 0.6 * len(arms)))
    ax = fig.subplots()
    im = ax.imshow(m, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(ts)), [str(t) for t in ts])
    ax.set_yticks(range(len(arms)), arms, fontsize=7)
    for i in range(len(arms)):
        for j in range(len(ts)):
            if m[i, j] == m[i, j]:
                ax.text(j, i, f"{m[i, j]:+.2f}", ha="center", va="center", fontsize=7)
    ax.set_xlabel("turn budget T")
    ax.set_title(f"{family}, {vis}: Pass@1 minus fixed generous", fontsize=9)
    fig.colorbar(im, ax=ax)
    return fig


def _step_recovery(
    Figure: Any, family: str, vis: str, points: list[tuple[str, float, float]]
) -> Any:
    fig = Figure(figsize=(5, 4))
    ax = fig.subplots()
    for agent, x, y in points:
        ax.scatter([x], [y], label=agent)
    ax.set(
        xlabel="single-step accuracy (oracle-prefix states)",
        ylabel="success after one fault (largest T)",
        xlim=(-0.02, 1.02),
        ylim=(-0.02, 1.02),
    )
    ax.set_title(f"{family}, {vis}: single step against recovery", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig
