"""Fault specs: what a user writes for ``faults=`` and where every spelling ends up.

``FaultSpec`` holds ErrorInjection's arguments; every place that takes faults (``gymnasium.make(id,
faults=...)``, ``--faults`` on the CLI, the study and the service) turns what it was given into
one with :func:`parse_faults` and hands :meth:`FaultSpec.kwargs` to ErrorInjection, so they accept
the same keys: :data:`FAULT_KEYS`, the fields of ``FaultSpec`` (a test checks that they are
ErrorInjection's parameters).

=====================================  ===============================================
``None``, ``False``                    no faults (no ErrorInjection)
``"slip"``, ``"slip,drop"``            those kinds (names are checked by ErrorInjection)
``["slip", "drop"]``                   the same as a list
``{"kinds": ["slip"], "at_turn": 2}``  any of :data:`FAULT_KEYS`
``{"cells": ["silent"]}``              every kind of the env in the silent cells
``FaultSpec(...)``                     itself
=====================================  ===============================================

Example:
    >>> parse_faults("slip, drop")
    FaultSpec(kinds=['slip', 'drop'])
    >>> parse_faults({"cells": ["silent"], "rate": 0.2}).kwargs()
    {'cells': ['silent'], 'rate': 0.2}
    >>> parse_faults(None) is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["FAULT_KEYS", "FaultSpec", "parse_faults"]


@dataclass(frozen=True)
class FaultSpec:
    """ErrorInjection's arguments (see :class:`budget_envs.wrappers.ErrorInjection` for each);
    a field left None takes ErrorInjection's default."""

    kinds: Any = None
    cells: Any = None
    at_turn: Any = None
    rate: float | None = None
    max_faults: int | None = None
    seed: int | None = None

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.kwargs().items())
        return f"FaultSpec({body})"

    def kwargs(self) -> dict[str, Any]:
        """The fields that are set, as ErrorInjection's keyword arguments."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }

    def to_json(self) -> dict[str, Any]:
        """A JSON object (the set fields) that :func:`parse_faults` reads back to an equal spec."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.kwargs().items()}


#: The keys a ``faults=`` dict may hold: ErrorInjection's arguments.
FAULT_KEYS: tuple[str, ...] = tuple(f.name for f in fields(FaultSpec))


def parse_faults(value: Any) -> FaultSpec | None:
    """A :class:`FaultSpec` from any spelling in the module's table (None: no faults); a
    TypeError names the accepted forms and keys."""
    if value is None or value is False:
        return None
    if isinstance(value, FaultSpec):
        return value
    if isinstance(value, str):
        kinds = tuple(k.strip() for k in value.split(",") if k.strip())
        if not kinds:
            raise TypeError(f"faults= got {value!r}: name at least one fault kind")
        return FaultSpec(kinds=kinds[0] if len(kinds) == 1 else list(kinds))
    if isinstance(value, (list, tuple)):
        return FaultSpec(kinds=list(value))
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(FAULT_KEYS))
        if unknown:
            raise TypeError(
                f"faults= got unknown keys {unknown}; expected a dict with keys from "
                f"{list(FAULT_KEYS)} (ErrorInjection's arguments), a kind name or a list of kinds"
            )
        return FaultSpec(**dict(value))
    raise TypeError(
        "faults= expects None, a kind name, a list of kinds, a FaultSpec or a dict of "
        f"ErrorInjection arguments {list(FAULT_KEYS)}; got {value!r}"
    )
