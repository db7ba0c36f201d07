"""The report's tables: number formats, CSV files, and the markdown sections shared by reports.

Numbers come from :mod:`budget_envs.eval.metrics`; a section function returns its markdown lines
and its rows, so a report writes both the section and its CSV.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from budget_envs.eval.metrics import prefix_table, recovery_by_cell

__all__ = [
    "fmt",
    "grid_cells",
    "markdown_table",
    "prefix_markdown",
    "prefix_t",
    "recovery_by_cell_markdown",
    "slug",
    "write_dicts",
]


def fmt(x: float | None, digits: int = 3) -> str:
    """``x`` to ``digits`` decimals, or ``-`` for no value."""
    return "-" if x is None else f"{x:.{digits}f}"


def slug(text: str) -> str:
    """``text`` as a file-name part: letters and digits, the rest ``_``."""
    return "".join(c if c.isalnum() else "_" for c in text).strip("_")


def write_dicts(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as a CSV file with a header (floats to 6 decimals; no rows: an empty file);
    returns ``path``."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        if rows:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            for row in rows:
                w.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in row.items()})
    return path


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """The lines of a markdown table: the header, its rule, then one line per row.

    Example:
        >>> markdown_table(["t", "success"], [[1, "0.500"], ["all", "0.250"]])
        ['| t | success |', '|---|---|', '| 1 | 0.500 |', '| all | 0.250 |']
    """
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows),
    ]


def prefix_t(row: dict[str, Any]) -> int | str:
    """The t of a prefix row: its prefix length, or ``"all"`` for a row over every t (the rows
    by damage, whose ``prefix_turns`` is negative)."""
    return "all" if row["prefix_turns"] < 0 else row["prefix_turns"]


def grid_cells(
    ks: Sequence[int], ts: Sequence[int], mean: np.ndarray, low: np.ndarray, high: np.ndarray
) -> Iterator[tuple[int, int, str, str, str, bool]]:
    """Each (K, T) cell of a surface in long form: K, T, the value and its interval (6
    decimals) and whether the interval lies above 0."""
    for i, k in enumerate(ks):
        for j, t in enumerate(ts):
            yield (
                k,
                t,
                f"{mean[i, j]:.6f}",
                f"{low[i, j]:.6f}",
                f"{high[i, j]:.6f}",
                bool(low[i, j] > 0),
            )


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
            f"{fmt(r['baseline_success'])} | {fmt(r['damage'], 2)} | {r['unrecoverable']} |"
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
    ]
    md += markdown_table(
        ["env", "agent", "prefix of", "t", "damage", "probes", "success", "95% interval"],
        (
            [
                r["env_id"],
                r["agent"],
                r["source"],
                prefix_t(r),
                r["damage"],
                r["probes"],
                f"{r['success']:.3f}",
                f"[{r['low']:.3f}, {r['high']:.3f}]",
            ]
            for r in rows
        ),
    )
    return md + [""], rows
