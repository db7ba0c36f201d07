"""The web shop as a WSGI application: HTML pages for people, a JSON session API for envs.

Routes (anything else is 404; wrong methods 405; bad JSON or arguments 400; too large 413)::

    GET    /                          start page: a form that opens a session on a task
    POST   /web/new                   form post -> 303 to /web/<sid>
    GET    /web/<sid>                 the session's current page as HTML
    POST   /web/<sid>                 form post (a=<action> or q=<query>) -> 303 to /web/<sid>
    GET    /api/info                  {"seed", "num_products", "version"}
    GET    /api/tasks/<task_id>       the task (goal items and targets) as JSON
    POST   /api/sessions              {"task_id", "scoring"} -> 201 a new session
    GET    /api/sessions/<sid>        the session's state, text view and admissible actions
    PUT    /api/sessions/<sid>        {"state"}: restore a snapshot into the session, or
                                      {"task_id", "scoring", "with_task"}: start over on a task
    POST   /api/sessions/<sid>/step   {"action", "fault"?}: play one action (a stale_page
                                      fault adds "stale_view", the page before the action)
    DELETE /api/sessions/<sid>        end the session

Session ids are 128-bit random tokens; a session is reachable only through its id, and every
request touches only the session it names. Everything a user or a product types is escaped.
"""

from __future__ import annotations

import html
import json
import logging
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from budget_envs.envs.webshop.shop import Block, SessionState, Shop
from budget_envs.errors import ShopHTTPError

__all__ = ["MAX_BODY", "MAX_SESSIONS", "WebShopApp"]

logger = logging.getLogger(__name__)

#: Largest request body accepted, in bytes.
MAX_BODY = 64 * 1024
#: Sessions kept; the least recently used one is dropped beyond this, whoever opened it. A
#: :class:`~budget_envs.envs.webshop.env.WebShopEnv` whose session was dropped opens it again
#: from the state it keeps, so other clients' sessions never stop a live env.
MAX_SESSIONS = 20_000
MAX_FAULT_DELAY_MS = 2000
_SID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
_STATUS = {
    200: "200 OK",
    201: "201 Created",
    204: "204 No Content",
    303: "303 See Other",
    400: "400 Bad Request",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    411: "411 Length Required",
    413: "413 Payload Too Large",
    414: "414 URI Too Long",
    500: "500 Internal Server Error",
    503: "503 Service Unavailable",
}
_SECURITY_HEADERS = [
    ("X-Content-Type-Options", "nosniff"),
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'",
    ),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]
_CSS = (
    "body{font-family:sans-serif;max-width:900px;margin:2em auto;color:#222}"
    "button{margin:2px;padding:4px 10px;border:1px solid #888;border-radius:4px;"
    "background:#f4f4f4;cursor:pointer}button.clicked{background:#ffd54f;font-weight:bold}"
    ".instr{background:#eef;padding:8px}.title{font-size:1.3em;font-weight:bold}"
    "form{display:inline}"
)


class _Session:
    __slots__ = ("lock", "state")

    def __init__(self, state: SessionState) -> None:
        self.lock = threading.Lock()
        self.state = state


class WebShopApp:
    """The WSGI callable serving one :class:`Shop`."""

    def __init__(self, shop: Shop, max_sessions: int = MAX_SESSIONS) -> None:
        self.shop = shop
        self.max_sessions = int(max_sessions)
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- sessions
    def _new_session(self, task_id: Any, scoring: Any) -> tuple[str, _Session]:
        if not isinstance(task_id, str):
            raise ShopHTTPError(400, "task_id must be a string such as 'L1-0000'")
        if not isinstance(scoring, str):
            raise ShopHTTPError(400, "scoring must be a string")
        try:
            state = self.shop.new_state(task_id, scoring)
        except ValueError as exc:
            raise ShopHTTPError(400, str(exc)) from None
        sid = secrets.token_urlsafe(16)
        sess = _Session(state)
        with self._lock:
            self._sessions[sid] = sess
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return sid, sess

    def _get(self, sid: str) -> _Session:
        if not _SID.match(sid):
            raise ShopHTTPError(404, "no such session")
        with self._lock:
            sess = self._sessions.get(sid)
            if sess is None:
                raise ShopHTTPError(404, "no such session")
            self._sessions.move_to_end(sid)
        return sess

    def session_count(self) -> int:
        """Sessions alive now."""
        with self._lock:
            return len(self._sessions)

    # ---------------------------------------------------------------- WSGI
    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        try:
            status, headers, body = self._dispatch(environ)
        except ShopHTTPError as exc:
            status, headers, body = self._error(environ, exc.status, exc.message)
        except Exception:  # a bug: answer 500, never leak a traceback to the client
            logger.exception(
                "web shop request failed: %s %s",
                environ.get("REQUEST_METHOD"),
                environ.get("PATH_INFO"),
            )
            status, headers, body = self._error(environ, 500, "internal error")
        headers = headers + _SECURITY_HEADERS + [("Content-Length", str(len(body)))]
        start_response(_STATUS.get(status, f"{status} Error"), headers)
        return [body]

    @staticmethod
    def _error(environ: dict, status: int, message: str) -> tuple[int, list, bytes]:
        if str(environ.get("PATH_INFO", "")).startswith("/api/"):
            return (
                status,
                [("Content-Type", "application/json")],
                _json_bytes({"error": message, "status": status}),
            )
        page = f"<!doctype html><title>{status}</title><p>{html.escape(message)}</p>"
        return status, [("Content-Type", "text/html; charset=utf-8")], page.encode()

    def _dispatch(self, environ: dict) -> tuple[int, list, bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "") or "/"
        if len(path) > 512:
            raise ShopHTTPError(414, "path too long")
        parts = path.split("/")[1:]
        if parts[:1] == ["api"]:
            return self._api(method, parts[1:], environ)
        if path == "/":
            self._allow(method, "GET")
            return self._html(200, self._start_page())
        if parts[:1] == ["web"] and len(parts) == 2:
            if parts[1] == "new":
                self._allow(method, "POST")
                form = _form(environ)
                sid, _ = self._new_session(
                    form.get("task", "L1-0000"), form.get("scoring", "exact")
                )
                return 303, [("Location", f"/web/{sid}")], b""
            sess = self._get(parts[1])
            if method == "GET":
                with sess.lock:
                    page = self._render(parts[1], sess.state)
                return self._html(200, page)
            self._allow(method, "POST")
            form = _form(environ)
            action = form.get("a")
            if action is None and "q" in form:
                action = f"search[{form['q']}]"
            if action is not None:
                with sess.lock:
                    self.shop.step(sess.state, action)
            return 303, [("Location", f"/web/{parts[1]}")], b""
        raise ShopHTTPError(404, "not found")

    @staticmethod
    def _allow(method: str, *allowed: str) -> None:
        if method not in allowed:
            raise ShopHTTPError(405, f"method {method[:16]} not allowed here")

    # ---------------------------------------------------------------- JSON API
    def _api(self, method: str, parts: list[str], environ: dict) -> tuple[int, list, bytes]:
        if parts == ["info"]:
            self._allow(method, "GET")
            return self._json(200, self.shop.info())
        if len(parts) in (2, 3) and parts[0] == "tasks":  # a held-out id is "test/L1-0000"
            self._allow(method, "GET")
            try:
                task = self.shop.task("/".join(parts[1:]))
            except ValueError as exc:
                raise ShopHTTPError(404, str(exc)) from None
            return self._json(200, task.to_dict())
        if parts == ["sessions"]:
            self._allow(method, "POST")
            data = _json_body(environ)
            sid, sess = self._new_session(data.get("task_id"), data.get("scoring", "exact"))
            with sess.lock:
                out = self._session_payload(sess.state)
            out["sid"] = sid
            out["task"] = self.shop.task(sess.state.task_id).to_dict()
            return self._json(201, out)
        if len(parts) == 2 and parts[0] == "sessions":
            sid = parts[1]
            if method == "GET":
                sess = self._get(sid)
                with sess.lock:
                    return self._json(200, self._session_payload(sess.state))
            if method == "PUT":
                sess = self._get(sid)
                data = _json_body(environ)
                try:
                    if "task_id" in data:  # start the session over on a task (a reset)
                        if not isinstance(data["task_id"], str):
                            raise ValueError("task_id must be a string")
                        state = self.shop.new_state(data["task_id"], data.get("scoring", "exact"))
                    else:
                        state = self.shop.state_from_dict(data.get("state"))
                except (ValueError, TypeError) as exc:
                    raise ShopHTTPError(400, str(exc)) from None
                with sess.lock:
                    sess.state = state
                    out = self._session_payload(state)
                if data.get("with_task"):
                    out["task"] = self.shop.task(state.task_id).to_dict()
                return self._json(200, out)
            if method == "DELETE":
                self._get(sid)
                with self._lock:
                    self._sessions.pop(sid, None)
                return 204, [], b""
            raise ShopHTTPError(405, "use GET, PUT or DELETE on a session")
        if len(parts) == 3 and parts[0] == "sessions" and parts[2] == "step":
            self._allow(method, "POST")
            sess = self._get(parts[1])
            data = _json_body(environ)
            action = data.get("action")
            if not isinstance(action, str):
                raise ShopHTTPError(400, "action must be a string")
            return self._step(sess, action, data.get("fault"))
        raise ShopHTTPError(404, "not found")

    def _step(self, sess: _Session, action: str, fault: Any) -> tuple[int, list, bytes]:
        kind = None
        if fault is not None:
            if not isinstance(fault, dict) or fault.get("kind") not in (
                "http_error",
                "stale_page",
                "slow_response",
            ):
                raise ShopHTTPError(
                    400, "fault must be {'kind': http_error|stale_page|slow_response}"
                )
            kind = fault["kind"]
        if kind == "http_error":
            status = fault.get("status", 503)
            if status not in (500, 503):
                raise ShopHTTPError(400, "an injected http_error has status 500 or 503")
            return self._json(status, {"error": "injected server error", "status": status})
        if kind == "slow_response":
            delay = fault.get("delay_ms", 200)
            if not isinstance(delay, int) or not 0 <= delay <= MAX_FAULT_DELAY_MS:
                raise ShopHTTPError(400, f"delay_ms must be an int in [0, {MAX_FAULT_DELAY_MS}]")
            time.sleep(delay / 1000.0)
        with sess.lock:
            before = self.shop.text_view(sess.state) if kind == "stale_page" else None
            result = self.shop.step(sess.state, action)
            out = self._session_payload(sess.state)
        if before is not None:  # the page as it was before the action (the state moved on)
            out["stale_view"] = before
        out.update(
            invalid=result.invalid,
            feedback=result.feedback,
            reward=result.reward,
            done=result.done,
            purchase=result.purchase,
            score=result.score,
        )
        return self._json(200, out)

    def _session_payload(self, state: SessionState) -> dict[str, Any]:
        view, admissible = self.shop.view_and_admissible(state)
        return {"state": state.to_dict(), "view": view, "admissible": admissible}

    @staticmethod
    def _json(status: int, data: Any) -> tuple[int, list, bytes]:
        return status, [("Content-Type", "application/json")], _json_bytes(data)

    @staticmethod
    def _html(status: int, page: str) -> tuple[int, list, bytes]:
        return status, [("Content-Type", "text/html; charset=utf-8")], page.encode("utf-8")

    # ---------------------------------------------------------------- HTML
    def _start_page(self) -> str:
        body = (
            "<h1>WebShop</h1><p>Open a shopping task (ids look like L1-0000 ... L5-0999).</p>"
            '<form method="post" action="/web/new"><input name="task" value="L1-0000">'
            '<select name="scoring"><option>exact</option><option>webshop</option></select>'
            "<button>Start</button></form>"
        )
        return _page("WebShop", body)

    def _render(self, sid: str, state: SessionState) -> str:
        esc = html.escape
        action_url = f"/web/{esc(sid)}"
        parts: list[str] = []
        for block in self.shop.blocks(state):
            parts.append(self._render_block(block, action_url))
        return _page("WebShop", "\n".join(parts))

    @staticmethod
    def _render_block(block: Block, action_url: str) -> str:
        esc = html.escape
        if block.kind in ("button", "clicked"):
            if block.text == "Search":
                return (
                    f'<form method="post" action="{action_url}">'
                    '<input name="q" size="50" placeholder="search the shop">'
                    "<button>Search</button></form>"
                )
            cls = ' class="clicked"' if block.kind == "clicked" else ""
            return (
                f'<form method="post" action="{action_url}">'
                f'<button name="a" value="{esc(block.action)}"{cls}>{esc(block.text)}</button>'
                "</form>"
            )
        if block.kind == "title":
            return f'<div class="title">{esc(block.text)}</div>'
        if block.kind == "instr":
            return f'<div class="instr">{esc(block.text)}</div>'
        return f"<div>{esc(block.text)}</div>"


def _page(title: str, body: str) -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>"
        f"<body>{body}</body></html>"
    )


def _json_bytes(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode("utf-8")


def _read_body(environ: dict) -> bytes:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise ShopHTTPError(400, "bad Content-Length") from None
    if length < 0:
        raise ShopHTTPError(400, "bad Content-Length")
    if length > MAX_BODY:
        raise ShopHTTPError(413, f"request body over {MAX_BODY} bytes")
    return environ["wsgi.input"].read(length) if length else b""


def _json_body(environ: dict) -> dict[str, Any]:
    raw = _read_body(environ)
    try:
        data = json.loads(raw.decode("utf-8")) if raw else {}
    except (UnicodeDecodeError, ValueError):
        raise ShopHTTPError(400, "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ShopHTTPError(400, "the body must be a JSON object")
    return data


def _form(environ: dict) -> dict[str, str]:
    raw = _read_body(environ)
    try:
        pairs = parse_qs(
            raw.decode("utf-8"), keep_blank_values=True, max_num_fields=20, strict_parsing=False
        )
    except (UnicodeDecodeError, ValueError):
        raise ShopHTTPError(400, "bad form data") from None
    return {k: v[0] for k, v in pairs.items() if v}
