"""A small threaded HTTP/1.1 server for the WSGI app: keep-alive, TCP_NODELAY, size limits.

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
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from budget_envs.envs.webshop.app import MAX_BODY

__all__ = ["ShopServer", "make_server"]

logger = logging.getLogger(__name__)
_MAX_URL = 2048


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "BudgetMixWebShop/1"
    sys_version = ""
    timeout = 120  # idle keep-alive connections are closed after this many seconds

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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, app) -> None:
        self.app = app
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request, client_address) -> None:
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
            self._conns.clear()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                conn.close()
            except OSError:
                pass

    def handle_error(self, request, client_address) -> None:
        logger.debug("connection from %s ended with an error", client_address, exc_info=True)


def make_server(app, host: str = "127.0.0.1", port: int = 0) -> _Server:
    """A bound (not yet serving) threaded HTTP/1.1 server for the WSGI ``app``."""
    return _Server((host, int(port)), app)


class ShopServer:
    """The web shop served on a background thread; ``base_url`` says where.

    Example:
        >>> from budget_envs.envs.webshop.server import ShopServer
        >>> server = ShopServer.start(seed=0)  # a free port on 127.0.0.1
        >>> server.base_url
        'http://127.0.0.1:...'
        >>> server.stop()
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self._httpd = make_server(app, host, port)
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
        self._stopped = False

    @classmethod
    def start(
        cls,
        seed: int = 0,
        num_products: int = 10_000,
        host: str = "127.0.0.1",
        port: int = 0,
        unseen_types: bool = False,
    ) -> ShopServer:
        """Build (or reuse) the shop for ``seed`` and serve it on ``host:port`` (0 = free port);
        ``unseen_types`` adds the held-out product types (the ``test_unseen`` split's shop)."""
        from budget_envs.envs.webshop.app import WebShopApp
        from budget_envs.envs.webshop.shop import get_shop

        return cls(WebShopApp(get_shop(seed, num_products, unseen_types)), host, port)

    @property
    def alive(self) -> bool:
        """Whether the server thread is still serving."""
        return not self._stopped and self._thread.is_alive()

    def stop(self) -> None:
        """Stop serving, close the listening socket and every open connection."""
        if self._stopped:
            return
        self._stopped = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections()
        self._thread.join(timeout=5)
