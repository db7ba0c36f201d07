"""The report's PNG figures, drawn with matplotlib's object-oriented API (no pyplot state).

matplotlib is the ``plots`` extra: :func:`figure_class` raises ``DependencyNotInstalled`` naming
it when it is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from budget_envs._util import import_optional
from budget_envs.eval.report.surfaces import GroupSurface
from budget_envs.eval.report.tables import slug

__all__ = ["figure_class", "integer_ticks", "recovery_figure", "save", "surface_figures"]


def figure_class() -> Any:
    """matplotlib's ``Figure`` class (the ``plots`` extra)."""
    return import_optional("matplotlib.figure", extra="plots", what="figures").Figure


def save(fig: Any, path: Path) -> Path:
    """Write ``fig`` as a PNG at ``path``."""
    fig.savefig(path, dpi=110)
    return path


def surface_figures(
    surfaces: list[GroupSurface], acc_rows: list[dict], rec_rows: list[dict], out: Path
) -> list[Path]:
    """A report's PNG figures per env, written into ``out``: the Pass@(K,T) heatmaps, Pass@(1,T)
    and Pass@(K,T_max) with their intervals, single-step accuracy and recovery."""
    Figure = figure_class()
    paths = []
    for env_id in sorted({s.env_id for s in surfaces}):
        group = [s for s in surfaces if s.env_id == env_id]
        stem = slug(env_id.split("/")[-1])
        paths.append(_heatmaps(Figure, group, env_id, out / f"{stem}_heatmap.png"))
        paths.append(_pass1_curves(Figure, group, env_id, out / f"{stem}_pass1_vs_T.png"))
        paths.append(_passk_curves(Figure, group, env_id, out / f"{stem}_passK_at_Tmax.png"))
        rows = [r for r in acc_rows if r["env_id"] == env_id]
        if rows:
            paths.append(_accuracy_bars(Figure, rows, env_id, out / f"{stem}_single_step.png"))
        rows = [r for r in rec_rows if r["env_id"] == env_id]
        if rows:
            fig = recovery_figure(rows, env_id)
            paths.append(save(fig, out / f"{stem}_recovery.png"))
    return paths


def _heatmaps(Figure: Any, group: list[GroupSurface], env_id: str, path: Path) -> Path:
    """One env's Pass@(K,T) heatmaps, one panel per agent, saved at ``path``."""
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(4.2 * len(group), 3.6), layout="constrained")
    axes = fig.subplots(1, len(group), squeeze=False)[0]
    for ax, s in zip(axes, group):
        im = ax.imshow(
            s.mean,
            origin="lower",
            aspect="auto",
            vmin=0,
            vmax=1,
            cmap="viridis",
            extent=(s.ts[0] - 0.5, s.ts[-1] + 0.5, s.ks[0] - 0.5, s.ks[-1] + 0.5)
            if s.visibility == "hidden"
            else None,
        )
        if s.visibility != "hidden":
            ax.set_xticks(range(len(s.ts)), [str(t) for t in s.ts])
            ax.set_yticks(range(len(s.ks)), [str(k) for k in s.ks])
        ax.set_title(s.label, fontsize=9)
        if s.visibility == "hidden":
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("T (turn budget)")
        ax.set_ylabel("K (samples)")
    fig.colorbar(im, ax=list(axes), label="Pass@(K,T)")
    fig.suptitle(f"{env_id}: Pass@(K,T)")
    return save(fig, path)


def _pass1_curves(Figure: Any, group: list[GroupSurface], env_id: str, path: Path) -> Path:
    """One env's Pass@(1,T) curves with their intervals, saved at ``path``."""
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    for s in group:
        # Hidden runs give a step function of T; visible runs only the budgets they ran.
        step = "post" if s.visibility == "hidden" else None
        line = ax.plot(
            s.ts,
            s.mean[0],
            "-" if step else "o--",
            drawstyle="steps-post" if step else "default",
            label=s.label,
        )[0]
        ax.fill_between(s.ts, s.low[0], s.high[0], alpha=0.2, step=step, color=line.get_color())
    integer_ticks(ax.xaxis, sorted({t for s in group for t in s.ts}))
    return _save_curves(fig, ax, "T (turn budget)", "Pass@(1,T)", env_id, path)


def _passk_curves(Figure: Any, group: list[GroupSurface], env_id: str, path: Path) -> Path:
    """One env's Pass@(K,T_max) curves with their intervals, saved at ``path``."""
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    for s in group:
        ax.plot(s.ks, s.mean[:, -1], "o-", label=f"{s.label} (T={s.ts[-1]})")
        ax.fill_between(s.ks, s.low[:, -1], s.high[:, -1], alpha=0.2)
    integer_ticks(ax.xaxis, sorted({k for s in group for k in s.ks}))
    return _save_curves(fig, ax, "K (samples)", "Pass@(K,T_max)", env_id, path)


def _accuracy_bars(Figure: Any, rows: list[dict], env_id: str, path: Path) -> Path:
    """One env's single-step accuracy per agent (on-policy and oracle-prefix), saved at ``path``."""
    fig = Figure(figsize=(6, 3.6), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(rows))
    on = [np.nan if r["on_policy"] is None else r["on_policy"] for r in rows]
    pre = [np.nan if r["prefix"] is None else r["prefix"] for r in rows]
    ax.bar(x - 0.2, on, 0.4, label="on-policy")
    ax.bar(x + 0.2, pre, 0.4, label="oracle-prefix")
    ax.set_xticks(x, [r["agent"] for r in rows], fontsize=8)
    ax.set(
        ylabel="share of oracle actions",
        ylim=(0, 1.05),
        title=f"{env_id}: single-step accuracy",
    )
    ax.legend(fontsize=8)
    return save(fig, path)


def integer_ticks(axis: Any, values: list[int], most: int = 12) -> None:
    """Whole-number ticks on ``axis`` for the integer ``values`` it shows: each value when there
    are at most ``most`` of them, else at most ``most`` whole numbers; the limits are padded by
    half a step, so a single value still gets its own tick (never a run of float labels)."""
    from matplotlib.ticker import FixedLocator, MaxNLocator

    if not values:
        return
    lo, hi = min(values), max(values)
    if len(values) <= most:
        axis.set_major_locator(FixedLocator(values))
    else:
        axis.set_major_locator(MaxNLocator(nbins=most, integer=True))
    axis.set_minor_locator(FixedLocator([]))
    pad = 0.5 if hi - lo < 4 else 0.02 * (hi - lo) + 0.5
    if axis.axis_name == "x":
        axis.axes.set_xlim(lo - pad, hi + pad)
    else:
        axis.axes.set_ylim(lo - pad, hi + pad)


def recovery_figure(rows: list[dict], env_id: str) -> Any:
    """Success within T after one fault at turn t, per agent, with Wilson 95% intervals on
    every point (n = the episodes of that fault turn), and each agent's no-fault success at
    the same T as a dotted line; one panel per T."""
    from budget_envs.eval.metrics import wilson_interval

    Figure = figure_class()
    budgets = sorted({r["budget"] for r in rows})
    fig = Figure(figsize=(4.2 * len(budgets), 3.8), layout="constrained")
    axes = fig.subplots(1, len(budgets), squeeze=False)[0]
    agents = sorted({r["agent"] for r in rows})
    for ax, budget in zip(axes, budgets):
        here = [r for r in rows if r["budget"] == budget]
        for i, agent in enumerate(agents):
            mine = sorted((r for r in here if r["agent"] == agent), key=lambda r: r["fault_turn"])
            if not mine:
                continue
            color = f"C{i}"
            xs = [int(r["fault_turn"]) for r in mine]
            ys = [float(r["success"]) for r in mine]
            bounds = [
                wilson_interval(round(float(r["success"]) * int(r["episodes"])), int(r["episodes"]))
                for r in mine
            ]
            yerr = [
                [max(0.0, y - lo) for y, (lo, _) in zip(ys, bounds)],
                [max(0.0, hi - y) for y, (_, hi) in zip(ys, bounds)],
            ]
            ax.errorbar(
                xs, ys, yerr=yerr, fmt="o-", color=color, capsize=3, label=f"{agent}: fault at t"
            )
            if mine[0]["baseline_success"] is not None:
                ax.axhline(
                    mine[0]["baseline_success"], color=color, ls=":", label=f"{agent}: no fault"
                )
        integer_ticks(ax.xaxis, sorted({int(r["fault_turn"]) for r in here}))
        ax.set(
            xlabel="fault turn t",
            ylabel=f"success within T={budget}",
            ylim=(-0.02, 1.02),
            title=f"T = {budget}",
        )
    axes[-1].legend(fontsize=7)
    fig.suptitle(f"{env_id}: recovery from one fault (dotted: no fault, same T; 95% Wilson)")
    return fig


def _save_curves(fig: Any, ax: Any, xlabel: str, ylabel: str, env_id: str, path: Path) -> Path:
    """Label a figure of success curves with their intervals (0 to 1, a legend) and save it."""
    ax.set(xlabel=xlabel, ylabel=ylabel, ylim=(-0.02, 1.02), title=f"{env_id}: {ylabel}, 95% CI")
    ax.legend(fontsize=8)
    return save(fig, path)
