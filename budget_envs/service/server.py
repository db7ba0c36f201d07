"""An OpenEnv server for any registered id: one env per session, many sessions.

The protocol is OpenEnv's own (``openenv.core.env_server.HTTPEnvServer``): sessions live on the
WebSocket ``/ws`` (``{"type": "reset" | "step" | "state" | "close" | "mcp", "data": ...}``),
``/schema`` and ``/health`` describe and check the server. This module adds what the suite
needs on top:

* :class:`SessionEnv`, an OpenEnv ``Environment`` around ``gymnasium.make(id, budget=...,
  visibility=..., faults=...)``: sessions are independent (own env, seeds, budget draws, faults);
* request ids: a step (or reset) carrying an id already applied in the session returns the
  recorded answer without stepping again, so clients can retry;
* :class:`~.table.SessionTable` and :mod:`.routes`: a session held by a socket belongs to it;
  sessions made over HTTP (``/mcp``, ``POST /reset``) have their own cap, a quarter of
  ``max_sessions``, and unattached ones expire; every live env is counted;
* families with a server of their own (the web shop) get one per process, shared by sessions;
* :class:`Guard`, an ASGI middleware: idle WebSocket sessions are closed (and their env freed)
  after ``idle_timeout`` seconds without a message, oversized messages get an error frame and
  leave the session alive, HTTP bodies over the limit (chunked ones too) get 413;
* ``GET /sessions``: sessions per route, live envs, env calls;
* :class:`EnvLane`: every session's env calls run one at a time, on the event loop while they
  are cheap (no thread hop per step), on one worker thread when they are not.

This module builds and runs the app; the parts live beside it: :mod:`.session` (one session's
env), :mod:`.table` (the sessions), :mod:`.routes` (the session routes), :mod:`.lane` (the env
calls' lane) and :mod:`.guard` (the ASGI guard).
"""

from __future__ import annotations

from budget_envs.service._deps import require_openenv

require_openenv()

import functools  # noqa: E402
import ipaddress  # noqa: E402
import logging  # noqa: E402
from typing import Any  # noqa: E402

from openenv.core.env_server.http_server import HTTPEnvServer  # noqa: E402
from openenv.core.env_server.types import ConcurrencyConfig  # noqa: E402

from budget_envs.hostcheck import HostPolicy  # noqa: E402
from budget_envs.registry import DEFAULT_BUDGET, entry_for  # noqa: E402
from budget_envs.service.guard import (  # noqa: E402
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_MESSAGE_BYTES,
    Guard,
    HostGuard,
)
from budget_envs.service.http_limits import (  # noqa: E402
    DEFAULT_HEADER_TIMEOUT,
    limited_h11,
    max_connections_for,
)
from budget_envs.service.lane import EnvLane  # noqa: E402
from budget_envs.service.models import BudgetAction, BudgetObservation, BudgetState  # noqa: E402
from budget_envs.service.routes import add_session_routes  # noqa: E402
from budget_envs.service.session import (  # noqa: E402, F401
    EnvCounter,
    ServeConfig,
    SessionEnv,
    _observation,
)
from budget_envs.service.table import SessionTable  # noqa: E402

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "EnvLane",
    "Guard",
    "ServeConfig",
    "SessionEnv",
    "bind_warning",
    "create_app",
    "warn_if_exposed",
    "run_app",
    "serve",
]

log = logging.getLogger(__name__)

#: Sessions one server holds at once unless told otherwise.
DEFAULT_MAX_SESSIONS = 64


def _check_positive(name: str, value: Any, kind: type, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, kind) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive {kind.__name__}, got {value!r}")


def create_app(
    env_id: str,
    *,
    budget: Any = DEFAULT_BUDGET,
    visibility: str = "hidden",
    faults: Any = None,
    env_kwargs: dict[str, Any] | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    info_delta: bool = True,
    allow_hosts: Any = (),
    allow_origins: Any = (),
) -> Any:
    """A FastAPI app serving ``env_id`` over OpenEnv's protocol (run it with any ASGI server).

    Requests (HTTP and WebSocket) whose ``Host`` is not a loopback name or one of
    ``allow_hosts``, or whose ``Origin`` is neither absent, on loopback nor one of
    ``allow_origins``, get 403 (:class:`~budget_envs.hostcheck.HostPolicy`; ``*`` allows any):
    no web page the user visits can drive the server.

    ``budget`` / ``visibility`` / ``faults`` / ``env_kwargs`` are what ``gymnasium.make`` gets
    for every session's env. One env is built here first to check the arguments; a family with
    a server of its own (``shared_env_kwargs``) keeps that env as the host every session uses.
    ``info_delta=False`` sends every info value in every step answer (for clients that do not
    restore ``info_delta`` answers).
    """
    entry = entry_for(env_id)  # NameNotFound with the registered ids
    _check_app_args(max_sessions, idle_timeout, max_message_bytes, env_kwargs)
    config = ServeConfig(
        env_id=entry.id,
        budget=budget,
        visibility=visibility,
        faults=faults,
        env_kwargs=dict(env_kwargs or {}),
        info_delta=bool(info_delta),
    )
    host = _host_env(config)

    from fastapi import FastAPI

    app = FastAPI(title=f"budget-envs: {entry.id}", description=entry.description)
    lane = EnvLane()
    counter = EnvCounter()
    make_session = functools.partial(SessionEnv, config, lane, counter)
    server = HTTPEnvServer(
        env=make_session,
        action_cls=BudgetAction,
        observation_cls=BudgetObservation,
        state_cls=BudgetState,
        # The sessions are ours (``SessionTable``), reaped by the guard: OpenEnv's own table
        # and reaper stay empty and off.
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=max_sessions, session_timeout=None
        ),
        env_name=entry.id.split("/")[-1],
    )
    server.register_routes(app)
    table = _session_table(make_session, lane, max_sessions, idle_timeout)
    add_session_routes(app, table)
    counters = {"reaped": 0, "aborted": 0}
    _add_sessions_route(app, entry.id, table, counter, lane, counters)
    _add_shutdown(app, table, lane)
    app.state.host = host
    app.state.openenv_server = server
    app.state.config = config
    app.state.sessions = table
    app.state.envs = counter
    app.add_middleware(
        Guard, idle_timeout=idle_timeout, max_bytes=max_message_bytes, counters=counters
    )
    # Added last, so it runs first: a refused request reaches neither the guard nor the app.
    app.add_middleware(HostGuard, policy=HostPolicy(allow_hosts, allow_origins))
    return app


def _check_app_args(
    max_sessions: Any, idle_timeout: Any, max_message_bytes: Any, env_kwargs: Any
) -> None:
    """:func:`create_app`'s limits and ``env_kwargs``, checked before any env is made."""
    _check_positive("max_sessions", max_sessions, int)
    if idle_timeout is not None and (
        not isinstance(idle_timeout, (int, float)) or isinstance(idle_timeout, bool)
    ):
        raise ValueError(f"idle_timeout must be a positive number or None, got {idle_timeout!r}")
    if idle_timeout is not None and idle_timeout <= 0:
        raise ValueError(f"idle_timeout must be a positive number or None, got {idle_timeout!r}")
    _check_positive("max_message_bytes", max_message_bytes, int)
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise TypeError(f"env_kwargs must be a dict, got {env_kwargs!r}")


def _host_env(config: ServeConfig) -> Any:
    """One env made from ``config`` to check the arguments: kept as the sessions' host when
    its family serves one of its own (``shared_env_kwargs``), else closed (None)."""
    host = config.make()  # fails here, not in the first session, on bad arguments
    share = getattr(host.unwrapped, "shared_env_kwargs", None)
    if callable(share):
        config.shared_kwargs = dict(share())
    else:
        host.close()
        host = None
    return host


def _session_table(
    make_session: Any, lane: EnvLane, max_sessions: int, idle_timeout: float | None
) -> SessionTable:
    """The app's sessions, each env closed on the lane when it has one."""

    async def close_env(env: SessionEnv) -> None:
        if env.has_env:  # after the env calls queued on the worker, on its thread
            await lane.close_env(env.close)
        else:
            env.close()

    return SessionTable(
        make_session,
        close_env,
        max_sessions=max_sessions,
        expire_s=idle_timeout if idle_timeout is not None else DEFAULT_IDLE_TIMEOUT,
    )


def _add_sessions_route(
    app: Any,
    env_id: str,
    table: SessionTable,
    counter: EnvCounter,
    lane: EnvLane,
    counters: dict[str, int],
) -> None:
    """Register ``GET /sessions`` on ``app``."""

    @app.get("/sessions", tags=["budget-envs"])
    def sessions() -> dict[str, Any]:
        """Sessions per route (``active`` / ``max``: on ``/ws``; ``http``: made over ``/mcp``
        and ``POST /reset``), the Gymnasium envs alive (``envs``: every route's), idle sessions
        closed (``reaped``), unattached ``/mcp`` sessions expired (``expired``), and the env
        calls run so far (``env_calls``: inline and worker counts, and per kind the inline runs
        and their seconds); ``aborted``: connections dropped because their client read nothing
        for the send timeout."""
        return {
            "env_id": env_id,
            "active": table.ws_active,
            "max": table.max_ws,
            "http": {"active": table.http_active, "max": table.max_http},
            "envs": counter.live,
            "reaped": counters["reaped"],
            "aborted": counters["aborted"],
            "expired": table.expired,
            "env_calls": lane.stats(),
        }


def _add_shutdown(app: Any, table: SessionTable, lane: EnvLane) -> None:
    """On shutdown: every session closed, the lane stopped, the host env closed."""

    async def close_host() -> None:
        await table.close_all()
        lane.close()
        if app.state.host is not None:
            app.state.host.close()
            app.state.host = None

    app.router.on_shutdown.append(close_host)


def bind_warning(host: str) -> str | None:
    """What to tell whoever serves on ``host``, when it reaches beyond this machine's loopback:
    the service has no authentication, so anyone who can reach the port can open sessions (and
    use the server's CPU and memory). None for a loopback address."""
    name = host.strip().strip("[]")
    if name.lower() == "localhost":
        return None
    try:
        if ipaddress.ip_address(name).is_loopback:
            return None
    except ValueError:  # a host name: it may resolve beyond loopback
        pass
    reach = "every network interface" if name in ("0.0.0.0", "::", "") else host
    return (
        f"serving on {reach}, beyond this machine's loopback: the service has no "
        "authentication, so anyone who can reach the port can open sessions and use this "
        "machine's CPU and memory; serve on 127.0.0.1 (the default) unless every machine on "
        "that network is trusted"
    )


def warn_if_exposed(host: str) -> str | None:
    """Log :func:`bind_warning`'s warning for ``host`` (when it reaches beyond loopback) on this
    module's logger, and return it (:func:`run_app` calls this before it binds)."""
    warning = bind_warning(host)
    if warning is not None:
        log.warning("%s", warning)
    return warning


def run_app(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> None:
    """Run an ASGI app under uvicorn with the service's WebSocket settings until interrupted.

    Binding beyond loopback logs :func:`bind_warning`'s warning first."""
    import gc

    import uvicorn

    warn_if_exposed(host)
    # What is alive now (modules, the app, a host env) lives as long as the process: kept out
    # of the cyclic collector's scans, a full collection no longer stalls every session for
    # the time it takes to walk them (a quarter of a second with ToolUse loaded).
    gc.freeze()
    # uvicorn's own cap sits above the guard's, so a message up to 4 times the limit gets the
    # guard's clear error frame instead of a bare close; beyond this, the connection is closed
    # (1009) before the message is read, so no connection buffers more than this.
    table = getattr(getattr(app, "state", None), "sessions", None)
    cap = max_connections_for(table.max_ws if table is not None else DEFAULT_MAX_SESSIONS)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        # A connection must finish its request head within DEFAULT_HEADER_TIMEOUT seconds, and
        # at most ``cap`` are open at once (see budget_envs.service.http_limits).
        http=limited_h11(DEFAULT_HEADER_TIMEOUT, cap),
        ws_max_size=ws_max_size(max_message_bytes),
        # Observations are small JSON on a local network: compressing each one costs more CPU
        # than it saves.
        ws_per_message_deflate=False,
    )


def ws_max_size(max_message_bytes: int) -> int:
    """The largest WebSocket message read at all (4 times the guard's limit, at least 1 MiB)."""
    return max(4 * max_message_bytes, 1 << 20)


def serve(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    **app_kwargs: Any,
) -> None:
    """Run :func:`create_app` under uvicorn until interrupted (``budgetmix serve`` calls it)."""
    max_bytes = app_kwargs.get("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES)
    app = create_app(env_id, **app_kwargs)
    run_app(app, host=host, port=port, log_level=log_level, max_message_bytes=max_bytes)
