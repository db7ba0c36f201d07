"""Native snapshots of a TextWorld game and the digest of its state (forking, ``state_hash``).

A snapshot is the interpreter's memory (Jericho) plus what TextWorld's wrappers track on their
own (the logic state, the winning policy, the move count) and the adapter's view (quests done,
won/lost, the entities a permanent fault put out of reach). Restoring all of it resumes the game
exactly, in this env or in another one that opens the same file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["NativeSnapshots"]


@dataclass(frozen=True)
class _Native:
    """A native snapshot: interpreter memory plus TextWorld's tracking and the adapter's view."""

    path: str
    jericho: Any
    progression: Any
    last_action: Any
    previous_policy: Any
    current_policy: Any
    moves: Any
    prev_state: Any
    state: Any
    marks: tuple
    marks_moves: int
    won: bool
    lost: bool
    blocked: frozenset = frozenset()
    told: frozenset = frozenset()


#: The fields of :class:`_Native` kept as they are, read from and restored to TextWorld's tracker
#: (field, tracker attribute) and to the env itself (field, env attribute): one table serves
#: snapshot and restore, so neither can miss a field the other has.
_TRACKER_FIELDS = (
    ("last_action", "_last_action"),
    ("previous_policy", "_previous_winning_policy"),
    ("current_policy", "_current_winning_policy"),
    ("moves", "_moves"),
)
_ENV_FIELDS = (
    ("marks", "_marks"),
    ("marks_moves", "_marks_moves"),
    ("won", "won"),
    ("lost", "lost"),
    ("blocked", "blocked"),
    ("told", "_told"),
)


class NativeSnapshots:
    """The snapshot hooks of :class:`~budget_envs.core.TextAgentEnv` for the TextWorld env.

    Mixed into :class:`~budget_envs.envs.textworld.env.TextWorldEnv`, whose game attributes
    (``_tw``, ``_tracker``, ``_i7data``, ``_jericho``, ``_path``, ``_state``, the quest marks,
    ``blocked``, ``_told``) and ``_restart_game(path)`` it reads and writes.
    """

    def _snapshot_state(self) -> _Native:
        tracker = self._tracker
        return _Native(
            path=self._path,
            jericho=self._jericho.get_state(),
            progression=tracker._game_progression.copy(),
            prev_state=self._i7data._prev_state,
            state=self._state,
            **{name: getattr(tracker, attr) for name, attr in _TRACKER_FIELDS},
            **{name: getattr(self, attr) for name, attr in _ENV_FIELDS},
        )

    def _restore_state(self, payload: _Native) -> None:
        if self._tw is None or self._path != payload.path:
            self._restart_game(payload.path)
        self._jericho.set_state(payload.jericho)
        tracker = self._tracker
        tracker._game_progression = payload.progression.copy()
        for name, attr in _TRACKER_FIELDS:
            setattr(tracker, attr, getattr(payload, name))
        self._i7data._prev_state = payload.prev_state
        for layer in (self._tw, tracker, self._i7data):
            layer.state = payload.state
        self._state = payload.state
        for name, attr in _ENV_FIELDS:
            setattr(self, attr, getattr(payload, name))

    def _state_digest(self) -> str:
        """The game's logic facts (sorted text) and the quests completed so far.

        Facts are what the interpreter's world is (positions, contents, carried, open/closed);
        the turn count, the last command and the score history are not in them.
        """
        memo = self.__dict__.setdefault("_fact_text", {})
        if memo.get("__path__") != self._path:
            memo.clear()
            memo["__path__"] = self._path
        out = []
        for fact in self._tracker._game_progression.state.facts:
            text = memo.get(fact)
            if text is None:
                text = memo[fact] = str(fact)
            out.append(text)
        out.sort()
        out.append("quests:" + "".join("1" if m else "0" for m in self._marks))
        # A permanent fault's effect: things out of reach for the rest of the episode.
        out.extend(
            f"blocked {n}{' (told)' if n in self._told else ''}" for n in sorted(self.blocked)
        )
        return "\n".join(out)
