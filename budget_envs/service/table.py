"""The server's sessions: who holds each one, the caps per route, and when unattached ones expire.

See :class:`SessionTable`. Pure asyncio: nothing here needs the ``openenv`` extra.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from budget_envs.errors import CapacityError, SessionRefused

__all__ = ["CapacityError", "Session", "SessionRefused", "SessionTable", "http_cap"]

log = logging.getLogger(__name__)


def http_cap(max_sessions: int) -> int:
    """Sessions made over HTTP (``/mcp``'s ``openenv/session/create``, ``POST /reset``) held at
    once: a quarter of ``max_sessions``, at least one."""
    return max(1, max_sessions // 4)


class Session:
    """One session: its env, the route that made it, and the socket holding it, if any."""

    __slots__ = ("attached", "created", "env", "holder", "id", "route", "timer")

    def __init__(self, sid: str, env: Any, route: str, holder: Any) -> None:
        self.id = sid
        self.env = env
        #: ``"ws"`` (made by a WebSocket on ``/ws``), ``"mcp"`` (made over ``/mcp``, unattached
        #: until a WebSocket attaches it) or ``"http"`` (one ``POST /reset``).
        self.route = route
        #: The connection that owns the session (a WebSocket, or an HTTP request), or None for
        #: an unattached ``/mcp`` session.
        self.holder = holder
        self.attached = False
        self.created = time.monotonic()
        self.timer: asyncio.TimerHandle | None = None


class SessionTable:
    """Every session of one server, each counted under the route that made it.

    * ``/ws`` sessions: at most ``max_sessions``; each belongs to the socket that made it and
      ends with it. Nobody else can attach to it or close it.
    * HTTP sessions: at most :func:`http_cap` (a quarter of ``max_sessions``), never taking a
      WebSocket slot. ``/mcp``'s ``openenv/session/create`` makes an unattached one: a WebSocket
      may attach it once, by id (``/ws?session_id=``), and then owns it as its own; unattached,
      it expires ``expire_s`` seconds after it was made, whatever messages name it meanwhile.
      A ``POST /reset`` holds one for the time of its request.

    ``make_env()`` builds a session's OpenEnv environment (cheaply: the Gymnasium env is built
    at its first reset); ``close_env(env)`` is awaited when a session ends.
    """

    def __init__(
        self,
        make_env: Callable[[], Any],
        close_env: Callable[[Any], Any],
        *,
        max_sessions: int,
        expire_s: float,
    ) -> None:
        self._make_env = make_env
        self._close_env = close_env
        self.max_ws = max_sessions
        self.max_http = http_cap(max_sessions)
        self.expire_s = expire_s
        self._sessions: dict[str, Session] = {}
        self._count = {"ws": 0, "http": 0}
        #: Unattached ``/mcp`` sessions closed because nobody attached them in time.
        self.expired = 0
        self._closing: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ counts
    @property
    def ws_active(self) -> int:
        """Sessions made over ``/ws`` alive now."""
        return self._count["ws"]

    @property
    def http_active(self) -> int:
        """Sessions made over HTTP alive now (unattached, attached or serving a request)."""
        return self._count["http"]

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self):
        return iter(list(self._sessions.values()))

    @staticmethod
    def _pool(route: str) -> str:
        return "ws" if route == "ws" else "http"

    # ------------------------------------------------------------------ opening
    def open(self, route: str, holder: Any = None) -> Session:
        """A new session made over ``route`` (``"ws"``, ``"mcp"`` or ``"http"``), held by
        ``holder`` (None: an unattached ``/mcp`` session, which expires unless attached)."""
        pool = self._pool(route)
        cap = self.max_ws if pool == "ws" else self.max_http
        if self._count[pool] >= cap:
            if pool == "ws":
                message = (
                    f"the server holds {cap} WebSocket sessions, its most (--max-sessions); "
                    "retry when one ends"
                )
            else:
                message = (
                    f"the server holds {cap} sessions made over HTTP (/mcp, /reset), its most "
                    "(a quarter of --max-sessions; WebSocket sessions on /ws are counted apart)"
                )
            raise CapacityError(message, self._count[pool], cap)
        sid = str(uuid.uuid4())
        session = Session(sid, self._make_env(), route, holder)
        self._sessions[sid] = session
        self._count[pool] += 1
        if holder is None:
            loop = asyncio.get_running_loop()
            session.timer = loop.call_later(self.expire_s, self._expire, sid)
        return session

    def attach(self, sid: str, holder: Any) -> Session:
        """The unattached ``/mcp`` session ``sid``, now owned by ``holder`` (a WebSocket)."""
        session = self._sessions.get(sid)
        if session is None:
            raise SessionRefused(
                f"Unknown session_id: {sid[:64]!r} (closed, expired or never made)"
            )
        if session.route != "mcp" or session.holder is not None or session.attached:
            raise SessionRefused(
                f"session {sid[:64]!r} belongs to another connection: only a session made over "
                "/mcp and not yet attached can be attached, once"
            )
        session.holder = holder
        session.attached = True
        if session.timer is not None:
            session.timer.cancel()
            session.timer = None
        return session

    # ------------------------------------------------------------------ closing
    def close_unattached(self, sid: str) -> Session:
        """Close the unattached ``/mcp`` session ``sid`` (what ``openenv/session/close`` may do);
        a session a connection holds is refused."""
        session = self._sessions.get(sid)
        if session is None:
            raise SessionRefused(
                f"Unknown session_id: {sid[:64]!r} (closed, expired or never made)"
            )
        if session.holder is not None:
            raise SessionRefused(
                f"session {sid[:64]!r} is held by a connection: only that connection can close "
                'it (on its WebSocket, send {"type": "close"})'
            )
        self._drop(session)
        return session

    def _expire(self, sid: str) -> None:
        session = self._sessions.get(sid)
        if session is None or session.holder is not None:
            return
        self.expired += 1
        self._drop(session)

    def _detach(self, session: Session) -> bool:
        """Take ``session`` out of the table and its pool's count; False if it was not there."""
        if self._sessions.pop(session.id, None) is None:
            return False
        self._count[self._pool(session.route)] -= 1
        if session.timer is not None:
            session.timer.cancel()
            session.timer = None
        return True

    def _drop(self, session: Session) -> None:
        """Remove ``session`` from the table and close its env in the background."""
        if not self._detach(session):
            return
        task = asyncio.get_running_loop().create_task(self._close(session))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def release(self, session: Session) -> None:
        """End ``session`` (its holder is done with it) and close its env."""
        if not self._detach(session):
            return
        # shielded: a cancelled handler (the server stopping) still frees the env
        await asyncio.shield(self._close(session))

    async def _close(self, session: Session) -> None:
        try:
            await self._close_env(session.env)
        except Exception as exc:  # one line, not a traceback: the session is gone either way
            log.warning("closing session %s's env failed: %r", session.id, exc)

    async def close_all(self) -> None:
        """End every session (the server is stopping)."""
        for session in list(self._sessions.values()):
            await self.release(session)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
