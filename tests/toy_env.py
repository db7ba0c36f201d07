"""A small deterministic env for testing the core (not a product env).

A corridor of rooms; a key lies in one room; the door at the east end opens with the key.
``smash door`` loses for good. The oracle is an exact breadth-first search over (room, key).
Snapshots use the base class's prefix replay, so the fallback is exercised.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from budget_envs.core import FaultOutcome, TextAgentEnv
from budget_envs.errors import ActionRejected

MOVES = {"go east": 1, "go west": -1}


class ToyEnv(TextAgentEnv):
    """Find the key, walk to the east end, open the door."""

    oracle_exact = True
    default_max_action_length = 256
    default_max_observation_length = 2048
    family_fault_cells = {"perturb": ("explicit", "transient")}

    def __init__(self, n_tasks: int = 40, **kwargs) -> None:
        super().__init__(**kwargs)
        if not isinstance(n_tasks, int) or n_tasks < 1:
            raise ValueError(f"n_tasks must be a positive int, got {n_tasks!r}")
        self._ids = [f"toy-{i:03d}" for i in range(n_tasks)]

    @property
    def task_ids(self):
        return self._ids

    def _load(self, task_id: str) -> str:
        index = int(task_id.split("-")[1])
        rng = np.random.default_rng([index, 7])
        self.length = int(rng.integers(3, 8))
        self.key_room = int(rng.integers(0, self.length - 1))
        self.room = int(rng.integers(0, self.length))
        self.has_key = False
        self.door_open = False
        return f"You are in a corridor of {self.length} rooms. {self._look()}"

    def _goal(self) -> str:
        return "Take the key and open the door at the east end."

    def _look(self) -> str:
        parts = [f"Room {self.room + 1} of {self.length}."]
        if not self.has_key and self.room == self.key_room:
            parts.append("A key lies here.")
        if self.room == self.length - 1:
            parts.append("A door is set in the east wall.")
        return " ".join(parts)

    def _admissible(self) -> list[str]:
        acts = ["look"]
        if self.room < self.length - 1:
            acts.append("go east")
        if self.room > 0:
            acts.append("go west")
        if not self.has_key and self.room == self.key_room:
            acts.append("take key")
        if self.room == self.length - 1:
            acts += ["open door", "smash door"]
        return acts

    def _execute(self, action: str) -> tuple[str, float]:
        cmd = " ".join(action.lower().split())
        if cmd not in self._admissible():
            raise ActionRejected(f"You can't do {action[:60]!r} here. Valid: {self._admissible()}")
        if cmd in MOVES:
            self.room += MOVES[cmd]
            return self._look(), 0.0
        if cmd == "take key":
            self.has_key = True
            return "Taken: key.", 0.0
        if cmd == "open door":
            if not self.has_key:
                return "The door is locked.", 0.0
            self.won = True
            return "The door swings open. You win!", 1.0
        if cmd == "smash door":
            self.lost = True
            return "The door jams for good. You lose.", 0.0
        return self._look(), 0.0

    # exact oracle over (room, has_key)
    def _distance(self, room: int, has_key: bool) -> int:
        seen = {(room, has_key)}
        queue = deque([(room, has_key, 0)])
        while queue:
            r, k, d = queue.popleft()
            if k and r == self.length - 1:
                return d + 1
            nexts = [(r + 1, k), (r - 1, k)]
            if not k and r == self.key_room:
                nexts.append((r, True))
            for nr, nk in nexts:
                if 0 <= nr < self.length and (nr, nk) not in seen:
                    seen.add((nr, nk))
                    queue.append((nr, nk, d + 1))
        raise RuntimeError("unreachable goal")

    def _cost_to_go(self) -> int:
        return self._distance(self.room, self.has_key)

    def _oracle_actions(self) -> list[str]:
        if self.done:
            return []
        best = self.cost_to_go()
        out = []
        for act in self._admissible():
            if act == "open door" and self.has_key:
                out.append(act)
            elif act in MOVES and 0 <= self.room + MOVES[act] < self.length:
                if self._distance(self.room + MOVES[act], self.has_key) == best - 1:
                    out.append(act)
            elif act == "take key" and self._distance(self.room, True) == best - 1:
                out.append(act)
        return out

    def fault_kinds(self) -> tuple[str, ...]:
        return ("perturb",)

    def _fault(self, kind, rng, action):
        """``perturb``: the agent's action is handled as usual, then a gust moves the player."""
        obs, reward, invalid = self._attempt(action)
        executed = None if invalid else action
        if self.won or self.lost:
            return FaultOutcome(obs, "none", executed, reward, invalid)
        self.room = int(rng.integers(0, self.length))
        return FaultOutcome(
            f"{obs}\nA gust of wind blows you away. {self._look()}",
            "world",
            executed,
            reward,
            invalid,
        )

    def _state_digest(self) -> str:
        return (
            f"{self.length}|{self.key_room}|{self.room}|{int(self.has_key)}|{int(self.door_open)}"
        )
