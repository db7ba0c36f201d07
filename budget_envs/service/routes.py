"""The service's session routes: ``/ws``, ``/mcp`` (HTTP and WebSocket), ``POST /reset`` and
``POST /step``, speaking OpenEnv's protocol over the server's :class:`~.table.SessionTable`.

They replace OpenEnv's own handlers of these paths (``HTTPEnvServer.register_routes`` still
gives ``/health``, ``/schema``, ``/metadata``, ``/state`` and the task routes), so that:

* a session held by a socket belongs to it (nobody else attaches to it or closes it), and every
  route's sessions are counted (``/mcp`` and ``/reset`` in their own quarter-sized pool);
* every malformed message (not JSON, JSON but not an object, numbers past the parser's limit,
  nesting past its depth, binary frames that are not UTF-8, unknown fields) gets an error
  frame and leaves the session as it was;
* a client that goes away ends its session quietly (no traceback, no log line above debug).
"""

from __future__ import annotations

from budget_envs.service._deps import require_openenv

require_openenv()

import json  # noqa: E402
import logging  # noqa: E402
from typing import Any  # noqa: E402

from fastapi import FastAPI, Request, WebSocket  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from pydantic import ValidationError  # noqa: E402
from pydantic_core import to_json  # noqa: E402

from budget_envs.service.models import BudgetAction, BudgetObservation  # noqa: E402
from budget_envs.service.session import MessageError, _short  # noqa: E402
from budget_envs.service.table import (  # noqa: E402
    CapacityError,
    Session,
    SessionRefused,
    SessionTable,
)

__all__ = ["REPLACED_PATHS", "add_session_routes", "observation_payload"]

log = logging.getLogger(__name__)

#: Paths whose OpenEnv handlers these routes replace.
REPLACED_PATHS = frozenset({"/ws", "/mcp", "/reset", "/step"})

#: Fields a reset message's data may hold.
RESET_FIELDS = frozenset({"seed", "options", "episode_id", "request_id", "info_delta"})

#: JSON-RPC error codes (OpenEnv's ``JsonRpcErrorCode``).
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, SERVER_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32000,
)

_CLOSE = object()
_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def observation_payload(obs: BudgetObservation) -> dict[str, Any]:
    """OpenEnv's result shape, ``{"observation": {...}, "reward": r, "done": d}``, of ``obs``
    (what ``serialize_observation`` gives, without a validation pass)."""
    fields = dict(obs.__dict__)
    reward = fields.pop("reward")
    done = fields.pop("done")
    return {"observation": fields, "reward": reward, "done": done}


def _cut(text: str, limit: int = 1000) -> str:
    """``text``, cut to ``limit`` characters (an error message may quote a client's input)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _text(payload: Any) -> str:
    return to_json(payload).decode()


def _error(message: str, code: str, **extra: Any) -> str:
    return _text({"type": "error", "data": {"message": message, "code": code, **extra}})


def _not_an_object(value: Any) -> str:
    kind = "null" if value is None else _JSON_KINDS.get(type(value), type(value).__name__)
    return (
        'a message is a JSON object such as {"type": "step", "data": {"action": "..."}}; '
        f"got a JSON {kind}"
    )


def _loads(text: str | bytes) -> tuple[Any, str | None]:
    """(decoded JSON, None) or (None, why not): a number past the parser's digit limit or
    nesting past its depth is malformed JSON like any other."""
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "Invalid JSON: nested too deep"
    except ValueError as exc:  # JSONDecodeError, int digit limit, bad UTF-8 bytes
        return None, f"Invalid JSON: {_cut(str(exc), 200)}"


# ---------------------------------------------------------------------- JSON-RPC (/mcp)
def _rpc(rid: Any, result: Any = None, error: tuple[int, str] | None = None, **data: Any):
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
    if error is None:
        out["result"] = result
    else:
        out["error"] = {"code": error[0], "message": error[1]}
        if data:
            out["error"]["data"] = data
    return out


def _mcp(table: SessionTable, payload: Any, own: Session | None) -> dict[str, Any]:
    """One JSON-RPC request of ``/mcp`` (or of a ``/ws`` socket's ``mcp`` message, ``own`` being
    its session): OpenEnv's session methods under the table's rules; the envs have no tools."""
    if type(payload) is not dict:
        return _rpc(None, error=(INVALID_REQUEST, "a JSON-RPC request is a JSON object"))
    rid = payload.get("id")
    if rid is not None and (type(rid) not in (str, int) or (type(rid) is str and len(rid) > 128)):
        return _rpc(None, error=(INVALID_REQUEST, "id must be a string or an integer"))
    method = payload.get("method")
    extra = set(payload) - {"jsonrpc", "method", "params", "id"}
    if payload.get("jsonrpc") != "2.0" or type(method) is not str or extra:
        return _rpc(
            rid,
            error=(
                INVALID_REQUEST,
                'a JSON-RPC request holds "jsonrpc": "2.0", "method", and optionally "params" '
                'and "id", nothing else',
            ),
        )
    params = payload.get("params", {})
    if type(params) is not dict:
        return _rpc(rid, error=(INVALID_PARAMS, "Params must be an object"))
    if method == "openenv/session/create":
        if own is not None:
            return _rpc(rid, {"session_id": own.id})
        try:
            session = table.open("mcp")
        except CapacityError as exc:
            return _rpc(
                rid,
                error=(SERVER_ERROR, str(exc)),
                active_sessions=exc.active,
                max_sessions=exc.maximum,
            )
        return _rpc(rid, {"session_id": session.id, "expires_in_s": table.expire_s})
    if method == "openenv/session/close":
        target = params.get("session_id")
        if type(target) is not str or not target:
            return _rpc(rid, error=(INVALID_PARAMS, "Invalid params - 'session_id' is required"))
        if own is not None and target == own.id:
            return _rpc(
                rid,
                error=(
                    INVALID_REQUEST,
                    'Cannot close active WebSocket-managed session via MCP method; send {"type": '
                    '"close"} on its socket',
                ),
            )
        try:
            table.close_unattached(target)
        except SessionRefused as exc:
            code = INVALID_PARAMS if str(exc).startswith("Unknown") else INVALID_REQUEST
            return _rpc(rid, error=(code, str(exc)))
        return _rpc(rid, {"session_id": target, "closed": True})
    if method in ("tools/list", "tools/call"):
        return _rpc(
            rid,
            error=(
                METHOD_NOT_FOUND,
                "this server's envs have no MCP tools: play them on the WebSocket /ws (reset, "
                "step), alone or attached to a session made here",
            ),
        )
    return _rpc(rid, error=(METHOD_NOT_FOUND, f"Method not found: {_short(method, 80)}"))


# ---------------------------------------------------------------------- /ws messages
async def _answer(table: SessionTable, session: Session, text: str | bytes) -> Any:
    """The answer (JSON text) to one ``/ws`` message, or ``_CLOSE``. Never raises for what the
    message holds: a bad one gets an error frame, and nothing of it was applied."""
    msg, why = _loads(text)
    if why is not None:
        return _error(why, "INVALID_JSON")
    if type(msg) is not dict:
        return _error(_not_an_object(msg), "VALIDATION_ERROR")
    kind = msg.get("type")
    data = msg.get("data", {}) if "data" in msg else {}
    extra = set(msg) - {"type", "data"}
    if extra:
        names = sorted(_short(k, 40) for k in list(extra)[:8])
        return _error(
            f'unknown field(s) {names}: a message holds "type" and "data"', "VALIDATION_ERROR"
        )
    if type(data) is not dict:
        return _error(f'"data" must be an object, got {_short(data)}', "VALIDATION_ERROR")
    env = session.env
    try:
        if kind == "step":
            if "data" not in msg:
                return _error('a step message needs "data": {"action": ...}', "VALIDATION_ERROR")
            try:
                action = BudgetAction.model_validate(data)
            except ValidationError as exc:
                errors = exc.errors(include_input=False, include_url=False)
                return _error("Invalid message", "VALIDATION_ERROR", errors=errors[:8])
            obs = await env.step_async(action)
        elif kind == "reset":
            unknown = set(data) - RESET_FIELDS
            if unknown:
                names = sorted(_short(k, 40) for k in list(unknown)[:8])
                return _error(
                    f"reset got unknown field(s) {names}; it takes {sorted(RESET_FIELDS)}",
                    "VALIDATION_ERROR",
                )
            obs = await env.reset_async(**data)
        elif kind == "state":
            if data:
                return _error('a state message has no "data"', "VALIDATION_ERROR")
            return _text({"type": "state", "data": env.state.model_dump()})
        elif kind == "close":
            return _CLOSE
        elif kind == "mcp":
            return _text({"type": "mcp", "data": _mcp(table, data, session)})
        else:
            return _error(f"Unknown message type: {_short(kind, 40)}", "UNKNOWN_TYPE")
    except MessageError as exc:
        return _error(str(exc), "VALIDATION_ERROR")
    except Exception as exc:  # the env's or the session's refusal: this message only
        return _error(_cut(str(exc)) or type(exc).__name__, "EXECUTION_ERROR")
    return _text({"type": "observation", "data": observation_payload(obs)})


class _Socket:
    """A WebSocket whose peer may vanish at any time: sends report it instead of raising."""

    __slots__ = ("gone", "ws")

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.gone = False

    @classmethod
    async def accept(cls, ws: WebSocket) -> _Socket | None:
        """``ws`` accepted, wrapped; None when its client left before that."""
        sock = cls(ws)
        try:
            await ws.accept()
        except Exception:
            return None
        return sock

    async def send(self, text: str) -> bool:
        if self.gone:
            return False
        try:
            await self.ws.send({"type": "websocket.send", "text": text})
        except Exception:  # disconnected (WebSocketDisconnect, OSError) or already closed
            self.gone = True
        return not self.gone

    async def receive(self) -> str | bytes | None:
        """The next message's text (or bytes), None once the peer is gone."""
        if self.gone:
            return None
        try:
            message = await self.ws.receive()
        except Exception:
            message = {"type": "websocket.disconnect"}
        if message["type"] == "websocket.disconnect":
            self.gone = True
            return None
        text = message.get("text")
        return text if text is not None else (message.get("bytes") or b"")

    async def close(self) -> None:
        if self.gone:
            return
        self.gone = True
        try:
            await self.ws.send({"type": "websocket.close", "code": 1000})
        except Exception:
            pass


def add_session_routes(app: FastAPI, table: SessionTable) -> None:
    """Register ``/ws``, ``/mcp`` (HTTP and WebSocket), ``POST /reset`` and ``POST /step`` on
    ``app``, removing the handlers of these paths already there (OpenEnv's)."""
    app.router.routes[:] = [
        r for r in app.router.routes if getattr(r, "path", None) not in REPLACED_PATHS
    ]
    _add_ws_route(app, table)
    _add_mcp_routes(app, table)
    _add_http_routes(app, table)


def _add_ws_route(app: FastAPI, table: SessionTable) -> None:
    """Register ``/ws``: one session held by the socket, its messages answered in turn."""

    @app.websocket("/ws")
    async def ws_session(websocket: WebSocket) -> None:
        sock = await _Socket.accept(websocket)
        if sock is None:
            return  # the client left before its session began
        session = await _open_session(table, websocket, sock)
        if session is None:
            return
        try:
            await _serve_socket(table, session, sock)
        finally:
            if sock.gone:
                log.debug("session %s ended: its client went away", session.id)
            await table.release(session)
            await sock.close()


async def _open_session(table: SessionTable, websocket: WebSocket, sock: _Socket) -> Session | None:
    """The socket's session: the one its ``session_id`` names, else a new one; None (the
    client told why, the socket closed) when the table refuses."""
    requested = websocket.query_params.get("session_id")
    try:
        if requested:
            return table.attach(requested, websocket)
        return table.open("ws", websocket)
    except CapacityError as exc:
        await sock.send(
            _error(
                str(exc),
                "CAPACITY_REACHED",
                active_sessions=exc.active,
                max_sessions=exc.maximum,
            )
        )
        await sock.close()
        return None
    except SessionRefused as exc:
        await sock.send(_error(str(exc), "SESSION_ERROR"))
        await sock.close()
        return None


async def _serve_socket(table: SessionTable, session: Session, sock: _Socket) -> None:
    """Answer the socket's messages until it closes, goes away or asks to close."""
    while True:
        text = await sock.receive()
        if text is None:
            return
        if type(text) is bytes:
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError:
                answer = _error("Invalid JSON: a binary frame that is not UTF-8", "INVALID_JSON")
                if not await sock.send(answer):
                    return
                continue
        answer = await _answer(table, session, text)
        if answer is _CLOSE or not await sock.send(answer):
            return


def _add_mcp_routes(app: FastAPI, table: SessionTable) -> None:
    """Register ``/mcp`` on a WebSocket and over HTTP: JSON-RPC session methods."""

    @app.websocket("/mcp")
    async def mcp_socket(websocket: WebSocket) -> None:
        sock = await _Socket.accept(websocket)
        if sock is None:
            return
        while True:
            text = await sock.receive()
            if text is None:
                return
            payload, why = _loads(text)
            answer = _rpc(None, error=(PARSE_ERROR, why)) if why else _mcp(table, payload, None)
            if not await sock.send(_text(answer)):
                return

    @app.post("/mcp", tags=["budget-envs"])
    async def mcp_http(request: Request) -> JSONResponse:
        """OpenEnv's JSON-RPC session methods: ``openenv/session/create`` (an unattached
        session a WebSocket may attach once; it expires unless attached) and
        ``openenv/session/close`` (unattached sessions only)."""
        payload, why = _loads(await request.body())
        answer = _rpc(None, error=(PARSE_ERROR, why)) if why else _mcp(table, payload, None)
        return JSONResponse(answer)


def _add_http_routes(app: FastAPI, table: SessionTable) -> None:
    """Register ``POST /reset`` (one reset in a session of its own) and ``POST /step``
    (refused: it has no session)."""

    @app.post("/reset", tags=["budget-envs"])
    async def http_reset(request: Request) -> JSONResponse:
        """One reset in a session of its own (counted with the sessions made over HTTP, closed
        when answered): OpenEnv's HTTP routes are stateless, so nothing can step it."""
        body = await request.body()
        data, why = _loads(body) if body.strip() else ({}, None)
        if why is not None:
            return JSONResponse({"detail": why, "code": "INVALID_JSON"}, status_code=422)
        if type(data) is not dict:
            detail = _not_an_object(data).replace("a message", "a reset body")
            return JSONResponse({"detail": detail, "code": "VALIDATION_ERROR"}, status_code=422)
        unknown = set(data) - RESET_FIELDS
        if unknown:
            names = sorted(_short(k, 40) for k in list(unknown)[:8])
            return JSONResponse(
                {"detail": f"reset got unknown field(s) {names}", "code": "VALIDATION_ERROR"},
                status_code=422,
            )
        try:
            session = table.open("http", request)
        except CapacityError as exc:
            return JSONResponse(
                {"detail": str(exc), "code": "CAPACITY_REACHED"},
                status_code=503,
                headers={"Retry-After": "1"},
            )
        try:
            obs = await session.env.reset_async(**data)
        except MessageError as exc:
            return JSONResponse({"detail": str(exc), "code": "VALIDATION_ERROR"}, status_code=422)
        except Exception as exc:
            detail = _cut(str(exc)) or type(exc).__name__
            return JSONResponse({"detail": detail, "code": "EXECUTION_ERROR"}, status_code=400)
        finally:
            await table.release(session)
        return JSONResponse(observation_payload(obs))

    @app.post("/step", tags=["budget-envs"])
    async def http_step() -> JSONResponse:
        """Refused: OpenEnv's HTTP ``/step`` has no session, so it would step a fresh env that
        was never reset. Play on the WebSocket ``/ws``."""
        return JSONResponse(
            {
                "detail": "HTTP /step has no session to step (OpenEnv's HTTP routes are "
                "stateless): open a WebSocket session on /ws, reset, then step",
                "code": "SESSION_ERROR",
            },
            status_code=409,
        )
