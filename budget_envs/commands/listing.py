"""``budgetmix list``: the registered env ids, their families, default budgets and extras."""

from __future__ import annotations

import argparse
from typing import TextIO

__all__ = ["cmd_list"]


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    from budget_envs.registry import entry_for, registered_ids

    ids = registered_ids()
    if not ids:
        print("No BudgetMix env is registered yet.", file=out)
        return 0
    entries = [entry_for(env_id) for env_id in ids]
    width = max(len(e.id) for e in entries)
    fwidth = max(len(e.family) for e in entries if e.family != e.id) if entries else 0
    for entry in entries:
        family = "" if entry.family == entry.id else entry.family
        extra = f"  [needs budget-envs[{entry.requires}]]" if entry.requires else ""
        print(
            f"{entry.id:<{width}}  {family:<{fwidth}}  T={entry.default_budget!s:<8} "
            f"{entry.description}{extra}",
            file=out,
        )
    prepared = sorted({e.family for e in entries if e.prepare is not None}, key=str.lower)
    if prepared:
        print(
            "\nFamilies with files to prepare ahead (budgetmix prepare FAMILY): "
            + ", ".join(prepared),
            file=out,
        )
    return 0
