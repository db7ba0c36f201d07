"""Ratios between benchmarks of the same run.

A benchmark declares its role with ``benchmark.extra_info``: ``{"compare": NAME, "role": ROLE}``
(NAME may be a list: the benchmark then takes that role in each comparison, and a ``goal`` may
be a dict by NAME) where ROLE is ``"ours"``, ``"baseline"`` (the raw upstream path) or ``"bare"`` (the path both
wrap). At the end of the run every comparison NAME is reported as ours / baseline; when a bare
path is present too, as the ratio of overheads (ours - bare) / (baseline - bare). The fastest
round is used: on a shared machine it is the least disturbed measurement. A benchmark whose
timed call holds setup it cannot leave out (``budgetmix train`` starts Ray and builds its
algorithm) gives its own figure as ``extra_info["seconds_per_call"]``.
"""

from __future__ import annotations

import json
import os
import pathlib


def _rows(config):
    session = getattr(config, "_benchmarksession", None)
    if session is None:
        return {}
    groups: dict[str, dict[str, float]] = {}
    goals: dict[str, str] = {}
    for bench in session.benchmarks:
        extra = bench.extra_info or {}
        names = extra.get("compare")
        if not names or bench.stats is None:
            continue
        per_call = extra.get("seconds_per_call") or bench.stats.min / max(
            int(extra.get("calls", 1)), 1
        )
        for name in [names] if isinstance(names, str) else names:
            groups.setdefault(name, {})[extra.get("role", "ours")] = per_call
            goal = extra.get("goal")
            goal = goal.get(name) if isinstance(goal, dict) else goal
            if goal:
                goals[name] = goal
    rows = {}
    for name, roles in sorted(groups.items()):
        if "ours" not in roles or "baseline" not in roles:
            continue
        row = {
            "ours_s": roles["ours"],
            "baseline_s": roles["baseline"],
            "goal": goals.get(name, ""),
        }
        if "bare" in roles:
            over_ours = roles["ours"] - roles["bare"]
            over_base = roles["baseline"] - roles["bare"]
            row["bare_s"] = roles["bare"]
            row["ratio"] = over_ours / over_base if over_base > 0 else float("inf")
            row["kind"] = "overhead ratio"
        else:
            row["ratio"] = roles["ours"] / roles["baseline"]
            row["kind"] = "time ratio"
        rows[name] = row
    return rows


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = _rows(config)
    if not rows:
        return
    terminalreporter.section("budget-envs ratios (same run)")
    for name, row in rows.items():
        terminalreporter.write_line(
            f"{name:40s} {row['kind']:15s} {row['ratio']:8.3f}   "
            f"ours {row['ours_s'] * 1e6:10.3f} us  baseline {row['baseline_s'] * 1e6:10.3f} us"
            + (f"  bare {row['bare_s'] * 1e6:10.3f} us" if "bare_s" in row else "")
            + (f"   goal: {row['goal']}" if row["goal"] else "")
        )
    out = os.environ.get("BUDGET_ENVS_BENCH_RATIOS")
    if out:
        pathlib.Path(out).write_text(json.dumps(rows, indent=2))
