"""The TextWorld family's fault hooks and what a permanent fault leaves behind.

``perturb`` and ``phantom`` are transient; ``unreachable`` and ``silent_unreachable`` put one
entity out of reach for the rest of the episode (``blocked``): commands naming it are refused,
dropped from the admissible ones and the exact oracle plans without it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from budget_envs._util import names_entity as _names
from budget_envs.core import UNREACHABLE, FaultOutcome
from budget_envs.errors import ActionRejected
from budget_envs.fault_turns import phantom_turn

__all__ = ["FaultHooks"]


class FaultHooks:
    """The fault hooks of :class:`~budget_envs.core.TextAgentEnv` for the TextWorld env.

    Mixed into :class:`~budget_envs.envs.textworld.env.TextWorldEnv`: it plays real game moves
    (``_play``, ``_attempt``), reads the admissible commands, the oracle (``oracle_actions``,
    ``_graph_lookup``) and TextWorld's tracker, and owns ``blocked`` and ``_told``.
    """

    family_fault_cells: ClassVar[dict[str, tuple[str, str]]] = {
        "perturb": ("explicit", "transient"),
        "phantom": ("silent", "transient"),
        "unreachable": ("explicit", "permanent"),
        "silent_unreachable": ("silent", "permanent"),
    }

    def fault_kinds(self) -> tuple[str, ...]:
        return ("perturb", "phantom", "unreachable", "silent_unreachable")

    def _fault(self, kind: str, rng: np.random.Generator, action: Any) -> FaultOutcome:
        """``perturb``: the agent's action is handled as usual, then the world changes under the
        player: a carried object is dropped and the player stumbles through a random exit (both
        real game moves, so tracking stays exact).

        ``phantom`` (silent): the action's usual feedback is shown but the action did not happen
        (the game is rolled back to before it). An action that ends the game is left to stand:
        its feedback could not be shown without its end.

        ``unreachable`` / ``silent_unreachable`` (permanent): the action is handled as usual,
        then one thing within reach (an object, container, supporter or door named by an
        admissible command, drawn from ``rng``; never a room or what the player carries) gets
        out of reach for the rest of the episode: commands naming it are refused (invalid
        turns) and no longer admissible, and the exact oracle plans without every action that
        involves it (UNREACHABLE, and the task lost, when no way is left). The explicit kind
        says so, and its refusals name the thing; the silent kind shows only the action's
        feedback, and its refusals say "Nothing happens." Without the exact oracle only things
        TextWorld's winning policy does not use are drawn."""
        if kind == "phantom":
            return phantom_turn(self, action, ending_stands=True)
        if kind in ("unreachable", "silent_unreachable"):
            return self._unreachable(kind, rng, action)
        obs, reward, invalid = self._attempt(action)
        executed = None if invalid else action
        parts = [obs]
        changed = False
        if not (self.won or self.lost):
            drops = [c for c in self._admissible() if c.startswith("drop ")]
            if drops:
                obs, gained = self._play(drops[int(rng.integers(len(drops)))])
                parts.append("Your grip slips. " + obs)
                reward += gained
                changed = True
        if not (self.won or self.lost):
            goes = [c for c in self._admissible() if c.startswith("go ")]
            if goes:
                best = set(self.oracle_actions())
                away = [c for c in goes if c not in best] or goes
                obs, gained = self._play(away[int(rng.integers(len(away)))])
                parts.append("You lose your footing and stumble away.\n\n" + obs)
                reward += gained
                changed = True
        if not changed and not (self.won or self.lost):
            parts.append("You stumble, but nothing changes.")
        return FaultOutcome(
            "\n\n".join(parts), "world" if changed else "none", executed, reward, invalid
        )

    def _unreachable(self, kind: str, rng: np.random.Generator, action: Any) -> FaultOutcome:
        obs, reward, invalid = self._attempt(action)
        executed = None if invalid else action
        if self.won or self.lost:
            return FaultOutcome(obs, "none", executed, reward, invalid)
        infos = self._tracker._game.infos
        facts = self._tracker._game_progression.state.facts
        carried = {
            f.arguments[0].name for f in facts if f.name == "in" and f.arguments[1].name == "I"
        }
        names = {
            v.name.lower()
            for k, v in infos.items()
            if v.name and v.type not in ("P", "I", "r") and k not in carried
        }
        # A name inside another name ("box" in "wooden box") cannot be refused on its own.
        names = {n for n in names if not any(n != m and _names(m, n) for m in names)}
        names -= self.blocked
        if self._graph is None:
            policy = list(self._state["policy_commands"] or [])
            names = {n for n in names if not any(_names(c.lower(), n) for c in policy)}
        wanted = [c.lower() for c in self._admissible()]
        pool = sorted(n for n in names if any(_names(c, n) for c in wanted))
        if not pool:
            return FaultOutcome(obs, "none", executed, reward, invalid)
        gone = pool[int(rng.integers(len(pool)))]
        self.blocked = self.blocked | {gone}
        if kind == "unreachable":
            self._told = self._told | {gone}
            obs = f"{obs}\n\nThe {gone} is suddenly out of reach; you will not get to it again."
        self.lost = self._lost_for_good()
        return FaultOutcome(obs, "world", executed, reward, invalid)

    # ------------------------------------------------------------------ out of reach
    def _check_reach(self, command: str) -> None:
        """Refuse ``command`` (:class:`~budget_envs.errors.ActionRejected`) if it names an
        entity out of reach: by name if the agent was told, else "Nothing happens."."""
        gone = self._blocked_in(command)
        if gone is not None:
            if gone in self._told:
                raise ActionRejected(f"The {gone} is out of reach; you cannot get to it any more.")
            raise ActionRejected("Nothing happens.")

    def _blocked_in(self, command: str) -> str | None:
        """The out-of-reach entity ``command`` names, if any."""
        low = command.lower()
        for name in sorted(self.blocked):
            if _names(low, name):
                return name
        return None

    def _blocked_ids(self) -> frozenset[str]:
        """The logic ids of the entities out of reach (what the exact oracle avoids)."""
        if not self.blocked:
            return frozenset()
        infos = self._tracker._game.infos
        return frozenset(k for k, v in infos.items() if v.name in self.blocked)

    def _lost_for_good(self) -> bool:
        """Whether the exact oracle finds no way to win around the entities out of reach."""
        if self._graph is None:
            return False
        found = self._graph_lookup()
        return found is not None and found[0] >= UNREACHABLE
