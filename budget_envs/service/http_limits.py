"""Limits on what a connection may hold before it has sent a request: a header-read timeout and
a cap on open connections, for ``budgetmix serve`` under uvicorn.

uvicorn (h11) never times out a connection that has not finished sending its request line and
headers, and accepts connections without bound: a client sending half a header per socket holds
sockets and file descriptors forever (about 20,000 of them exhaust the descriptors).
:func:`limited_h11` builds uvicorn's h11 protocol with both limits: a connection whose request
headers are not complete ``header_timeout`` seconds after it opened (or after its previous
answer) is dropped, and a connection beyond ``max_connections`` open ones is closed at once.
WebSocket sessions are bounded by the session cap; this bounds everything before them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_HEADER_TIMEOUT", "limited_h11", "max_connections_for"]

#: Seconds a connection may take to send a whole request line and headers.
DEFAULT_HEADER_TIMEOUT = 10.0


def max_connections_for(max_sessions: int) -> int:
    """The open-connection cap of a server holding ``max_sessions`` WebSocket sessions: room
    for every session, as many HTTP clients again and headroom (at least 64)."""
    return max(64, 2 * int(max_sessions) + 32)


def limited_h11(
    header_timeout: float = DEFAULT_HEADER_TIMEOUT, max_connections: int = 1024
) -> type:
    """uvicorn's ``H11Protocol`` with a header-read timeout and a connection cap (pass it as
    ``uvicorn.run(..., http=limited_h11(...))``)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class LimitedH11Protocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._header_timer: Any = None
            if len(self.connections) > max_connections:
                transport.abort()  # over the cap: the client sees the connection refused
                return
            self._arm_header_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:  # a request's head is still arriving
                if self._header_timer is None:
                    self._arm_header_timer()
            elif self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            if getattr(self, "_header_timer", None) is not None:
                self._header_timer.cancel()
                self._header_timer = None
            super().connection_lost(exc)

        def _arm_header_timer(self) -> None:
            self._header_timer = self.loop.call_later(header_timeout, self._header_expired)

        def _header_expired(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                return  # closed already, or upgraded to a WebSocket
            if self.conn.their_state is h11.IDLE and (
                self.cycle is None or self.cycle.response_complete
            ):
                self.transport.abort()

    return LimitedH11Protocol
