"""The bookkeeping of a contract check: run a rule, word its message, raise or collect.

A check opens ``with ck.rule(rule_id):`` and calls :func:`_need` on what the rule asks; a broken
rule raises :class:`~budget_envs.errors.ContractViolation` at once or becomes a :class:`Finding`
of the :class:`ContractReport`; an advisory rule warns with :class:`ContractWarning`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from budget_envs.errors import ContractViolation

from .rules import DOCS, RULES

__all__ = ["ContractReport", "ContractWarning", "Finding"]


class ContractWarning(UserWarning):
    """An advisory rule of the family contract is not met (see :data:`RULES`)."""


@dataclass(frozen=True)
class Finding:
    """A broken rule: its id, the message, and whether it only warns."""

    rule: str
    message: str
    advisory: bool = False


@dataclass(frozen=True)
class ContractReport:
    """What :func:`check_family` found.

    Attributes:
        env: the id or class name checked.
        passed: the rules that ran and held, in check order.
        findings: every broken rule (advisory ones included), in the order found.
        not_run: rules left out, with why (a missing hook stops the checks that play).
    """

    env: str
    passed: tuple[str, ...]
    findings: tuple[Finding, ...]
    not_run: tuple[str, ...] = ()

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.advisory)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.advisory)

    @property
    def ok(self) -> bool:
        """No required rule is broken (warnings allowed)."""
        return not self.failures

    def __str__(self) -> str:
        counts = len(self.passed), len(self.failures), len(self.warnings)
        head = "{}: {} rules held, {} broken, {} warnings".format(self.env, *counts)
        return "\n".join([head, *(f"  {f.message}" for f in self.findings), *self.not_run])


# ---------------------------------------------------------------------- bookkeeping
def _need(condition: Any, detail: str) -> None:
    """Break the rule being checked (see :meth:`_Checker.rule`) unless ``condition`` holds."""
    if not condition:
        raise ContractViolation(detail)


class _Checker:
    """Runs rules, words their messages, raises or collects."""

    def __init__(self, subject: str, raise_on_fail: bool) -> None:
        self.subject = subject
        self.raise_on_fail = raise_on_fail
        self.ran: list[str] = []
        self.findings: list[Finding] = []
        self.not_run: list[str] = []

    @contextmanager
    def rule(self, rule_id: str, guard: bool = False) -> Iterator[None]:
        """Check ``rule_id`` in the ``with`` body: a :func:`_need` that fails, or any exception,
        breaks it (raised at once, or collected). A ``guard`` only catches crashes between the
        rules it holds: it does not count as checking ``rule_id``."""
        if not guard and rule_id not in self.ran:
            self.ran.append(rule_id)
        try:
            yield
        except ContractViolation as exc:
            if exc.rule:  # worded by an inner rule already
                raise
            self.fail(rule_id, str(exc))
        except Exception as exc:  # a crash inside a check is that rule broken
            self.fail(rule_id, f"raised {type(exc).__name__}: {str(exc)[:300]}", exc)

    def fail(self, rule_id: str, detail: str, cause: BaseException | None = None) -> None:
        where = f"{DOCS}#{RULES[rule_id].section}"
        text = f"[{rule_id}] {self.subject}: {detail.rstrip('.')}. See {where}"
        if RULES[rule_id].advisory:
            warnings.warn(text, ContractWarning, stacklevel=2)
        elif self.raise_on_fail:
            raise ContractViolation(text, rule_id) from cause
        self.findings.append(Finding(rule_id, text, advisory=RULES[rule_id].advisory))

    def broken(self, prefix: str = "") -> bool:
        return any(f.rule.startswith(prefix) and not f.advisory for f in self.findings)

    def report(self) -> ContractReport:
        failed = {f.rule for f in self.findings}
        passed = tuple(r for r in self.ran if r not in failed)
        return ContractReport(self.subject, passed, tuple(self.findings), tuple(self.not_run))
