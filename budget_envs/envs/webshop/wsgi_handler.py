"""One request of the shop's HTTP/1.1 server: its framing and the handler that runs the app.

The serving loop (:mod:`budget_envs.envs.webshop.wsgi_server`) reads bytes until
:func:`_frame` says a request has fully arrived, then a worker hands it to :class:`_Handler`,
which checks it (Host and Origin, target length, framing, body size), calls the WSGI app and
writes the answer in one call.
"""

from __future__ import annotations

import io
import logging
import socket
import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from budget_envs.envs.webshop.app import MAX_BODY

logger = logging.getLogger(__name__)
_MAX_URL = 2048
#: Bytes of request line and headers read before a request is handed on as it is (the handler
#: then answers 414 or 431 and closes).
_HEAD_LIMIT = 65536 + 16384


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
    """Answers one request that has already arrived in full (``data``).

    ``server`` is the serving loop (``wsgi_server._Server``, not imported here: that module
    imports this one): the handler reads its ``app``, ``host_policy`` and ``server_address``.
    """

    protocol_version = "HTTP/1.1"
    server_version = "BudgetMixWebShop/1"
    sys_version = ""

    def __init__(self, conn: _Conn, data: bytes, server: Any) -> None:  # noqa: D107
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
