"""The web shop served on a background thread, and one such server per catalogue per process.

:class:`ShopServer` serves a shop's WSGI app (:class:`~budget_envs.envs.webshop.app.WebShopApp`)
with :mod:`budget_envs.envs.webshop.wsgi_server`'s HTTP/1.1 server on a background thread and can
stop it cleanly, closing the kept-alive connections too (so clients of a stopped server see it
die). :func:`acquire_server` and :func:`release_server` share one server per catalogue among the
envs of a process.
"""

from __future__ import annotations

import logging
import os
import threading

from budget_envs.envs.webshop.wsgi_server import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_WORKERS,
    IDLE_TIMEOUT,
    REQUEST_TIMEOUT,
    make_server,
)

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


class ShopServer:
    """The web shop served on a background thread; ``base_url`` says where.

    ``workers`` and ``max_connections`` bound the server's threads and open connections (see
    :mod:`budget_envs.envs.webshop.wsgi_server`): it runs ``workers + 1`` threads however many
    clients connect.

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
