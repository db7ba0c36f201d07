"""A small HTTP/1.1 server for the WSGI app: keep-alive, TCP_NODELAY, size limits, bounded threads.

One thread, the serving loop, owns every socket: it accepts connections and reads requests
without blocking. A request goes to a worker only once it has fully arrived, so a slow or silent
client holds a connection slot, never a thread. A fixed pool of ``workers`` threads (default
:data:`DEFAULT_WORKERS`) runs the app and writes the answers; complete requests beyond them wait
in a queue. Open connections are capped at ``max_connections`` (default
:data:`DEFAULT_MAX_CONNECTIONS`): at the cap the server stops accepting, and new connections wait
in the listen backlog until one closes. A connection that starts a request and does not finish
it within ``request_timeout`` seconds is closed, and so is one idle for ``idle_timeout`` seconds.
Whatever the clients do, the server runs ``workers + 1`` threads.

Python's ``wsgiref`` server closes the connection after every request, and the stdlib HTTP
server without TCP_NODELAY answers a keep-alive request in about 44 ms (Nagle's algorithm waits
for a delayed ACK between the header and body writes). This gateway speaks HTTP/1.1 keep-alive
with TCP_NODELAY set and writes each answer in one call, so a request takes well under 1 ms.

A request's framing and its handler are :mod:`budget_envs.envs.webshop.wsgi_handler`'s;
:class:`~budget_envs.envs.webshop.server.ShopServer` runs this server on a background thread.
"""

from __future__ import annotations

import logging
import queue
import selectors
import socket
import threading
import time

from budget_envs.envs.webshop.wsgi_handler import _Conn, _frame, _Handler
from budget_envs.hostcheck import HostPolicy

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_WORKERS",
    "IDLE_TIMEOUT",
    "REQUEST_TIMEOUT",
    "make_server",
]

logger = logging.getLogger(__name__)
#: Threads that run requests (the app's work and the answer's write).
DEFAULT_WORKERS = 32
#: Open connections at most (lowered to the process's file limit less 128 when that is
#: smaller); beyond them new connections wait in the listen backlog.
DEFAULT_MAX_CONNECTIONS = 1024
#: Seconds a client may take to send a whole request once it has started one.
REQUEST_TIMEOUT = 30.0
#: Seconds an idle keep-alive connection is kept open.
IDLE_TIMEOUT = 120.0
#: Seconds a closing connection is drained of what the client still sends (a lingering close:
#: closing with unread input would reset the connection and could lose the answer).
_LINGER = 2.0


class _Server:
    """The serving loop and its worker pool (see the module docstring)."""

    def __init__(
        self,
        address: tuple[str, int],
        app,
        *,
        workers: int = DEFAULT_WORKERS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        host_policy: HostPolicy | None = None,
    ) -> None:
        for name, value in (("workers", workers), ("max_connections", max_connections)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name, value in (("request_timeout", request_timeout), ("idle_timeout", idle_timeout)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        self.app = app
        self.host_policy = HostPolicy() if host_policy is None else host_policy
        self.workers = workers
        self.max_connections = min(max_connections, max(8, _file_limit() - 128))
        self.request_timeout = float(request_timeout)
        self.idle_timeout = float(idle_timeout)
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(1024)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()[:2]
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._listening = False
        self._retry_accept = 0.0
        self._conns: set[_Conn] = set()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._stop = False
        self._running = threading.Event()
        self._exited = threading.Event()
        self._exited.set()

    # ---------------------------------------------------------------- public
    def connection_count(self) -> int:
        """Connections open now (read on the serving loop's thread or after it stopped)."""
        return len(self._conns)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until :meth:`shutdown` (called from another thread)."""
        self._exited.clear()
        self._stop = False
        self._start_workers()
        self._listen(True)
        self._running.set()
        next_sweep = 0.0
        try:
            while not self._stop:
                for key, _ in self._sel.select(poll_interval):
                    if key.data is None:
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        self._readable(key.data)
                self._take_back()
                now = time.monotonic()
                if now >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + min(0.25, poll_interval)
        finally:
            self._running.clear()
            self._listen(False)
            self._exited.set()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait until it has returned."""
        self._stop = True
        self._wake()
        self._exited.wait()

    def server_close(self) -> None:
        """Close the listening socket and stop the workers (after :meth:`shutdown`)."""
        self._listen(False)
        self.socket.close()
        threads, self._threads = self._threads, []
        for _ in threads:
            self._jobs.put(None)
        deadline = time.monotonic() + 5.0
        for t in threads:  # each ends after its request in hand (if any)
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        for sock in (self._wake_r, self._wake_w):
            sock.close()
        self._sel.close()

    def close_connections(self) -> None:
        """Close every open connection, answered or not (after :meth:`shutdown`)."""
        conns, self._conns = list(self._conns), set()
        for conn in conns:
            _close_socket(conn.sock)

    # ---------------------------------------------------------------- the loop
    def _start_workers(self) -> None:
        while len(self._threads) < self.workers:
            t = threading.Thread(
                target=self._work,
                name=f"webshop-worker-{self.server_address[1]}-{len(self._threads)}",
                daemon=True,
            )
            t.start()
            self._threads.append(t)

    def _listen(self, on: bool) -> None:
        if on and not self._listening and self.socket.fileno() >= 0:
            self._sel.register(self.socket, selectors.EVENT_READ, None)
            self._listening = True
        elif not on and self._listening:
            self._sel.unregister(self.socket)
            self._listening = False

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:  # the buffer is full (a wake-up is pending anyway) or closed
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _accept(self) -> None:
        now = time.monotonic()
        while len(self._conns) < self.max_connections:
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of file descriptors: pause accepting for a moment
                logger.warning("web shop server: accept failed", exc_info=True)
                self._listen(False)
                self._retry_accept = now + 0.5
                return
            sock.setblocking(False)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            conn = _Conn(sock, addr, now)
            self._conns.add(conn)
            self._sel.register(sock, selectors.EVENT_READ, conn)
        self._listen(False)  # at the cap: new connections wait in the backlog

    def _readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        if conn.state == "drain":
            return
        now = time.monotonic()
        if not conn.buf:
            conn.started = now
        conn.buf += data
        conn.last = now
        self._dispatch(conn)

    def _dispatch(self, conn: _Conn) -> None:
        framed = _frame(conn.buf)
        if framed is None:
            return
        size, close = framed
        data = bytes(conn.buf[:size])
        del conn.buf[:size]
        self._sel.unregister(conn.sock)
        conn.state = "busy"
        self._jobs.put((conn, data, close))

    def _take_back(self) -> None:
        """Connections the workers have answered: wait for the next request, or close."""
        now = time.monotonic()
        while True:
            try:
                conn, keep = self._done.get_nowait()
            except queue.Empty:
                return
            if conn not in self._conns:
                continue
            conn.last = now
            if not keep:
                self._linger(conn, now)
                continue
            try:
                conn.sock.setblocking(False)
            except OSError:
                self._close(conn)
                continue
            conn.state = "read"
            conn.started = now if conn.buf else None
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            self._dispatch(conn)  # a pipelined request may be buffered already

    def _linger(self, conn: _Conn, now: float) -> None:
        try:
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.setblocking(False)
        except OSError:
            self._close(conn)
            return
        conn.state = "drain"
        conn.until = now + _LINGER
        conn.buf.clear()
        self._sel.register(conn.sock, selectors.EVENT_READ, conn)

    def _sweep(self, now: float) -> None:
        """Close connections past their deadline; accept again once below the cap."""
        for conn in list(self._conns):
            if conn.state == "drain":
                expired = now >= conn.until
            elif conn.state == "read" and conn.buf:
                expired = now - conn.started > self.request_timeout
            else:
                expired = conn.state == "read" and now - conn.last > self.idle_timeout
            if expired:
                self._close(conn)
        if len(self._conns) < self.max_connections and now >= self._retry_accept:
            self._listen(True)

    def _close(self, conn: _Conn) -> None:
        if conn.state != "busy":
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        self._conns.discard(conn)
        _close_socket(conn.sock)
        if not self._listening and len(self._conns) < self.max_connections:
            self._listen(time.monotonic() >= self._retry_accept)

    # ---------------------------------------------------------------- workers
    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            conn, data, close = job
            keep = False
            try:
                conn.sock.settimeout(self.request_timeout)
                keep = not _Handler(conn, data, self).close_connection and not close
            except Exception:  # a client gone mid-answer, or a closed server
                logger.debug("web shop connection %s ended with an error", conn.addr, exc_info=True)
            self._done.put((conn, keep))
            self._wake()


def _file_limit() -> int:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 1 << 20
    return soft if soft > 0 else 1 << 20


def _close_socket(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def make_server(
    app,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    workers: int = DEFAULT_WORKERS,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    host_policy: HostPolicy | None = None,
) -> _Server:
    """A bound (not yet serving) HTTP/1.1 server for the WSGI ``app``: ``workers`` threads run
    requests, at most ``max_connections`` connections are open (see the module docstring);
    requests whose Host or Origin ``host_policy`` refuses (default: anything not loopback) get
    403."""
    return _Server(
        (host, int(port)),
        app,
        workers=workers,
        max_connections=max_connections,
        host_policy=host_policy,
    )
