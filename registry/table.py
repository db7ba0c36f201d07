"""The one table of BudgetMix env ids.

Each row names an id, the env class that implements it, the default turn budget that
``gymnasium.make(id)`` wraps it in, a one-line description, and default constructor kwargs.
``budget_envs.registry.register_envs()`` registers every row; adding a row is all it takes to
publish an id (the registry-parametrized tests pick it up at once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


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
    EnvEntry(
        id="BudgetMix/WebShop-v0",
        entry_point="budget_envs.envs.webshop:WebShopEnv",
        default_budget=40,
        description="WebShop-style shopping over HTTP: search and buy from 10,000 generated "
        "products (levels 1-5, 3 to 30 optimal turns)",
        kwargs={},
    ),
    EnvEntry(
        id="BudgetMix/ToolUse-v0",
        entry_point="budget_envs.envs.tooluse:ToolUseEnv",
        default_budget=40,
        description="OpenAI-style tool calls over a generated SQLite back office: support "
        "tickets (levels 1-5, 3 to 39 optimal calls), exact oracle",
        kwargs={},
    ),
    EnvEntry(
        id="BudgetMix/TextWorld-v0",
        entry_point="budget_envs.envs.textworld:TextWorldEnv",
        default_budget=40,
        description="TextWorld custom quests generated offline (levels 1-5, 3 to ~25 optimal "
        "turns), exact oracle on small games",
        kwargs={},
        requires="textworld",
    ),
    EnvEntry(
        id="BudgetMix/TextWorld-CoinCollector-v0",
        entry_point="budget_envs.envs.textworld:CoinCollectorEnv",
        default_budget=60,
        description="TextWorld coin collector: walk a chain of rooms to the coin (3 to 45 turns), "
        "exact oracle",
        kwargs={},
        requires="textworld",
    ),
    EnvEntry(
        id="BudgetMix/TextWorld-TreasureHunter-v0",
        entry_point="budget_envs.envs.textworld:TreasureHunterEnv",
        default_budget=40,
        description="TextWorld treasure hunter: fetch the named object, not the wrong one",
        kwargs={},
        requires="textworld",
    ),
    EnvEntry(
        id="BudgetMix/TextWorld-Cooking-v0",
        entry_point="budget_envs.envs.textworld:CookingEnv",
        default_budget=60,
        description="TextWorld cooking: read the recipe, gather, cut, cook, prepare and eat "
        "(levels 1-6, 3 to ~35 turns)",
        kwargs={},
        requires="textworld",
    ),
    EnvEntry(
        id="BudgetMix/ALFWorld-v0",
        entry_point="budget_envs.envs.alfworld:AlfWorldEnv",
        default_budget=50,
        description="ALFWorld household tasks (6 types) on alfworld's PDDL engine: generated "
        "tasks by default, real datasets via data_dir",
        kwargs={},
        requires="alfworld",
    ),
)
