"""One session of the service: an OpenEnv ``Environment`` around a Gymnasium env.

:class:`SessionEnv` holds what the module docstring of :mod:`budget_envs.service.server` promises
a session: its own env (built at the first reset from a :class:`ServeConfig`), request ids that
replay a recorded answer instead of stepping again, and step answers whose info holds only the
values that changed since the session's previous answer (``info_delta``).
"""

from __future__ import annotations

from budget_envs.service._deps import require_openenv

require_openenv()

import functools  # noqa: E402
import json  # noqa: E402
import warnings  # noqa: E402
from collections import OrderedDict  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import EnvironmentMetadata  # noqa: E402

from budget_envs.registry import DEFAULT_BUDGET, entry_for  # noqa: E402
from budget_envs.service.lane import EnvLane  # noqa: E402
from budget_envs.service.models import BudgetAction, BudgetObservation, BudgetState  # noqa: E402

__all__ = ["REPLAY_CACHE", "ServeConfig", "SessionEnv"]

#: Answers a session remembers for request-id retries.
REPLAY_CACHE = 1024

#: A value missing from the previous answer's info (no value of an info is this object).
_MISSING = object()

#: Value types a reset answer reuses from the previous answer when equal (``_full_info``).
_OMITTABLE = (str, list, dict)


def _plain(value: Any) -> Any:
    """``value`` with only JSON types (tuples become lists, numpy scalars Python numbers)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return repr(value)


@dataclass
class ServeConfig:
    """What every session of one server builds: ``gymnasium.make(env_id, **make_kwargs())``."""

    env_id: str
    budget: Any = DEFAULT_BUDGET
    visibility: str = "hidden"
    faults: Any = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Kwargs a family's host env gives so sessions share its server (see ``shared_env_kwargs``).
    shared_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Step answers leave out info values unchanged since the session's previous answer.
    info_delta: bool = True

    def make_kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"visibility": self.visibility, "faults": self.faults}
        if self.budget is not DEFAULT_BUDGET:
            out["budget"] = self.budget
        out.update(self.env_kwargs)
        out.update(self.shared_kwargs)
        return out

    def make(self) -> gym.Env:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the passive checker's notes on Text spaces
            return gym.make(self.env_id, **self.make_kwargs())


_new_object = object.__new__
_set_slot = object.__setattr__
_OBSERVATION_FIELDS = tuple(BudgetObservation.model_fields)


def _observation(
    text: str,
    reward: float,
    terminated: bool,
    truncated: bool,
    info: dict[str, Any],
    request_id: str | None,
    info_delta: bool,
) -> BudgetObservation:
    """A step answer built from values of the right types, without pydantic's validation
    (a third of the session's own work per step): what ``model_construct`` does, for these
    fields only. ``tests/test_service.py`` checks it equals the validated model."""
    obs = _new_object(BudgetObservation)
    _set_slot(
        obs,
        "__dict__",
        {
            "done": terminated or truncated,
            "reward": reward,
            "metadata": {},
            "text": text,
            "terminated": terminated,
            "truncated": truncated,
            "info": info,
            "request_id": request_id,
            "replayed": False,
            "info_delta": info_delta,
        },
    )
    _set_slot(obs, "__pydantic_fields_set__", set(_OBSERVATION_FIELDS))
    _set_slot(obs, "__pydantic_extra__", None)
    _set_slot(obs, "__pydantic_private__", None)
    return obs


class SessionEnv(Environment[BudgetAction, BudgetObservation, BudgetState]):
    """One session's env. Built cheaply; the Gymnasium env is made at the first reset.

    ``reset(seed=None, options=None, request_id=None)`` and ``step(BudgetAction)`` return a
    :class:`BudgetObservation` holding exactly what the Gymnasium env returned.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True
    # Resets and steps go through the server's EnvLane (``reset_async`` / ``step_async``);
    # what OpenEnv still runs in its executor (building this object, ``close``) runs on one
    # shared thread, not a thread per session: under the GIL more threads add no parallelism.
    REQUIRES_SINGLE_THREAD_EXECUTOR = True

    def __init__(self, config: ServeConfig, lane: EnvLane | None = None) -> None:
        super().__init__()
        self._config = config
        self._lane = EnvLane() if lane is None else lane
        self._env: gym.Env | None = None
        self._episode_id: str | None = None
        self._steps = 0
        self._info: dict[str, Any] = {}
        # The whole (JSON-typed) info of the last answer sent: the base the client restores
        # left-out values from. Its values are shared with the replay cache, never mutated.
        self._sent: dict[str, Any] | None = None
        # The env's own info behind ``_sent`` (None when ``_sent`` came from a replay).
        self._raw: dict[str, Any] | None = None
        # The keys of ``_sent``, in order: a step answer is a delta only while they stay.
        self._keys: list[str] = []
        self._replies: OrderedDict[str, tuple[str, BudgetObservation]] = OrderedDict()

    # ---------------------------------------------------------------- info deltas
    def _full_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """``_plain(info)``, reusing the last answer's converted value for every value equal to
        it (``info["tools"]`` of ToolUse: 6 KB converted again at every step otherwise)."""
        sent = self._sent
        if not sent:
            return _plain(info)
        out: dict[str, Any] = {}
        for k, v in info.items():
            k = str(k)
            old = sent.get(k, _MISSING)
            # raw against converted: a tuple never equals its list, so it is converted anew
            if type(v) is type(old) and isinstance(v, _OMITTABLE) and v == old:
                out[k] = old
            else:
                out[k] = _plain(v)
        return out

    def _step_info(self, info: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """(whole info, info as sent, whether that is a delta) of a step answer, in one pass.

        The delta holds the values that differ from the previous answer's (type and value:
        ``1`` and ``True`` differ); it is used when the info has the previous answer's keys in
        its order, so the client restores the whole info by updating the previous one. A
        value the env returns again as the very object of its previous step (ToolUse's shared
        ``tools`` schema) is unchanged without a deep comparison (an env never mutates an info
        value it returned).
        """
        sent, raw = self._sent, self._raw
        if not sent:
            full = _plain(info)
            self._keys = list(full)
            return full, full, False
        delta = self._config.info_delta and list(info) == self._keys
        full: dict[str, Any] = {}
        wire: dict[str, Any] = {}
        raw_get = raw.get if raw is not None else None
        for k, v in info.items():
            if type(k) is not str:
                k = str(k)
            old = sent.get(k, _MISSING)
            if v is old:
                same = True
            else:
                t = type(v)
                if t is str or t is bool or t is int or t is float or v is None:
                    same = t is type(old) and v == old
                elif old is not _MISSING and raw_get is not None and v is raw_get(k, _MISSING):
                    same = True
                elif (t is list or t is dict) and t is type(old) and v == old:
                    same = True
                else:
                    # raw against converted: a tuple never equals its list, so compare the
                    # new conversion too
                    v = _plain(v)
                    same = type(v) is type(old) and v == old
            if same:
                full[k] = old
                if not delta:
                    wire[k] = old
            else:
                full[k] = wire[k] = v
        if not delta:  # (with a delta the keys are the previous answer's)
            self._keys = list(full)
        return full, wire, delta

    def _wire(self, obs: BudgetObservation, delta: bool) -> BudgetObservation:
        """The answer as sent: with ``delta``, only the info values that differ from the
        session's previous answer (see :meth:`_step_info`). The whole info becomes the next
        answer's base."""
        sent, self._sent = self._sent, obs.info
        self._raw = None
        keys, self._keys = self._keys, list(obs.info)
        if not (delta and sent and self._config.info_delta and keys == self._keys):
            return obs
        changed = {}
        for k, v in obs.info.items():
            old = sent[k]
            if not (v is old or (type(v) is type(old) and v == old)):
                changed[k] = v
        return obs.model_copy(update={"info": changed, "info_delta": True})

    # ---------------------------------------------------------------- request ids
    def _replay(self, request_id: str | None, key: str) -> BudgetObservation | None:
        if request_id is None:
            return None
        hit = self._replies.get(request_id)
        if hit is None:
            return None
        if hit[0] != key:
            raise ValueError(
                f"request id {request_id!r} was already used in this session for a different "
                "message; use a fresh id for every new step"
            )
        return hit[1].model_copy(update={"replayed": True})

    def _record(self, request_id: str | None, key: str, obs: BudgetObservation) -> None:
        if request_id is None:
            return
        self._replies[request_id] = (key, obs)
        while len(self._replies) > REPLAY_CACHE:
            self._replies.popitem(last=False)

    # ---------------------------------------------------------------- OpenEnv API
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        request_id: str | None = None,
        **kwargs: Any,
    ) -> BudgetObservation:
        if kwargs:
            raise ValueError(
                f"reset got unknown field(s) {sorted(kwargs)}; it takes seed, options, "
                "episode_id and request_id"
            )
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError(f"seed must be an int or null, got {seed!r}")
        if options is not None and not isinstance(options, dict):
            raise ValueError(f"options must be an object or null, got {options!r}")
        key = json.dumps(["reset", seed, options], sort_keys=True, default=repr)
        replayed = self._replay(request_id, key)
        if replayed is not None:
            return self._wire(replayed, delta=False)
        if self._env is None:
            self._env = self._config.make()
        text, info = self._env.reset(seed=seed, options=options)
        self._episode_id = episode_id
        self._steps = 0
        self._info = info
        obs = BudgetObservation(
            text=text,
            info=self._full_info(info),
            reward=0.0,
            done=False,
            request_id=request_id,
        )
        self._record(request_id, key, obs)
        # A reset answer is whole: a client that reconnected (a new session) starts from it.
        obs = self._wire(obs, delta=False)
        self._raw = info
        return obs

    def step(
        self, action: BudgetAction, timeout_s: float | None = None, **kwargs: Any
    ) -> BudgetObservation:
        rid = action.request_id
        if rid is not None:
            key = "step\x1f" + action.action
            replayed = self._replay(rid, key)
            if replayed is not None:
                return self._wire(replayed, delta=True)
        if self._env is None:
            raise RuntimeError(
                "this session has no episode yet (it is new, or an idle one was closed and the client opened a new one): send a reset first"
            )
        text, reward, terminated, truncated, info = self._env.step(action.action)
        self._steps += 1
        self._info = info
        full, wire, delta = self._step_info(info)
        self._sent, self._raw = full, info
        terminated, truncated = bool(terminated), bool(truncated)
        text = text if type(text) is str else str(text)
        reward = float(reward)
        if rid is not None:
            self._record(
                rid, key, _observation(text, reward, terminated, truncated, full, rid, False)
            )
        return _observation(text, reward, terminated, truncated, wire, rid, delta)

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        request_id: str | None = None,
        **kwargs: Any,
    ) -> BudgetObservation:
        """:meth:`reset` through the server's lane; the first one (it builds the env) always
        runs on the worker thread."""
        call = functools.partial(self.reset, seed, episode_id, options, request_id, **kwargs)
        if self._env is None:
            return await self._lane.run("open", call, inline=False)
        return await self._lane.run("reset", call)

    async def step_async(
        self, action: BudgetAction, timeout_s: float | None = None, **kwargs: Any
    ) -> BudgetObservation:
        """:meth:`step` through the server's lane (inline on the event loop while cheap)."""
        return await self._lane.run(
            "step", functools.partial(self.step, action, timeout_s, **kwargs)
        )

    @property
    def state(self) -> BudgetState:
        return BudgetState(
            episode_id=self._episode_id,
            step_count=self._steps,
            env_id=self._config.env_id,
            task_id=self._info.get("task_id"),
            state_hash=self._info.get("state_hash"),
        )

    def get_metadata(self) -> EnvironmentMetadata:
        entry = entry_for(self._config.env_id)
        return EnvironmentMetadata(
            name=entry.id, description=entry.description, version="0.1.0", author="budget-envs"
        )

    def close(self) -> None:
        if self._env is not None:
            env, self._env = self._env, None
            env.close()
