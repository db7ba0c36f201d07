"""The service's lane: every session's env calls, one at a time, inline while they are cheap.

See :class:`EnvLane`. Pure asyncio: nothing here needs the ``openenv`` extra.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["INLINE_LIMIT_S", "LANE_PROBE_EVERY", "LANE_WINDOW", "EnvLane"]

#: Seconds (median of recent runs) above which env calls leave the event loop for the worker thread.
INLINE_LIMIT_S = 0.002
#: Inline runs of a kind of call the median is taken over.
LANE_WINDOW = 15
#: A kind of call judged slow still runs inline once in this many calls, to check it still is.
LANE_PROBE_EVERY = 64

#: What a batched call's future holds when the call is to run on the worker thread instead.
_TO_WORKER = object()


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

    async def close_env(self, call: Any) -> Any:
        """``call()`` (closing a session's env) on the worker thread, after the env calls queued
        there, and not counted in :meth:`stats` (a close is not an env call of the session)."""
        return await self._on_worker(call, counted=False)

    async def _on_worker(self, call: Any, counted: bool = True) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="budget-envs")
        self._queued += 1
        if counted:
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
