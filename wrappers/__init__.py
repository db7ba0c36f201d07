"""Wrappers for any BudgetMix env (installed as ``budget_envs.wrappers``).

* :class:`BudgetWrapper` - the turn budget, drawn per episode, shown or hidden.
* :class:`ErrorInjection` - seeded faults (slip, drop, garble and each family's own).
* :class:`ProcessReward` - a per-turn progress signal from the oracle's cost-to-go.
* Budget specs: :class:`Fixed`, :class:`Uniform`, :class:`Choice`, :class:`LogUniform`,
  :class:`Schedule` and :func:`parse_budget`.
* Fault specs: :class:`FaultSpec` and :func:`parse_faults` (what ``faults=`` accepts).
"""

from __future__ import annotations

from budget_envs.wrappers.budget import VISIBILITIES, BudgetWrapper
from budget_envs.wrappers.budget_spec import (
    BudgetSpec,
    Choice,
    Fixed,
    LogUniform,
    Schedule,
    Uniform,
    budget_grid,
    parse_budget,
)
from budget_envs.wrappers.fault_spec import FAULT_KEYS, FaultSpec, parse_faults
from budget_envs.wrappers.faults import GENERIC_KINDS, ErrorInjection
from budget_envs.wrappers.process_reward import ProcessReward

__all__ = [
    "BudgetSpec",
    "BudgetWrapper",
    "Choice",
    "ErrorInjection",
    "FAULT_KEYS",
    "FaultSpec",
    "Fixed",
    "GENERIC_KINDS",
    "LogUniform",
    "ProcessReward",
    "Schedule",
    "Uniform",
    "VISIBILITIES",
    "budget_grid",
    "parse_budget",
    "parse_faults",
]
