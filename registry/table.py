"""The one table of BudgetMix env ids.

Each row names an id, the env class that implements it, the default turn budget that
``gymnasium.make(id)`` wraps it in, a one-line description, and default constructor kwargs.
``budget_envs.registry.register_envs()`` registers every row; adding a row is all it takes to
publish an id (the registry-parametrized tests pick it up at once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class EnvEntry:
    """One registered id.

    Attributes:
        id: ``Namespace/Name-vN``.
        entry_point: ``"module:Class"`` of the bare env (a callable is allowed for tests).
        default_budget: the budget spec ``gymnasium.make(id)`` uses when ``budget=`` is not given.
        description: one line for ``budgetmix list`` and the README.
        kwargs: default constructor kwargs of the bare env.
        requires: the pip extra the family needs beyond the core install ("" when none).
    """

    id: str
    entry_point: str | Callable[..., Any]
    default_budget: Any
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    requires: str = ""


#: Every product env id. Families add their rows here.
ENV_TABLE: tuple[EnvEntry, ...] = (
)
