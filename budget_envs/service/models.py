"""Wire types of the service: OpenEnv ``Action`` / ``Observation`` / ``State`` subclasses.

OpenEnv's step result has a single ``done``; :class:`BudgetObservation` also carries Gymnasium's
``terminated`` and ``truncated`` and the whole ``info`` dict, so a client sees exactly what the
in-process env returns. OpenEnv's step message has no request id; :class:`BudgetAction` has one.
"""

from __future__ import annotations

from budget_envs.service._deps import require_openenv

require_openenv()

from typing import Any  # noqa: E402

from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from pydantic import Field  # noqa: E402

__all__ = ["MAX_REQUEST_ID", "BudgetAction", "BudgetObservation", "BudgetState"]

#: Longest accepted request id, in characters.
MAX_REQUEST_ID = 128


class BudgetAction(Action):
    """One turn: the action text, and optionally a request id that makes retries safe."""

    action: str = Field(description="The agent's action text (ToolUse: the tool-call JSON).")
    request_id: str | None = Field(
        default=None,
        max_length=MAX_REQUEST_ID,
        description="Client-chosen id, unique within the session. A step whose id was already "
        "applied returns the recorded result (replayed=true) without stepping again.",
    )
    info_base: int | None = Field(
        default=None,
        ge=0,
        description="The info_seq of the last answer whose whole info the client holds (clients "
        "that asked for info deltas at reset). The server sends a delta only against that "
        "answer, and the whole info when it is not the last one it sent (an answer was lost).",
    )


class BudgetObservation(Observation):
    """What ``env.step`` / ``env.reset`` returned, in full; ``done = terminated or truncated``."""

    text: str = Field(default="", description="The observation text.")
    terminated: bool = Field(default=False, description="Gymnasium's terminated (won or lost).")
    truncated: bool = Field(default=False, description="Gymnasium's truncated (budget spent).")
    info: dict[str, Any] = Field(default_factory=dict, description="The env's info dict.")
    request_id: str | None = Field(default=None, description="The request id answered, if any.")
    replayed: bool = Field(
        default=False, description="True when this answer is a recorded one (a retried id)."
    )
    info_delta: bool = Field(
        default=False,
        description="True when info holds only the values that changed since the answer named "
        "by info_base: the whole info is that answer's updated with these, in its key order "
        "(the client restores it). Only for clients that asked for deltas at reset.",
    )
    info_seq: int | None = Field(
        default=None,
        description="This answer's number in the session (clients that asked for info deltas): "
        "the info_base a later step names to get a delta against this answer's info.",
    )
    info_base: int | None = Field(
        default=None,
        description="With info_delta: the info_seq of the answer whose info this delta updates.",
    )


class BudgetState(State):
    """The session's env: its id, task, turn and state hash (``step_count`` = wrapper turns)."""

    env_id: str = Field(default="", description="The served BudgetMix id.")
    task_id: str | None = Field(default=None, description="The task being played.")
    state_hash: str | None = Field(default=None, description="info['state_hash'] now.")
