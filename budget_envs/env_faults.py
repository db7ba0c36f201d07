"""The env side of faults: their taxonomy, what a fault turn did, and arming one.

The fault kinds every env offers (:data:`GENERIC_KINDS`), the cells of the taxonomy
(:data:`CELLS`: visibility x persistence) and what a fault did to its turn
(:data:`FAULT_EFFECTS`) are named here once for the families, the
:class:`~budget_envs.wrappers.ErrorInjection` wrapper and the reports; a family's fault hook
returns a :class:`FaultOutcome`. :class:`FaultArming` is the part of
:class:`~budget_envs.core.TextAgentEnv` that arms a fault and applies it on the next ``step``
(a mixin of the base class, as :class:`~budget_envs.snapshot.Forking` is, so that the turn
pipeline and the faults read as two ideas). :mod:`budget_envs.core` re-exports every name here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from budget_envs.errors import UnknownFaultKind

__all__ = [
    "CELLS",
    "FAULT_EFFECTS",
    "GENERIC_CELLS",
    "GENERIC_KINDS",
    "PERSISTENCE",
    "VISIBILITY",
    "ArmedFault",
    "FaultArming",
    "FaultOutcome",
    "garble_text",
]

#: Fault kinds every env offers; a family adds its own through ``fault_kinds()``.
GENERIC_KINDS: tuple[str, ...] = ("slip", "drop", "garble")

#: How a fault shows itself: ``explicit`` (the agent is told, or the observation plainly says
#: something went wrong) or ``silent`` (a plausible but wrong result; nothing says it is wrong).
VISIBILITY: tuple[str, ...] = ("explicit", "silent")
#: How long a fault lasts: ``transient`` (this turn only; the world is then as playable as before)
#: or ``permanent`` (something stays broken for the rest of the episode).
PERSISTENCE: tuple[str, ...] = ("transient", "permanent")
#: The four cells of the fault taxonomy, in report order.
CELLS: tuple[tuple[str, str], ...] = tuple((v, p) for v in VISIBILITY for p in PERSISTENCE)
#: The cell of each generic kind unless a family says otherwise (``family_fault_cells``).
GENERIC_CELLS: dict[str, tuple[str, str]] = {
    "slip": ("explicit", "transient"),
    "drop": ("explicit", "transient"),
    "garble": ("explicit", "transient"),
}

#: What a fault did to its turn (``info["fault"]["effect"]``); docs/faults.md has the table.
FAULT_EFFECTS: dict[str, str] = {
    "replaced": "another action ran instead of the agent's",
    "dropped": "the agent's action did not run; the state is unchanged",
    "observation": "the agent's action ran as usual; what the agent sees is corrupted, stale, "
    "late or lost",
    "world": "the agent's action was handled as usual, then the world changed",
    "none": "the fault changed nothing (the action was rejected as usual, or nothing applied)",
}

_WORD = re.compile(r"[A-Za-z]+")
_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)


def garble_text(obs: str, rng: np.random.Generator) -> str:
    """Scramble about a third of the words of ``obs``; layout, length and charset stay the same.

    Example:
        >>> import numpy as np
        >>> out = garble_text("You see a key.", np.random.default_rng(0))
        >>> len(out) == len("You see a key.") and out.endswith(".")
        True
    """
    words = list(_WORD.finditer(obs))
    if not words:
        return obs
    hit = rng.random(len(words)) < 0.35
    if not hit.any():
        hit[int(rng.integers(len(words)))] = True
    if not obs.isascii():
        pieces = list(obs)
        for match, h in zip(words, hit):
            if h:
                letters = _LETTERS[rng.integers(26, size=match.end() - match.start())]
                pieces[match.start() : match.end()] = list(letters.tobytes().decode())
        return "".join(pieces)
    chars = bytearray(obs, "ascii")
    for match, h in zip(words, hit):
        if h:
            letters = _LETTERS[rng.integers(26, size=match.end() - match.start())]
            chars[match.start() : match.end()] = letters.tobytes()
    return chars.decode("ascii")


@dataclass(frozen=True)
class ArmedFault:
    """A fault waiting for the next ``step``: its kind and the generator its draws come from."""

    kind: str
    rng: np.random.Generator


@dataclass(frozen=True)
class FaultOutcome:
    """What a fault did on its turn; the family hook ``_fault`` returns one.

    ``step`` turns it into the ordinary 5-tuple: ``observation`` is what the agent sees,
    ``reward`` the reward the turn earned the normal way (the executed action's reward from
    ``_execute`` or the family's own scoring), ``invalid`` whether the agent's action was rejected,
    ``executed`` the action that ran (None when none did) and ``effect`` one of
    :data:`FAULT_EFFECTS`.
    """

    observation: str
    effect: str
    executed: str | None = None
    reward: float = 0.0
    invalid: bool = False

    def __post_init__(self) -> None:
        if self.effect not in FAULT_EFFECTS:
            raise ValueError(f"effect must be one of {list(FAULT_EFFECTS)}, got {self.effect!r}")


class FaultArming:
    """Fault kinds, their cells, arming and the generic kinds of
    :class:`~budget_envs.core.TextAgentEnv` (see there).

    The host class keeps the armed fault in ``_armed`` (its ``step`` uses it up), runs actions
    through ``_attempt``, lists valid ones with ``_admissible`` and declares the family's one
    fault hook ``_fault()`` with its other hooks; a family adds kinds with ``fault_kinds()`` and
    their cells in ``family_fault_cells``.
    """

    def fault_kinds(self) -> tuple[str, ...]:
        """Names of this family's own fault kinds (the generic ones are :data:`GENERIC_KINDS`)."""
        return ()

    def fault_cells(self) -> dict[str, tuple[str, str]]:
        """Every fault kind this env offers (generic ones included) mapped to its cell.

        A cell is ``(visibility, persistence)``: ``explicit`` or ``silent``, ``transient`` or
        ``permanent`` (see :data:`CELLS`). A generic kind's cell can differ by family.

        Example:
            >>> from budget_envs.envs.tooluse import ToolUseEnv
            >>> ToolUseEnv(level=1).fault_cells()["stale_read"]
            ('silent', 'transient')
        """
        cells: dict[str, tuple[str, str]] = {}
        for kind in GENERIC_KINDS + tuple(self.fault_kinds()):
            cell = self.family_fault_cells.get(kind, GENERIC_CELLS.get(kind))
            if cell is None or tuple(cell) not in CELLS:
                raise TypeError(
                    f"{type(self).__name__} lists the fault kind {kind!r} without a valid cell "
                    f"in family_fault_cells (expected one of {list(CELLS)}, got {cell!r})"
                )
            cells[kind] = tuple(cell)
        return cells

    def arm_fault(self, kind: str | None, rng: np.random.Generator | None = None) -> None:
        """Make the next :meth:`step` a faulty turn of ``kind`` whose draws come from ``rng``.

        The armed fault is used up by the next ``step`` (and dropped by ``reset``); ``kind=None``
        disarms. A fault armed on a finished episode does nothing: that turn is the usual
        "episode is over" turn and carries no ``info["fault"]``.
        """
        if kind is None:
            self._armed = None
            return
        kinds = GENERIC_KINDS + tuple(self.fault_kinds())
        if kind not in kinds:
            raise UnknownFaultKind(
                f"unknown fault kind {kind!r} for {type(self).__name__}; "
                f"expected one of {list(kinds)}"
            )
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"arm_fault() needs a numpy Generator as rng, got {rng!r}")
        self._armed = ArmedFault(kind, rng)

    def _apply_fault(self, kind: str, rng: np.random.Generator, action: Any) -> FaultOutcome:
        """The generic kinds, then the family hook (also used to replay a fault in restore)."""
        if kind == "slip":
            other = self.slip_action(action, rng)
            if other is None:
                return FaultOutcome(self.no_effect_feedback(), "dropped")
            obs, reward, invalid = self._attempt(other)
            return FaultOutcome(obs, "replaced", None if invalid else other, reward, invalid)
        if kind == "drop":
            return FaultOutcome(self.no_effect_feedback(), "dropped")
        if kind == "garble":
            obs, reward, invalid = self._attempt(action)
            return FaultOutcome(
                garble_text(obs, rng), "observation", None if invalid else action, reward, invalid
            )
        return self._fault(kind, rng, action)

    def slip_action(self, action: str, rng: np.random.Generator) -> str | None:
        """A different valid action executed instead of ``action`` (generic ``slip`` fault)."""
        others = [a for a in self._admissible() if a != action]
        if not others:
            return None
        return others[int(rng.integers(len(others)))]

    def no_effect_feedback(self) -> str:
        """What the env says when an action has no effect (generic ``drop`` fault)."""
        return "Nothing happens."
