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
            last_action=tracker._last_action,
            previous_policy=tracker._previous_winning_policy,
            current_policy=tracker._current_winning_policy,
            moves=tracker._moves,
            prev_state=self._i7data._prev_state,
            state=self._state,
            marks=self._marks,
            marks_moves=self._marks_moves,
            won=self.won,
            lost=self.lost,
            blocked=self.blocked,
            told=self._told,
        )

    def _restore_state(self, payload: _Native) -> None:
        if self._tw is None or self._path != payload.path:
            self._restart_game(payload.path)
        self._jericho.set_state(payload.jericho)
        tracker = self._tracker
        tracker._game_progression = payload.progression.copy()
        tracker._last_action = payload.last_action
        tracker._previous_winning_policy = payload.previous_policy
        tracker._current_winning_policy = payload.current_policy
        tracker._moves = payload.moves
        self._i7data._prev_state = payload.prev_state
        for layer in (self._tw, tracker, self._i7data):
            layer.state = payload.state
        self._state = payload.state
        self._marks = payload.marks
        self._marks_moves = payload.marks_moves
        self.won = payload.won
        self.lost = payload.lost
        self.blocked = payload.blocked
        self._told = payload.told

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
