"""Hostile clients against a real ``budgetmix serve`` (a subprocess on a free loopback port).

Each attack of the red-team pass ends in a clear error; a bystander session (a ``RemoteEnv``
stepped beside the in-process env) keeps stepping with answers equal to the in-process env's;
and the server's memory stays bounded: its resident memory (``VmRSS``, and the peak ``VmHWM``,
from ``/proc/<pid>/status``) grows by less than a generous limit over the attack. The figures
are printed (``-s`` shows them). No timings are asserted.
"""

from __future__ import annotations

import json
import socket
import threading

import numpy as np
import pytest

pytest.importorskip(
    "openenv.core.env_server", reason='needs the openenv extra: pip install -e ".[openenv]"'
)

from contract_helpers import make, policy_action  # noqa: E402
from service_helpers import budgetmix_serve, proc_status_kb  # noqa: E402

from budget_envs.service import RemoteEnv  # noqa: E402

ENV_ID = "BudgetMix/ToolUse-v0"
BUDGET = 1000  # long episodes: attacks step well past a usual budget
MAX_SESSIONS = 96
#: Generous bound on the server's memory growth over one attack, in KiB.
GROWTH_LIMIT_KB = 64 * 1024


def _json(value):
    return json.loads(json.dumps(value))


@pytest.fixture(scope="module")
def server():
    """The server the attacks run against (96 sessions)."""
    with budgetmix_serve(
        ENV_ID,
        *("--budget", str(BUDGET), "--max-sessions", str(MAX_SESSIONS), "--idle-timeout", "300"),
    ) as srv:
        yield srv


class Bystander:
    """A session of an honest client, stepped beside the in-process env: every answer equal."""

    def __init__(self, url: str, seed: int = 0) -> None:
        self.remote = RemoteEnv(url, message_timeout_s=300)
        self.local = make(ENV_ID, budget=BUDGET)
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.turns = 0
        self._reset()

    def _reset(self) -> None:
        a = self.local.reset(seed=self.seed)
        b = self.remote.reset(seed=self.seed)
        assert b[0] == a[0] and b[1] == _json(a[1])
        self.info = a[1]

    def check(self, turns: int = 3) -> None:
        for _ in range(turns):
            action = policy_action(self.local, self.info, self.rng)
            a = self.local.step(action)
            b = self.remote.step(action)
            assert b[:4] == (a[0], float(a[1]), a[2], a[3]), (self.turns, action)
            assert b[4] == _json(a[4]), self.turns
            self.info = a[4]
            self.turns += 1
            if a[2] or a[3]:
                self.seed += 1
                self._reset()

    def close(self) -> None:
        self.remote.close()
        self.local.close()


@pytest.fixture
def bystander(server):
    by = Bystander(server.url)
    by.check()
    yield by
    by.check()  # still stepping right after the attack
    by.close()


class Memory:
    """The server's resident memory and its peak, before and after an attack (KiB)."""

    def __init__(self, srv, what: str) -> None:
        self.srv, self.what = srv, what
        self.rss0 = srv.rss_kb()
        self.hwm0 = proc_status_kb(srv.proc.pid, "VmHWM")

    def check(self, limit_kb: int = GROWTH_LIMIT_KB) -> None:
        rss1 = self.srv.rss_kb()
        hwm1 = proc_status_kb(self.srv.proc.pid, "VmHWM")
        print(
            f"\n[memory] {self.what}: VmRSS {self.rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB "
            f"({(rss1 - self.rss0) / 1024:+.1f}), VmHWM {self.hwm0 / 1024:.1f} -> "
            f"{hwm1 / 1024:.1f} MiB ({(hwm1 - self.hwm0) / 1024:+.1f})"
        )
        assert rss1 - self.rss0 < limit_kb, (self.rss0, rss1)
        assert hwm1 - self.hwm0 < limit_kb, (self.hwm0, hwm1)


# ------------------------------------------------------------------------- sizes and memory
def _post_chunked(port: int, path: str, total: int, chunk: int = 1 << 20):
    """POST ``total`` bytes to ``path`` in chunks (no Content-Length) until the server answers
    or stops reading; returns (the server's answer, bytes sent)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(60)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    got = bytearray()
    answered = threading.Event()

    def read():
        try:
            while data := sock.recv(65536):
                got.extend(data)
        except OSError:
            pass
        answered.set()

    reader = threading.Thread(target=read, daemon=True)
    sent = 0
    frame = f"{chunk:x}\r\n".encode() + b"7" * chunk + b"\r\n"
    try:
        sock.sendall(head.encode())
        reader.start()
        while sent < total and not answered.is_set():
            sock.sendall(frame)
            sent += chunk
        if sent >= total:
            sock.sendall(b"0\r\n\r\n")
    except OSError:  # the server closed the connection: it read no more
        pass
    answered.wait(120)
    sock.close()
    return bytes(got).decode(errors="replace"), sent


def test_chunked_body_is_capped_on_bytes_read(server, bystander):
    memory = Memory(server, "200 MB chunked POST /reset")
    port = int(server.url.rsplit(":", 1)[1])
    answer, sent = _post_chunked(port, "/reset", 200 << 20)
    assert answer.startswith("HTTP/1.1 413"), answer[:300]
    body = json.loads(answer.split("\r\n\r\n", 1)[1])
    assert "over the limit of 1048576" in body["detail"]
    assert sent < 200 << 20  # the server stopped reading
    print(f"\n[chunked] sent {sent / 2**20:.0f} MiB before the server's 413")
    memory.check()
