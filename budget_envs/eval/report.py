"""Reports of a run: markdown and CSV tables, PNG figures; and the comparison of two runs.

Tables and numbers come from :mod:`budget_envs.eval.metrics`; the figures need matplotlib (the
``plots`` extra) and are drawn with the object-oriented API (no pyplot global state).
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs._util import import_optional
from budget_envs.eval.metrics import (
    bootstrap_pass_at_kt,
    first_success_matrix,
    pass_at_kt_per_task,
    prefix_difference,
    prefix_table,
    recovery_by_cell,
    recovery_table,
    single_step_accuracy,
)

__all__ = ["GroupSurface", "compare_runs", "group_surfaces", "write_report"]

logger = logging.getLogger(__name__)


@dataclass
class GroupSurface:
    """The Pass@(K,T) surface of one (env, agent, visibility) group, with bootstrap bounds."""

    env_id: str
    agent: str
    visibility: str
    task_ids: list[str]
    ks: list[int]
    ts: list[int]
    per_task: np.ndarray  # (tasks, K, T)
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    errors: int = 0
    missing: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return _label(self.agent, self.visibility)


def _label(agent: str, visibility: str) -> str:
    return agent if visibility == "hidden" else f"{agent} ({visibility})"


def _episodes(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("record", "episode") == "episode"]


def _groups(
    records: Sequence[dict[str, Any]], kind: str = "episode"
) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("record", "episode") != kind:
            continue
        out.setdefault((r["env_id"], r["agent"], r.get("visibility", "hidden")), []).append(r)
    return out


def group_surfaces(
    records: Sequence[dict[str, Any]], *, n_boot: int = 1000, seed: int = 0
) -> list[GroupSurface]:
    """One surface per (env, agent, visibility) over the no-fault episodes.

    Budget-hidden groups cover every T up to the largest run; budget-visible groups only the T
    they ran (the metrics refuse to derive the others). K runs over 1..n.
    """
    out = []
    for (env_id, agent, vis), recs in sorted(_groups(records).items()):
        clean = [r for r in recs if r.get("fault_turn") is None]
        errors = sum(1 for r in clean if r.get("error"))
        if not clean or errors == len(clean):
            continue
        budgets = sorted({int(r["budget"]) for r in clean})
        ts = list(range(1, max(budgets) + 1)) if vis == "hidden" else budgets
        rows: dict[str, dict[int, np.ndarray]] = {}
        n = max(int(r["sample"]) for r in clean) + 1
        for t in ts:
            ids, m = first_success_matrix(clean, t, samples=n)
            for i, task in enumerate(ids):
                rows.setdefault(task, {})[t] = m[i]
        task_ids = sorted(rows)
        # A task is usable when every T has every sample (no errors, no gaps).
        full = [
            task
            for task in task_ids
            if all(t in rows[task] and np.all(rows[task][t] >= 0) for t in ts)
        ]
        notes = []
        if len(full) < len(task_ids):
            notes.append(
                f"{len(task_ids) - len(full)} task(s) left out: missing or errored samples"
            )
        if not full:
            continue
        ks = list(range(1, n + 1))
        per_task = np.empty((len(full), len(ks), len(ts)))
        for j, t in enumerate(ts):
            m = np.stack([rows[task][t] for task in full])
            per_task[:, :, j] = pass_at_kt_per_task(m, ks, [t])[:, :, 0]
        mean, low, high = bootstrap_pass_at_kt(
            None, ks, ts, n_boot=n_boot, seed=seed, per_task=per_task
        )
        out.append(
            GroupSurface(
                env_id=env_id,
                agent=agent,
                visibility=vis,
                task_ids=full,
                ks=ks,
                ts=ts,
                per_task=per_task,
                mean=mean,
                low=low,
                high=high,
                errors=errors,
                missing=len(task_ids) - len(full),
                notes=notes,
            )
        )
    return out


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_")


def _figure_module() -> Any:
    return import_optional("matplotlib.figure", extra="plots", what="figures").Figure


@dataclass
class ReportResult:
    """Files a report wrote."""

    out_dir: Path
    markdown: Path
    tables: list[Path]
    figures: list[Path]
    text: str


def write_report(
    records: Sequence[dict[str, Any]],
    out_dir: str | os.PathLike[str],
    *,
    title: str = "BudgetMix evaluation",
    n_boot: int = 1000,
    seed: int = 0,
    figures: bool = True,
) -> ReportResult:
    """Write ``report.md``, CSV tables and PNG figures for ``records`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    surfaces = group_surfaces(records, n_boot=n_boot, seed=seed)
    tables: list[Path] = []
    figs: list[Path] = []
    md: list[str] = [f"# {title}", ""]

    # ---- Pass@(K,T) surface, long CSV
    path = out / "pass_at_kt.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["env_id", "agent", "visibility", "K", "T", "pass", "low", "high", "tasks"])
        for s in surfaces:
            for a, k in enumerate(s.ks):
                for b, t in enumerate(s.ts):
                    w.writerow(
                        [
                            s.env_id,
                            s.agent,
                            s.visibility,
                            k,
                            t,
                            f"{s.mean[a, b]:.6f}",
                            f"{s.low[a, b]:.6f}",
                            f"{s.high[a, b]:.6f}",
                            len(s.task_ids),
                        ]
                    )
    tables.append(path)

    # ---- summary
    episodes = _episodes(records)
    errors = [r for r in records if r.get("error")]
    md += [
        f"{len(episodes)} episodes, {sum(1 for r in records if r.get('record') == 'probe')} "
        f"single-step probes, {sum(1 for r in records if r.get('record') == 'prefix')} prefix "
        f"probes, {len(errors)} errors.",
        "",
        "## Pass@(K,T)",
        "",
        "95% bootstrap intervals over tasks. Budget-hidden runs derive every T from one run at "
        "T_max; budget-visible runs show only the T they ran.",
        "",
        "| env | agent | tasks | n | T_max | Pass@(1,T_max) | Pass@(n,T_max) | T for half of Pass@1 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary_rows = []
    for s in surfaces:
        top1 = s.mean[0, -1]
        half = None
        if top1 > 0 and s.visibility == "hidden":
            reach = np.flatnonzero(s.mean[0] >= top1 / 2)
            half = s.ts[int(reach[0])] if reach.size else None
        row = {
            "env_id": s.env_id,
            "agent": s.label,
            "tasks": len(s.task_ids),
            "n": s.ks[-1],
            "T_max": s.ts[-1],
            "pass1": top1,
            "pass1_low": s.low[0, -1],
            "pass1_high": s.high[0, -1],
            "passn": s.mean[-1, -1],
            "half_T": half,
        }
        summary_rows.append(row)
        md.append(
            f"| {s.env_id} | {s.label} | {len(s.task_ids)} | {s.ks[-1]} | {s.ts[-1]} | "
            f"{top1:.3f} [{s.low[0, -1]:.3f}, {s.high[0, -1]:.3f}] | {s.mean[-1, -1]:.3f} | "
            f"{'-' if half is None else half} |"
        )
        for note in s.notes:
            md.append(f"|  | note: {note} | | | | | | |")
    path = out / "summary.csv"
    _write_dicts(path, summary_rows)
    tables.append(path)

    # ---- Pass@(1,T) at a few budgets
    md += ["", "### Pass@(1,T) by budget", ""]
    for env_id in sorted({s.env_id for s in surfaces}):
        group = [s for s in surfaces if s.env_id == env_id]
        ts = sorted(set().union(*[set(s.ts) for s in group]))
        shown = sorted({ts[int(round(i))] for i in np.linspace(0, len(ts) - 1, min(len(ts), 6))})
        md += [
            f"**{env_id}**",
            "",
            "| agent | " + " | ".join(f"T={t}" for t in shown) + " |",
            "|---|" + "---|" * len(shown),
        ]
        for s in group:
            cells = [f"{s.mean[0, s.ts.index(t)]:.2f}" if t in s.ts else "n/a" for t in shown]
            md.append(f"| {s.label} | " + " | ".join(cells) + " |")
        md.append("")

    # ---- single-step accuracy
    acc_rows = []
    for (env_id, agent, vis), recs in sorted(_all_groups(records).items()):
        acc = single_step_accuracy(recs)
        if acc["on_policy"] is None and acc["prefix"] is None:
            continue
        acc_rows.append({"env_id": env_id, "agent": _label(agent, vis), "visibility": vis, **acc})
    if acc_rows:
        md += [
            "## Single-step accuracy",
            "",
            "Share of turns whose action is an oracle action: on the agent's own trajectories "
            "(on-policy) and from oracle-prefix states (the oracle plays t turns, the agent "
            "picks one action); progress = the action lowered the oracle cost-to-go.",
            "",
            "| env | agent | on-policy | turns | oracle-prefix | states | prefix progress |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in acc_rows:
            md.append(
                f"| {r['env_id']} | {r['agent']} | {_fmt(r['on_policy'])} | {r['on_policy_turns']} | "
                f"{_fmt(r['prefix'])} | {r['prefix_states']} | {_fmt(r['prefix_progress'])} |"
            )
        path = out / "single_step.csv"
        _write_dicts(path, acc_rows)
        tables.append(path)
        md.append("")

    # ---- recovery
    rec_rows = []
    for (env_id, agent, vis), recs in sorted(_groups(records).items()):
        fault_budgets = [int(r["budget"]) for r in recs if r.get("fault_turn") is not None]
        if not fault_budgets:
            continue
        t_max = max(fault_budgets)
        # Hidden runs give recovery at tighter budgets too, where it is not saturated.
        budgets = (
            sorted({max(1, t_max // 4), max(1, t_max // 2), t_max}) if vis == "hidden" else [t_max]
        )
        for row in recovery_table(recs, budgets=budgets):
            rec_rows.append(
                {"env_id": env_id, "agent": _label(agent, vis), "visibility": vis, **asdict(row)}
            )
    if rec_rows:
        md += [
            "## Recovery",
            "",
            "Success within the budget after one fault at turn t, against no fault at the same "
            "T; damage = oracle cost-to-go the fault added; extra turns = first-success turn "
            "with the fault minus without it (tasks solved both ways).",
            "",
            "| env | agent | fault turn | T | episodes | fired | success | no-fault success | damage | extra turns | unrecoverable |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rec_rows:
            md.append(
                f"| {r['env_id']} | {r['agent']} | {r['fault_turn']} | {r['budget']} | {r['episodes']} | "
                f"{r['fired']:.2f} | {r['success']:.3f} | {_fmt(r['baseline_success'])} | "
                f"{_fmt(r['damage'], 2)} | {_fmt(r['extra_turns'], 2)} | {r['unrecoverable']} |"
            )
        path = out / "recovery.csv"
        _write_dicts(path, rec_rows)
        tables.append(path)
        md.append("")

    cell_md, cell_rows = recovery_by_cell_markdown(records)
    if cell_rows:
        md += cell_md
        path = out / "recovery_by_cell.csv"
        _write_dicts(path, cell_rows)
        tables.append(path)
    prefix_md, prefix_rows = prefix_markdown(records)
    if prefix_rows:
        md += prefix_md
        path = out / "prefix_recovery.csv"
        _write_dicts(path, prefix_rows)
        tables.append(path)

    if errors:
        md += [
            "## Errors",
            "",
            "Episodes that ended in an agent or endpoint error (not counted as failures):",
            "",
        ]
        for r in errors[:20]:
            md.append(
                f"- {r['env_id']} {r['agent']} {r['task_id']} sample {r.get('sample', '-')}: {r['error'][:200]}"
            )
        md.append("")

    if figures and surfaces:
        figs += _figures(surfaces, acc_rows, rec_rows, out)
        md += ["## Figures", ""] + [f"![{p.stem}]({p.name})" for p in figs] + [""]

    text = "\n".join(md)
    md_path = out / "report.md"
    md_path.write_text(text, encoding="utf-8")
    return ReportResult(out_dir=out, markdown=md_path, tables=tables, figures=figs, text=text)


def _all_groups(
    records: Sequence[dict[str, Any]],
) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault((r["env_id"], r["agent"], r.get("visibility", "hidden")), []).append(r)
    return out


def _write_dicts(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        if not rows:
            return
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in row.items()})


def _figures(
    surfaces: list[GroupSurface], acc_rows: list[dict], rec_rows: list[dict], out: Path
) -> list[Path]:
    Figure = _figure_module()
    from matplotlib.ticker import MaxNLocator

    paths = []
    for env_id in sorted({s.env_id for s in surfaces}):
        group = [s for s in surfaces if s.env_id == env_id]
        slug = _slug(env_id.split("/")[-1])
        # heatmaps
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
        paths.append(_save(fig, out / f"{slug}_heatmap.png"))
        # Pass@(1,T)
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
        ax.set(
            xlabel="T (turn budget)",
            ylabel="Pass@(1,T)",
            ylim=(-0.02, 1.02),
            title=f"{env_id}: Pass@(1,T), 95% CI",
        )
        ax.legend(fontsize=8)
        paths.append(_save(fig, out / f"{slug}_pass1_vs_T.png"))
        # Pass@(K,T_max)
        fig = Figure(figsize=(6, 4), layout="constrained")
        ax = fig.subplots()
        for s in group:
            ax.plot(s.ks, s.mean[:, -1], "o-", label=f"{s.label} (T={s.ts[-1]})")
            ax.fill_between(s.ks, s.low[:, -1], s.high[:, -1], alpha=0.2)
        ax.set(
            xlabel="K (samples)",
            ylabel="Pass@(K,T_max)",
            ylim=(-0.02, 1.02),
            title=f"{env_id}: Pass@(K,T_max), 95% CI",
        )
        ax.legend(fontsize=8)
        paths.append(_save(fig, out / f"{slug}_passK_at_Tmax.png"))
        # single-step accuracy
        rows = [r for r in acc_rows if r["env_id"] == env_id]
        if rows:
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
            paths.append(_save(fig, out / f"{slug}_single_step.png"))
        rows = [r for r in rec_rows if r["env_id"] == env_id]
        if rows:
            budgets = sorted({r["budget"] for r in rows})
            fig = Figure(figsize=(4.2 * len(budgets), 3.8), layout="constrained")
            axes = fig.subplots(1, len(budgets), squeeze=False)[0]
            agents = sorted({r["agent"] for r in rows})
            for ax, budget in zip(axes, budgets):
                for i, agent in enumerate(agents):
                    mine = sorted(
                        (r for r in rows if r["agent"] == agent and r["budget"] == budget),
                        key=lambda r: r["fault_turn"],
                    )
                    if not mine:
                        continue
                    color = f"C{i}"
                    ax.plot(
                        [r["fault_turn"] for r in mine],
                        [r["success"] for r in mine],
                        "o-",
                        color=color,
                        label=f"{agent}: fault at t",
                    )
                    if mine[0]["baseline_success"] is not None:
                        ax.axhline(
                            mine[0]["baseline_success"],
                            color=color,
                            ls=":",
                            label=f"{agent}: no fault",
                        )
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                ax.set(
                    xlabel="fault turn t",
                    ylabel=f"success within T={budget}",
                    ylim=(-0.02, 1.02),
                    title=f"T = {budget}",
                )
            axes[-1].legend(fontsize=7)
            fig.suptitle(f"{env_id}: recovery from one fault (dotted: no fault, same T)")
            paths.append(_save(fig, out / f"{slug}_recovery.png"))
    return paths


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path


# ---------------------------------------------------------------------- compare
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
) -> list[Comparison]:
    """The difference surface B - A per env, and where B's gain holds.

    The bootstrap resamples tasks with the same draws for A and B (a paired interval). The gain
    "holds" at (K,T) when the interval's lower end is above 0. ``holds_from[K]`` is the smallest
    T from which it holds at every larger T of the shared range (None when it does not hold at
    the largest T); below it the gain has vanished.

    When both runs hold prefix probes of the two agents on the same failed prefixes (the same
    source episodes and t), the comparison adds B's success minus A's after them, with the same
    paired bootstrap over tasks, by t and by the prefix's damage (``prefix``).
    """
    surf_a = group_surfaces(records_a, n_boot=1, seed=seed)
    surf_b = group_surfaces(records_b, n_boot=1, seed=seed)
    results = []
    envs = sorted({s.env_id for s in surf_a} & {s.env_id for s in surf_b})
    if not envs:
        raise ValueError("the two runs share no env with usable records")
    for env_id in envs:
        a, b = _pick(surf_a, env_id, agent_a), _pick(surf_b, env_id, agent_b)
        if a is None or b is None:
            continue
        tasks = sorted(set(a.task_ids) & set(b.task_ids))
        ts = sorted(set(a.ts) & set(b.ts))
        ks = [k for k in a.ks if k in b.ks]
        if not tasks or not ts:
            logger.warning("%s: no shared tasks or budgets between the runs", env_id)
            continue
        ia = [a.task_ids.index(t) for t in tasks]
        ib = [b.task_ids.index(t) for t in tasks]
        ka, kb = [a.ks.index(k) for k in ks], [b.ks.index(k) for k in ks]
        ta, tb = [a.ts.index(t) for t in ts], [b.ts.index(t) for t in ts]
        diff_tasks = b.per_task[np.ix_(ib, kb, tb)] - a.per_task[np.ix_(ia, ka, ta)]
        mean, low, high = bootstrap_pass_at_kt(
            None, ks, ts, n_boot=n_boot, seed=seed, per_task=diff_tasks
        )
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
        lines = [f"{env_id}: {b.label} (B) minus {a.label} (A), {len(tasks)} shared tasks"]
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
        comp = Comparison(
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
        )
        results.append(comp)
    if out_dir is not None:
        _write_comparison(results, Path(out_dir), figures)
    return results


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


def _write_comparison(results: list[Comparison], out: Path, figures: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "difference.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["env_id", "A", "B", "K", "T", "diff", "low", "high", "holds"])
        for c in results:
            for i, k in enumerate(c.ks):
                for j, t in enumerate(c.ts):
                    w.writerow(
                        [
                            c.env_id,
                            c.label_a,
                            c.label_b,
                            k,
                            t,
                            f"{c.diff[i, j]:.6f}",
                            f"{c.low[i, j]:.6f}",
                            f"{c.high[i, j]:.6f}",
                            int(c.low[i, j] > 0),
                        ]
                    )
    prefix_rows = [{"A": c.label_a, "B": c.label_b, **asdict(r)} for c in results for r in c.prefix]
    if prefix_rows:
        _write_dicts(out / "prefix_difference.csv", prefix_rows)
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
            "| env | A | B | prefix of | t | damage | pairs | tasks | A success | B success | "
            "B - A | 95% interval |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in prefix_rows:
            t = "all" if r["prefix_turns"] < 0 else r["prefix_turns"]
            md.append(
                f"| {r['env_id']} | {r['A']} | {r['B']} | {r['source']} | {t} | {r['damage']} | "
                f"{r['pairs']} | {r['tasks']} | {r['success_a']:.3f} | {r['success_b']:.3f} | "
                f"{r['diff']:+.3f} | [{r['low']:+.3f}, {r['high']:+.3f}] |"
            )
        md.append("")
    if figures and results:
        Figure = _figure_module()
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
            name = f"{_slug(c.env_id.split('/')[-1])}_difference.png"
            fig.savefig(out / name, dpi=110)
            md.append(f"![{name}]({name})")
    (out / "compare.md").write_text("\n".join(md) + "\n", encoding="utf-8")


def recovery_by_cell_markdown(
    records: Sequence[dict[str, Any]],
) -> tuple[list[str], list[dict[str, Any]]]:
    """The "Recovery by fault cell" section (markdown lines) and its rows."""
    rows = [asdict(r) for r in recovery_by_cell(records)]
    if not rows:
        return [], []
    md = [
        "## Recovery by fault cell",
        "",
        "Success after one fault, by the fault's cell (explicit or silent, transient or "
        "permanent), with its Wilson 95% interval; no-fault success is the same agent at the "
        "same T; damage = oracle cost-to-go the fault added; unrecoverable = faults that left "
        "the task unsolvable.",
        "",
        "| env | agent | cell | kinds | episodes | success | 95% interval | no-fault success | damage | unrecoverable |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['env_id']} | {r['agent']} | {r['cell']} | {r['kinds']} | {r['episodes']} | "
            f"{r['success']:.3f} | [{r['low']:.3f}, {r['high']:.3f}] | "
            f"{_fmt(r['baseline_success'])} | {_fmt(r['damage'], 2)} | {r['unrecoverable']} |"
        )
    return md + [""], rows


def prefix_markdown(records: Sequence[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """The "Recovery from a failed prefix" section (markdown lines) and its rows."""
    rows = [asdict(r) for r in prefix_table(records, by="turns")]
    rows += [asdict(r) for r in prefix_table(records, by="damage")]
    if not rows:
        return [], []
    unreached = sum(1 for r in records if r.get("record") == "prefix" and not r.get("reached"))
    md = [
        "## Recovery from a failed prefix",
        "",
        "The first t turns of a failed episode (of the source agent) are replayed; the agent "
        "plays the remaining T - t turns. Success with its Wilson 95% interval, by t and by the "
        "prefix's damage in oracle turns (cost-to-go after the prefix + t - cost-to-go at the "
        f"start). Probes whose replay did not reach the recorded state: {unreached}.",
        "",
        "| env | agent | prefix of | t | damage | probes | success | 95% interval |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = "all" if r["prefix_turns"] < 0 else r["prefix_turns"]
        md.append(
            f"| {r['env_id']} | {r['agent']} | {r['source']} | {t} | {r['damage']} | "
            f"{r['probes']} | {r['success']:.3f} | [{r['low']:.3f}, {r['high']:.3f}] |"
        )
    return md + [""], rows
