"""Fault turns that more than one family plays the same way, written once for all of them.

A family's ``_fault`` hook (see :class:`~budget_envs.core.TextAgentEnv`) may hand a kind to one of
these instead of writing it again; each needs only the contract's own methods (``_attempt``,
``snapshot``, ``restore``) and flags (``replaying``, ``won``, ``lost``). :class:`ReachFaults` is
the whole hook of the families whose worlds have things a permanent fault can put out of reach
(ALFWorld, TextWorld).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from budget_envs.core import FaultOutcome

if TYPE_CHECKING:
    import numpy as np

    from budget_envs.core import TextAgentEnv

__all__ = ["REACH_FAULT_CELLS", "ReachFaults", "phantom_turn"]

#: The fault kinds of :class:`ReachFaults` and their cells, in :meth:`~ReachFaults.fault_kinds`
#: order.
REACH_FAULT_CELLS: dict[str, tuple[str, str]] = {
    "perturb": ("explicit", "transient"),
    "phantom": ("silent", "transient"),
    "unreachable": ("explicit", "permanent"),
    "silent_unreachable": ("silent", "permanent"),
}


def phantom_turn(env: TextAgentEnv, action: Any, *, ending_stands: bool) -> FaultOutcome:
    """The ``phantom`` fault: the action's usual feedback is shown, but the action did not
    happen (the env is restored to the snapshot taken before it).

    An invalid action is an ordinary invalid turn. ``ending_stands``: an action that wins or
    loses the episode is left to stand (its feedback could not be shown without its end);
    otherwise it is rolled back like any other. While the env replays a prefix the turn left no
    trace, so nothing is played.
    """
    if env.replaying:
        return FaultOutcome("", "dropped")
    snap = env.snapshot()
    obs, reward, invalid = env._attempt(action)
    if invalid or (ending_stands and (env.won or env.lost)):
        return FaultOutcome(obs, "none", None if invalid else action, reward, invalid)
    env.restore(snap)
    return FaultOutcome(obs, "dropped")


class ReachFaults:
    """The fault hooks of a family with ``perturb``, ``phantom``, ``unreachable`` and
    ``silent_unreachable`` (ALFWorld, TextWorld), mixed in before
    :class:`~budget_envs.core.TextAgentEnv`.

    The family says what its world does: :attr:`phantom_ending_stands`, :meth:`_perturb` (how
    the world changes under the player), :meth:`_reach_pool` (what may go out of reach now) and
    :meth:`_lost_for_good` (whether the task can no longer be won); it keeps the names out of
    reach in ``blocked`` (a frozenset, emptied at each reset) and refuses or hides the commands
    naming them.
    """

    family_fault_cells: ClassVar[dict[str, tuple[str, str]]] = REACH_FAULT_CELLS
    #: ``phantom``: an action that wins or loses the episode is left to stand (see
    #: :func:`phantom_turn`).
    phantom_ending_stands: ClassVar[bool] = False
    blocked: frozenset[str]

    def fault_kinds(self) -> tuple[str, ...]:
        return tuple(REACH_FAULT_CELLS)

    def _fault(self, kind: str, rng: np.random.Generator, action: Any) -> FaultOutcome:
        """``phantom`` (silent): :func:`phantom_turn`. Every other kind handles the action as
        usual first (a turn that ends the episode is then left as it is), then:

        ``perturb``: the world changes under the player (:meth:`_perturb`, real game moves, so
        tracking stays exact).

        ``unreachable`` / ``silent_unreachable`` (permanent): one thing within reach, drawn from
        ``rng`` among :meth:`_reach_pool`, gets out of reach for the rest of the episode (added
        to ``blocked``; the task is lost when :meth:`_lost_for_good` says no way is left). The
        explicit kind says so; the silent kind shows only the action's feedback."""
        if kind == "phantom":
            return phantom_turn(self, action, ending_stands=self.phantom_ending_stands)
        obs, reward, invalid = self._attempt(action)
        executed = None if invalid else action
        if self.won or self.lost:
            return FaultOutcome(obs, "none", executed, reward, invalid)
        if kind == "perturb":
            obs, effect, reward = self._perturb(rng, obs, reward)
            return FaultOutcome(obs, effect, executed, reward, invalid)
        pool = self._reach_pool()
        if not pool:
            return FaultOutcome(obs, "none", executed, reward, invalid)
        gone = pool[int(rng.integers(len(pool)))]
        self._put_out_of_reach(gone, told=kind == "unreachable")
        if self._lost_for_good():
            self.lost = True
        if kind == "unreachable":
            obs = f"{obs}\n\nThe {gone} is suddenly out of reach; you will not get to it again."
        return FaultOutcome(obs, "world", executed, reward, invalid)

    def _perturb(self, rng: np.random.Generator, obs: str, reward: float) -> tuple[str, str, float]:
        """After the agent's action (feedback ``obs``, ``reward``) left the episode running:
        change the world with moves drawn from ``rng``; the turn's feedback, effect and reward."""
        raise NotImplementedError

    def _reach_pool(self) -> list[str]:
        """The names that may go out of reach now, sorted (empty: nothing does)."""
        raise NotImplementedError

    def _lost_for_good(self) -> bool:
        """Whether no way to win is left around the names in ``blocked``."""
        raise NotImplementedError

    def _put_out_of_reach(self, name: str, *, told: bool) -> None:
        """Put ``name`` out of reach; ``told``: the agent was told so (``unreachable``)."""
        self.blocked = self.blocked | {name}
