"""What :meth:`budget_envs.core.TextAgentEnv.snapshot` returns and what ``restore`` accepts.

:class:`Snapshot` is re-exported by :mod:`budget_envs.core` (and ``budget_envs``);
:func:`snapshot_problem` says why an object is not a well-formed snapshot (a forged or damaged
one), before ``restore`` changes anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Snapshot", "snapshot_problem"]


@dataclass(frozen=True)
class Snapshot:
    """A point in an episode that :meth:`TextAgentEnv.restore` can return to.

    ``payload`` is the family's native state when it has one; otherwise it is ``None`` and the
    episode is rebuilt by replaying ``trace`` (every state-changing event since reset) from the
    reset RNG state ``reset_rng``.
    ``env`` (module.class of the env that took it) and ``scope`` (its ``_snapshot_scope()``) say
    where it restores; older pickles load with ``env=None`` and only their task is checked.
    """

    task_id: str
    observation: str
    trace: tuple = ()
    reset_rng: dict | None = None
    rng: dict | None = None
    done: bool = False
    turn: int = 0
    payload: Any = field(default=None, compare=False)
    env: str | None = None
    scope: tuple = ()


def _show_scope(scope: tuple) -> str:
    return f" ({', '.join(f'{k}={v!r}' for k, v in scope)})" if scope else ""


def _rng_from_state(state: dict) -> np.random.Generator:
    bit_gen = getattr(np.random, state["bit_generator"])()
    bit_gen.state = state
    return np.random.Generator(bit_gen)


def snapshot_problem(snap: Any) -> str | None:
    """Why ``snap`` is not a well-formed :class:`Snapshot`, or None when it is."""
    if not isinstance(snap, Snapshot):
        return f"it is a {type(snap).__name__}, not a Snapshot"
    if not isinstance(snap.task_id, str) or not isinstance(snap.observation, str):
        return "its task_id and observation must be text"
    if not isinstance(snap.trace, (tuple, list)) or not isinstance(snap.scope, (tuple, list)):
        return "its trace and scope must be sequences"
    if any(not isinstance(item, (tuple, list)) or len(item) != 2 for item in snap.scope):
        return "its scope must hold (name, value) pairs"
    for event in snap.trace:
        if not isinstance(event, (tuple, list)) or not event:
            return f"its trace holds {event!r:.60}, not an event"
        if event[0] == "step" and len(event) == 2 and isinstance(event[1], str):
            continue
        if event[0] == "fault" and len(event) == 4 and isinstance(event[1], str):
            if isinstance(event[2], dict) or event[2] is None:
                continue
        return f"its trace holds {event!r:.60}, not a step or fault event"
    for name in ("reset_rng", "rng"):
        if getattr(snap, name) is not None and not isinstance(getattr(snap, name), dict):
            return f"its {name} must be a generator state or None"
    if isinstance(snap.turn, bool) or not isinstance(snap.turn, int) or snap.turn < 0:
        return "its turn must be an int >= 0"
    if not isinstance(snap.done, bool) or not (snap.env is None or isinstance(snap.env, str)):
        return "its done must be true or false and its env a class name"
    return None
