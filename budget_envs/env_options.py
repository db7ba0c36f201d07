"""The keyword options every family's env takes on behalf of :class:`~budget_envs.core.TextAgentEnv`.

A family's constructor names its own options and passes the base ones through unchanged::

    def __init__(self, *, level=None, **base: Unpack[BaseOptions]) -> None:
        super().__init__(**base)

so the base options, their defaults and their checks live in one place
(:meth:`TextAgentEnv.__init__ <budget_envs.core.TextAgentEnv>`), and a type checker still sees
each keyword of every family's constructor.
"""

from __future__ import annotations

from typing import TypedDict

__all__ = ["BaseOptions"]


class BaseOptions(TypedDict, total=False):
    """``render_mode``, ``max_action_length``, ``max_observation_length``: see
    :class:`~budget_envs.core.TextAgentEnv` (each defaults to None: no rendering, the class's
    default lengths)."""

    render_mode: str | None
    max_action_length: int | None
    max_observation_length: int | None
