"""Start ``budget_envs.service`` servers in subprocesses for the service tests and benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

TESTS = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, what: str, deadline_s: float = 60.0, every_s: float = 0.05):
    """Poll ``check()`` until it returns a truthy value (a wait, not a timed assertion)."""
    end = time.monotonic() + deadline_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(every_s)


@contextlib.contextmanager
def serving(env_id: str, **kwargs):
    """Serve ``env_id`` (``create_app`` kwargs as JSON) in a subprocess; yields the base URL."""
    port = free_port()
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "import budget_envs\n"
        "from contract_helpers import register_toy\n"
        "register_toy()\n"
        "from budget_envs.service.server import serve\n"
        f"serve({env_id!r}, port={port}, **json.loads(sys.argv[1]))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(kwargs)],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"

    def up():
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read()[-3000:]}")
        try:
            return requests.get(url + "/health", timeout=1).ok
        except requests.RequestException:
            return False

    try:
        wait_until(up, f"{env_id} server", deadline_s=180)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sessions(url: str) -> dict:
    return requests.get(url + "/sessions", timeout=5).json()
