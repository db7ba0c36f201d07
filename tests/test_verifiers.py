"""verifiers 0.4.0's v1 ``openenv`` taskset plays ``budgetmix serve``: a short ``vf-eval`` run
from its own virtualenv (``make verifiers-venv``; verifiers pins mcp 2.0.0, which conflicts with
our openenv extra), against a stand-in OpenAI-compatible server that replies with the first
candidate action. Marked ``verifiers``: ``make test-all`` runs it, ``make test`` does not."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("VERIFIERS_VENV", ROOT / ".venv-verifiers"))
ENV_ID = "BudgetMix/TextWorld-CoinCollector-v0"

pytestmark = pytest.mark.verifiers


def _reply_text(body: dict) -> str:
    """The first candidate action of the last observation the model was shown (else 'look')."""
    for message in reversed(body.get("messages") or []):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, str):
            continue
        try:
            payload = json.loads(content)
        except json.JSONDecodeError:
            continue
        info = (payload.get("observation") or {}).get("info") or {}
        options = info.get("candidate_actions") or []
        return options[0] if options else "look"
    return "look"


class _Chat(BaseHTTPRequestHandler):
    """Chat completions, streamed (SSE) or not: verifiers' interception relays a stream."""

    requests: list[dict] = []

    def log_message(self, *args):  # quiet
        pass

    def _json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._json({"object": "list", "data": [{"id": "test-model", "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        type(self).requests.append(body)
        text = _reply_text(body)
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        base = {"id": "cmpl-1", "created": int(time.time()), "model": "test-model"}
        if not body.get("stream"):
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            self._json({**base, "object": "chat.completion", "choices": [choice], "usage": usage})
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        chunk = {**base, "object": "chat.completion.chunk"}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**chunk, "choices": [], "usage": usage},
        ]
        for event in events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def servers():
    chat = ThreadingHTTPServer(("127.0.0.1", 0), _Chat)
    threading.Thread(target=chat.serve_forever, daemon=True).start()
    port = _free_port()
    cmd = [str(Path(sys.executable).parent / "budgetmix"), "serve", ENV_ID]
    cmd += ["--budget", "3..6", "--visibility", "remaining", "--port", str(port)]
    serve = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert serve.poll() is None, "budgetmix serve exited"
            assert time.monotonic() < deadline, "budgetmix serve did not come up"
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{chat.server_address[1]}/v1"
    finally:
        serve.terminate()
        serve.wait(timeout=30)
        chat.shutdown()


def test_vf_eval_plays_budgetmix_serve_through_the_openenv_taskset(servers, tmp_path):
    vf_eval = VENV / "bin" / "vf-eval"
    assert vf_eval.exists(), f"{vf_eval} is missing: run `make verifiers-venv`"
    env_url, chat_url = servers
    config = tmp_path / "eval.toml"
    config.write_text(
        "\n".join(
            [
                'model = "test-model"',
                "push = false",
                "num_rollouts = 2",
                f'output_dir = "{tmp_path / "out"}"',
                "[client]",
                f'base_url = "{chat_url}"',
                "[env.taskset]",
                'id = "openenv"',
                f'base_url = "{env_url}"',
                "resets = [{seed = 0}, {seed = 1, options = {budget = 3}}]",
                "[env.player]",
                "max_turns = 20",
                "[env.player.runtime]",
                'type = "subprocess"',
            ]
        )
    )
    run = subprocess.run(
        [str(vf_eval), "@", str(config), "--no-rich"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (traces_file,) = (tmp_path / "out").glob("*/traces.jsonl")
    traces = [json.loads(line) for line in traces_file.read_text().splitlines()]
    assert len(traces) == 4  # 2 tasks x 2 rollouts
    log = run.stdout + run.stderr
    done = [line for line in log.splitlines() if "rollout done:" in line]
    assert len(done) == 4 and all("stop=" in line for line in done), log[-3000:]
    assert all(t["ok"] and not t["errors"] for t in traces), log[-3000:]
    # every model call saw the env's observation with its budget line and candidate actions
    seen = [_reply_text(body) for body in _Chat.requests]
    assert seen and all(action != "look" for action in seen)
    # The episodes ended at the env's done, within the drawn T (3..6), or T=3 for task 1
    # (its reset's options set the budget); verifiers' own cap (20 turns) never came first.
    ends = [
        (int(line.split("task=")[1].split()[0]), int(line.split("turns=")[1].split()[0]))
        for line in done
    ]
    assert sorted(task for task, _ in ends) == [0, 0, 1, 1], done
    assert all(1 <= turns <= (3 if task == 1 else 6) for task, turns in ends), done
