"""Forking an episode: what :meth:`budget_envs.core.TextAgentEnv.snapshot` returns, what
``restore`` accepts, and the two methods themselves.

:class:`Snapshot` is re-exported by :mod:`budget_envs.core` (and ``budget_envs``);
:func:`snapshot_problem` says why an object is not a well-formed snapshot (a forged or damaged
one), before ``restore`` changes anything. :class:`Forking` is the part of
:class:`~budget_envs.core.TextAgentEnv` that takes and restores snapshots (a mixin of the base
class, kept here so that the turn pipeline and the forking read as two ideas).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from budget_envs.errors import ActionRejected, SnapshotMismatch

__all__ = ["Forking", "Snapshot", "snapshot_problem"]


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


class Forking:
    """``snapshot()`` / ``restore()`` of :class:`~budget_envs.core.TextAgentEnv` (see there).

    A snapshot is taken natively when the class sets ``native_snapshot`` (the family's
    ``_snapshot_state()`` / ``_restore_state()``); otherwise ``restore`` reloads the task and
    replays the trace of the episode, which the envs' determinism makes exact.
    """

    def snapshot(self) -> Snapshot:
        """Capture the current point of the episode (cheap; restore with :meth:`restore`)."""
        self._require_reset()
        payload = self._snapshot_state() if self.native_snapshot else None
        return Snapshot(
            env=self._env_name(),
            scope=tuple(self._snapshot_scope()),
            task_id=self._task_id,
            observation=self._last_obs,
            trace=tuple(self._trace),
            reset_rng=self._reset_rng_state,
            rng=copy.deepcopy(self.np_random.bit_generator.state),
            done=self._done,
            turn=self.turn,
            payload=payload,
        )

    def restore(self, snap: Snapshot) -> str:
        """Return to ``snap`` and give back the observation seen there.

        Without a native snapshot the task is reloaded from the reset RNG state and every event
        of the trace is replayed; the envs are deterministic, so this equals the original.
        :class:`SnapshotMismatch` (nothing changed): ``snap`` is of another env class or scope,
        or of a task this env lacks. :class:`EnvClosed`: after ``close()``.
        """
        self._require_open()
        why = snapshot_problem(snap)
        if why is not None:
            raise SnapshotMismatch(
                f"restore(): not a snapshot of this env: {why}. Nothing changed."
            )
        self._check_snapshot(snap)
        before = self.snapshot() if self._task_id is not None else None
        try:
            return self._restore(snap)
        except (ActionRejected, AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            if before is not None:  # a forged trace or state: back to where the env was
                self._restore(before)
            raise SnapshotMismatch(
                f"restore(): the snapshot does not restore in this env ({exc!r:.120}); "
                "the env is as it was"
            ) from None

    def _restore(self, snap: Snapshot) -> str:
        if snap.payload is not None:
            self._restore_state(snap.payload)
            self._task_id = snap.task_id
        else:
            if snap.reset_rng is not None:
                self.np_random.bit_generator.state = copy.deepcopy(snap.reset_rng)
            self._reset_rng_state = snap.reset_rng
            self._start(snap.task_id)
            self.replaying = True
            try:
                for event in snap.trace:
                    if event[0] == "step":
                        self._execute(event[1])
                    else:
                        _, kind, rng_state, action = event
                        self._apply_fault(kind, _rng_from_state(rng_state), action)
                    self._done = self.won or self.lost
            finally:
                self.replaying = False
        self._trace = list(snap.trace)
        self._done = snap.done
        self.turn = snap.turn
        self._last_obs = snap.observation
        if snap.rng is not None:
            self.np_random.bit_generator.state = copy.deepcopy(snap.rng)
        return snap.observation

    def _env_name(self) -> str:
        cls = type(self)
        return f"{cls.__module__}.{cls.__qualname__}"

    def _check_snapshot(self, snap: Snapshot) -> None:
        """Raise :class:`SnapshotMismatch` unless ``snap`` can be restored here (no change)."""
        mine, scope = self._env_name(), tuple(self._snapshot_scope())
        if snap.env is not None and snap.env != mine:
            why = "another env class"
        elif snap.env is not None and tuple(snap.scope) != scope:
            why = "other settings (its task id names another task here)"
        elif snap.payload is not None and not self.native_snapshot:
            why = "a native state, and this env restores by replay only"
        elif not isinstance(snap.task_id, str) or snap.task_id not in self._task_index():
            why = f"a task this env does not have (it has e.g. {list(self.task_ids[:3])!r})"
        else:
            return
        raise SnapshotMismatch(
            f"restore(): the snapshot is of task {snap.task_id!r} in "
            f"{snap.env or 'an env of unrecorded class'}{_show_scope(snap.scope)}; this env is "
            f"{mine}{_show_scope(scope)}: {why}. Nothing was changed."
        )

    def _snapshot_state(self) -> Any:
        raise NotImplementedError

    def _restore_state(self, payload: Any) -> None:
        raise NotImplementedError
