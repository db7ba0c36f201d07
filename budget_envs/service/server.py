"""An OpenEnv server for any registered id: one env per WebSocket session, many sessions.

The protocol is OpenEnv's own (``openenv.core.env_server.HTTPEnvServer``): sessions live on the
WebSocket ``/ws`` (``{"type": "reset" | "step" | "state" | "close", "data": ...}``), ``/schema``
and ``/health`` describe and check the server. This module adds what the suite needs on top:

* :class:`SessionEnv`, an OpenEnv ``Environment`` around ``gymnasium.make(id, budget=...,
  visibility=..., faults=...)``: sessions are independent (own env, seeds, budget draws, faults);
* request ids: a step (or reset) carrying an id already applied in the session returns the
  recorded answer without stepping again, so clients can retry;
* families with a server of their own (the web shop) get one per process, shared by sessions;
* :class:`Guard`, an ASGI middleware: idle WebSocket sessions are closed (and their env freed)
  after ``idle_timeout`` seconds, oversized messages get an error frame and leave the session
  alive, oversized HTTP bodies get 413;
* ``GET /sessions``: active and maximum sessions;
* :class:`EnvLane`: every session's env calls run one at a time, on the event loop while they
  are cheap (no thread hop per step), on one worker thread when they are not.
"""

from __future__ import annotations

from budget_envs.service._deps import require_openenv

require_openenv()

import asyncio  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections import OrderedDict, deque  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from openenv.core.env_server.http_server import HTTPEnvServer  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata  # noqa: E402

from budget_envs.registry import entry_for  # noqa: E402
from budget_envs.service.models import BudgetAction, BudgetObservation, BudgetState  # noqa: E402

__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "EnvLane",
    "Guard",
    "ServeConfig",
    "SessionEnv",
    "create_app",
    "run_app",
    "serve",
]

logger = logging.getLogger(__name__)

#: Sessions one server holds at once unless told otherwise.
DEFAULT_MAX_SESSIONS = 64
#: Seconds a WebSocket session may stay silent before it is closed and its env freed.
DEFAULT_IDLE_TIMEOUT = 300.0
#: Largest WebSocket message or HTTP body the server reads, in bytes.
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
#: Answers a session remembers for request-id retries.
REPLAY_CACHE = 1024
#: Seconds (median of recent runs) above which env calls leave the event loop for the worker thread.
INLINE_LIMIT_S = 0.002
#: Inline runs of a kind of call the median is taken over.
LANE_WINDOW = 15
#: A kind of call judged slow still runs inline once in this many calls, to check it still is.
LANE_PROBE_EVERY = 64

_DEFAULT = object()
#: What a batched call's future holds when the call is to run on the worker thread instead.
_TO_WORKER = object()

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
    budget: Any = _DEFAULT
    visibility: str = "hidden"
    faults: Any = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Kwargs a family's host env gives so sessions share its server (see ``shared_env_kwargs``).
    shared_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Step answers leave out info values unchanged since the session's previous answer.
    info_delta: bool = True

    def make_kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"visibility": self.visibility, "faults": self.faults}
        if self.budget is not _DEFAULT:
            out["budget"] = self.budget
        out.update(self.env_kwargs)
        out.update(self.shared_kwargs)
        return out

    def make(self) -> gym.Env:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the passive checker's notes on Text spaces
            return gym.make(self.env_id, **self.make_kwargs())


class EnvLane:
    """Runs the env calls of every session of one server one at a time, in arrival order.

    A call runs inline on the event loop while calls of its kind are cheap and none waits on
    the worker thread; otherwise it runs on the one worker thread, and the next calls follow
    it there until the worker is idle again. Handing a 20 us ToolUse step to a thread costs
    more than the step (a future, a wake-up of the loop, and the GIL passed back and forth
    around every SQLite call, which at 64+ sessions stalls the loop's sockets); a slow call (an
    ALFWorld step, building an env) inline would stall every other session's socket for its
    duration.

    "Cheap" is the median of the last ``window`` inline runs of the kind under
    ``inline_limit_s``: on a busy machine a 20 us call is now and then preempted for
    milliseconds, and one such run must not send every later call to the thread (where each
    pays the hop, and times taken there, inflated by waits for the GIL, would keep them
    there). Runs on the worker are therefore not timed; a kind judged slow runs inline once
    in ``probe_every`` calls to check it still is.

    With ``batch`` (the default), the inline calls that arrive in one turn of the event loop
    run together, one after another, at its next turn: under many sessions the loop reads
    every socket that has a message, and each session's handler then reaches its env call.
    The env calls, then the answers, then the next reads each run back to back instead of
    interleaved session by session, and the answers leave in bursts the clients read
    together. Each call pays one future and one extra turn of the loop.
    """

    def __init__(
        self,
        inline_limit_s: float = INLINE_LIMIT_S,
        *,
        window: int = LANE_WINDOW,
        probe_every: int = LANE_PROBE_EVERY,
        clock: Any = time.perf_counter,
        batch: bool = True,
    ) -> None:
        if not isinstance(inline_limit_s, (int, float)) or isinstance(inline_limit_s, bool):
            raise TypeError(f"inline_limit_s must be a number, got {inline_limit_s!r}")
        for name, value in (("window", window), ("probe_every", probe_every)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.inline_limit_s = float(inline_limit_s)
        self.probe_every = probe_every
        self._window = window
        self._clock = clock
        self._runs: dict[str, deque[float]] = {}
        self._slow: set[str] = set()
        self._skipped: dict[str, int] = {}
        self._queued = 0
        self._executor: ThreadPoolExecutor | None = None
        self.batch = bool(batch)
        # inline calls waiting for the next turn of the loop: (kind, call, future, probe)
        self._pending: list[tuple[str, Any, asyncio.Future, bool]] = []
        #: Turns of the loop that ran gathered inline calls (``counts["inline"] / batches``
        #: calls each, on average).
        self.batches = 0
        #: Calls run so far: ``{"inline": n, "worker": m}`` (for tests and profiling).
        self.counts = {"inline": 0, "worker": 0}
        #: Per kind of call, ``[runs, seconds]`` over the inline runs (the timed ones).
        self.timed: dict[str, list[float]] = {}

    def is_slow(self, kind: str) -> bool:
        """Whether calls of ``kind`` go to the worker thread (when nothing else decides)."""
        return kind in self._slow

    def _timed(self, kind: str, call: Any) -> Any:
        t0 = self._clock()
        try:
            return call()
        finally:
            runs = self._runs.get(kind)
            if runs is None:
                runs = self._runs[kind] = deque(maxlen=self._window)
            took = self._clock() - t0
            runs.append(took)
            total = self.timed.get(kind)
            if total is None:
                total = self.timed[kind] = [0, 0.0]
            total[0] += 1
            total[1] += took
            # The median; under 3 runs the fastest, so that one preempted run decides nothing.
            typical = min(runs) if len(runs) < 3 else sorted(runs)[len(runs) // 2]
            if typical < self.inline_limit_s:
                self._slow.discard(kind)
            else:
                self._slow.add(kind)

    async def run(self, kind: str, call: Any, *, inline: bool = True) -> Any:
        """``call()``, inline or on the worker thread (always there with ``inline=False``)."""
        if inline and not self._queued:
            if kind not in self._slow:
                return await self._inline(kind, call)
            skipped = self._skipped.get(kind, 0) + 1
            if skipped >= self.probe_every:
                self._skipped[kind] = 0
                return await self._inline(kind, call, probe=True)
            self._skipped[kind] = skipped
        return await self._on_worker(call)

    async def _inline(self, kind: str, call: Any, probe: bool = False) -> Any:
        if not self.batch:
            self.counts["inline"] += 1
            return self._timed(kind, call)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((kind, call, future, probe))
        if len(self._pending) == 1:
            loop.call_soon(self._run_pending)
        result = await future
        if result is _TO_WORKER:  # its kind turned slow earlier in its batch
            return await self._on_worker(call)
        return result

    def _run_pending(self) -> None:
        """Run the calls gathered since the last turn of the loop, in arrival order."""
        pending, self._pending = self._pending, []
        self.batches += 1
        for kind, call, future, probe in pending:
            if future.cancelled():  # its session went away meanwhile
                continue
            if kind in self._slow and not probe:  # turned slow earlier in this batch
                future.set_result(_TO_WORKER)
                continue
            self.counts["inline"] += 1
            try:
                result = self._timed(kind, call)
            except Exception as exc:  # the caller gets it as is
                future.set_exception(exc)
            else:
                future.set_result(result)

    async def _on_worker(self, call: Any) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="budget-envs")
        self._queued += 1
        self.counts["worker"] += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, call)
        finally:
            self._queued -= 1

    def stats(self) -> dict[str, Any]:
        """Calls so far: how many ran inline and on the worker, and per kind of call the inline
        runs and their total seconds (what an env call costs inside this server)."""
        return {
            **self.counts,
            "batches": self.batches,
            "timed": {k: {"runs": int(n), "seconds": t} for k, (n, t) in self.timed.items()},
        }

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None


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
            old = sent.get(k, _DEFAULT)
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
            old = sent.get(k, _DEFAULT)
            if v is old:
                same = True
            else:
                t = type(v)
                if t is str or t is bool or t is int or t is float or v is None:
                    same = t is type(old) and v == old
                elif old is not _DEFAULT and raw_get is not None and v is raw_get(k, _DEFAULT):
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


# ---------------------------------------------------------------------------- ASGI guard
def _error_frame(message: str, code: str) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": code}})


class Guard:
    """ASGI middleware: idle WebSocket sessions are closed; oversized input is refused.

    A WebSocket that sends nothing for ``idle_timeout`` seconds gets an error frame and is
    closed (code 4000); the app sees a disconnect, so OpenEnv destroys the session and its env.
    A message over ``max_bytes`` gets an error frame and is dropped; the session goes on. An
    HTTP body over ``max_bytes`` (by Content-Length) gets 413.
    """

    def __init__(
        self,
        app: Any,
        idle_timeout: float | None,
        max_bytes: int,
        counters: dict[str, int] | None = None,
    ) -> None:
        self.app = app
        self.idle_timeout = idle_timeout
        self.max_bytes = max_bytes
        self.counters = {"reaped": 0} if counters is None else counters

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            for name, value in scope.get("headers", ()):
                if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                    await self._too_large(send, int(value))
                    return
            await self.app(scope, receive, send)
            return
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        timeout = self.idle_timeout
        # One timer per connection, not a timeout task per message: a receive notes when it
        # began waiting, and the timer, when due, either closes the silent socket or sleeps
        # until the latest wait could first run out.
        state: dict[str, Any] = {
            "open": False,
            "reaped": False,
            "closed": False,
            "waiting": False,
            "since": 0.0,
            "timer": None,
        }

        async def reap() -> None:
            state["reaped"] = True
            self.counters["reaped"] += 1
            try:
                await send(
                    {
                        "type": "websocket.send",
                        "text": _error_frame(
                            f"session closed after {timeout:g} s without a message; open a "
                            "new session",
                            "SESSION_ERROR",
                        ),
                    }
                )
                state["closed"] = True
                # the app's pending receive then gets the disconnect
                await send(
                    {"type": "websocket.close", "code": 4000, "reason": f"idle for {timeout:g} s"}
                )
            except Exception:  # the peer went away meanwhile: the app sees that disconnect
                state["closed"] = True

        def due() -> None:
            state["timer"] = None
            if state["reaped"]:
                return
            now = loop.time()
            if state["waiting"] and now - state["since"] >= timeout:
                state["reap"] = loop.create_task(reap())
                return
            start = state["since"] if state["waiting"] else now
            state["timer"] = loop.call_at(start + timeout, due)

        async def guarded_send(message: dict) -> None:
            if state["closed"]:
                return  # the guard closed this socket; the app's late messages go nowhere
            if message["type"] == "websocket.accept":
                state["open"] = True
                if timeout is not None:
                    state["since"] = loop.time()
                    state["timer"] = loop.call_at(state["since"] + timeout, due)
            await send(message)

        async def guarded_receive() -> dict:
            while True:
                state["since"] = loop.time()
                state["waiting"] = True
                try:
                    message = await receive()
                finally:
                    state["waiting"] = False
                if state["reaped"]:
                    return {"type": "websocket.disconnect", "code": 1001}
                if message["type"] == "websocket.receive":
                    body = message.get("text")
                    if body is None:
                        size = len(message.get("bytes") or b"")
                    else:  # a UTF-8 character takes at most 4 bytes: most messages skip encode
                        size = len(body) if 4 * len(body) <= self.max_bytes else len(body.encode())
                    if size > self.max_bytes:
                        await send(
                            {
                                "type": "websocket.send",
                                "text": _error_frame(
                                    f"message of {size} bytes is over the limit of "
                                    f"{self.max_bytes}; it was not applied",
                                    "VALIDATION_ERROR",
                                ),
                            }
                        )
                        continue
                return message

        try:
            await self.app(scope, guarded_receive, guarded_send)
        finally:
            if state["timer"] is not None:
                state["timer"].cancel()

    async def _too_large(self, send: Any, size: int) -> None:
        body = json.dumps(
            {"detail": f"request body of {size} bytes is over the limit of {self.max_bytes}"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------------------- the app
def _check_positive(name: str, value: Any, kind: type, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, kind) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive {kind.__name__}, got {value!r}")


def create_app(
    env_id: str,
    *,
    budget: Any = _DEFAULT,
    visibility: str = "hidden",
    faults: Any = None,
    env_kwargs: dict[str, Any] | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    info_delta: bool = True,
) -> Any:
    """A FastAPI app serving ``env_id`` over OpenEnv's protocol (run it with any ASGI server).

    ``budget`` / ``visibility`` / ``faults`` / ``env_kwargs`` are what ``gymnasium.make`` gets
    for every session's env. One env is built here first to check the arguments; a family with
    a server of its own (``shared_env_kwargs``) keeps that env as the host every session uses.
    ``info_delta=False`` sends every info value in every step answer (for clients that do not
    restore ``info_delta`` answers).
    """
    entry = entry_for(env_id)  # NameNotFound with the registered ids
    _check_positive("max_sessions", max_sessions, int)
    if idle_timeout is not None and (
        not isinstance(idle_timeout, (int, float)) or isinstance(idle_timeout, bool)
    ):
        raise ValueError(f"idle_timeout must be a positive number or None, got {idle_timeout!r}")
    if idle_timeout is not None and idle_timeout <= 0:
        raise ValueError(f"idle_timeout must be a positive number or None, got {idle_timeout!r}")
    _check_positive("max_message_bytes", max_message_bytes, int)
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise TypeError(f"env_kwargs must be a dict, got {env_kwargs!r}")
    config = ServeConfig(
        env_id=entry.id,
        budget=budget,
        visibility=visibility,
        faults=faults,
        env_kwargs=dict(env_kwargs or {}),
        info_delta=bool(info_delta),
    )
    host = config.make()  # fails here, not in the first session, on bad arguments
    share = getattr(host.unwrapped, "shared_env_kwargs", None)
    if callable(share):
        config.shared_kwargs = dict(share())
    else:
        host.close()
        host = None

    from fastapi import FastAPI

    app = FastAPI(title=f"budget-envs: {entry.id}", description=entry.description)
    lane = EnvLane()
    server = HTTPEnvServer(
        env=functools.partial(SessionEnv, config, lane),
        action_cls=BudgetAction,
        observation_cls=BudgetObservation,
        state_cls=BudgetState,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=max_sessions, session_timeout=idle_timeout
        ),
        env_name=entry.id.split("/")[-1],
    )
    server.register_routes(app)

    counters = {"reaped": 0}

    @app.get("/sessions", tags=["budget-envs"])
    def sessions() -> dict[str, Any]:
        """Active and maximum sessions, how many idle sessions were closed, and the env calls
        run so far (``env_calls``: inline and worker counts, and per kind the inline runs and
        their seconds)."""
        status = server.get_capacity_status()
        return {
            "env_id": entry.id,
            "active": status.active_sessions,
            "max": status.max_sessions,
            "reaped": counters["reaped"],
            "env_calls": lane.stats(),
        }

    def close_host() -> None:
        lane.close()
        if app.state.host is not None:
            app.state.host.close()
            app.state.host = None

    app.router.on_shutdown.append(close_host)
    app.state.host = host
    app.state.openenv_server = server
    app.state.config = config
    app.add_middleware(
        Guard, idle_timeout=idle_timeout, max_bytes=max_message_bytes, counters=counters
    )
    return app


def run_app(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> None:
    """Run an ASGI app under uvicorn with the service's WebSocket settings until interrupted."""
    import gc

    import uvicorn

    # What is alive now (modules, the app, a host env) lives as long as the process: kept out
    # of the cyclic collector's scans, a full collection no longer stalls every session for
    # the time it takes to walk them (a quarter of a second with ToolUse loaded).
    gc.freeze()
    # uvicorn's own cap sits above the guard's, so an oversized message gets the guard's clear
    # error frame instead of a bare close; beyond this, the connection is closed (1009).
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        ws_max_size=max(16 * max_message_bytes, 16 << 20),
        # Observations are small JSON on a local network: compressing each one costs more CPU
        # than it saves.
        ws_per_message_deflate=False,
    )


def serve(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    **app_kwargs: Any,
) -> None:
    """Run :func:`create_app` under uvicorn until interrupted (``budgetmix serve`` calls it)."""
    max_bytes = app_kwargs.get("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES)
    app = create_app(env_id, **app_kwargs)
    run_app(app, host=host, port=port, log_level=log_level, max_message_bytes=max_bytes)
