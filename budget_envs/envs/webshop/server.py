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

:class:`ShopServer` runs it on a background thread and can stop it cleanly, closing the kept-alive
connections too (so clients of a stopped server see it die).
"""

from __future__ import annotations

import io
import logging
import os
import queue
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from urllib.parse import unquote

from budget_envs.envs.webshop.app import MAX_BODY
from budget_envs.hostcheck import HostPolicy

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_WORKERS",
    "IDLE_TIMEOUT",
    "REQUEST_TIMEOUT",
    "ShopServer",
    "acquire_server",
    "make_server",
    "release_server",
]

logger = logging.getLogger(__name__)
_MAX_URL = 2048
#: Threads that run requests (the app's work and the answer's write).
DEFAULT_WORKERS = 32
#: Open connections at most (lowered to the process's file limit less 128 when that is
#: smaller); beyond them new connections wait in the listen backlog.
DEFAULT_MAX_CONNECTIONS = 1024
#: Seconds a client may take to send a whole request once it has started one.
REQUEST_TIMEOUT = 30.0
#: Seconds an idle keep-alive connection is kept open.
IDLE_TIMEOUT = 120.0
#: Bytes of request line and headers read before a request is handed on as it is (the handler
#: then answers 414 or 431 and closes).
_HEAD_LIMIT = 65536 + 16384
#: Seconds a closing connection is drained of what the client still sends (a lingering close:
#: closing with unread input would reset the connection and could lose the answer).
_LINGER = 2.0


class _Writer:
    """The handler's ``wfile``: every write goes out whole (blocking, with the socket timeout)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def write(self, data: bytes) -> int:
        self._sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass


class _Conn:
    """One client connection, owned by the serving loop except while a worker answers it."""

    __slots__ = ("sock", "addr", "buf", "last", "started", "state", "until")

    def __init__(self, sock: socket.socket, addr, now: float) -> None:
        self.sock = sock
        self.addr = addr
        self.buf = bytearray()
        self.last = now  # last byte received or answer sent
        self.started: float | None = None  # first byte of the request being received
        self.state = "read"  # "read" (the loop waits for bytes), "busy" (a worker), "drain"
        self.until = 0.0  # end of a lingering close


def _frame(buf: bytearray) -> tuple[int, bool] | None:
    """``(bytes of the first request in buf, close after it)``, or None while it is incomplete.

    A request whose framing the handler will refuse (chunked, a bad, repeated or too large
    Content-Length, a head over :data:`_HEAD_LIMIT`) is handed on at once with close=True: the
    handler answers the error and the connection is closed.
    """
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return (len(buf), True) if len(buf) > _HEAD_LIMIT else None
    head_end = end + 4
    lengths: list[bytes] = []
    chunked = False
    for line in bytes(buf[:end]).split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            lengths.append(value.strip())
        elif name == b"transfer-encoding":
            chunked = True
    if chunked or len(lengths) > 1:
        return head_end, True
    if not lengths:
        return head_end, False
    if not lengths[0].isdigit() or int(lengths[0]) > MAX_BODY:
        return head_end, True
    total = head_end + int(lengths[0])
    return (total, False) if len(buf) >= total else None


class _Handler(BaseHTTPRequestHandler):
    """Answers one request that has already arrived in full (``data``)."""

    protocol_version = "HTTP/1.1"
    server_version = "BudgetMixWebShop/1"
    sys_version = ""

    def __init__(self, conn: _Conn, data: bytes, server: _Server) -> None:  # noqa: D107
        self.server = server
        self.request = self.connection = conn.sock
        self.client_address = conn.addr
        self.rfile = io.BytesIO(data)
        self.wfile = _Writer(conn.sock)
        self.close_connection = True
        self.handle_one_request()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        logger.debug("%s " + format, self.address_string(), *args)

    def _plain(self, status: int, message: str) -> None:
        body = message.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def _handle(self) -> None:
        why = self.server.host_policy.refusal(self.headers.get("Host"), self.headers.get("Origin"))
        if why is not None:  # a foreign page or a rebound name (see budget_envs.hostcheck)
            self._plain(403, why)
            return
        if len(self.path) > _MAX_URL:
            self._plain(414, "URI too long")
            return
        if self.headers.get("Transfer-Encoding"):
            self._plain(411, "send a Content-Length; chunked bodies are not accepted")
            return
        raw_length = self.headers.get("Content-Length", "0") or "0"
        try:
            length = int(raw_length)
        except ValueError:
            self._plain(400, "bad Content-Length")
            return
        if length < 0:
            self._plain(400, "bad Content-Length")
            return
        if length > MAX_BODY:
            self._plain(413, f"request body over {MAX_BODY} bytes")
            return
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            self.close_connection = True
            return
        path, _, query = self.path.partition("?")
        if not path.startswith("/"):
            self._plain(400, "bad request target")
            return
        environ = {
            "REQUEST_METHOD": self.command,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote(path, encoding="latin-1"),
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(length),
            "SERVER_NAME": self.server.server_address[0],
            "SERVER_PORT": str(self.server.server_address[1]),
            "SERVER_PROTOCOL": self.request_version,
            "REMOTE_ADDR": self.client_address[0],
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        captured: list = []

        def start_response(status: str, headers: list, exc_info=None) -> Callable:
            captured[:] = [status, headers]
            return lambda data: None

        chunks = self.server.app(environ, start_response)
        payload = b"".join(chunks)
        status, headers = captured
        code, _, reason = status.partition(" ")
        lines = [f"HTTP/1.1 {code} {reason}\r\n"]
        lines += [f"{k}: {v}\r\n" for k, v in headers]
        if self.close_connection:
            lines.append("Connection: close\r\n")
        lines.append("\r\n")
        # One write for header and body: no Nagle/delayed-ACK stall even without TCP_NODELAY.
        if self.command == "HEAD":
            payload = b""
        self.wfile.write("".join(lines).encode("latin-1") + payload)
        self.log_request(code, len(payload))

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _handle


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


class ShopServer:
    """The web shop served on a background thread; ``base_url`` says where.

    ``workers`` and ``max_connections`` bound the server's threads and open connections (see
    the module docstring): it runs ``workers + 1`` threads however many clients connect.

    Example:
        >>> from budget_envs.envs.webshop.server import ShopServer
        >>> server = ShopServer.start(seed=0)  # a free port on 127.0.0.1
        >>> server.base_url
        'http://127.0.0.1:...'
        >>> server.stop()
    """

    def __init__(
        self,
        app,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        workers: int = DEFAULT_WORKERS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self.app = app
        self._httpd = make_server(app, host, port, workers=workers, max_connections=max_connections)
        addr = self._httpd.server_address
        self.host, self.port = addr[0], addr[1]
        self.base_url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"webshop-server-{self.port}",
            daemon=True,
        )
        self._thread.start()
        self._httpd._running.wait(5)
        self._stopped = False
        self._pid = os.getpid()
        #: Envs using this server through :func:`acquire_server` (0 for a server started alone).
        self.users = 0

    @classmethod
    def start(
        cls,
        seed: int = 0,
        num_products: int = 10_000,
        host: str = "127.0.0.1",
        port: int = 0,
        unseen_types: bool = False,
        **limits: int,
    ) -> ShopServer:
        """Build (or reuse) the shop for ``seed`` and serve it on ``host:port`` (0 = free port);
        ``unseen_types`` adds the held-out product types (the ``test_unseen`` split's shop);
        ``limits``: ``workers``, ``max_connections``."""
        from budget_envs.envs.webshop.app import WebShopApp
        from budget_envs.envs.webshop.shop import get_shop

        return cls(WebShopApp(get_shop(seed, num_products, unseen_types)), host, port, **limits)

    @property
    def alive(self) -> bool:
        """Whether the server thread is still serving (never in a forked child process)."""
        return not self._stopped and self._pid == os.getpid() and self._thread.is_alive()

    @property
    def threads(self) -> int:
        """Threads the server runs: its serving loop and its workers."""
        return 1 + self._httpd.workers

    @property
    def connections(self) -> int:
        """Client connections open now (at most ``max_connections``)."""
        return self._httpd.connection_count()

    def stop(self) -> None:
        """Stop serving, close the listening socket and every open connection."""
        if self._stopped:
            return
        self._stopped = True
        if self._pid != os.getpid():  # a forked child's copy: its serving loop never ran here
            try:  # close only this process's descriptor (a shutdown would reach the parent's)
                self._httpd.socket.close()
            except OSError:  # pragma: no cover - already closed
                pass
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections()
        self._thread.join(timeout=5)


# ---------------------------------------------------------------- one server per catalogue
_SHARED_LOCK = threading.Lock()
#: (pid, seed, num_products, host, unseen_types) -> the server envs of this process share now.
_SHARED: dict[tuple, ShopServer] = {}


def acquire_server(
    seed: int = 0,
    num_products: int = 10_000,
    host: str = "127.0.0.1",
    unseen_types: bool = False,
    *,
    replace: ShopServer | None = None,
) -> ShopServer:
    """The shop server of this process for one catalogue, started on first use.

    Every WebShop env of a process without a ``base_url`` plays on the one server its catalogue
    has here (a server is ``workers + 1`` threads and its catalogue index, so 1,024 envs cost
    one of each, not 1,024), each env in its own session. Each call counts one user;
    :func:`release_server` uncounts it and stops the server when its last user is gone. A
    server that died, one ``replace`` names (a restart) and one inherited by a forked process
    are replaced by a fresh one; users of the old one keep it until they release it.

    Example:
        >>> from budget_envs.envs.webshop.server import acquire_server, release_server
        >>> a, b = acquire_server(seed=0), acquire_server(seed=0)
        >>> a is b, a.users
        (True, 2)
        >>> release_server(a); release_server(b); a.alive
        False
    """
    key = (os.getpid(), int(seed), int(num_products), host, bool(unseen_types))
    with _SHARED_LOCK:
        server = _SHARED.get(key)
        if server is None or server is replace or not server.alive:
            server = ShopServer.start(seed, num_products, host=host, unseen_types=unseen_types)
            server._key = key
            _SHARED[key] = server
        server.users += 1
        return server


def release_server(server: ShopServer) -> None:
    """One user of an :func:`acquire_server` server is done; the last one stops it."""
    with _SHARED_LOCK:
        server.users -= 1
        if server.users > 0:
            return
        key = getattr(server, "_key", None)
        if _SHARED.get(key) is server:
            del _SHARED[key]
    from budget_envs.envs.webshop.client import drop_idle

    try:
        server.stop()
    except Exception:  # pragma: no cover - best effort at interpreter exit
        logger.debug("stopping the web shop server failed", exc_info=True)
    drop_idle(server.base_url)
