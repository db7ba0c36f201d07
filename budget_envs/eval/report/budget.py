"""What a turn buys: the smallest budget T that keeps a share of an agent's success.

For each (env, agent, visibility) surface, :func:`budget_answers` finds the smallest T with
``Pass@1(T) >= keep * Pass@1(T_max)`` (every T up to T_max for budget-hidden runs, only the T a
budget-visible run played), a 95% task-bootstrap interval on that T, the Pass@1 each extra turn
adds, and, where the records hold them, what a turn and a success cost (tokens, seconds).

A resample in which the agent wins nothing at T_max has no T to keep: it counts as "never
reached", so an interval whose upper end is such a resample reads ``> T_max``.

Cost at T in a budget-hidden run: an episode played to T_max would have stopped at
``min(turns, T)``, so its turns at T are known exactly; a turn's cost is the run's mean (the
sum of tokens, or of seconds, over the sum of turns of its episodes), so the cost of an episode
at T is that mean times its turns at T, and a success at T costs the mean episode cost at T over
Pass@1(T).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs.eval.report.surfaces import GroupSurface, groups
from budget_envs.eval.report.tables import markdown_table, slug

__all__ = [
    "DEFAULT_KEEP",
    "BudgetAnswer",
    "budget_answers",
    "budget_curve_rows",
    "budget_figure",
    "budget_markdown",
    "check_keep",
]

#: The share of Pass@1(T_max) a report asks T to keep unless told otherwise.
DEFAULT_KEEP = 0.95


def check_keep(keep: Any) -> float:
    """``keep`` as a float in (0, 1], else a ValueError."""
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0 < keep <= 1:
        raise ValueError(f"keep must be a share in (0, 1], got {keep!r}")
    return float(keep)


@dataclass
class BudgetAnswer:
    """The budget answer of one (env, agent, visibility) surface."""

    env_id: str
    agent: str
    visibility: str
    keep: float
    tasks: int
    ts: list[int]
    pass1: list[float]
    low: list[float]
    high: list[float]
    #: Pass@1 added per extra turn at each T (from the T before it; from 0 at the first T).
    marginal: list[float]
    #: The smallest T keeping ``keep`` of Pass@1(T_max); None when nothing is won at T_max.
    t_keep: int | None
    #: 95% task-bootstrap interval on ``t_keep``; a None upper end: never reached (> T_max).
    t_low: int | None
    t_high: int | None
    #: Mean tokens and seconds an episode spends at each T (None where the records hold none).
    tokens: list[float | None] = field(default_factory=list)
    seconds: list[float | None] = field(default_factory=list)
    tokens_per_turn: float | None = None
    seconds_per_turn: float | None = None

    @property
    def t_max(self) -> int:
        return self.ts[-1]

    def per_success(self, costs: list[float | None], t: int) -> float | None:
        """Cost of one success at ``t`` (an episode's mean cost over Pass@1(t))."""
        j = self.ts.index(t)
        cost, p = costs[j], self.pass1[j]
        return None if cost is None or p <= 0 else cost / p

    def interval_text(self) -> str:
        if self.t_keep is None:
            return "-"
        high = f"> {self.t_max}" if self.t_high is None else str(self.t_high)
        return f"[{self.t_low}, {high}]"

    def top_gains(self, n: int = 2) -> list[tuple[int, float]]:
        """The ``n`` largest positive per-turn gains, as (T, gain), largest first."""
        order = sorted(range(len(self.ts)), key=lambda j: (-round(self.marginal[j], 9), self.ts[j]))
        return [(self.ts[j], self.marginal[j]) for j in order[:n] if self.marginal[j] > 0]

    def sentence(self) -> str:
        """One sentence a lead can paste."""
        head = f"{self.agent} on {self.env_id} ({self.tasks} tasks)"
        if self.t_keep is None:
            return f"{head} wins nothing at T={self.t_max}: no budget keeps any success."
        p_max = self.pass1[-1]
        j = self.ts.index(self.t_keep)
        text = (
            f"{head} keeps {self.keep:.0%} of its Pass@1 at T={self.t_max} "
            f"({p_max:.3f}) from T={self.t_keep} {self.interval_text()} "
            f"(Pass@1 {self.pass1[j]:.3f} there)"
        )
        gains = self.top_gains()
        if gains:
            text += "; the largest gains per extra turn are " + " and ".join(
                f"{g:+.3f} at T={t}" for t, g in gains
            )
        costs = []
        for unit, per_turn, per_episode in (
            ("tokens", self.tokens_per_turn, self.tokens),
            ("s", self.seconds_per_turn, self.seconds),
        ):
            if per_turn is not None:
                each = self.per_success(per_episode, self.t_keep)
                there = (
                    "" if each is None else f" ({_num(each)} {unit} per success at T={self.t_keep})"
                )
                costs.append(f"{_num(per_turn)} {unit}{there}")
        if costs:
            text += "; a turn costs " + " and ".join(costs)
        return text + "."


def _num(x: float) -> str:
    """A cost: whole numbers with thousands separators from 100 up, else 3 significant digits."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _t_keep(curve: np.ndarray, keep: float) -> int | None:
    """Index of the first T whose Pass@1 keeps ``keep`` of the last; None if the last is 0."""
    top = float(curve[-1])
    if top <= 0:
        return None
    return int(np.flatnonzero(curve >= keep * top - 1e-12)[0])


def _costs(
    records: Sequence[dict[str, Any]], s: GroupSurface
) -> tuple[list[float | None], list[float | None], float | None, float | None]:
    """Mean tokens and seconds of an episode at each T of ``s``, and per turn."""
    eps = [r for r in records if r.get("fault_turn") is None and not r.get("error")]
    tokens: list[float | None] = []
    seconds: list[float | None] = []
    per_turn: dict[str, float | None] = {}
    top = [r for r in eps if int(r["budget"]) == s.ts[-1]] if s.visibility == "hidden" else eps
    for what, get in (
        ("tokens", lambda r: sum((r.get("tokens") or {}).get(k, 0) for k in _TOKEN_KEYS)),
        ("seconds", lambda r: r.get("wall_time")),
    ):
        have = [r for r in top if int(r.get("turns") or 0) > 0 and get(r)]
        turns = sum(int(r["turns"]) for r in have)
        per_turn[what] = sum(float(get(r)) for r in have) / turns if have else None
    for t in s.ts:
        at = top if s.visibility == "hidden" else [r for r in eps if int(r["budget"]) == t]
        used = [min(int(r.get("turns") or 0), t) for r in at]
        mean_turns = sum(used) / len(used) if used else None
        for costs, what in ((tokens, "tokens"), (seconds, "seconds")):
            unit = per_turn[what]
            costs.append(None if unit is None or mean_turns is None else unit * mean_turns)
    return tokens, seconds, per_turn["tokens"], per_turn["seconds"]


_TOKEN_KEYS = ("prompt_tokens", "completion_tokens")


def budget_answers(
    surfaces: Sequence[GroupSurface],
    records: Sequence[dict[str, Any]],
    *,
    keep: float = DEFAULT_KEEP,
    n_boot: int = 1000,
    seed: int = 0,
) -> list[BudgetAnswer]:
    """The budget answer of every surface (see the module's docstring)."""
    keep = check_keep(keep)
    by_group = groups(records)
    out = []
    for s in surfaces:
        curve = s.per_task[:, 0, :]  # (tasks, T): Pass@1 per task
        mean = curve.mean(axis=0)
        marginal = np.diff(np.concatenate([[0.0], mean])) / np.diff([0, *s.ts])
        j = _t_keep(mean, keep)
        t_low = t_high = None
        rng = np.random.default_rng(seed)
        idx = rng.integers(len(s.task_ids), size=(max(1, int(n_boot)), len(s.task_ids)))
        drawn = curve[idx].mean(axis=1)  # (resamples, T)
        band = np.percentile(drawn, [2.5, 97.5], axis=0)
        if j is not None:
            found = [_t_keep(c, keep) for c in drawn]
            values = np.array([np.inf if i is None else s.ts[i] for i in found], dtype=float)
            low, high = np.percentile(values, [2.5, 97.5], method="nearest")
            t_low = int(low) if np.isfinite(low) else None
            t_high = int(high) if np.isfinite(high) else None
        tokens, seconds, tpt, spt = _costs(by_group.get((s.env_id, s.agent, s.visibility), []), s)
        out.append(
            BudgetAnswer(
                env_id=s.env_id,
                agent=s.label,
                visibility=s.visibility,
                keep=keep,
                tasks=len(s.task_ids),
                ts=list(s.ts),
                pass1=[float(x) for x in mean],
                low=[float(x) for x in band[0]],
                high=[float(x) for x in band[1]],
                marginal=[float(x) for x in marginal],
                t_keep=None if j is None else s.ts[j],
                t_low=t_low,
                t_high=t_high,
                tokens=tokens,
                seconds=seconds,
                tokens_per_turn=tpt,
                seconds_per_turn=spt,
            )
        )
    return out


def budget_curve_rows(answers: Sequence[BudgetAnswer]) -> list[dict[str, Any]]:
    """One row per env, agent and T (``budget_curve.csv``)."""
    rows = []
    for a in answers:
        for j, t in enumerate(a.ts):
            rows.append(
                {
                    "env_id": a.env_id,
                    "agent": a.agent,
                    "visibility": a.visibility,
                    "T": t,
                    "pass1": a.pass1[j],
                    "low": a.low[j],
                    "high": a.high[j],
                    "kept": a.pass1[j] / a.pass1[-1] if a.pass1[-1] > 0 else None,
                    "gain_per_turn": a.marginal[j],
                    "keeps": int(a.t_keep is not None and t >= a.t_keep),
                    "tokens_per_episode": a.tokens[j],
                    "seconds_per_episode": a.seconds[j],
                    "tokens_per_success": a.per_success(a.tokens, t),
                    "seconds_per_success": a.per_success(a.seconds, t),
                }
            )
    return rows


def _cost(x: float | None) -> str:
    return "-" if x is None else _num(x)


def budget_markdown(answers: Sequence[BudgetAnswer], keep: float) -> list[str]:
    """The report's "What a turn buys" section."""
    md = [
        "## What a turn buys",
        "",
        f"The smallest T whose Pass@1 keeps {keep:.0%} of Pass@1 at T_max, with a 95% "
        "bootstrap interval over tasks (`> T_max`: some resamples win nothing at T_max); the "
        "largest Pass@1 gains per extra turn; what a turn costs and what a success costs at "
        "that T (tokens and seconds, where the records hold them). Every T is in "
        "`budget_curve.csv`.",
        "",
    ]
    rows = []
    for a in answers:
        t = a.t_keep
        gains = ", ".join(f"{g:+.3f} at T={tt}" for tt, g in a.top_gains()) or "-"
        rows.append(
            [
                a.env_id,
                a.agent,
                a.tasks,
                a.t_max,
                f"{a.pass1[-1]:.3f}",
                "-" if t is None else t,
                a.interval_text(),
                gains,
                _cost(a.tokens_per_turn),
                _cost(a.seconds_per_turn),
                "-" if t is None else _cost(a.per_success(a.tokens, t)),
            ]
        )
    md += markdown_table(
        [
            "env",
            "agent",
            "tasks",
            "T_max",
            "Pass@1(T_max)",
            f"T keeping {keep:.0%}",
            "95% interval",
            "largest gains per turn",
            "tokens / turn",
            "s / turn",
            "tokens / success there",
        ],
        rows,
    )
    md += [""] + [f"- {a.sentence()}" for a in answers] + [""]
    return md


def budget_figure(answers: Sequence[BudgetAnswer], out: Path, name: str) -> Path | None:
    """Pass@1 against T per env (one line per agent, its interval shaded), each agent's T
    keeping the share marked with its interval; written as ``out/name``."""
    from budget_envs.eval.report.figures import figure_class, save

    envs = sorted({a.env_id for a in answers})
    if not envs:
        return None
    Figure = figure_class()
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(5.2 * len(envs), 3.8), layout="constrained")
    axes = fig.subplots(1, len(envs), squeeze=False)[0]
    for ax, env_id in zip(axes, envs):
        for a in (x for x in answers if x.env_id == env_id):
            (line,) = ax.plot(a.ts, a.pass1, marker=".", label=a.agent)
            ax.fill_between(a.ts, a.low, a.high, color=line.get_color(), alpha=0.15)
            if a.t_keep is not None:
                y = a.pass1[a.ts.index(a.t_keep)]
                hi = a.t_max if a.t_high is None else a.t_high
                ax.errorbar(
                    [a.t_keep],
                    [y],
                    xerr=[[a.t_keep - a.t_low], [hi - a.t_keep]],
                    fmt="o",
                    color=line.get_color(),
                    capsize=3,
                )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel="T (turn budget)", ylabel="Pass@1", ylim=(-0.02, 1.02))
        ax.set_title(f"{env_id}: T keeping {answers[0].keep:.0%} (dot, interval)", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    return save(fig, out / f"{slug(name)}.png")
