"""What ``budgetmix demo`` computes (``budgetmix demo`` itself, which prints, is
:mod:`budget_envs.commands.demo`).

The demo plays three reference agents (random, the oracle, the oracle with ``epsilon`` random
turns) on one id of every registered family: a hidden-budget run at the family's ``T_max`` with
fault and single-step probes, and a run with the budget shown at three budgets. It writes one
report over both, the random-vs-noisy-oracle comparison, and, unless told not to, trains a pair
of policies with the study's stages (:func:`budget_envs.study.demo_spec`).

Nothing here prints: the command shows the results.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PairRun",
    "demo_env_ids",
    "demo_plans",
    "middle_budget_rows",
    "noisy_oracle",
    "probe_envs",
    "reference_reports",
    "run_pair",
    "spread_tasks",
    "summary",
    "t_max",
]

#: The report sections the demo's summary shows (with the Pass@(K,T) table before them).
SUMMARY_SECTIONS = ("## Single-step accuracy", "## Recovery")


def demo_env_ids() -> tuple[list[str], str]:
    """The first id of every product family (every registered id when the table is empty),
    and how to name them."""
    from budget_envs.registry import ENV_TABLE, registered_ids

    if ENV_TABLE:
        ids, seen = [], set()
        for entry in ENV_TABLE:
            fam = entry.family
            if fam not in seen:
                seen.add(fam)
                ids.append(entry.id)
        return ids, "product families"
    return registered_ids(), "registered ids (no product family is registered yet)"


def probe_envs(env_ids: Sequence[str], *, seed: int) -> tuple[list[str], list[tuple[str, str]]]:
    """The ids whose env resets and takes a turn, and ``(id, why)`` for those that cannot."""
    from budget_envs.eval.runner import transcript

    usable, skipped = [], []
    for env_id in env_ids:
        try:
            transcript(env_id, seed=seed, max_turns=1)
        except Exception as exc:  # the demo reports any env that cannot run, and carries on
            skipped.append((env_id, f"{type(exc).__name__}: {exc}"))
        else:
            usable.append(env_id)
    return usable, skipped


def t_max(env_id: str, max_turns: int | None) -> int:
    """The env's ``T_max``, capped at ``max_turns`` when given."""
    from budget_envs.eval.runner import default_t_max

    t = default_t_max(env_id)
    return min(t, max_turns) if max_turns else t


def spread_tasks(env_id: str, count: int) -> list[int]:
    """``count`` task indices spread evenly over the env's task list (easy to hard levels)."""
    import gymnasium as gym

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(env_id, budget=None)
    try:
        total = len(env.unwrapped.task_ids)
    finally:
        env.close()
    if count >= total:
        return list(range(total))
    return sorted({int(round(i)) for i in np.linspace(0, total - 1, count)})


def noisy_oracle(epsilon: float) -> tuple[str, str]:
    """The name and spec of the oracle with ``epsilon`` random turns.

    >>> noisy_oracle(0.3)
    ('oracle-eps0.3', 'oracle:epsilon=0.3')
    """
    return f"oracle-eps{epsilon:g}", f"oracle:epsilon={epsilon}"


def demo_plans(
    env_id: str,
    *,
    epsilon: float,
    tasks: int,
    samples: int,
    fault_turns: Sequence[int],
    probe_states: int,
    seed: int,
    max_turns: int | None = None,
) -> list[tuple[str, Any]]:
    """``("hidden", plan)`` and ``("visible", plan)``: the env's two runs.

    The hidden run plays random, the oracle and the noisy oracle at ``T_max`` with fault and
    single-step probes; the visible one plays the noisy oracle at ``T_max`` / 4, / 2 and 1
    with the remaining turns shown.
    """
    from budget_envs.eval.runner import EvalPlan

    t = t_max(env_id, max_turns)
    picked = spread_tasks(env_id, tasks)
    noisy, noisy_spec = noisy_oracle(epsilon)
    hidden = EvalPlan(
        env_ids=[env_id],
        agents={"random": "random", "oracle": "oracle", noisy: noisy_spec},
        tasks=picked,
        samples=samples,
        budgets=[t],
        visibility="hidden",
        fault_turns=list(fault_turns),
        probe_states=probe_states,
        seed=seed,
    )
    visible = EvalPlan(
        env_ids=[env_id],
        agents={noisy: noisy_spec},
        tasks=picked,
        samples=samples,
        budgets=sorted({max(1, t // 4), max(1, t // 2), t}),
        visibility="remaining",
        seed=seed,
    )
    return [("hidden", hidden), ("visible", visible)]


def reference_reports(
    records: Sequence[dict[str, Any]], out_dir: Path, *, epsilon: float, figures: bool
) -> tuple[Any, list[Any]]:
    """The report of the reference runs in ``out_dir`` and the comparison of the noisy oracle
    against random in ``out_dir/compare`` (empty when the two cannot be paired)."""
    from budget_envs.eval.report import compare_runs, write_report

    report = write_report(
        records, out_dir, title="BudgetMix demo: reference agents", figures=figures
    )
    try:
        comps = compare_runs(
            records,
            records,
            out_dir / "compare",
            agent_a="random",
            agent_b=noisy_oracle(epsilon)[0],
            figures=figures,
        )
    except ValueError:
        comps = []
    return report, comps


def summary(report_text: str) -> str:
    """The report's Pass@(K,T) table and, at the middle budget, its single-step and recovery
    tables: what the demo shows of a report."""
    lines = report_text.splitlines()
    a = lines.index("## Pass@(K,T)")
    b = next((i for i in range(a + 1, len(lines)) if lines[i].startswith("### ")), len(lines))
    parts = ["\n".join(lines[a:b]).rstrip()]
    for section in SUMMARY_SECTIONS:
        if section in lines:
            a = lines.index(section)
            b = next(
                (i for i in range(a + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
            )
            table = [line for line in lines[a:b] if line.startswith("|")]
            if section == "## Recovery":
                table = table[:2] + middle_budget_rows(table[2:])
                section += " (at the middle budget; every budget is in the report)"
            parts.append(f"\n{section}\n" + "\n".join(table))
    return "\n".join(parts)


def middle_budget_rows(rows: list[str]) -> list[str]:
    """Recovery table rows at each env's middle budget (column 4 is T).

    >>> rows = [f"| toy | a | 1 | {t} | 0.5 |" for t in (4, 8, 16)]
    >>> middle_budget_rows(rows)
    ['| toy | a | 1 | 8 | 0.5 |']
    """
    budgets: dict[str, set[int]] = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        budgets.setdefault(cells[0], set()).add(int(cells[3]))
    keep = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        ts = sorted(budgets[cells[0]])
        if int(cells[3]) == ts[len(ts) // 2]:
            keep.append(row)
    return keep


@dataclass
class PairRun:
    """The trained pair's results: the study report, the pair's summary
    (:func:`budget_envs.study.pair_summary`), whether an earlier demo's records were reused,
    and the seconds it took."""

    report: Any
    pair: Any
    reused: bool
    seconds: float


def run_pair(
    spec: Any,
    folder: Path,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    workers: int = 2,
    figures: bool = True,
) -> PairRun:
    """The study's train, eval, compare and report stages on ``spec``
    (:func:`budget_envs.study.demo_spec`) into ``folder``, then the pair's summary."""
    from budget_envs import study

    start = time.perf_counter()
    reused = any((folder / "records").glob("*.jsonl.gz"))
    report = study.run_study(
        spec, folder, folder / "study.md", progress=progress, workers=workers, figures=figures
    )
    pair = study.pair_summary(spec, folder)
    return PairRun(report, pair, reused, time.perf_counter() - start)
