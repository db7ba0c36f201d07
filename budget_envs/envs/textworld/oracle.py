"""Exact oracle for generated TextWorld games: breadth-first search over the game's logic.

A node is the set of true facts plus which quests are already completed (quest completion is
sticky in the compiled game, so the facts alone do not say it). The compiled game checks each
open quest at the end of every turn, in order: a triggered fail event loses the game, a triggered
win event completes the quest, and the game is won when every required quest is completed.
:func:`advance` mirrors that rule, so distances here are distances in the real game.

The reachable graph is built once per game (bounded by ``max_states``) and distances to a won
node come from one backward pass; a state outside the graph (after a fault) grows it. When the
bound is hit the game is too large for an exact answer and the env falls back to TextWorld's
``policy_commands`` (a heuristic).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Hashable
from typing import Any

from budget_envs.core import UNREACHABLE

logger = logging.getLogger(__name__)

LIVE, WON, LOST = 0, 1, -1


class QuestRules:
    """How quest completion, winning and losing follow from a logic state."""

    def __init__(self, game: Any) -> None:
        self.quests = list(game.quests)
        self.required = [
            i
            for i, q in enumerate(self.quests)
            if q.win_events and not getattr(q, "optional", False)
        ]

    def start(self) -> tuple[bool, ...]:
        return (False,) * len(self.quests)

    def advance(self, done: tuple[bool, ...], state: Any) -> tuple[tuple[bool, ...], int]:
        """Quest completion and status after a turn ending in ``state``."""
        marks = list(done)
        for i, quest in enumerate(self.quests):
            if marks[i]:
                continue
            if quest.is_failing(state):
                return tuple(marks), LOST
            if quest.is_winning(state):
                marks[i] = True
        if self.required and all(marks[i] for i in self.required):
            return tuple(marks), WON
        return tuple(marks), LIVE


def node_key(state: Any, done: tuple[bool, ...]) -> Hashable:
    return (frozenset(state.facts), done)


class StateGraph:
    """The reachable part of a game's state space with exact distances to a won state."""

    def __init__(self, game: Any, max_states: int) -> None:
        self.game = game
        self.rules = QuestRules(game)
        self._kb_rules = list(game.kb.rules.values())
        self._constants = game.kb.types.constants_mapping
        self.max_states = max_states
        # key -> [(action, child key)]; won/lost nodes have no children.
        self.children: dict[Hashable, list[tuple[Any, Hashable]]] = {}
        self.status: dict[Hashable, int] = {}
        self.dist: dict[Hashable, int] = {}
        # Distances when some entities are out of bounds: (entities, graph size) -> distances.
        self._avoiding: dict[tuple[frozenset[str], int], dict[Hashable, int]] = {}

    def __len__(self) -> int:
        return len(self.children)

    def explore_start(self) -> bool:
        """:meth:`explore` from the game's first state; False if the graph is too large."""
        start = self.game.world.state.copy()
        marks, status = self.rules.advance(self.rules.start(), start)
        return self.explore(start, marks, status)

    def explore(self, state: Any, done: tuple[bool, ...], status: int = LIVE) -> bool:
        """Add everything reachable from ``(state, done)``; False (graph unchanged) if too large."""
        root = node_key(state, done)
        if root in self.children:
            return True
        children: dict[Hashable, list[tuple[Any, Hashable]]] = {}
        statuses: dict[Hashable, int] = {root: status}
        queue = deque([(root, state, done)])
        seen = {root}
        while queue:
            key, st, marks = queue.popleft()
            if statuses[key] != LIVE:
                children[key] = []
                continue
            edges = []
            for action in st.all_applicable_actions(self._kb_rules, self._constants):
                child = st.copy()
                child.apply(action)
                child_marks, child_status = self.rules.advance(marks, child)
                child_key = node_key(child, child_marks)
                if child_key == key:
                    continue  # look, examine, inventory: no change
                edges.append((action, child_key))
                if child_key in seen or child_key in self.children:
                    continue
                if len(seen) >= self.max_states:
                    logger.debug("state graph over %d states; oracle is heuristic", self.max_states)
                    return False
                seen.add(child_key)
                statuses[child_key] = child_status
                queue.append((child_key, child, child_marks))
            children[key] = edges
        self.children.update(children)
        self.status.update(statuses)
        self._distances()
        return True

    def _distances(self, avoid: frozenset[str] = frozenset()) -> dict[Hashable, int]:
        """Distances to a won node over the edges whose action names none of ``avoid``
        (entity ids); with no ``avoid`` they become ``self.dist``."""
        parents: dict[Hashable, list[Hashable]] = {}
        for key, edges in self.children.items():
            for action, child in edges:
                if avoid and touches(action, avoid):
                    continue
                parents.setdefault(child, []).append(key)
        dist = {k: 0 for k, s in self.status.items() if s == WON}
        queue = deque(dist)
        while queue:
            key = queue.popleft()
            for parent in parents.get(key, ()):
                if parent not in dist:
                    dist[parent] = dist[key] + 1
                    queue.append(parent)
        if not avoid:
            self.dist = dist
        return dist

    def lookup(
        self, state: Any, done: tuple[bool, ...], status: int, avoid: frozenset[str] = frozenset()
    ) -> tuple[int, list[Any]] | None:
        """``(cost to go, optimal actions)`` from a state, or None if the graph cannot hold it.

        ``avoid`` names entities (ids) no action may involve any more (a permanent fault put
        them out of reach): the distances are then those of the graph without their actions.
        """
        key = node_key(state, done)
        if key not in self.children and not self.explore(state, done, status):
            return None
        dist = self.dist
        if avoid:
            memo = (avoid, len(self.children))
            if memo not in self._avoiding:
                self._avoiding[memo] = self._distances(avoid)
            dist = self._avoiding[memo]
        cost = dist.get(key, UNREACHABLE)
        if cost in (0, UNREACHABLE):
            return cost, []
        best = [
            a
            for a, child in self.children[key]
            if dist.get(child) == cost - 1 and not (avoid and touches(a, avoid))
        ]
        return cost, best


def touches(action: Any, entities: frozenset[str]) -> bool:
    """Whether the logic ``action`` involves one of ``entities`` (ids such as ``"c_0"``)."""
    return any(v.name in entities for v in action.variables)
