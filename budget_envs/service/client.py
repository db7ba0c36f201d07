"""Clients of ``budgetmix serve``: an OpenEnv ``EnvClient`` and a Gymnasium env on top of it.

:class:`BudgetEnvClient` is OpenEnv's async WebSocket client (``.sync()`` for blocking use); its
results carry a :class:`~budget_envs.service.models.BudgetObservation` with ``text``,
``terminated``, ``truncated`` and ``info``. :class:`RemoteEnv` turns it back into a
``gymnasium.Env`` whose ``reset`` / ``step`` return what the in-process env returns.

Example (against a running ``budgetmix serve BudgetMix/ToolUse-v0 --port 8000``)::

    from budget_envs.service import RemoteEnv

    env = RemoteEnv("http://127.0.0.1:8000")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(info["candidate_actions"][0])
"""

from __future__ import annotations

from budget_envs.service._deps import require_openenv

require_openenv()

import itertools  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_client import EnvClient  # noqa: E402

from budget_envs.core import text_space  # noqa: E402
from budget_envs.service.models import BudgetAction, BudgetObservation, BudgetState  # noqa: E402

__all__ = ["BudgetEnvClient", "RemoteEnv"]


class BudgetEnvClient(EnvClient[BudgetAction, BudgetObservation, BudgetState]):
    """OpenEnv client of a budget-envs server (one instance = one session).

    Example:
        >>> async with BudgetEnvClient(base_url="http://127.0.0.1:8000") as env:  # doctest: +SKIP
        ...     result = await env.reset(seed=0)
        ...     action = result.observation.info["candidate_actions"][0]
        ...     result = await env.step(BudgetAction(action=action, request_id="t1"))
        ...     result.observation.truncated, result.observation.info["budget"]
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The whole info of the last answer: the server leaves out values equal to it.
        self._last_info: dict[str, Any] | None = None

    def _step_payload(self, action: BudgetAction) -> dict[str, Any]:
        payload: dict[str, Any] = {"action": action.action}
        if action.request_id is not None:
            payload["request_id"] = action.request_id
        if action.metadata:
            payload["metadata"] = action.metadata
        return payload

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[BudgetObservation]:
        # ``payload`` was just decoded from the message: its dicts are ours to fill in place.
        fields = payload.get("observation")
        fields = {} if fields is None else fields
        fields["reward"] = payload.get("reward")
        fields["done"] = bool(payload.get("done", False))
        if fields.get("info_delta"):
            # the values that changed since the previous answer: the rest, and the key order,
            # are the previous answer's
            base = self._last_info
            if base is None:
                raise RuntimeError(
                    "the server sent an info delta, but this client has no earlier answer to "
                    "apply it to (reset first)"
                )
            info = dict(base)
            info.update(fields.get("info") or {})
            fields["info"] = info
            fields["info_delta"] = False  # restored: the info is whole again
        obs = BudgetObservation(**fields)
        # the base of the next delta is this client's own dict (validation copied it into
        # ``obs.info``), so a caller adding keys to the info it got changes no later answer
        self._last_info = fields.get("info") or {}
        return StepResult(
            observation=obs,
            reward=payload.get("reward"),
            done=obs.done,
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: dict[str, Any]) -> BudgetState:
        return BudgetState(**payload)


class RemoteEnv(gym.Env[str, str]):
    """A served session as a ``gymnasium.Env``: same observations, rewards, flags and info.

    Every step sends a request id new to the session (or the one given), so :meth:`step` may be retried after
    a lost answer with ``request_id=`` and is applied once. ``info`` values arrive as JSON
    (tuples as lists).

    Args:
        base_url: the server, e.g. ``"http://127.0.0.1:8000"``.
        message_timeout_s: seconds to wait for an answer.
        max_length: bound of the ``Text`` spaces.
    """

    metadata = {"render_modes": []}

    def __init__(
        self, base_url: str, *, message_timeout_s: float = 60.0, max_length: int = 1 << 20
    ) -> None:
        self._client = BudgetEnvClient(
            base_url=base_url, message_timeout_s=message_timeout_s
        ).sync()
        self._client.connect()
        self.observation_space = text_space(max_length)
        self.action_space = text_space(max_length)
        self.last_result: StepResult[BudgetObservation] | None = None
        self._ids = itertools.count(1)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        kwargs: dict[str, Any] = {"seed": seed}
        if options is not None:
            kwargs["options"] = options
        result = self._client.reset(**kwargs)
        self.last_result = result
        return result.observation.text, result.observation.info

    def step(
        self, action: str, request_id: str | None = None
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        rid = f"r{next(self._ids)}" if request_id is None else request_id
        result = self._client.step(BudgetAction(action=action, request_id=rid))
        self.last_result = result
        obs = result.observation
        return obs.text, float(obs.reward or 0.0), obs.terminated, obs.truncated, obs.info

    def state(self) -> BudgetState:
        """The server-side session state (env id, task, turns, state hash)."""
        return self._client.state()

    def close(self) -> None:
        self._client.close()
        super().close()
