"""The comparison of two runs: the difference surface B - A per env, and where B's gain holds."""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs.errors import UnknownAgent
from budget_envs.eval.metrics import bootstrap_pass_at_kt, prefix_difference
from budget_envs.eval.outdir import ensure_dir, folder_errors
from budget_envs.eval.report.budget import (
    DEFAULT_KEEP,
    BudgetAnswer,
    budget_answers,
    budget_curve_rows,
    budget_figure,
    budget_markdown,
    check_keep,
)
from budget_envs.eval.report.figures import figure_class, save
from budget_envs.eval.report.surfaces import GroupSurface, group_surfaces, label
from budget_envs.eval.report.tables import grid_cells, markdown_table, prefix_t, slug, write_dicts

__all__ = ["Comparison", "compare_runs"]

logger = logging.getLogger(__name__)


@dataclass
class Comparison:
    """B minus A on the tasks and budgets both runs cover, with a paired bootstrap interval."""

    env_id: str
    label_a: str
    label_b: str
    ks: list[int]
    ts: list[int]
    tasks: int
    diff: np.ndarray
    low: np.ndarray
    high: np.ndarray
    holds_from: dict[int, int | None]
    text: str = ""
    #: B minus A after the same failed prefixes (:func:`~budget_envs.eval.metrics.prefix_difference`).
    prefix: list[Any] = field(default_factory=list)
    #: What a turn buys A and B on the shared tasks and budgets (:mod:`.budget`).
    budget: list[BudgetAnswer] = field(default_factory=list)


def _pick(surfaces: list[GroupSurface], env_id: str, agent: str | None) -> GroupSurface | None:
    mine = [
        s
        for s in surfaces
        if s.env_id == env_id and (agent is None or s.agent == agent or s.label == agent)
    ]
    if agent is None and len(mine) > 1:
        raise ValueError(
            f"{env_id}: the run holds several agents {[s.label for s in mine]}; choose one with "
            "--agent-a / --agent-b"
        )
    return mine[0] if mine else None


def compare_runs(
    records_a: Sequence[dict[str, Any]],
    records_b: Sequence[dict[str, Any]],
    out_dir: str | os.PathLike[str] | None = None,
    *,
    agent_a: str | None = None,
    agent_b: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    figures: bool = True,
    keep: float = DEFAULT_KEEP,
) -> list[Comparison]:
    """The difference surface B - A per env, and where B's gain holds.

    Each comparison also answers "what does a turn buy" for A and for B on the shared tasks and
    budgets (the smallest T keeping ``keep`` of Pass@1 at the largest shared T, per-turn gains,
    cost per turn; :mod:`~budget_envs.eval.report.budget`).

    The bootstrap resamples tasks with the same draws for A and B (a paired interval). The gain
    "holds" at (K,T) when the interval's lower end is above 0. ``holds_from[K]`` is the smallest
    T from which it holds at every larger T of the shared range (None when it does not hold at
    the largest T); below it the gain has vanished.

    When both runs hold prefix probes of the two agents on the same failed prefixes (the same
    source episodes and t), the comparison adds B's success minus A's after them, with the same
    paired bootstrap over tasks, by t and by the prefix's damage (``prefix``).

    Raises :class:`~budget_envs.errors.UnknownAgent` when ``agent_a`` or ``agent_b`` names no
    agent of its run (the message lists the run's agents), and
    :class:`~budget_envs.errors.OutDirError` when ``out_dir`` cannot take the files. An empty
    list means the agents share no env, task or budget with usable episodes (``budgetmix
    compare`` calls that an error).
    """
    keep = check_keep(keep)
    surf_a = group_surfaces(records_a, n_boot=1, seed=seed)
    surf_b = group_surfaces(records_b, n_boot=1, seed=seed)
    for run, agent, records in (("A", agent_a, records_a), ("B", agent_b, records_b)):
        if agent is not None:
            _check_agent(run, agent, records)
    results = []
    envs = sorted({s.env_id for s in surf_a} & {s.env_id for s in surf_b})
    if not envs:
        raise ValueError("the two runs share no env with usable records")
    for env_id in envs:
        a, b = _pick(surf_a, env_id, agent_a), _pick(surf_b, env_id, agent_b)
        if a is None or b is None:
            continue
        comp = _compare_env(env_id, a, b, records_a, records_b, n_boot=n_boot, seed=seed, keep=keep)
        if comp is not None:
            results.append(comp)
    if out_dir is not None:
        out = ensure_dir(out_dir, "write the comparison to")
        with folder_errors("write the comparison to", out):
            _write_comparison(results, out, figures)
    return results


def _compare_env(
    env_id: str,
    a: GroupSurface,
    b: GroupSurface,
    records_a: Sequence[dict[str, Any]],
    records_b: Sequence[dict[str, Any]],
    *,
    n_boot: int,
    seed: int,
    keep: float,
) -> Comparison | None:
    """B minus A on one env (None, with a warning, when they share no task or budget)."""
    tasks = sorted(set(a.task_ids) & set(b.task_ids))
    ts = sorted(set(a.ts) & set(b.ts))
    ks = [k for k in a.ks if k in b.ks]
    if not tasks or not ts:
        logger.warning("%s: no shared tasks or budgets between the runs", env_id)
        return None
    ia = [a.task_ids.index(t) for t in tasks]
    ib = [b.task_ids.index(t) for t in tasks]
    ka, kb = [a.ks.index(k) for k in ks], [b.ks.index(k) for k in ks]
    ta, tb = [a.ts.index(t) for t in ts], [b.ts.index(t) for t in ts]
    diff_tasks = b.per_task[np.ix_(ib, kb, tb)] - a.per_task[np.ix_(ia, ka, ta)]
    mean, low, high = bootstrap_pass_at_kt(
        None, ks, ts, n_boot=n_boot, seed=seed, per_task=diff_tasks
    )
    holds_from = _holds_from(ks, ts, low)
    lines = [f"{env_id}: {b.label} (B) minus {a.label} (A), {len(tasks)} shared tasks"]
    lines += _gain_lines(ks, ts, mean, low, high, holds_from)
    prefix = prefix_difference(
        records_a,
        records_b,
        agent_a=a.agent,
        agent_b=b.agent,
        visibility_a=a.visibility,
        visibility_b=b.visibility,
        env_id=env_id,
        n_boot=n_boot,
        seed=seed,
    )
    lines += _prefix_lines(prefix, records_a, records_b, env_id, a, b)
    budget = [
        *budget_answers([_shared(a, ia, ta)], records_a, keep=keep, n_boot=n_boot, seed=seed),
        *budget_answers([_shared(b, ib, tb)], records_b, keep=keep, n_boot=n_boot, seed=seed),
    ]
    lines += [f"  {x.sentence()}" for x in budget]
    return Comparison(
        env_id=env_id,
        label_a=a.label,
        label_b=b.label,
        ks=ks,
        ts=ts,
        tasks=len(tasks),
        diff=mean,
        low=low,
        high=high,
        holds_from=holds_from,
        text="\n".join(lines),
        prefix=prefix,
        budget=budget,
    )


def _holds_from(ks: list[int], ts: list[int], low: np.ndarray) -> dict[int, int | None]:
    """Per K, the smallest T from which the interval's lower end stays above 0 (None: not at
    the largest T)."""
    holds_from: dict[int, int | None] = {}
    for i, k in enumerate(ks):
        ok = low[i] > 0
        if not ok[-1]:
            holds_from[k] = None
            continue
        j = len(ts) - 1
        while j > 0 and ok[j - 1]:
            j -= 1
        holds_from[k] = ts[j]
    return holds_from


def _gain_lines(
    ks: list[int],
    ts: list[int],
    mean: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    holds_from: dict[int, int | None],
) -> list[str]:
    """The compare text's gain at the largest T and where it holds, for the smallest and
    largest K."""
    lines = []
    for k in (ks[0], ks[-1]) if len(ks) > 1 else (ks[0],):
        i = ks.index(k)
        hf = holds_from[k]
        top = f"gain at T={ts[-1]}: {mean[i, -1]:+.3f} [{low[i, -1]:+.3f}, {high[i, -1]:+.3f}]"
        if hf is None:
            lines.append(f"  K={k}: {top}; B's gain does not hold at T={ts[-1]}")
        elif hf == ts[0]:
            lines.append(f"  K={k}: {top}; holds at every T in {ts[0]}..{ts[-1]}")
        else:
            below = ts[ts.index(hf) - 1]
            lines.append(f"  K={k}: {top}; holds for T >= {hf}, vanishes at T = {below}")
    return lines


def _check_agent(run: str, agent: str, records: Sequence[dict[str, Any]]) -> None:
    """Raise :class:`UnknownAgent` when run ``run`` (A or B) has no episode of ``agent``,
    listing the agents it has."""
    episodes = [r for r in records if r.get("record", "episode") == "episode"]
    names = sorted({str(r.get("agent")) for r in episodes})
    labels = {label(str(r.get("agent")), str(r.get("visibility", "hidden"))) for r in episodes}
    if agent in names or agent in labels:
        return
    raise UnknownAgent(
        f"run {run} has no agent {agent!r}; its agents: {', '.join(names) or '(none)'} "
        f"(choose one with --agent-{run.lower()})",
        agent=agent,
        agents=names,
    )


def _prefix_lines(
    rows: list[Any],
    records_a: Sequence[dict[str, Any]],
    records_b: Sequence[dict[str, Any]],
    env_id: str,
    a: GroupSurface,
    b: GroupSurface,
) -> list[str]:
    """The compare text about success after the same failed prefixes (or why there is none)."""

    def probed(records: Sequence[dict[str, Any]], agent: str) -> bool:
        return any(
            r.get("record") == "prefix" and r["env_id"] == env_id and r["agent"] == agent
            for r in records
        )

    if not rows:
        if probed(records_a, a.agent) and probed(records_b, b.agent):
            return [
                "  after a failed prefix: no prefix probed by both agents (pairs need the same "
                "source episode and t: run both with --prefix-from the same source agent)"
            ]
        return []

    def cell(r: Any) -> str:
        return f"{r.diff:+.3f} [{r.low:+.3f}, {r.high:+.3f}]"

    lines = []
    for source in sorted({r.source for r in rows}):
        mine = [r for r in rows if r.source == source]
        top = mine[0]
        lines.append(
            f"  after a failed prefix of {source}: success {top.success_b:.3f} (B) vs "
            f"{top.success_a:.3f} (A), B - A {cell(top)} ({top.pairs} paired probes, "
            f"{top.tasks} tasks)"
        )
        by_t = [r for r in mine if r.prefix_turns >= 0]
        by_d = [r for r in mine if r.damage != "all"]
        lines.append("    by t: " + "; ".join(f"t={r.prefix_turns}: {cell(r)}" for r in by_t))
        lines.append("    by damage: " + "; ".join(f"{r.damage}: {cell(r)}" for r in by_d))
    return lines


def _shared(s: GroupSurface, tasks: list[int], ts: list[int]) -> GroupSurface:
    """``s`` on the given task and T indices (what both runs cover)."""
    from dataclasses import replace

    per_task = s.per_task[np.ix_(tasks, range(len(s.ks)), ts)]
    return replace(
        s, task_ids=[s.task_ids[i] for i in tasks], ts=[s.ts[j] for j in ts], per_task=per_task
    )


def _write_comparison(results: list[Comparison], out: Path, figures: bool) -> None:
    with open(out / "difference.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["env_id", "A", "B", "K", "T", "diff", "low", "high", "holds"])
        for c in results:
            for k, t, diff, low, high, holds in grid_cells(c.ks, c.ts, c.diff, c.low, c.high):
                w.writerow([c.env_id, c.label_a, c.label_b, k, t, diff, low, high, int(holds)])
    prefix_rows = [{"A": c.label_a, "B": c.label_b, **asdict(r)} for c in results for r in c.prefix]
    if prefix_rows:
        write_dicts(out / "prefix_difference.csv", prefix_rows)
    md = [
        "# Comparison (B minus A)",
        "",
        "95% paired bootstrap over shared tasks; the gain holds where the interval is above 0.",
        "",
    ]
    for c in results:
        md += ["```", c.text, "```", ""]
    if prefix_rows:
        md += [
            "## After a failed prefix",
            "",
            "B's success minus A's after the same failed prefixes (the same source episode, the "
            "first t turns replayed), per task then averaged over tasks, with the 95% paired "
            "bootstrap over tasks; by t and by the prefix's damage in oracle turns.",
            "",
        ]
        md += markdown_table(
            [
                "env",
                "A",
                "B",
                "prefix of",
                "t",
                "damage",
                "pairs",
                "tasks",
                "A success",
                "B success",
                "B - A",
                "95% interval",
            ],
            (
                [
                    r["env_id"],
                    r["A"],
                    r["B"],
                    r["source"],
                    prefix_t(r),
                    r["damage"],
                    r["pairs"],
                    r["tasks"],
                    f"{r['success_a']:.3f}",
                    f"{r['success_b']:.3f}",
                    f"{r['diff']:+.3f}",
                    f"[{r['low']:+.3f}, {r['high']:+.3f}]",
                ]
                for r in prefix_rows
            ),
        )
        md.append("")
    answers = [x for c in results for x in c.budget]
    if answers:
        md += budget_markdown(answers, answers[0].keep)
        write_dicts(out / "budget_curve.csv", budget_curve_rows(answers))
    if figures and results:
        md += [f"![{name}]({name})" for name in _difference_figures(results, out)]
        if answers:
            md.append(f"![budget_curve]({budget_figure(answers, out, 'budget_curve').name})")
    (out / "compare.md").write_text("\n".join(md) + "\n", encoding="utf-8")


def _difference_figures(results: list[Comparison], out: Path) -> list[str]:
    """One heatmap of B - A per comparison, written into ``out`` (dots: the gain holds); the
    file names, in order."""
    Figure = figure_class()
    names = []
    for c in results:
        fig = Figure(figsize=(6, 4), layout="constrained")
        ax = fig.subplots()
        lim = max(1e-9, float(np.abs(c.diff).max()))
        im = ax.imshow(c.diff, origin="lower", aspect="auto", cmap="RdBu", vmin=-lim, vmax=lim)
        holds = np.argwhere(c.low > 0)
        if holds.size:
            ax.scatter(holds[:, 1], holds[:, 0], marker=".", s=8, color="k", label="gain holds")
            ax.legend(fontsize=7, loc="upper left")
        ax.set_xticks(
            range(len(c.ts))[:: max(1, len(c.ts) // 10)],
            [str(t) for t in c.ts][:: max(1, len(c.ts) // 10)],
        )
        ax.set_yticks(range(len(c.ks)), [str(k) for k in c.ks])
        ax.set(
            xlabel="T (turn budget)",
            ylabel="K (samples)",
            title=f"{c.env_id}: {c.label_b} - {c.label_a}",
        )
        fig.colorbar(im, ax=ax, label="Pass@(K,T) difference")
        name = f"{slug(c.env_id.split('/')[-1])}_difference.png"
        save(fig, out / name)
        names.append(name)
    return names
