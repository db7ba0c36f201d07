"""Start ``budget_envs.service`` servers in subprocesses for the service tests and benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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


@dataclass
class Served:
    """A server running in a subprocess: its base URL, process and log (stdout and stderr)."""

    url: str
    proc: subprocess.Popen
    log_path: Path

    @property
    def ws_url(self) -> str:
        return self.url.replace("http", "ws", 1) + "/ws"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss_kb(self) -> int:
        """The server's resident memory now (``VmRSS``), in KiB."""
        return proc_status_kb(self.proc.pid, "VmRSS")


def proc_status_kb(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` memory field (``VmRSS``, ``VmHWM``...), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


@contextlib.contextmanager
def served(argv: list[str], port: int, what: str, health: str = "/health"):
    """Run ``argv`` (a server listening on ``port``) with its output in a file; yields a
    :class:`Served` once ``health`` answers, and stops it afterwards."""
    with tempfile.TemporaryDirectory(prefix="served-") as tmp:
        log_path = Path(tmp) / "server.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                argv,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        url = f"http://127.0.0.1:{port}"

        def up():
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {log_path.read_text()[-3000:]}")
            try:
                return requests.get(url + health, timeout=1).ok
            except requests.RequestException:
                return False

        try:
            wait_until(up, what, deadline_s=180)
            yield Served(url, proc, log_path)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def budgetmix_serve(env_id: str, *args: str):
    """``budgetmix serve ENV_ID --port <free port> ARGS...`` (the real command) in a subprocess."""
    port = free_port()
    exe = Path(sys.executable).with_name("budgetmix")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "budget_envs.cli"]
    with served([*argv, "serve", env_id, "--port", str(port), *args], port, env_id) as srv:
        yield srv


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
    argv = [sys.executable, "-c", code, json.dumps(kwargs)]
    with served(argv, port, f"{env_id} server") as srv:
        yield srv.url


def sessions(url: str) -> dict:
    return requests.get(url + "/sessions", timeout=5).json()


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def chromium_flags(tmp_path) -> list[str]:
    """Headless Chromium (Debian's ``chromium``) with a fresh profile under ``tmp_path``: no
    sandbox, GPU, network chatter or first-run pages."""
    assert os.path.exists(CHROMIUM), "install chromium: apt-get install -y chromium"
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)
    return [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
    ]
