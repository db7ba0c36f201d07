"""The service's ASGI guard: idle WebSocket sessions are closed; oversized input is refused.

See :class:`Guard`. Plain ASGI: nothing here needs the ``openenv`` extra.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_SEND_TIMEOUT",
    "Guard",
    "HostGuard",
]

#: Seconds a WebSocket session may stay silent before it is closed and its env freed.
DEFAULT_IDLE_TIMEOUT = 300.0
#: Largest WebSocket message or HTTP body the server reads, in bytes.
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
#: Seconds one WebSocket send may wait on a client that does not read (a full send buffer)
#: before the connection is aborted and its session freed.
DEFAULT_SEND_TIMEOUT = 10.0


def _abort(send: Any) -> None:
    """Drop the connection under ``send`` at once, unsent data and all.

    ASGI has no abort, and closing waits for the send buffer to drain, which a client that
    never reads never lets happen: uvicorn's ``send`` is a method of its connection's protocol,
    whose transport is aborted here. Under another server nothing is done (the session is still
    freed: the app sees the send fail)."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is not None and hasattr(transport, "abort"):
        transport.abort()


def _error_frame(message: str, code: str) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": code}})


class Guard:
    """ASGI middleware: idle WebSocket sessions are closed; oversized input is refused.

    A WebSocket that sends no message for ``idle_timeout`` seconds gets an error frame and is
    closed (code 4000); the app sees a disconnect, so the session and its env end. Any message
    (a state query, a malformed one) keeps the session alive. A message over ``max_bytes`` gets
    an error frame and is dropped; the session goes on. An HTTP body is read here, counting its
    bytes as they arrive (a chunked body has no Content-Length to trust): one over
    ``max_bytes`` gets 413 as soon as it passes the limit, and the rest is never read; the app
    gets the body read, so no request holds more than ``max_bytes`` of it. A send that waits
    more than ``send_timeout`` seconds on a client that does not read aborts the connection:
    the app's send fails (so its session ends), and so does a reap's.
    """

    def __init__(
        self,
        app: Any,
        idle_timeout: float | None,
        max_bytes: int,
        counters: dict[str, int] | None = None,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
    ) -> None:
        self.app = app
        self.send_timeout = float(send_timeout)
        self.idle_timeout = idle_timeout
        self.max_bytes = max_bytes
        self.counters = {"reaped": 0} if counters is None else counters

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
            return
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        conn = _GuardedSocket(self, receive, send)
        try:
            await self.app(scope, conn.receive, conn.send)
        finally:
            conn.cancel_timer()

    async def _http(self, scope: dict, receive: Any, send: Any) -> None:
        limit = self.max_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await self._too_large(send, f"request body of {int(value)} bytes")
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(
                    send, f"request body of more than {limit} bytes (read so far: {size})"
                )
                return
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks
        delivered = False

        async def replay() -> dict:
            nonlocal delivered, body
            if not delivered:
                delivered = True
                out, body = body, b""
                return {"type": "http.request", "body": out, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _too_large(self, send: Any, what: str) -> None:
        payload = {"detail": f"{what} is over the limit of {self.max_bytes}", "code": "TOO_LARGE"}
        # the rest of the body is never read: the connection cannot be reused
        await _json_answer(send, 413, payload, close=True)


class _GuardedSocket:
    """One WebSocket connection under a :class:`Guard`: its idle timer, its bounded sends and
    its size-checked receives (the ``receive`` and ``send`` the app gets)."""

    def __init__(self, guard: Guard, receive: Any, send: Any) -> None:
        self.guard = guard
        self._receive = receive
        self._send = send
        self.loop = asyncio.get_running_loop()
        self.timeout = guard.idle_timeout
        # One timer per connection, not a timeout task per message: a receive notes when it
        # began waiting, and the timer, when due, either closes the silent socket or sleeps
        # until the latest wait could first run out.
        self.open = False
        self.reaped = False
        self.closed = False
        self.waiting = False
        self.since = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.reap_task: asyncio.Task | None = None
        # uvicorn's protocol tells whether a send would wait (its flow-control event): while it
        # would not, a send goes straight out, with no timeout task per message.
        writable = getattr(getattr(send, "__self__", None), "writable", None)
        self._writable = writable if hasattr(writable, "is_set") else None

    async def bounded(self, message: dict) -> None:
        """Send ``message``; a client that reads nothing for the send timeout is aborted."""
        writable, send = self._writable, self._send
        if writable is not None and writable.is_set():
            await send(message)
            return
        guard = self.guard
        try:
            await asyncio.wait_for(send(message), guard.send_timeout)
        except asyncio.TimeoutError:
            self.closed = True
            guard.counters["aborted"] = guard.counters.get("aborted", 0) + 1
            _abort(send)
            raise ConnectionResetError(
                f"the client read nothing for {guard.send_timeout:g} s; connection aborted"
            ) from None

    async def reap(self) -> None:
        """Tell the silent client its session is over, then close the socket."""
        timeout = self.timeout
        self.reaped = True
        self.guard.counters["reaped"] += 1
        try:
            await self.bounded(
                {
                    "type": "websocket.send",
                    "text": _error_frame(
                        f"session closed after {timeout:g} s without a message; open a new session",
                        "SESSION_ERROR",
                    ),
                }
            )
            self.closed = True
            # the app's pending receive then gets the disconnect
            await self.bounded(
                {"type": "websocket.close", "code": 4000, "reason": f"idle for {timeout:g} s"}
            )
        except Exception:  # the peer went away meanwhile: the app sees that disconnect
            self.closed = True

    def due(self) -> None:
        """The idle timer: reap a socket silent for the timeout, else wait until it could be."""
        self.timer = None
        if self.reaped:
            return
        loop, timeout = self.loop, self.timeout
        now = loop.time()
        if self.waiting and now - self.since >= timeout:
            self.reap_task = loop.create_task(self.reap())
            return
        start = self.since if self.waiting else now
        self.timer = loop.call_at(start + timeout, self.due)

    async def send(self, message: dict) -> None:
        """The app's send: the accept starts the idle timer; nothing goes out once closed."""
        if self.closed:
            return  # the guard closed this socket; the app's late messages go nowhere
        if message["type"] == "websocket.accept":
            self.open = True
            if self.timeout is not None:
                self.since = self.loop.time()
                self.timer = self.loop.call_at(self.since + self.timeout, self.due)
            await self._send(message)
            return
        await self.bounded(message)

    async def receive(self) -> dict:
        """The app's receive: a disconnect once reaped; an oversized message is answered with
        an error frame and dropped."""
        while True:
            self.since = self.loop.time()
            self.waiting = True
            try:
                message = await self._receive()
            finally:
                self.waiting = False
            if self.reaped:
                return {"type": "websocket.disconnect", "code": 1001}
            if message["type"] == "websocket.receive":
                max_bytes = self.guard.max_bytes
                body = message.get("text")
                if body is None:
                    size = len(message.get("bytes") or b"")
                else:  # a UTF-8 character takes at most 4 bytes: most messages skip encode
                    size = len(body) if 4 * len(body) <= max_bytes else len(body.encode())
                if size > max_bytes:
                    await self.bounded(
                        {
                            "type": "websocket.send",
                            "text": _error_frame(
                                f"message of {size} bytes is over the limit of "
                                f"{max_bytes}; it was not applied",
                                "VALIDATION_ERROR",
                            ),
                        }
                    )
                    continue
            return message

    def cancel_timer(self) -> None:
        """Stop the idle timer (the app is done with the socket)."""
        if self.timer is not None:
            self.timer.cancel()


async def _json_answer(send: Any, status: int, payload: dict, close: bool = False) -> None:
    """An HTTP answer of ``payload`` as JSON (``Connection: close`` with ``close``); a client
    that went away meanwhile is not an error."""
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    try:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    except Exception:  # the client went away meanwhile
        pass


class HostGuard:
    """ASGI middleware: requests whose ``Host`` or ``Origin`` the policy refuses get 403.

    ``policy`` is a :class:`budget_envs.hostcheck.HostPolicy` (loopback only by default). An
    HTTP request is answered 403 with a JSON error before the app sees it; a WebSocket
    handshake is refused (the server answers 403, no session is made).
    """

    def __init__(self, app: Any, policy: Any) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = origin = None
        for key, value in scope.get("headers") or ():
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
        why = self.policy.refusal(host, origin)
        if why is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008, "reason": "forbidden"})
            return
        await _json_answer(send, 403, {"error": why, "code": "FORBIDDEN_ORIGIN"})
