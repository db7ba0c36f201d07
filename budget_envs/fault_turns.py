"""Fault turns that more than one family plays the same way, written once for all of them.

A family's ``_fault`` hook (see :class:`~budget_envs.core.TextAgentEnv`) may hand a kind to one of
these instead of writing it again; each needs only the contract's own methods (``_attempt``,
``snapshot``, ``restore``) and flags (``replaying``, ``won``, ``lost``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from budget_envs.core import FaultOutcome

if TYPE_CHECKING:
    from budget_envs.core import TextAgentEnv

__all__ = ["phantom_turn"]


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
