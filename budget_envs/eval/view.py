"""The trajectory viewer: a run's episodes as a self-contained web page (``budgetmix view RUN``).

:func:`write_view` writes ``index.html`` (the page, its script and style inline: no network, no
CDN) and ``data/`` beside it: ``meta.js`` (the run, its Pass@(K,T) surfaces and budget curves),
``episodes.js`` (one compact row per episode, for the list and its filters) and
``turns-NNN.js`` (the turns of :data:`PAGE` episodes each, loaded when one of them is opened).
Data files are scripts that hand their content to the page (``VIEW.meta(...)`` and so on), so
the page works from ``file://`` as well as over HTTP. :func:`serve_view` serves the folder on
loopback.

The page's state lives in the URL's fragment (``#outcome=won&agent=eps&open=12``), so a view
can be linked to, and a test can open one with a headless browser.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from budget_envs.eval.outdir import ensure_dir, folder_errors
from budget_envs.eval.view_page import PAGE_HTML

__all__ = ["OBS_CHARS", "PAGE", "ViewResult", "serve_view", "write_view"]

#: Episodes per turns file.
PAGE = 200
#: An observation is cut to this many characters in the viewer's data.
OBS_CHARS = 4000


class ViewResult:
    """What :func:`write_view` wrote."""

    def __init__(self, folder: Path, episodes: int, files: list[Path]) -> None:
        self.folder = folder
        self.index = folder / "index.html"
        self.episodes = episodes
        self.files = files

    @property
    def size(self) -> int:
        """Bytes of every file written."""
        return sum(p.stat().st_size for p in self.files)


def _script(path: Path, call: str, payload: Any) -> Path:
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    # A JSON text inside <script> must not close it: "</" becomes "<\/" (still the same JSON).
    text = text.replace("</", "<\\/")
    path.write_text(f"{call}({text});\n", encoding="utf-8")
    return path


def _outcome(r: dict[str, Any]) -> str:
    if r.get("error"):
        return "error"
    return "won" if r.get("won") else "lost"


def _observations(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The observations of a transcript: the first one, then the one after each turn."""
    obs: list[str] = []
    seen_first = False
    after_assistant = False
    for m in messages:
        role = m.get("role")
        if role == "assistant":
            after_assistant = True
            continue
        if role == "system":
            continue
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        if not seen_first:
            obs.append(text[:OBS_CHARS])
            seen_first = True
        elif after_assistant:
            obs.append(text[:OBS_CHARS])
            after_assistant = False
    return obs


def _tool_calls(action: str) -> list[dict[str, Any]] | None:
    """The tool calls an action holds (``{"tool_calls": [...]}``), else None."""
    if not action.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(action)
    except ValueError:
        return None
    calls = value.get("tool_calls") if isinstance(value, dict) else None
    if not isinstance(calls, list):
        return None
    out = []
    for c in calls:
        if isinstance(c, dict):
            out.append({"name": str(c.get("name", "")), "arguments": c.get("arguments", {})})
    return out


def _turns(r: dict[str, Any], messages: Sequence[dict[str, Any]] | None) -> dict[str, Any]:
    """One episode's turns for the viewer."""
    actions = list(r.get("actions") or [])
    agree = list(r.get("oracle_agreement") or [])
    costs = list(r.get("costs") or [])
    replies = [t.get("reply") for t in (r.get("agent_turns") or []) if isinstance(t, dict)]
    faults: dict[int, list[dict[str, Any]]] = {}
    for f in r.get("faults") or []:
        if isinstance(f, dict) and f.get("turn") is not None:
            faults.setdefault(int(f["turn"]), []).append(
                {k: f.get(k) for k in ("kind", "action", "executed", "effect", "cell")}
            )
    obs = _observations(messages) if messages else []
    budget = int(r.get("budget") or 0)
    turns = []
    for i, action in enumerate(actions):
        t = i + 1
        turns.append(
            {
                "t": t,
                "action": str(action),
                "left": budget - t,
                "oracle": agree[i] if i < len(agree) else None,
                "cost": costs[i] if i < len(costs) else None,
                "fault": faults.get(t),
                "reply": replies[i] if i < len(replies) else None,
                "calls": _tool_calls(str(action)),
                "obs": obs[t] if t < len(obs) else None,
            }
        )
    off = next((i + 1 for i, a in enumerate(agree) if a is False), None)
    return {"first": obs[0] if obs else None, "turns": turns, "left_oracle": off}


def _charts(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per env and agent: the Pass@(K,T) surface and the budget curve."""
    from budget_envs.eval.report.budget import budget_answers
    from budget_envs.eval.report.surfaces import group_surfaces

    surfaces = group_surfaces(records, n_boot=200, seed=0)
    answers = budget_answers(surfaces, records, n_boot=200, seed=0)
    out = []
    for s, a in zip(surfaces, answers):
        out.append(
            {
                "env": s.env_id,
                "agent": s.label,
                "ks": s.ks,
                "ts": s.ts,
                "surface": [[round(float(x), 4) for x in row] for row in s.mean],
                "pass1": [round(x, 4) for x in a.pass1],
                "low": [round(x, 4) for x in a.low],
                "high": [round(x, 4) for x in a.high],
                "t_keep": a.t_keep,
                "sentence": a.sentence(),
            }
        )
    return out


def write_view(
    records: Sequence[dict[str, Any]],
    out_dir: str | os.PathLike[str],
    *,
    transcripts: Sequence[dict[str, Any]] | None = None,
    title: str = "BudgetMix episodes",
) -> ViewResult:
    """Write the viewer of ``records`` (and, where given, their ``transcripts``, matched by
    ``key``, for the observations) into ``out_dir``; see the module's docstring."""
    out = ensure_dir(out_dir, "write the viewer to")
    with folder_errors("write the viewer to", out):
        return _write(records, out, transcripts or [], title)


def _write(
    records: Sequence[dict[str, Any]],
    out: Path,
    transcripts: Sequence[dict[str, Any]],
    title: str,
) -> ViewResult:
    episodes = [r for r in records if r.get("record", "episode") == "episode"]
    episodes.sort(
        key=lambda r: (
            str(r.get("env_id")),
            str(r.get("agent")),
            str(r.get("task_id")),
            int(r.get("sample") or 0),
            int(r.get("budget") or 0),
            -1 if r.get("fault_turn") is None else int(r["fault_turn"]),
        )
    )
    by_key = {t.get("key"): t.get("messages") for t in transcripts if t.get("key")}
    data = out / "data"
    data.mkdir(exist_ok=True)
    for old in data.glob("turns-*.js"):
        old.unlink()
    envs = sorted({str(r.get("env_id")) for r in episodes})
    agents = sorted({str(r.get("agent")) for r in episodes})
    rows = []
    for i, r in enumerate(episodes):
        rows.append(
            [
                i,
                envs.index(str(r.get("env_id"))),
                agents.index(str(r.get("agent"))),
                str(r.get("task_id")),
                int(r.get("sample") or 0),
                int(r.get("budget") or 0),
                str(r.get("visibility", "hidden")),
                r.get("fault_turn"),
                _outcome(r),
                str(r.get("stop_reason") or ("error" if r.get("error") else "")),
                int(r.get("turns") or 0),
                r.get("first_success_turn"),
            ]
        )
    files = [
        _script(
            data / "meta.js",
            "VIEW.meta",
            {
                "title": title,
                "envs": envs,
                "agents": agents,
                "episodes": len(episodes),
                "page": PAGE,
                "transcripts": bool(by_key),
                "charts": _charts(records),
            },
        ),
        _script(data / "episodes.js", "VIEW.episodes", rows),
    ]
    for start in range(0, len(episodes), PAGE):
        chunk = episodes[start : start + PAGE]
        payload = {
            "start": start,
            "turns": [_turns(r, by_key.get(r.get("key"))) for r in chunk],
            "errors": [str(r.get("error") or "")[:2000] for r in chunk],
        }
        files.append(_script(data / f"turns-{start // PAGE:03d}.js", "VIEW.turns", payload))
    index = out / "index.html"
    index.write_text(PAGE_HTML, encoding="utf-8")
    files.append(index)
    return ViewResult(out, len(episodes), files)


def serve_view(folder: str | os.PathLike[str], port: int = 0, host: str = "127.0.0.1") -> Any:
    """An HTTP server of ``folder`` on ``host`` (loopback by default), started in a thread;
    ``server.server_address`` holds its port, ``server.shutdown()`` stops it."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # library code prints nothing

    handler = functools.partial(Quiet, directory=str(folder))
    server = ThreadingHTTPServer((host, int(port)), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
