"""The WebShop env's side of the shop's HTTP API: its server, its session, and requests that
outlive a lost session or a dead server.

Every reset, step, snapshot and restore of :class:`~budget_envs.envs.webshop.env.WebShopEnv` is
a request through :class:`ShopSession`: on the server at ``base_url``, or on the process's
server for the env's catalogue (:func:`~budget_envs.envs.webshop.server.acquire_server`), over
the connections the envs of a process share (:func:`~budget_envs.envs.webshop.client.shared_pool`).
The env keeps the session state of every answer, so a session the server no longer has is
opened again from it, and a server of the env's own that died mid-episode is restarted with it.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from budget_envs.envs.webshop.client import CONNECTION_ERRORS, ConnectionPool, shared_pool
from budget_envs.errors import WebShopServerError

__all__ = ["ShopSession"]

logger = logging.getLogger(__name__)


class ShopSession:
    """The server and session requests of :class:`~budget_envs.envs.webshop.env.WebShopEnv`.

    Mixed into the env: it reads the env's settings (``_given_url``, ``catalogue_seed``,
    ``unseen_types``, ``split``, ``scoring``, ``host``, ``timeout``) and owns its server, its
    connection pool and its session (``_server``, ``_finalizer``, ``_http``, ``_sid``); each
    answer sets the shown page (``_state``, ``_admissible_now``, ``_view``).
    """

    @property
    def base_url(self) -> str:
        """Where the shop server answers (starts the env's own server if it has none yet)."""
        if self._given_url is not None:
            return self._given_url
        if self._server is None:
            self._start_server()
        return self._server.base_url

    @property
    def server(self):
        """The :class:`~budget_envs.envs.webshop.server.ShopServer` this env started or shares
        with the other envs of its process, or None (a ``base_url`` given)."""
        return self._server

    def shared_env_kwargs(self) -> dict[str, Any]:
        """Constructor kwargs that make more envs of this process use this env's shop server.

        The eval runner's async driver (many live envs) and the OpenEnv service (one env per
        session) pass them to every further env, so a process runs one shop server, not one per
        env. This env keeps owning the server and stops it on close.
        """
        return {"base_url": self.base_url}

    def _start_server(self, replace=None) -> None:
        from budget_envs.envs.webshop.server import acquire_server, release_server

        self._require_open()  # a closed env never starts a server again
        self._server = acquire_server(
            self.catalogue_seed,
            self.num_products,
            host=self.host,
            unseen_types=self.unseen_types,
            replace=replace,
        )
        self._finalizer = weakref.finalize(self, release_server, self._server)
        logger.info("web shop env plays on the server at %s", self._server.base_url)

    def restart_server(self) -> str:
        """Play on a fresh server (after this process's server died); returns the new
        ``base_url``. Other envs of the process move to it when they find the old one dead."""
        if self._given_url is not None:
            raise WebShopServerError(
                f"this env does not own the server at {self._given_url}; restart it there"
            )
        old = self._server
        if self._finalizer is not None:
            self._finalizer()
        self._server = None
        self._sid = None
        self._start_server(replace=old)
        return self._server.base_url

    def _session(self) -> ConnectionPool:
        if self._http is None:
            self._http = shared_pool(self.timeout)
            self._check_server()
        return self._http

    def _check_server(self) -> None:
        info = self._request("GET", "/api/info")
        if info.get("seed") != self.catalogue_seed:
            raise WebShopServerError(
                f"the server at {self.base_url} serves catalogue seed {info.get('seed')!r}, "
                f"but this env was made with catalogue_seed={self.catalogue_seed}"
            )
        if bool(info.get("unseen_types", False)) != self.unseen_types:
            raise WebShopServerError(
                f"the server at {self.base_url} "
                + (
                    "has no held-out product types: split='test_unseen' needs a server started "
                    "with --unseen-types"
                    if self.unseen_types
                    else "serves the test_unseen catalogue (--unseen-types), but this env plays "
                    f"split={self.split!r}"
                )
            )

    def _request(
        self, method: str, path: str, json: Any = None, ok: tuple[int, ...] = (200, 201, 204)
    ) -> Any:
        base_url = self.base_url
        http = self._http if self._http is not None else self._session()
        try:
            status, payload = http.request(method, base_url, path, json)
        except CONNECTION_ERRORS as exc:
            raise WebShopServerError(
                f"the web shop server at {self.base_url} did not answer "
                f"({type(exc).__name__}); is it running?"
                + (
                    " The env owns it: call env.unwrapped.restart_server() or reset()."
                    if self._given_url is None
                    else ""
                )
            ) from exc
        if status not in ok:
            text = payload.decode("utf-8", errors="replace")
            raise WebShopServerError(
                f"the web shop server at {self.base_url} answered {status} to "
                f"{method} {path}: {text[:200]}"
            )
        if status == 204:
            return None
        if status >= 500:
            return {"status": status}
        return http.decode(payload)

    def _apply(self, data: dict[str, Any]) -> None:
        self._state = data["state"]
        self._admissible_now = list(data["admissible"])
        self._view = data["view"]

    def _in_session(
        self, method: str, suffix: str = "", json: Any = None, ok: tuple[int, ...] = (200,)
    ) -> Any:
        """A request on the env's shop session. When the server answers that it has no such
        session (evicted by other clients' sessions, or a restarted server), the session is
        opened again from the env's last state and the request is sent once more."""
        if self._sid is not None:
            data = self._request(
                method, f"/api/sessions/{self._sid}{suffix}", json=json, ok=(*ok, 404)
            )
            if not (isinstance(data, dict) and data.get("status") == 404):
                return data
            logger.info("the web shop server lost session %s; opening it again", self._sid)
        self._reopen(self._state)
        return self._request(method, f"/api/sessions/{self._sid}{suffix}", json=json, ok=ok)

    def _reopen(self, state: dict[str, Any]) -> None:
        """Open a new session on the server and set it to ``state`` (a session state)."""
        if not state:
            raise WebShopServerError("this env has no shop session yet: call reset() first")
        self._sid = None
        if self._http is None:
            self._session()
        else:  # the same catalogue as before (a restarted server may serve another one)
            self._check_server()
        data = self._request(
            "POST", "/api/sessions", json={"task_id": state["task_id"], "scoring": self.scoring}
        )
        self._sid = data["sid"]
        self._apply(self._request("PUT", f"/api/sessions/{self._sid}", json={"state": state}))

    def _put_state(self, state: dict[str, Any]) -> None:
        """Set the session to ``state``, opening a session when the env has none (yet)."""
        if self._sid is None:
            self._reopen(state)
        else:
            self._apply(self._in_session("PUT", json={"state": state}))

    def _step_request(self, action: str, fault: dict | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"action": action}
        if fault is not None:
            body["fault"] = fault
        ok = (200, 500, 503) if fault else (200,)
        try:
            return self._in_session("POST", "/step", json=body, ok=ok)
        except WebShopServerError:
            if not self._revive():
                raise
        return self._in_session("POST", "/step", json=body, ok=ok)

    def _revive(self) -> bool:
        """Mid-episode, after the env's own server died: start a fresh one and put the episode's
        state (the env keeps the session state of every answer) into a new session there, so
        the turn runs as if nothing happened. False when there is nothing to revive: the server
        is someone else's (then the caller's error stands) or it is still alive."""
        if self._server is None or self._server.alive or self._task_id is None:
            return False
        logger.warning(
            "the web shop server at %s died mid-episode; restarting it and restoring the "
            "session of %s",
            self._server.base_url,
            self._task_id,
        )
        self.restart_server()
        self._reopen(self._state)
        return True
