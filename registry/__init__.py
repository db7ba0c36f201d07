"""The BudgetMix registry (installed as ``budget_envs.registry``).

:data:`ENV_TABLE` is the one table of ids; :func:`register_envs` registers every row with
Gymnasium (``import budget_envs`` calls it). Each id's entry point is a factory in this module
(``budget_envs.registry:make_<Name>_v<N>``) that builds the bare env and wraps it::

    ErrorInjection (only with faults=...)  inside  BudgetWrapper (unless budget=None)

so ``gymnasium.make(id, budget=..., visibility=..., faults=...)`` configures the wrappers and
``gymnasium.make(env.spec)`` rebuilds the same stack.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from budget_envs.registry.table import ENV_TABLE, EnvEntry, PrepareResult, Progress

from budget_envs._util import missing_dependency

__all__ = [
    "DEFAULT_BUDGET",
    "ENV_TABLE",
    "EnvEntry",
    "PrepareResult",
    "Progress",
    "entry_for",
    "families",
    "family_entries",
    "make_env",
    "register_env",
    "register_envs",
    "registered_ids",
    "unregister_env",
]


class _DefaultBudget:
    """The sentinel of an omitted ``budget=``: the id's default budget (``None`` is the bare env)."""

    def __repr__(self) -> str:
        return "DEFAULT_BUDGET"

    def __reduce__(self) -> str:
        return "DEFAULT_BUDGET"  # pickles as the module attribute: one sentinel in every process


#: ``budget=DEFAULT_BUDGET`` (the default) wraps the env in its row's default budget.
DEFAULT_BUDGET = _DefaultBudget()
_ROWS: dict[str, EnvEntry] = {}


def _factory_name(env_id: str) -> str:
    name = env_id.split("/")[-1]
    return "make_" + "".join(c if c.isalnum() else "_" for c in name)


def _load_class(entry: EnvEntry) -> Callable[..., gym.Env]:
    if callable(entry.entry_point):
        return entry.entry_point
    module_name, _, attr = entry.entry_point.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if entry.requires:
            raise missing_dependency(entry.id, entry.requires, exc) from exc
        raise
    return getattr(module, attr)


def _fault_kwargs(faults: Any) -> dict[str, Any] | None:
    from budget_envs.wrappers.fault_spec import parse_faults

    spec = parse_faults(faults)
    return None if spec is None else spec.kwargs()


def make_env(
    entry: EnvEntry,
    *,
    budget: Any = DEFAULT_BUDGET,
    visibility: str = "hidden",
    faults: Any = None,
    budget_info: bool = True,
    **env_kwargs: Any,
) -> gym.Env:
    """Build ``entry``'s env with its wrapper stack (what ``gymnasium.make`` calls);
    ``budget_info=False`` leaves ``info["budget"]`` out (see :class:`BudgetWrapper`)."""
    from budget_envs.wrappers import BudgetWrapper, ErrorInjection

    fault_kwargs = _fault_kwargs(faults)
    if budget is None and visibility != "hidden":
        raise ValueError(
            f"visibility={visibility!r} needs a budget to show; budget=None gives the bare env"
        )
    env = _load_class(entry)(**{**entry.kwargs, **env_kwargs})
    if fault_kwargs is not None:
        env = ErrorInjection(env, **fault_kwargs)
    if budget is not None:
        env = BudgetWrapper(
            env,
            budget=entry.default_budget if budget is DEFAULT_BUDGET else budget,
            visibility=visibility,
            budget_info=budget_info,
        )
    return env


def __getattr__(name: str) -> Any:
    # Entry points are "budget_envs.registry:make_<Name>": built on demand from the table, so a
    # row is all an id needs, and a fresh process resolves them without any prior registration.
    if name.startswith("make_"):
        for entry in list(_ROWS.values()) + list(ENV_TABLE):
            if _factory_name(entry.id) == name:

                def factory(_entry: EnvEntry = entry, **kwargs: Any) -> gym.Env:
                    return make_env(_entry, **kwargs)

                factory.__name__ = factory.__qualname__ = name
                factory.__doc__ = f"Build {entry.id}: {entry.description}"
                return factory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_env(entry: EnvEntry) -> None:
    """Register one row with Gymnasium (idempotent)."""
    if not isinstance(entry, EnvEntry):
        raise TypeError(f"register_env expects an EnvEntry, got {type(entry).__name__}")
    _ROWS[entry.id] = entry
    if entry.id in gym.registry:
        return
    gym.register(
        id=entry.id,
        entry_point=f"{__name__}:{_factory_name(entry.id)}",
        disable_env_checker=False,
        order_enforce=True,
    )


def register_envs() -> list[str]:
    """Register every id of :data:`ENV_TABLE`; returns the ids."""
    for entry in ENV_TABLE:
        register_env(entry)
    return [entry.id for entry in ENV_TABLE]


def registered_ids(include_extra: bool = True) -> list[str]:
    """Product ids in table order, plus rows added with :func:`register_env` (e.g. by tests).

    Example:
        >>> from budget_envs.registry import registered_ids
        >>> "BudgetMix/ToolUse-v0" in registered_ids(include_extra=False)
        True
    """
    ids = [entry.id for entry in ENV_TABLE]
    if include_extra:
        ids += [i for i in _ROWS if i not in ids]
    return ids


def entry_for(env_id: str) -> EnvEntry:
    """The table row of ``env_id`` (with a helpful error for unknown ids).

    Example:
        >>> from budget_envs.registry import entry_for
        >>> entry_for("BudgetMix/ToolUse-v0").default_budget
        40
        >>> entry_for("BudgetMix/ALFWorld-v0").requires  # the pip extra the family needs
        'alfworld'
    """
    for entry in list(ENV_TABLE) + list(_ROWS.values()):
        if entry.id == env_id:
            return entry
    raise gym.error.NameNotFound(
        f"unknown BudgetMix id {env_id!r}; registered ids: {registered_ids()}"
    )


def unregister_env(env_id: str) -> None:
    """Remove a row added with :func:`register_env` (product ids of the table stay)."""
    if any(entry.id == env_id for entry in ENV_TABLE):
        raise ValueError(f"{env_id!r} is a product id of ENV_TABLE; it cannot be unregistered")
    if _ROWS.pop(env_id, None) is None:
        raise gym.error.NameNotFound(f"{env_id!r} was not added with register_env")
    gym.registry.pop(env_id, None)


def families() -> dict[str, list[EnvEntry]]:
    """Every family name with its rows, in registration order (``budgetmix list``, ``prepare``)."""
    out: dict[str, list[EnvEntry]] = {}
    for env_id in registered_ids():
        entry = entry_for(env_id)
        out.setdefault(entry.family, []).append(entry)
    return out


def family_entries(name: str) -> list[EnvEntry]:
    """The rows of the family called ``name`` (case-insensitive), or of the id ``name``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"a family name must be a non-empty str, got {name!r}")
    for family, entries in families().items():
        if family.lower() == name.lower():
            return entries
    for entry in list(ENV_TABLE) + list(_ROWS.values()):
        if entry.id == name:
            return [entry]
    raise gym.error.NameNotFound(
        f"unknown family {name!r}; registered families: {list(families())}"
    )
