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


def _json_copy(value: Any) -> Any:
    """``value`` (JSON-typed) with fresh lists and dicts all the way down."""
    t = type(value)
    if t is dict:
        return {k: _json_copy(v) for k, v in value.items()}
    if t is list:
        return [_json_copy(v) for v in value]
    return value


class BudgetEnvClient(EnvClient[BudgetAction, BudgetObservation, BudgetState]):
    """OpenEnv client of a budget-envs server (one instance = one session).

    It asks for info deltas at every reset (``info_delta=False`` at construction: whole infos
    only): a step answer then carries only the info values that changed since the answer this
    client names in its step (``info_base``, the last answer it received), and the client
    restores the whole info. After a lost answer the server answers with the whole info, so a
    retried step (same ``request_id``) returns the info of its own turn.

    Example:
        >>> async with BudgetEnvClient(base_url="http://127.0.0.1:8000") as env:  # doctest: +SKIP
        ...     result = await env.reset(seed=0)
        ...     action = result.observation.info["candidate_actions"][0]
        ...     result = await env.step(BudgetAction(action=action, request_id="t1"))
        ...     result.observation.truncated, result.observation.info["budget"]
    """

    def __init__(self, *args: Any, info_delta: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._info_delta = bool(info_delta)
        # The last answer's number (``info_seq``) and its whole info as this client's own deep
        # copy: the base the server's deltas update. Never handed out, so nothing a caller
        # does to an info it got changes a later answer.
        self._base_seq: int | None = None
        self._base: dict[str, Any] | None = None
        # The objects handed out in the last answer's info, per key: an unchanged value is
        # handed out again while it still equals the base (the caller did not change it), as
        # the in-process env returns an unchanged value (ToolUse's ``tools``) as the same object.
        self._given: dict[str, Any] = {}

    async def _reset_async(self, **kwargs: Any) -> StepResult[BudgetObservation]:
        if self._info_delta:
            kwargs.setdefault("info_delta", True)
        # until the reset's answer arrives there is no base: a failed reset leaves none, and
        # the next step then gets a whole info
        self._base_seq, self._base, self._given = None, None, {}
        return await super()._reset_async(**kwargs)

    def _step_payload(self, action: BudgetAction) -> dict[str, Any]:
        payload: dict[str, Any] = {"action": action.action}
        if action.request_id is not None:
            payload["request_id"] = action.request_id
        base = action.info_base if action.info_base is not None else self._base_seq
        if base is not None:
            payload["info_base"] = base
        if action.metadata:
            payload["metadata"] = action.metadata
        return payload

    def _restore(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The whole info of a delta answer (``fields`` decoded from it), from the base."""
        base = self._base
        if base is None:
            raise RuntimeError(
                "the server sent an info delta, but this client has no earlier answer to "
                "apply it to (reset first)"
            )
        if fields.get("info_base") != self._base_seq:
            raise RuntimeError(
                f"the server sent an info delta against answer {fields.get('info_base')!r}, "
                f"but this client holds answer {self._base_seq!r}"
            )
        changed = fields.get("info") or {}
        given = self._given
        info: dict[str, Any] = {}
        for k, kept in base.items():
            if k in changed:
                info[k] = changed[k]
                continue
            value = given.get(k, kept)
            t = type(value)
            if (t is dict or t is list) and (value is kept or value != kept):
                value = _json_copy(kept)  # changed by the caller since: a fresh copy
            info[k] = value
        for k, v in changed.items():  # (a delta keeps the base's keys; nothing is dropped)
            if k not in info:
                info[k] = v
        for k, v in changed.items():
            base[k] = _json_copy(v)
        return info

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[BudgetObservation]:
        # ``payload`` was just decoded from the message: its dicts are ours to fill in place.
        fields = payload.get("observation")
        fields = {} if fields is None else fields
        fields["reward"] = payload.get("reward")
        fields["done"] = bool(payload.get("done", False))
        seq = fields.get("info_seq")
        if fields.get("info_delta"):
            info = self._restore(fields)
            fields["info"] = info
            fields["info_delta"] = False  # restored: the info is whole again
            fields["info_base"] = None
        else:
            info = fields.get("info") or {}
            # a whole info in a session with deltas: the next delta's base, as our own copy
            self._base = _json_copy(info) if seq is not None else None
        self._base_seq = seq
        self._given = info
        obs = BudgetObservation(**fields)
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
