"""Check an env family against every rule of the family contract, in one place.

:func:`check_family` is to a BudgetMix family what Gymnasium's ``check_env`` is to an env: it
builds the family's env, plays a few short seeded episodes and checks each rule of
:data:`RULES` (the hooks a family fills, the oracle, faults and their cells, snapshots and state
hashes, held-out splits, candidate actions, the ``info`` types of :mod:`budget_envs.info`,
determinism and bad input). A broken rule raises :class:`~budget_envs.errors.ContractViolation`
whose message starts with the rule's id, names what is wrong or missing and the section of
``docs/extending.md`` to read; an advisory rule (``splits.accepted``) warns with
:class:`ContractWarning` instead. ``raise_on_fail=False`` runs every check and returns the
findings in a :class:`ContractReport`.

Example:
    >>> from budget_envs.contract import check_family
    >>> small = {"level": 1, "tasks_per_level": 2}
    >>> report = check_family("BudgetMix/ToolUse-v0", env_kwargs=small)
    >>> report.ok, "oracle.wins" in report.passed
    (True, True)
"""

from __future__ import annotations

from .check import check_family
from .checker import ContractReport, ContractWarning, Finding
from .episodes import BAD_ACTIONS as BAD_ACTIONS
from .episodes import MUST_REJECT as MUST_REJECT
from .rules import RULES, Rule

__all__ = ["RULES", "ContractReport", "ContractWarning", "Finding", "Rule", "check_family"]
