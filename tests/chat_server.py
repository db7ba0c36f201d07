"""A deterministic OpenAI-compatible test server, run in its own process (aiohttp).

``python tests/chat_server.py --port 0 --delay 0.1`` prints ``PORT <n>`` once it listens. Each
``POST /v1/chat/completions`` is answered after ``--delay`` seconds (an ``asyncio`` sleep, so
requests overlap as on a batching server) with a reply that depends only on the request's
messages: a native tool call to one of the request's tools, or one of :data:`TEXT_ACTIONS`,
picked by a hash of the messages, after a ``<think>`` block naming that hash (``--think``).
Cross-talk between episodes would show in the records. ``usage`` is counted from the request
(``prompt_tokens`` = characters of the messages // 4) so it too depends on each conversation.

Test hooks: ``GET /_requests`` returns every request body received (``POST /_clear`` forgets
them); ``POST /_script`` queues replies ``{"status", "headers", "body"}`` or
``{"message", "finish_reason"}`` served before the deterministic ones. ``--api-key K`` makes
every route but the hooks answer 401 to another key.

:func:`chat_server` starts one for a test or a benchmark and stops it afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

#: Text actions the server answers with (valid commands of the text games).
TEXT_ACTIONS = ("look", "inventory", "go north", "go south", "go east", "go west")
MODEL = "test-model"


def digest(messages: Any) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:12]


def reply_for(body: dict[str, Any], think: bool) -> dict[str, Any]:
    """The deterministic reply to a request body (a chat completion)."""
    messages = body.get("messages") or []
    h = digest(messages)
    n = int(h, 16)
    tools = body.get("tools") or []
    prompt_tokens = len(json.dumps(messages)) // 4
    if tools:
        name = tools[n % len(tools)]["function"]["name"]
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{h}",
                    "type": "function",
                    "function": {"name": name, "arguments": "{}"},
                }
            ],
        }
        finish, completion_tokens = "tool_calls", 8
    else:
        action = TEXT_ACTIONS[n % len(TEXT_ACTIONS)]
        content = f"<think>digest {h}</think>\n{action}" if think else action
        message = {"role": "assistant", "content": content}
        finish, completion_tokens = "stop", len(content) // 4 + 1
    return {
        "id": f"chatcmpl-{h}",
        "object": "chat.completion",
        "model": body.get("model", MODEL),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def build_app(delay: float, think: bool, api_key: str | None, model: str) -> Any:
    import asyncio

    from aiohttp import web

    requests: list[dict[str, Any]] = []
    script: list[dict[str, Any]] = []

    def authorized(request: web.Request) -> bool:
        return api_key is None or request.headers.get("Authorization") == f"Bearer {api_key}"

    async def models(request: web.Request) -> web.Response:
        if not authorized(request):
            return web.json_response({"error": {"message": "invalid api key"}}, status=401)
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]})

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        requests.append(body)
        if not authorized(request):
            return web.json_response({"error": {"message": "invalid api key"}}, status=401)
        if script:
            item = script.pop(0)
            if "status" in item:
                return web.Response(
                    status=item["status"],
                    headers=item.get("headers") or {},
                    text=json.dumps(item.get("body", {})),
                    content_type="application/json",
                )
            out = reply_for(body, think)
            out["choices"][0]["message"] = {"role": "assistant", **item["message"]}
            out["choices"][0]["finish_reason"] = item.get("finish_reason", "stop")
            return web.json_response(out)
        if delay:
            await asyncio.sleep(delay)
        return web.json_response(reply_for(body, think))

    async def get_requests(request: web.Request) -> web.Response:
        return web.json_response(requests)

    async def clear(request: web.Request) -> web.Response:
        requests.clear()
        return web.json_response({"ok": True})

    async def add_script(request: web.Request) -> web.Response:
        script.extend(await request.json())
        return web.json_response({"queued": len(script)})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.add_routes(
        [
            web.get("/v1/models", models),
            web.post("/v1/chat/completions", completions),
            web.get("/_requests", get_requests),
            web.post("/_clear", clear),
            web.post("/_script", add_script),
        ]
    )
    return app


def main() -> None:
    import asyncio

    from aiohttp import web

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--think", action="store_true")
    p.add_argument("--api-key", default=None)
    p.add_argument("--model", default=MODEL)
    args = p.parse_args()

    async def serve() -> None:
        runner = web.AppRunner(
            build_app(args.delay, args.think, args.api_key, args.model), access_log=None
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=1024)
        await site.start()
        port = runner.addresses[0][1]
        print(f"PORT {port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


class ServerHandle:
    """A running test server: ``url`` (``.../v1``), its request log and its reply script."""

    def __init__(self, proc: subprocess.Popen, port: int) -> None:
        self.proc = proc
        self.port = port
        self.root = f"http://127.0.0.1:{port}"
        self.url = f"{self.root}/v1"

    def requests(self) -> list[dict[str, Any]]:
        import requests

        return requests.get(f"{self.root}/_requests", timeout=10).json()

    def clear(self) -> None:
        import requests

        requests.post(f"{self.root}/_clear", timeout=10).raise_for_status()

    def script(self, items: list[dict[str, Any]]) -> None:
        import requests

        requests.post(f"{self.root}/_script", json=items, timeout=10).raise_for_status()


@contextlib.contextmanager
def chat_server(
    delay: float = 0.0, think: bool = False, api_key: str | None = None
) -> Iterator[ServerHandle]:
    """Start the test server in its own process on a free loopback port; stop it afterwards."""
    cmd = [sys.executable, os.path.abspath(__file__), "--port", "0", "--delay", str(delay)]
    if think:
        cmd.append("--think")
    if api_key:
        cmd += ["--api-key", api_key]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"the test chat server did not start (said {line!r})")
        yield ServerHandle(proc, int(line.split()[1]))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
