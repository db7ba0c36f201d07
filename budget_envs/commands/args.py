"""Argument types the command line shares: integers, budget grids, JSON objects."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["grid", "ints", "json_dict"]


def ints(text: str) -> list[int]:
    """Comma-separated integers (``--fault-turns 1,2,4``)."""
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return values


def grid(text: str) -> list[int]:
    """The budgets an evaluation plays: the budget grammar read as a grid
    (:func:`budget_envs.wrappers.budget_spec.budget_grid`; ``4..12:4`` is 4, 8, 12)."""
    from budget_envs.wrappers.budget_spec import budget_grid

    try:
        return budget_grid(text.replace(" ", ""))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def json_dict(text: str) -> dict[str, Any]:
    """A JSON object (``--env-kwargs``)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value
