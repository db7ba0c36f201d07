"""What a family's prepare hook reports (``budgetmix prepare``, ``prepare=True``).

A core-layer module: the families implement the hook and the registry names it, so both import
these types from here (the registry re-exports them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PrepareResult", "Progress"]

#: ``progress(done, total, note)``: called by a prepare hook after each file it made or found.
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class PrepareResult:
    """What a prepare hook reports: files ready out of those asked for, where, what failed."""

    ready: int
    total: int
    location: str
    failures: tuple[str, ...] = ()
