"""The TextWorld family's fault hooks and what a permanent fault leaves behind.

``perturb`` and ``phantom`` are transient; ``unreachable`` and ``silent_unreachable`` put one
entity out of reach for the rest of the episode (``blocked``): commands naming it are refused,
dropped from the admissible ones and the exact oracle plans without it.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from budget_envs._util import names_entity as _names
from budget_envs.core import UNREACHABLE
from budget_envs.errors import ActionRejected
from budget_envs.fault_turns import ReachFaults

__all__ = ["FaultHooks"]


class FaultHooks(ReachFaults):
    """The fault hooks of :class:`~budget_envs.core.TextAgentEnv` for the TextWorld env: the
    kinds and their dispatch are :class:`~budget_envs.fault_turns.ReachFaults`'; this says what
    TextWorld's world does.

    Mixed into :class:`~budget_envs.envs.textworld.env.TextWorldEnv`: it plays real game moves
    (``_play``, ``_attempt``), reads the admissible commands, the oracle (``oracle_actions``,
    ``_graph_lookup``) and TextWorld's tracker, and owns ``blocked`` and ``_told``.
    """

    #: ``phantom`` leaves an action that ends the game to stand: its feedback could not be shown
    #: without its end.
    phantom_ending_stands: ClassVar[bool] = True

    def _perturb(self, rng: np.random.Generator, obs: str, reward: float) -> tuple[str, str, float]:
        """``perturb``: the world changes under the player: a carried object is dropped and the
        player stumbles through a random exit (both real game moves, so tracking stays exact)."""
        parts = [obs]
        changed = False
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
        if not changed:
            parts.append("You stumble, but nothing changes.")
        return "\n\n".join(parts), "world" if changed else "none", reward

    def _reach_pool(self) -> list[str]:
        """``unreachable`` / ``silent_unreachable`` draw from these: objects, containers,
        supporters and doors named by an admissible command, never a room or what the player
        carries; without the exact oracle only things TextWorld's winning policy does not use.
        Commands naming a thing out of reach are refused (invalid turns; :meth:`_check_reach`)
        and no longer admissible, and the exact oracle plans without every action that involves
        it."""
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
        return sorted(n for n in names if any(_names(c, n) for c in wanted))

    def _put_out_of_reach(self, name: str, *, told: bool) -> None:
        super()._put_out_of_reach(name, told=told)
        if told:  # its refusals name it
            self._told = self._told | {name}

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
