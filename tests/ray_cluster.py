"""A real two-node Ray cluster on this machine, started and stopped as a user would, and only it.

``ray start --head`` on 127.0.0.1 with a temp dir and ports of its own, a second node joining it
with ``ray start --address``; on the way out the processes of this cluster alone are stopped
(every process whose command line names the cluster's temp dir, and their descendants):
``ray stop`` would stop every Ray of the machine, another job's included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray() -> str:
    exe = Path(sys.executable).with_name("ray")
    if not exe.exists():
        raise AssertionError(f"no ray command beside {sys.executable}: install the ray extra")
    return str(exe)


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process this user can read."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        out[int(entry)] = (ppid, cmd)
    return out


def cluster_pids(temp_dir: str) -> set[int]:
    """Processes of the cluster whose temp dir is ``temp_dir``: those naming it, and their
    descendants (Ray's agents and workers, which do not name it)."""
    procs = _processes()
    mine = {pid for pid, (_, cmd) in procs.items() if temp_dir in cmd}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in mine and pid not in mine}
        mine |= more
        grew = bool(more)
    mine.discard(os.getpid())
    return mine


def stop_cluster(temp_dir: str, grace_s: float = 20.0) -> None:
    """SIGTERM to this cluster's processes, SIGKILL to those left after ``grace_s``."""
    pids = cluster_pids(temp_dir)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        end = time.monotonic() + grace_s
        while time.monotonic() < end:
            pids = {p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)}
            if not pids:
                return
            time.sleep(0.2)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def _run(args: list[str], env: dict) -> None:
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180, check=False)
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(args[:3])} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )


@contextlib.contextmanager
def two_node_cluster(cpus_per_node: int = 1):
    """Yields ``(address, temp_dir)`` of a head node and one more, on 127.0.0.1."""
    temp_dir = tempfile.mkdtemp(prefix="ray-two-")
    port = _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--node-ip-address=127.0.0.1", f"--num-cpus={cpus_per_node}", "--disable-usage-stats"]
    try:
        _run(
            [
                _ray(),
                "start",
                "--head",
                f"--port={port}",
                f"--temp-dir={temp_dir}",
                "--include-dashboard=false",
                f"--dashboard-port={_free_port()}",
                f"--dashboard-agent-listen-port={_free_port()}",
                *common,
            ],
            env,
        )
        address = f"127.0.0.1:{port}"
        _run(
            [
                _ray(),
                "start",
                f"--address={address}",
                f"--dashboard-agent-listen-port={_free_port()}",
                *common,
            ],
            env,
        )
        yield address, temp_dir
    finally:
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
