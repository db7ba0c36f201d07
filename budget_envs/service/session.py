"""One session of the service: an OpenEnv ``Environment`` around a Gymnasium env.

:class:`SessionEnv` holds what the module docstring of :mod:`budget_envs.service.server` promises
a session: its own env (built at the first reset from a :class:`ServeConfig`, counted in the
server's :class:`EnvCounter`, never again once the session is closed), request ids that replay
a recorded answer instead of stepping again (keys are digests; the answers kept are bounded in
number and size), and, for clients that ask for them at reset, step answers whose info holds
only the values that changed since an answer the client names (``info_delta``).
"""

from __future__ import annotations

from budget_envs.service._deps import require_openenv

require_openenv()

import asyncio  # noqa: E402
import functools  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import threading  # noqa: E402
import warnings  # noqa: E402
from collections import OrderedDict  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import EnvironmentMetadata  # noqa: E402

from budget_envs.errors import MessageError, SessionClosed  # noqa: E402
from budget_envs.registry import DEFAULT_BUDGET, entry_for  # noqa: E402
from budget_envs.service.lane import EnvLane  # noqa: E402
from budget_envs.service.models import (  # noqa: E402
    MAX_REQUEST_ID,
    BudgetAction,
    BudgetObservation,
    BudgetState,
)

__all__ = [
    "REPLAY_BYTES",
    "REPLAY_CACHE",
    "EnvCounter",
    "MessageError",
    "ServeConfig",
    "SessionClosed",
    "SessionEnv",
]

#: Answers a session remembers for request-id retries (the last ones, at most this many)...
REPLAY_CACHE = 1024
#: ... and at most this many bytes of them, estimated (:func:`_approx_size`); the last answer
#: is always kept.
REPLAY_BYTES = 1 << 20
#: Fixed cost of one kept answer beyond its text and changed info values (the answer object,
#: its info dict, the cache's entry), estimated in bytes.
_ANSWER_OVERHEAD = 2048
#: Longest episode id accepted at reset, in characters.
MAX_EPISODE_ID = 255
#: Threads that run envs' slow reset preparation (``prepare_reset``), off the shared lane.
PREPARE_THREADS = 2

log = logging.getLogger(__name__)
_prepare: list[ThreadPoolExecutor] = []
_prepare_lock = threading.Lock()


def _prepare_pool() -> ThreadPoolExecutor:
    with _prepare_lock:
        if not _prepare:
            _prepare.append(
                ThreadPoolExecutor(PREPARE_THREADS, thread_name_prefix="budgetmix-prepare")
            )
        return _prepare[0]


class EnvCounter:
    """The Gymnasium envs of one server's sessions, whatever route made them: ``live`` now,
    ``built`` so far."""

    __slots__ = ("built", "live")

    def __init__(self) -> None:
        self.live = 0
        self.built = 0


def _digest(*parts: str) -> bytes:
    """16 bytes naming a message (a replay key holds this, not the message's text)."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.digest()


def _approx_size(value: Any) -> int:
    """Bytes a JSON-typed value takes in memory, roughly (CPython's object sizes)."""
    t = type(value)
    if t is str:
        return 49 + len(value)
    if t is list or t is tuple:
        return 56 + 8 * len(value) + sum(_approx_size(v) for v in value)
    if t is dict:
        return 232 + sum(80 + _approx_size(v) for v in value.values())
    return 32


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (an error quotes a bad value, not all of it)."""
    try:
        text = repr(value) if not isinstance(value, int) or abs(value) < 10**40 else "a huge int"
    except Exception:  # a value whose repr fails (or nests too deep)
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    info_seq: int | None = None,
    info_base: int | None = None,
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
            "info_seq": info_seq,
            "info_base": info_base,
        },
    )
    _set_slot(obs, "__pydantic_fields_set__", set(_OBSERVATION_FIELDS))
    _set_slot(obs, "__pydantic_extra__", None)
    _set_slot(obs, "__pydantic_private__", None)
    return obs


class SessionEnv(Environment[BudgetAction, BudgetObservation, BudgetState]):
    """One session's env. Built cheaply; the Gymnasium env is made at the first reset.

    ``reset(seed=None, options=None, request_id=None, info_delta=False)`` and
    ``step(BudgetAction)`` return a :class:`BudgetObservation` holding exactly what the
    Gymnasium env returned. After :meth:`close` the session refuses every reset and step, so no
    env lives outside the server's count (:class:`EnvCounter`).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True
    # Resets and steps go through the server's EnvLane (``reset_async`` / ``step_async``);
    # what OpenEnv still runs in its executor (building this object, ``close``) runs on one
    # shared thread, not a thread per session: under the GIL more threads add no parallelism.
    REQUIRES_SINGLE_THREAD_EXECUTOR = True

    def __init__(
        self,
        config: ServeConfig,
        lane: EnvLane | None = None,
        counter: EnvCounter | None = None,
    ) -> None:
        super().__init__()
        self._config = config
        self._lane = EnvLane() if lane is None else lane
        self._counter = EnvCounter() if counter is None else counter
        self._env: gym.Env | None = None
        self._closed = False
        self._episode_id: str | None = None
        self._steps = 0
        self._info: dict[str, Any] = {}
        # Whether the client asked for info deltas at its last reset (and the server sends them).
        self._delta_on = False
        # Answers sent so far; the last one's whole (JSON-typed) info is ``_sent``: the only
        # base a delta is computed against, and only when the step names it (``info_base``).
        # Its values are shared with the replay cache, never mutated.
        self._seq = 0
        self._sent: dict[str, Any] | None = None
        # The env's own info behind ``_sent`` (None when ``_sent`` came from a replay).
        self._raw: dict[str, Any] | None = None
        # The keys of ``_sent``, in order: a step answer is a delta only while they stay.
        self._keys: list[str] = []
        # request id -> (digest of the message, whole answer, estimated bytes)
        self._replies: OrderedDict[str, tuple[bytes, BudgetObservation, int]] = OrderedDict()
        self._replay_bytes = 0
        # Ids of earlier episodes' requests (and of a reset whose episode has stepped): a
        # message naming one is refused, never replayed into, or run anew in, this episode.
        self._stale: OrderedDict[str, None] = OrderedDict()
        self._reset_rid: str | None = None

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

    def _step_info(
        self, info: dict[str, Any], allow_delta: bool, measure: bool
    ) -> tuple[dict[str, Any], dict[str, Any], bool, int]:
        """(whole info, info as sent, whether that is a delta, estimated bytes of the values
        that changed when ``measure``) of a step answer, in one pass.

        The delta (when ``allow_delta``: the client holds the last answer's info) holds the
        values that differ from the last answer's (type and value: ``1`` and ``True`` differ);
        it is used when the info has that answer's keys in its order, so the client restores
        the whole info by updating the base. A value the env returns again as the very object
        of its previous step (ToolUse's shared ``tools`` schema) is unchanged without a deep
        comparison (an env never mutates an info value it returned).
        """
        sent, raw = self._sent, self._raw
        if not sent:
            full = _plain(info)
            self._keys = list(full)
            return full, full, False, _approx_size(full) if measure else 0
        delta = allow_delta and list(info) == self._keys
        full: dict[str, Any] = {}
        wire: dict[str, Any] = {}
        size = 0
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
                if measure:
                    size += _approx_size(v)
        if not delta:  # (with a delta the keys are the previous answer's)
            self._keys = list(full)
        return full, wire, delta, size

    def _whole(
        self, obs: BudgetObservation, raw: dict[str, Any] | None, replayed: bool = False
    ) -> BudgetObservation:
        """``obs`` (its info whole) as the session's next answer: numbered, and the base of the
        next delta."""
        self._sent, self._raw = obs.info, raw
        self._keys = list(obs.info)
        self._seq += 1
        update: dict[str, Any] = {"info_seq": self._seq if self._delta_on else None}
        if replayed:
            update["replayed"] = True
        return obs.model_copy(update=update)

    # ---------------------------------------------------------------- request ids
    def _retire(self, request_ids: Any) -> None:
        """Move ``request_ids`` out of the replay cache into the stale ids (bounded)."""
        for rid in list(request_ids):
            hit = self._replies.pop(rid, None)
            if hit is not None:
                self._replay_bytes -= hit[2]
            self._stale[rid] = None
            self._stale.move_to_end(rid)
        while len(self._stale) > REPLAY_CACHE:
            self._stale.popitem(last=False)

    def _replay(self, request_id: str | None, key: bytes) -> BudgetObservation | None:
        if request_id is None:
            return None
        if request_id in self._stale:
            raise ValueError(
                f"request id {_short(request_id)} belongs to an earlier episode of this session "
                "(or to a reset whose episode has already stepped); it is not replayed or run "
                "again: use a fresh id"
            )
        hit = self._replies.get(request_id)
        if hit is None:
            return None
        if hit[0] != key:
            raise ValueError(
                f"request id {_short(request_id)} was already used in this session for a "
                "different message; use a fresh id for every new step"
            )
        return hit[1]

    def _record(
        self, request_id: str | None, key: bytes, obs: BudgetObservation, size: int
    ) -> None:
        if request_id is None:
            return
        size += _ANSWER_OVERHEAD + len(obs.text) + len(request_id)
        self._replies[request_id] = (key, obs, size)
        self._replay_bytes += size
        replies = self._replies
        while len(replies) > 1 and (
            len(replies) > REPLAY_CACHE or self._replay_bytes > REPLAY_BYTES
        ):
            self._replay_bytes -= replies.popitem(last=False)[1][2]

    def replay_stats(self) -> dict[str, int]:
        """Answers kept for retries and their estimated bytes."""
        return {"answers": len(self._replies), "bytes": self._replay_bytes}

    # ---------------------------------------------------------------- OpenEnv API
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        request_id: str | None = None,
        info_delta: bool = False,
        **kwargs: Any,
    ) -> BudgetObservation:
        if kwargs:
            names = sorted(_short(k, 40) for k in list(kwargs)[:8])
            raise MessageError(
                f"reset got unknown field(s) {names}; it takes seed, options, episode_id, "
                "request_id and info_delta"
            )
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise MessageError(f"seed must be a non-negative int or null, got {_short(seed)}")
        if options is not None and not isinstance(options, dict):
            raise MessageError(f"options must be an object or null, got {_short(options)}")
        if episode_id is not None and (
            not isinstance(episode_id, str) or len(episode_id) > MAX_EPISODE_ID
        ):
            raise MessageError(
                f"episode_id must be a string of at most {MAX_EPISODE_ID} characters or null, "
                f"got {_short(episode_id)}"
            )
        if request_id is not None and (
            not isinstance(request_id, str) or len(request_id) > MAX_REQUEST_ID
        ):
            raise MessageError(
                f"request_id must be a string of at most {MAX_REQUEST_ID} characters or null, "
                f"got {_short(request_id)}"
            )
        if not isinstance(info_delta, bool):
            raise MessageError(f"info_delta must be true or false, got {_short(info_delta)}")
        self._check_open()
        try:
            text_key = json.dumps([seed, options, info_delta], sort_keys=True, default=repr)
        except (ValueError, TypeError, RecursionError) as exc:
            raise MessageError(f"options cannot be read back as JSON: {_short(exc)}") from None
        key = _digest("reset", text_key)
        replayed = self._replay(request_id, key)
        if replayed is not None:
            self._delta_on = info_delta and self._config.info_delta
            return self._whole(replayed, None, replayed=True)
        self._open_env()
        text, info = self._env.reset(seed=seed, options=options)
        self._retire(self._replies)  # request ids are scoped to their episode
        self._reset_rid = request_id
        self._episode_id = episode_id
        self._steps = 0
        self._info = info
        self._delta_on = info_delta and self._config.info_delta
        obs = BudgetObservation(
            text=text,
            info=self._full_info(info),
            reward=0.0,
            done=False,
            request_id=request_id,
        )
        if request_id is not None:
            self._record(request_id, key, obs, _approx_size(obs.info))
        # A reset answer is whole: a client that reconnected (a new session) starts from it.
        return self._whole(obs, info)

    def step(
        self, action: BudgetAction, timeout_s: float | None = None, **kwargs: Any
    ) -> BudgetObservation:
        rid = action.request_id
        if rid is not None:
            key = _digest("step", action.action)
            replayed = self._replay(rid, key)
            if replayed is not None:  # a retry: its answer whole, whatever base it names
                return self._whole(replayed, None, replayed=True)
        self._check_open()
        if self._env is None:
            raise RuntimeError(
                "this session has no episode yet (it is new, or an idle one was closed and the "
                "client opened a new one): send a reset first"
            )
        text, reward, terminated, truncated, info = self._env.step(action.action)
        if self._reset_rid is not None:  # the client has its reset answer: no retry of it now
            self._retire([self._reset_rid])
            self._reset_rid = None
        self._steps += 1
        self._info = info
        base = action.info_base
        allow = self._delta_on and base is not None and base == self._seq
        full, wire, delta, size = self._step_info(info, allow, rid is not None)
        self._sent, self._raw = full, info
        self._seq += 1
        terminated, truncated = bool(terminated), bool(truncated)
        text = text if type(text) is str else str(text)
        reward = float(reward)
        if rid is not None:
            whole = _observation(text, reward, terminated, truncated, full, rid, False)
            self._record(rid, key, whole, size)
        return _observation(
            text,
            reward,
            terminated,
            truncated,
            wire,
            rid,
            delta,
            self._seq if self._delta_on else None,
            base if delta else None,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed("this session is closed; open a new session")

    async def reset_async(self, *args: Any, **kwargs: Any) -> BudgetObservation:
        """:meth:`reset` (the same arguments, checked there) through the server's lane; the
        first one (it builds the env) always runs on the worker thread."""
        call = functools.partial(self.reset, *args, **kwargs)
        if self._env is None and not self._closed:
            await self._lane.run("open", self._open_env, inline=False)
        await self._prepare_reset(kwargs.get("seed"), kwargs.get("options"))
        return await self._lane.run("reset", call)

    def _open_env(self) -> None:
        if self._env is None and not self._closed:
            self._env = self._config.make()
            self._counter.live += 1
            self._counter.built += 1

    async def _prepare_reset(self, seed: Any, options: Any) -> None:
        """Run the env's slow preparation for this reset (a TextWorld game generated on first
        use) on a thread of its own, off the lane every session's calls share: other sessions
        keep stepping meanwhile. Errors are left to the reset, which reports them."""
        base = getattr(self._env, "unwrapped", None)
        prepare = getattr(base, "prepare_reset", None)
        if prepare is None or self._closed:
            return
        if seed is not None and (type(seed) is not int or seed < 0):
            return
        if options is not None and not isinstance(options, dict):
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(_prepare_pool(), prepare, seed, options)
        except Exception:  # the reset itself raises what matters, as a turn or an error
            log.debug("prepare_reset failed; the reset reports it", exc_info=True)

    async def step_async(
        self, action: BudgetAction, timeout_s: float | None = None, **kwargs: Any
    ) -> BudgetObservation:
        """:meth:`step` through the server's lane (inline on the event loop while cheap)."""
        return await self._lane.run(
            "step", functools.partial(self.step, action, timeout_s, **kwargs)
        )

    @property
    def has_env(self) -> bool:
        """Whether this session holds a built Gymnasium env now."""
        return self._env is not None

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
        """Free the env; the session then refuses every reset and step."""
        self._closed = True
        self._replies.clear()
        self._replay_bytes = 0
        self._sent = self._raw = None
        if self._env is not None:
            env, self._env = self._env, None
            self._counter.live -= 1
            env.close()
