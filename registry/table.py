"""The one table of BudgetMix env ids, and everything shared code needs to know about a family.

Each row names an id, the env class that implements it, the default turn budget that
``gymnasium.make(id)`` wraps it in, a one-line description, default constructor kwargs, and the
family's metadata: its name, the chat agents' system prompt, its prepare hook and its pip extra. ``budget_envs.registry.register_envs()`` registers every row; adding a row (here, or
with ``register_env`` from anywhere) is all it takes to publish an id: ``budgetmix list``,
``budgetmix prepare``, the chat agents and the registry-parametrized tests pick it up at once.
No module outside a family parses an id string.

A **prepare hook** generates and caches a family's files ahead of time. It is called with
keyword arguments only::

    hook(*, progress=None, **options) -> PrepareResult

``progress(done, total, note)`` is called after each file. ``budgetmix prepare FAMILY`` turns the
hook's keyword parameters (with their defaults, type hints and the ``Args:`` section of its
docstring) into command-line options, so a family's options need no shared code either.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from budget_envs.prepare import PrepareResult, Progress

__all__ = ["ENV_TABLE", "EnvEntry", "PrepareResult", "Progress"]


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
        family: the family's name (rows of one family share it; default: the id).
        prompt: the chat agents' system prompt for this id: the text, or a callable
            ``prompt(info) -> str`` given the first ``info`` of an episode (None: the agents'
            generic prompt).
        prepare: the family's prepare hook (see the module docstring), a callable or a lazy
            ``"module:function"`` reference; None when there is nothing to prepare.
    """

    id: str
    entry_point: str | Callable[..., Any]
    default_budget: Any
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    requires: str = ""
    family: str = ""
    prompt: str | Callable[[Mapping[str, Any]], str] | None = None
    prepare: str | Callable[..., PrepareResult] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or "/" not in self.id:
            raise ValueError(f"id must look like 'Namespace/Name-vN', got {self.id!r}")
        if not isinstance(self.family, str):
            raise TypeError(f"family must be a str, got {self.family!r}")
        if not self.family:
            object.__setattr__(self, "family", self.id)
        if self.prompt is not None and not (isinstance(self.prompt, str) or callable(self.prompt)):
            raise TypeError(f"prompt must be a str, a callable or None, got {self.prompt!r}")
        if self.prepare is not None and not (
            callable(self.prepare) or (isinstance(self.prepare, str) and ":" in self.prepare)
        ):
            raise TypeError(
                f"prepare must be a callable, a 'module:function' string or None, "
                f"got {self.prepare!r}"
            )

    def chat_prompt(self, info: Mapping[str, Any]) -> str | None:
        """The system prompt for an episode that starts with ``info`` (None: no own prompt)."""
        if callable(self.prompt):
            return str(self.prompt(info))
        return self.prompt

    def prepare_hook(self) -> Callable[..., PrepareResult] | None:
        """The prepare hook, imported on first use (raises ImportError if its module is missing)."""
        if self.prepare is None or callable(self.prepare):
            return self.prepare
        module_name, _, attr = self.prepare.partition(":")
        return getattr(importlib.import_module(module_name), attr)


_TEXTWORLD_PROMPT = (
    "You are playing a text adventure. Reply with exactly one command (for example "
    "'go north', 'take key', 'open door'), nothing else."
)
_TEXTWORLD_PREPARE = "budget_envs.envs.textworld.prepare:prepare_hook"


#: Every product env id. Families add their rows here.
ENV_TABLE: tuple[EnvEntry, ...] = (
    EnvEntry(
        id="BudgetMix/WebShop-v0",
        entry_point="budget_envs.envs.webshop:WebShopEnv",
        default_budget=40,
        description="WebShop-style shopping over HTTP: search and buy from 10,000 generated "
        "products (levels 1-5, 3 to 30 optimal turns)",
        kwargs={},
        family="WebShop",
        prompt="You are shopping on a web store to satisfy an instruction. Reply with exactly one "
        "action: search[query] or click[button text], nothing else.",
    ),
    EnvEntry(
        id="BudgetMix/ToolUse-v0",
        entry_point="budget_envs.envs.tooluse:ToolUseEnv",
        default_budget=40,
        description="OpenAI-style tool calls over a generated SQLite back office: support "
        "tickets (levels 1-5, 3 to 39 optimal calls), exact oracle",
        kwargs={},
        family="ToolUse",
        prompt="You solve the task by calling the provided tools. Call exactly one tool per "
        "turn (each call is one turn of the budget); when the task is done, call the tool that "
        "submits the answer.",
    ),
    EnvEntry(
        id="BudgetMix/TextWorld-v0",
        entry_point="budget_envs.envs.textworld:TextWorldEnv",
        default_budget=40,
        description="TextWorld custom quests generated offline (levels 1-5, 3 to ~25 optimal "
        "turns), exact oracle on small games",
        kwargs={},
        requires="textworld",
        family="TextWorld",
        prompt=_TEXTWORLD_PROMPT,
        prepare=_TEXTWORLD_PREPARE,
    ),
    EnvEntry(
        id="BudgetMix/TextWorld-CoinCollector-v0",
        entry_point="budget_envs.envs.textworld:CoinCollectorEnv",
        default_budget=60,
        description="TextWorld coin collector: walk a chain of rooms to the coin (3 to 45 turns), "
        "exact oracle",
        kwargs={},
        requires="textworld",
        family="TextWorld",
        prompt=_TEXTWORLD_PROMPT,
        prepare=_TEXTWORLD_PREPARE,
    ),
    EnvEntry(
        id="BudgetMix/TextWorld-TreasureHunter-v0",
        entry_point="budget_envs.envs.textworld:TreasureHunterEnv",
        default_budget=40,
        description="TextWorld treasure hunter: fetch the named object, not the wrong one",
        kwargs={},
        requires="textworld",
        family="TextWorld",
        prompt=_TEXTWORLD_PROMPT,
        prepare=_TEXTWORLD_PREPARE,
    ),
    EnvEntry(
        id="BudgetMix/TextWorld-Cooking-v0",
        entry_point="budget_envs.envs.textworld:CookingEnv",
        default_budget=60,
        description="TextWorld cooking: read the recipe, gather, cut, cook, prepare and eat "
        "(levels 1-6, 3 to ~35 turns)",
        kwargs={},
        requires="textworld",
        family="TextWorld",
        prompt=_TEXTWORLD_PROMPT,
        prepare=_TEXTWORLD_PREPARE,
    ),
    EnvEntry(
        id="BudgetMix/ALFWorld-v0",
        entry_point="budget_envs.envs.alfworld:AlfWorldEnv",
        default_budget=50,
        description="ALFWorld household tasks (6 types) on alfworld's PDDL engine: generated "
        "tasks by default, real datasets via data_dir",
        kwargs={},
        requires="alfworld",
        family="ALFWorld",
        prompt="You are a household robot in a text simulation. Reply with exactly one command "
        "from the admissible actions (for example 'go to fridge 1'), nothing else.",
        prepare="budget_envs.envs.alfworld.prepare:prepare_hook",
    ),
)
