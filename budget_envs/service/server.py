"""An OpenEnv server for any registered id: one env per WebSocket session, many sessions.

The protocol is OpenEnv's own (``openenv.core.env_server.HTTPEnvServer``): sessions live on the
WebSocket ``/ws`` (``{"type": "reset" | "step" | "state" | "close", "data": ...}``), ``/schema``
and ``/health`` describe and check the server. This module adds what the suite needs on top:

* :class:`SessionEnv`, an OpenEnv ``Environment`` around ``gymnasium.make(id, budget=...,
  visibility=..., faults=...)``: sessions are independent (own env, seeds, budget draws, faults);
* request ids: a step (or reset) carrying an id already applied in the session returns the
  recorded answer without stepping again, so clients can retry;
* families with a server of their own (the web shop) get one per process, shared by sessions;
* :class:`Guard`, an ASGI middleware: idle WebSocket sessions are closed (and their env freed)
  after ``idle_timeout`` seconds, oversized messages get an error frame and leave the session
  alive, oversized HTTP bodies get 413;
* ``GET /sessions``: active and maximum sessions;
* :class:`EnvLane`: every session's env calls run one at a time, on the event loop while they
  are cheap (no thread hop per step), on one worker thread when they are not.

This module builds and runs the app; the parts live beside it: :mod:`.session` (one session's
env), :mod:`.lane` (the env calls' lane) and :mod:`.guard` (the ASGI guard).
"""

from __future__ import annotations

from budget_envs.service._deps import require_openenv

require_openenv()

import functools  # noqa: E402
from typing import Any  # noqa: E402

from openenv.core.env_server.http_server import HTTPEnvServer  # noqa: E402
from openenv.core.env_server.types import ConcurrencyConfig  # noqa: E402

from budget_envs.registry import DEFAULT_BUDGET, entry_for  # noqa: E402
from budget_envs.service.guard import (  # noqa: E402
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_MESSAGE_BYTES,
    Guard,
)
from budget_envs.service.lane import EnvLane  # noqa: E402
from budget_envs.service.models import BudgetAction, BudgetObservation, BudgetState  # noqa: E402
from budget_envs.service.session import ServeConfig, SessionEnv, _observation  # noqa: E402, F401

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "EnvLane",
    "Guard",
    "ServeConfig",
    "SessionEnv",
    "create_app",
    "run_app",
    "serve",
]

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
) -> Any:
    """A FastAPI app serving ``env_id`` over OpenEnv's protocol (run it with any ASGI server).

    ``budget`` / ``visibility`` / ``faults`` / ``env_kwargs`` are what ``gymnasium.make`` gets
    for every session's env. One env is built here first to check the arguments; a family with
    a server of its own (``shared_env_kwargs``) keeps that env as the host every session uses.
    ``info_delta=False`` sends every info value in every step answer (for clients that do not
    restore ``info_delta`` answers).
    """
    entry = entry_for(env_id)  # NameNotFound with the registered ids
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
    config = ServeConfig(
        env_id=entry.id,
        budget=budget,
        visibility=visibility,
        faults=faults,
        env_kwargs=dict(env_kwargs or {}),
        info_delta=bool(info_delta),
    )
    host = config.make()  # fails here, not in the first session, on bad arguments
    share = getattr(host.unwrapped, "shared_env_kwargs", None)
    if callable(share):
        config.shared_kwargs = dict(share())
    else:
        host.close()
        host = None

    from fastapi import FastAPI

    app = FastAPI(title=f"budget-envs: {entry.id}", description=entry.description)
    lane = EnvLane()
    server = HTTPEnvServer(
        env=functools.partial(SessionEnv, config, lane),
        action_cls=BudgetAction,
        observation_cls=BudgetObservation,
        state_cls=BudgetState,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=max_sessions, session_timeout=idle_timeout
        ),
        env_name=entry.id.split("/")[-1],
    )
    server.register_routes(app)

    counters = {"reaped": 0}

    @app.get("/sessions", tags=["budget-envs"])
    def sessions() -> dict[str, Any]:
        """Active and maximum sessions, how many idle sessions were closed, and the env calls
        run so far (``env_calls``: inline and worker counts, and per kind the inline runs and
        their seconds)."""
        status = server.get_capacity_status()
        return {
            "env_id": entry.id,
            "active": status.active_sessions,
            "max": status.max_sessions,
            "reaped": counters["reaped"],
            "env_calls": lane.stats(),
        }

    def close_host() -> None:
        lane.close()
        if app.state.host is not None:
            app.state.host.close()
            app.state.host = None

    app.router.on_shutdown.append(close_host)
    app.state.host = host
    app.state.openenv_server = server
    app.state.config = config
    app.add_middleware(
        Guard, idle_timeout=idle_timeout, max_bytes=max_message_bytes, counters=counters
    )
    return app


def run_app(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> None:
    """Run an ASGI app under uvicorn with the service's WebSocket settings until interrupted."""
    import gc

    import uvicorn

    # What is alive now (modules, the app, a host env) lives as long as the process: kept out
    # of the cyclic collector's scans, a full collection no longer stalls every session for
    # the time it takes to walk them (a quarter of a second with ToolUse loaded).
    gc.freeze()
    # uvicorn's own cap sits above the guard's, so an oversized message gets the guard's clear
    # error frame instead of a bare close; beyond this, the connection is closed (1009).
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        ws_max_size=max(16 * max_message_bytes, 16 << 20),
        # Observations are small JSON on a local network: compressing each one costs more CPU
        # than it saves.
        ws_per_message_deflate=False,
    )


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
