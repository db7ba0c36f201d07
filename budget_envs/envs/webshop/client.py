"""The env's HTTP connection to the shop: one kept-alive ``http.client`` connection.

A step is one small JSON request and answer on loopback, so what the client library does per
request is most of a step. ``requests`` (a ``Session``) spent about half of the env's step
around the socket: reading proxy settings from ``os.environ`` twice per request, merging
session settings, urllib3's pool and retry bookkeeping, two socket writes per request. This
connection does only what the env needs: it reuses one socket, reconnects when the server has
closed it while idle (as urllib3 does before reusing a pooled connection), writes each request
in one call, and never retries a request it has sent. Proxies from environment variables are
not used: the shop is reached directly.

The envs of a process share their connections (:func:`shared_pool`): an env borrows a kept-alive
connection for one request and gives it back, so a process holds as many connections as it has
requests in flight (one for a loop that steps its envs in turn), not one per env.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import threading
from typing import Any
from urllib.parse import quote, urlsplit

__all__ = ["ConnectionPool", "ShopConnection", "drop_idle", "shared_pool"]

#: Characters a request target keeps as they are (the rest is percent-encoded, as requests does).
_SAFE = "/?=&%:@!$'()*+,;~-._"

#: Longest line of an answer's head, and most header lines (http.client's limits).
_MAX_LINE = 65536
_MAX_HEADERS = 100
#: What a failed request raises (the env turns it into a WebShopServerError).
CONNECTION_ERRORS = (OSError, http.client.HTTPException)


class ShopConnection:
    """Requests to one shop server over a single kept-alive HTTP/1.1 connection.

    Args:
        timeout: seconds to wait to connect and for any answer.

    Example:
        >>> from budget_envs.envs.webshop.client import ShopConnection
        >>> from budget_envs.envs.webshop.server import ShopServer
        >>> server = ShopServer.start(seed=0)
        >>> http = ShopConnection(timeout=10)
        >>> status, body = http.request("GET", server.base_url, "/api/info")
        >>> status, http.decode(body)["seed"]
        (200, 0)
        >>> http.close(); server.stop()
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = float(timeout)
        self._sock: socket.socket | None = None
        self._rfile: Any = None  # the socket's buffered reader, kept across answers
        self._origin: str | None = None
        self._host = b""
        self._prefix = ""

    def _socket(self, base_url: str, timeout: float) -> socket.socket:
        sock = self._sock
        if sock is not None and (self._origin != base_url or _dropped(sock)):
            self.close()
            sock = None
        if sock is None:
            parts = urlsplit(base_url)
            https = parts.scheme == "https"
            port = parts.port or (443 if https else 80)
            sock = socket.create_connection((parts.hostname, port), timeout=timeout)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # pragma: no cover - a socket without TCP options
                pass
            if https:
                import ssl

                sock = ssl.create_default_context().wrap_socket(
                    sock, server_hostname=parts.hostname
                )
            self._sock, self._origin = sock, base_url
            self._rfile = sock.makefile("rb")
            self._host = parts.netloc.rpartition("@")[2].encode("idna")
            self._prefix = parts.path.rstrip("/")
        return sock

    def request(
        self,
        method: str,
        base_url: str,
        path: str,
        body: Any = None,
        timeout: float | None = None,
    ) -> tuple[int, bytes]:
        """``(status, body bytes)`` of ``method path`` (``body`` sent as JSON when not None).

        The request goes out in one write. Raises one of :data:`CONNECTION_ERRORS` when the
        server cannot be reached or does not answer; the connection is then closed (the next
        request opens a new one)."""
        try:
            sock = self._socket(base_url, self.timeout if timeout is None else timeout)
            if timeout is not None:
                sock.settimeout(timeout)
            head = [
                f"{method} {quote(self._prefix + path, safe=_SAFE)} HTTP/1.1".encode("ascii"),
                b"Host: " + self._host,
                b"Accept: application/json",
                b"Accept-Encoding: identity",
            ]
            data = b""
            if body is not None:
                data = json.dumps(body, allow_nan=False).encode("utf-8")
                head.append(b"Content-Type: application/json")
            if body is not None or method in ("POST", "PUT"):
                head.append(b"Content-Length: %d" % len(data))
            sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + data)
            status, payload, will_close = _read_answer(self._rfile, method)
            if timeout is not None:
                sock.settimeout(self.timeout)
        except BaseException:
            self.close()
            raise
        if will_close:
            self.close()
        return status, payload

    @staticmethod
    def decode(payload: bytes) -> Any:
        """A JSON answer body as Python data."""
        return json.loads(payload)

    def close(self) -> None:
        """Close the connection (a later request opens a new one)."""
        sock, self._sock, self._origin = self._sock, None, None
        rfile, self._rfile = self._rfile, None
        if rfile is not None:
            rfile.close()
        if sock is not None:
            try:
                sock.close()
            except OSError:  # pragma: no cover - closing an already broken socket
                pass


class ConnectionPool:
    """Kept-alive :class:`ShopConnection` s that many envs borrow, one request at a time.

    Args:
        timeout: seconds to wait to connect and for any answer.
        max_idle: idle connections kept per server; more are closed when given back.

    Example:
        >>> from budget_envs.envs.webshop.client import ConnectionPool
        >>> from budget_envs.envs.webshop.server import ShopServer
        >>> server = ShopServer.start(seed=0)
        >>> pool = ConnectionPool(timeout=10)
        >>> [pool.request("GET", server.base_url, "/api/info")[0] for _ in range(3)]
        [200, 200, 200]
        >>> pool.idle(server.base_url)  # the three requests took turns on one connection
        1
        >>> pool.close(); server.stop()
    """

    def __init__(self, timeout: float, max_idle: int = 32) -> None:
        self.timeout = float(timeout)
        self.max_idle = int(max_idle)
        self._lock = threading.Lock()
        self._idle: dict[str, list[ShopConnection]] = {}

    def request(
        self,
        method: str,
        base_url: str,
        path: str,
        body: Any = None,
        timeout: float | None = None,
    ) -> tuple[int, bytes]:
        """As :meth:`ShopConnection.request`, on a connection borrowed for this request."""
        with self._lock:
            idle = self._idle.get(base_url)
            conn = idle.pop() if idle else None
        if conn is None:
            conn = ShopConnection(self.timeout)
        try:
            return conn.request(method, base_url, path, body, timeout)
        finally:
            self._give_back(base_url, conn)

    decode = staticmethod(ShopConnection.decode)

    def _give_back(self, base_url: str, conn: ShopConnection) -> None:
        if conn._sock is None:  # closed by the request (an error, or the server's close)
            return
        with self._lock:
            idle = self._idle.setdefault(base_url, [])
            if len(idle) < self.max_idle:
                idle.append(conn)
                return
        conn.close()

    def idle(self, base_url: str) -> int:
        """Idle connections kept for ``base_url``."""
        with self._lock:
            return len(self._idle.get(base_url, ()))

    def drop(self, base_url: str) -> None:
        """Close the idle connections to ``base_url`` (its server stopped)."""
        with self._lock:
            conns = self._idle.pop(base_url, [])
        for conn in conns:
            conn.close()

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()


_POOLS_LOCK = threading.Lock()
#: (pid, timeout) -> the pool the envs of this process with that timeout share.
_POOLS: dict[tuple[int, float], ConnectionPool] = {}


def shared_pool(timeout: float) -> ConnectionPool:
    """The connection pool of this process for requests with ``timeout`` (a forked process
    gets its own: connections are never shared across processes)."""
    key = (os.getpid(), float(timeout))
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ConnectionPool(timeout)
        return pool


def drop_idle(base_url: str) -> None:
    """Close this process's idle connections to ``base_url`` (its server stopped)."""
    pid = os.getpid()
    with _POOLS_LOCK:
        pools = [p for (owner, _), p in _POOLS.items() if owner == pid]
    for pool in pools:
        pool.drop(base_url)


def _read_answer(rfile: Any, method: str) -> tuple[int, bytes, bool]:
    """``(status, body, close after it)`` of the next answer on ``rfile``.

    The answer's head is read line by line (``http.client``'s header parser, built on the
    ``email`` package, was a third of the client's Python per step); the body by its
    Content-Length, by chunks, or to the end of the connection. Informational (1xx) answers are
    skipped. A malformed or cut answer raises an ``http.client.HTTPException``."""
    while True:
        line = rfile.readline(_MAX_LINE + 1)
        if not line:
            raise http.client.RemoteDisconnected(
                "the server closed the connection without an answer"
            )
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or len(line) > _MAX_LINE:
            raise http.client.BadStatusLine(repr(line[:100]))
        try:
            status = int(parts[1])
        except ValueError:
            raise http.client.BadStatusLine(repr(line[:100])) from None
        if not 100 <= status <= 999:
            raise http.client.BadStatusLine(repr(line[:100]))
        close = parts[0] == b"HTTP/1.0"
        length: int | None = None
        chunked = False
        for _ in range(_MAX_HEADERS + 1):
            header = rfile.readline(_MAX_LINE + 1)
            if header in (b"\r\n", b"\n", b""):
                break
            if len(header) > _MAX_LINE:
                raise http.client.LineTooLong("header line")
            name, _, value = header.partition(b":")
            name = name.strip().lower()
            value = value.strip().lower()
            if name == b"content-length":
                if not value.isdigit():
                    raise http.client.HTTPException(f"bad Content-Length {value[:40]!r}")
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = value.endswith(b"chunked")
            elif name == b"connection":
                tokens = {t.strip() for t in value.split(b",")}
                close = b"close" in tokens or (close and b"keep-alive" not in tokens)
        else:
            raise http.client.HTTPException(f"more than {_MAX_HEADERS} headers")
        if status >= 200:
            break
    if status in (204, 304) or method == "HEAD":
        return status, b"", close
    if chunked:
        return status, _read_chunks(rfile), close
    if length is None:
        return status, rfile.read(), True
    body = rfile.read(length)
    if len(body) < length:
        raise http.client.IncompleteRead(body, length - len(body))
    return status, body, close


def _read_chunks(rfile: Any) -> bytes:
    out = bytearray()
    while True:
        line = rfile.readline(_MAX_LINE + 1)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise http.client.IncompleteRead(bytes(out)) from None
        if size == 0:
            while rfile.readline(_MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(out)
        chunk = rfile.read(size)
        if len(chunk) < size:
            raise http.client.IncompleteRead(bytes(out) + chunk, size - len(chunk))
        out += chunk
        rfile.readline(_MAX_LINE + 1)  # the CRLF after the chunk


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle kept-alive connection was closed by the server (readable while idle:
    end of file, or bytes no request asked for)."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True
