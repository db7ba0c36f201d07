"""Secure by default, tried as an attacker would, through the real CLI and real servers.

A policy folder someone hands you runs no code; a web page the user visits cannot drive
``budgetmix serve`` or ``budgetmix serve-web`` (foreign ``Origin`` or ``Host``, DNS rebinding);
each attack fails with a clear answer and leaves what a legitimate client does working.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from service_helpers import budgetmix_serve, free_port, served, wait_until
from websockets.sync.client import connect

from budget_envs.hostcheck import HostPolicy

BUDGETMIX = [sys.executable, "-m", "budget_envs.cli"]
ENV_ID = "BudgetMix/ToolUse-v0"


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*BUDGETMIX, *args], capture_output=True, text=True, timeout=600, cwd=cwd)


# ------------------------------------------------------------------ a policy folder runs no code
class _Payload:
    """Unpickling this creates ``marker``: what an ``os.system`` payload would do, visibly."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _malicious_folder(root: Path, marker: Path) -> Path:
    folder = root / "shared-policy"
    where = folder / "checkpoint/learner_group/learner/rl_module/default_policy"
    where.mkdir(parents=True)
    (where / "class_and_ctor_args.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    (folder / "policy.json").write_text(json.dumps({"trainer": "rllib", "visibility": "hidden"}))
    return folder


def _eval_with(folder: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return _run(
        "eval", ENV_ID, "--agent", f"p=policy:{folder}", "--tasks", "1", "--samples", "1",
        "--budgets", "3", "--out", str(out), "--quiet", *extra,
    )  # fmt: skip


def test_a_policy_folder_that_needs_unpickling_is_refused_and_its_payload_never_runs(tmp_path):
    marker = tmp_path / "payload-ran"
    folder = _malicious_folder(tmp_path, marker)
    done = _eval_with(folder, tmp_path / "run")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "module.safetensors" in done.stderr and "--trust-policy" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not marker.exists()
    # The same folder in Python: refused at construction, before any episode.
    from budget_envs.errors import UntrustedPolicy
    from budget_envs.eval.agents import make_agent

    with pytest.raises(UntrustedPolicy, match="trust"):
        make_agent(f"policy:{folder}")
    assert not marker.exists()


def test_the_attack_is_real_when_the_user_trusts_the_folder(tmp_path):
    """--trust-policy is what a user opts into: RLlib's loader unpickles, and the payload runs
    (so the refusal above is what keeps it from running)."""
    marker = tmp_path / "payload-ran"
    folder = _malicious_folder(tmp_path, marker)
    _eval_with(folder, tmp_path / "run", "--trust-policy")
    assert marker.exists()


def test_a_policy_the_suite_trained_loads_from_safetensors_and_plays(tmp_path):
    """`budgetmix train --trainer rllib` writes module.safetensors; eval plays the folder with no
    --trust-policy, and with the RLlib checkpoint's pickles removed it still plays the same."""
    policy = tmp_path / "policy"
    done = _run(
        "train", ENV_ID, "--trainer", "rllib", "--iterations", "1", "--budget", "6",
        "--env-kwargs", '{"level": 1}', "--out", str(policy), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (policy / "module.safetensors").is_file()
    meta = json.loads((policy / "policy.json").read_text())
    assert meta["module"]["class"] == "ActionScoringTorchModule"
    first = _eval_with(policy, tmp_path / "run1", "--budgets", "6", "--save-transcripts")
    assert first.returncode == 0, first.stdout + first.stderr
    pickles = list((policy / "checkpoint").rglob("*.pkl"))
    assert pickles
    for path in pickles:
        path.unlink()
    second = _eval_with(policy, tmp_path / "run2", "--budgets", "6", "--save-transcripts")
    assert second.returncode == 0, second.stdout + second.stderr

    def transcripts(run: Path) -> list:
        return (run / "transcripts.jsonl").read_text().splitlines()

    assert transcripts(tmp_path / "run1") == transcripts(tmp_path / "run2") != []


def test_a_lora_adapter_without_safetensors_is_refused(tmp_path):
    from budget_envs.integrations.lm.agent import load_lm

    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": "smollm2-135m", "peft_type": "LORA"})
    )
    (tmp_path / "adapter_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ValueError, match="adapter_model.safetensors"):
        load_lm(str(tmp_path))


# ------------------------------------------------------------------ no web page drives a server
EVIL = "http://evil.example"


def _handshake(url: str, headers: dict[str, str]) -> int:
    """The status a WebSocket handshake to ``url``/ws gets, with exactly these headers (a raw
    request: a client library would add its own Host)."""
    host, port = url.removeprefix("http://").split(":")
    fields = {
        "Host": f"{host}:{port}",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
        **headers,
    }
    request = "GET /ws HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall((request + "\r\n").encode())
        status_line = sock.makefile("rb").readline().decode()
    return int(status_line.split()[1])


@pytest.fixture(scope="module")
def serve():
    with budgetmix_serve(ENV_ID, "--max-sessions", "8") as srv:
        yield srv


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": EVIL},
        {"Host": "evil.example"},
        {"Host": "evil.example", "Origin": EVIL},
        {"Origin": "null"},
        {"Host": "127.0.0.1.evil.example:8000"},
    ],
    ids=["origin", "host", "rebinding", "null-origin", "lookalike-host"],
)
def test_serve_refuses_foreign_pages_on_websocket_and_http(serve, headers):
    before = requests.get(serve.url + "/sessions", timeout=10).json()
    assert _handshake(serve.url, headers) == 403
    # A CORS "simple" request: text/plain, no preflight; it must make no session.
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    answer = requests.post(
        serve.url + "/mcp", data=body, headers={"Content-Type": "text/plain", **headers}, timeout=30
    )
    assert answer.status_code == 403 and answer.json()["code"] == "FORBIDDEN_ORIGIN"
    reset = requests.post(serve.url + "/reset", data="{}", headers=headers, timeout=30)
    assert reset.status_code == 403
    after = requests.get(serve.url + "/sessions", timeout=10).json()
    assert after["http"]["active"] == before["http"]["active"]
    assert after["active"] == before["active"]


def test_serve_answers_programs_and_loopback_pages(serve):
    assert _handshake(serve.url, {"Host": "localhost"}) == 101
    for headers in ({}, {"Origin": serve.url}, {"Origin": "http://localhost:5173"}):
        with connect(serve.ws_url, additional_headers=headers, open_timeout=30) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            answer = json.loads(ws.recv(timeout=60))
            assert answer["type"] == "observation", answer
    assert requests.get(serve.url + "/health", headers={"Host": "localhost"}, timeout=10).ok


def test_serve_allows_the_hosts_and_origins_it_is_told():
    with budgetmix_serve(
        ENV_ID, "--allow-host", "envs.internal", "--allow-origin", "https://app.example"
    ) as srv:
        ok = requests.get(srv.url + "/health", headers={"Host": "envs.internal:80"}, timeout=10)
        assert ok.status_code == 200
        page = {"Origin": "https://app.example"}
        with connect(srv.ws_url, additional_headers=page, open_timeout=30):
            pass
        other = requests.get(srv.url + "/health", headers={"Host": "evil.example"}, timeout=10)
        assert other.status_code == 403


@pytest.fixture(scope="module")
def shop():
    port = free_port()
    argv = [*BUDGETMIX, "serve-web", "--port", str(port), "--products", "1000"]
    with served(argv, port, "serve-web", health="/") as srv:
        yield srv


def test_serve_web_refuses_a_foreign_host_and_origin(shop):
    assert requests.get(shop.url + "/", timeout=30).status_code == 200
    rebound = requests.get(shop.url + "/", headers={"Host": "evil.example"}, timeout=30)
    assert rebound.status_code == 403 and "loopback" in rebound.text
    # A form on a foreign page posting to the shop (no preflight for a form POST).
    posted = requests.post(
        shop.url + "/web/new",
        data={"task": "L1-0000"},
        headers={"Origin": EVIL},
        timeout=30,
        allow_redirects=False,
    )
    assert posted.status_code == 403 and "Origin" in posted.text
    own = requests.post(
        shop.url + "/web/new",
        data={"task": "L1-0000"},
        headers={"Origin": shop.url},
        timeout=30,
        allow_redirects=False,
    )
    assert own.status_code == 303
    own_page = requests.get(shop.url + "/", headers={"Origin": shop.url}, timeout=30)
    assert own_page.status_code == 200


@pytest.mark.parametrize(
    "host,origin,ok",
    [
        (None, None, True),
        ("localhost:3000", None, True),
        ("[::1]:80", "http://[::1]:80", True),
        ("127.0.0.7", "https://127.0.0.1", True),
        ("LOCALHOST.", None, True),
        ("evil.example", None, False),
        ("localhost.evil.example", None, False),
        ("127.0.0.1", "http://evil.example", False),
        ("127.0.0.1", "null", False),
        ("127.0.0.1", "file://", False),
    ],
)
def test_host_policy(host, origin, ok):
    assert (HostPolicy().refusal(host, origin) is None) is ok
    assert HostPolicy(["*"], ["*"]).refusal(host, origin) is None


# ------------------------------------------------------------------ request ids end with their episode
def _ask(ws, message: dict) -> dict:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=60))


def test_request_ids_of_an_earlier_episode_are_refused_after_a_reset(serve):
    with connect(serve.ws_url, open_timeout=30) as ws:
        first = _ask(ws, {"type": "reset", "data": {"seed": 1, "request_id": "r1"}})
        task_1 = first["data"]["observation"]["info"]["task_id"]
        step = {"type": "step", "data": {"action": "look", "request_id": "s1"}}
        assert _ask(ws, step)["type"] == "observation"
        again = _ask(ws, step)  # a retry inside the episode still replays
        assert again["data"]["observation"]["replayed"]
        second = _ask(ws, {"type": "reset", "data": {"seed": 2, "request_id": "r2"}})
        task_2 = second["data"]["observation"]["info"]["task_id"]
        state = _ask(ws, {"type": "state"})["data"]
        for stale in (step, {"type": "reset", "data": {"seed": 1, "request_id": "r1"}}):
            refused = _ask(ws, stale)
            assert refused["type"] == "error", refused
            assert "earlier episode" in refused["data"]["message"]
        # Nothing moved: the env was not stepped, and the episode is still the second one.
        assert _ask(ws, {"type": "state"})["data"] == state
        retry = _ask(ws, {"type": "reset", "data": {"seed": 2, "request_id": "r2"}})
        assert retry["data"]["observation"]["replayed"]
        assert retry["data"]["observation"]["info"]["task_id"] == task_2
        answer = _ask(ws, {"type": "step", "data": {"action": "look", "request_id": "s2"}})
        assert answer["data"]["observation"]["info"]["task_id"] == task_2
        assert answer["data"]["observation"]["info"]["turn"] == 1
        # Once the episode has stepped, its reset id is spent too.
        late = _ask(ws, {"type": "reset", "data": {"seed": 2, "request_id": "r2"}})
        assert late["type"] == "error" and "earlier episode" in late["data"]["message"]
    assert task_1 is not None


# ------------------------------------------------------------------ a client that never reads
def _raw_ws(port: int) -> socket.socket:
    """A WebSocket connection made by hand that will never read what the server sends."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(
        (
            f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _frame(text: str) -> bytes:
    """One masked text frame (clients must mask; a zero mask keeps the payload as it is)."""
    data = text.encode()
    n = len(data)
    size = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
    return b"\x81" + size + b"\0\0\0\0" + data


def test_a_client_that_never_reads_is_freed_within_the_idle_timeout_plus_a_bound():
    idle, sessions_cap = 2.0, 4
    with budgetmix_serve(
        ENV_ID,
        *("--max-sessions", str(sessions_cap), "--idle-timeout", str(idle), "--budget", "10000"),
        "--full-info",
    ) as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        hogs = []
        for _ in range(sessions_cap):
            sock = _raw_ws(port)
            sock.sendall(_frame(json.dumps({"type": "reset", "data": {"seed": 0}})))
            # Many steps whose answers (several KB each: the whole info) are never read.
            state = _frame(json.dumps({"type": "step", "data": {"action": "x"}}))
            sock.settimeout(5)
            try:
                for _ in range(20000):
                    sock.sendall(state)
            except (TimeoutError, OSError):
                pass  # the server stopped reading: its send buffer to us is full
            hogs.append(sock)
        start = time.monotonic()
        wait_until(
            lambda: requests.get(srv.url + "/sessions", timeout=10).json()["active"] == 0,
            "the non-reading clients' sessions to be freed",
            deadline_s=idle + 10.0 + 30.0,  # idle timeout + send timeout + slack
        )
        freed_after = time.monotonic() - start
        counts = requests.get(srv.url + "/sessions", timeout=10).json()
        assert counts["aborted"] >= 1, counts
        # A new client gets a session at once.
        with connect(srv.ws_url, open_timeout=30) as ws:
            assert _ask(ws, {"type": "reset", "data": {"seed": 0}})["type"] == "observation"
        for sock in hogs:
            sock.close()
    print(f"\nnon-reading clients freed {freed_after:.1f} s after they stopped sending")


# ------------------------------------------------------------------ one TextWorld client stalls no other
def test_a_reset_to_an_ungenerated_game_stalls_no_other_session(tmp_path):
    kwargs = json.dumps({"level": 1, "tasks_per_level": 20, "cache_dir": str(tmp_path)})
    with budgetmix_serve(
        "BudgetMix/TextWorld-v0", "--env-kwargs", kwargs, "--budget", "10000"
    ) as srv:
        with connect(srv.ws_url, open_timeout=60) as bystander:
            first = _ask(bystander, {"type": "reset", "data": {"options": {"task_id": 0}}})
            assert first["type"] == "observation", first
            sent, done = threading.Event(), threading.Event()
            answer: dict = {}

            def reset_other() -> None:
                with connect(srv.ws_url, open_timeout=60) as other:
                    other.send(json.dumps({"type": "reset", "data": {"options": {"task_id": 7}}}))
                    sent.set()
                    answer.update(json.loads(other.recv(timeout=300)))
                done.set()

            thread = threading.Thread(target=reset_other)
            thread.start()
            sent.wait(60)
            steps, worst = 0, 0.0
            while not done.is_set():  # every step here starts while the game is generated
                t0 = time.perf_counter()
                reply = _ask(bystander, {"type": "step", "data": {"action": "look"}})
                worst = max(worst, time.perf_counter() - t0)
                assert reply["type"] == "observation", reply
                steps += 1
            thread.join()
        assert answer["type"] == "observation", answer
        assert answer["data"]["observation"]["info"]["task_id"].endswith("L1-s7") or answer
    print(
        f"\nbystander: {steps} steps while the other session's game was generated, worst {worst:.3f} s"
    )
    # Before, the first step waited for the whole generation and the reset was done by then.
    assert steps >= 5


# ------------------------------------------------------------------ two writers of one folder
@pytest.mark.parametrize("fmt", ["chat", "lm"])
def test_two_export_sft_runs_into_one_folder_never_mix_rows(tmp_path, fmt):
    """The second export finds the folder's writer lock held and is refused with a clear
    message; the first writes its rows, each episode once."""
    out = tmp_path / "sft"
    argv = [
        *BUDGETMIX, "export-sft", ENV_ID, "--tasks", "40", "--out", str(out), "--quiet",
        "--env-kwargs", '{"level": 1}', "--format", fmt,
    ]  # fmt: skip
    from budget_envs.eval.runner.folder import RunLock

    out.mkdir()
    with RunLock(out):  # a live writer holds the folder
        refused = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "in use" in refused.stderr and "written" not in refused.stdout
    assert not (out / "train.jsonl").exists()
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = [p.communicate(timeout=600) + (p.returncode,) for p in (first, second)]
    codes = sorted(code for _, _, code in results)
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 40, [r[:2] for r in results]
    if codes == [0, 2]:  # they overlapped: one was refused
        loser = next(r for r in results if r[2] == 2)
        assert "in use" in loser[1]
    else:  # one ended before the other began: each wrote all 40, the last one's file stands
        assert codes == [0, 0]
    assert not [p.name for p in out.iterdir() if p.name.endswith((".part", ".tmp"))]


# ------------------------------------------------------------------ a run writes only its own files
def _eval(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return _run(
        "eval", ENV_ID, "--agent", "random", "--tasks", "2", "--samples", "1", "--budgets", "3",
        "--out", str(out), "--quiet", *extra,
    )  # fmt: skip


def test_eval_refuses_a_folder_whose_config_json_is_not_its_own(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    theirs = json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 576})
    (model / "config.json").write_text(theirs)
    done = _eval(model)
    assert done.returncode == 2 and "not the config of an eval run" in done.stderr, done.stderr
    assert (model / "config.json").read_text() == theirs
    assert not (model / "records.jsonl").exists()


def test_resume_refuses_records_linked_out_of_the_run(tmp_path):
    run = tmp_path / "run"
    assert _eval(run).returncode == 0
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text("precious\n")
    (run / "records.jsonl").unlink()
    (run / "records.jsonl").symlink_to(elsewhere)
    done = _eval(run, "--resume")
    assert done.returncode == 2 and "outside the run folder" in done.stderr, done.stderr
    assert elsewhere.read_text() == "precious\n"


def test_report_notes_a_run_still_being_written(tmp_path):
    from budget_envs.eval.runner.folder import RunLock

    run = tmp_path / "run"
    assert _eval(run).returncode == 0
    quiet = _run("report", str(run), "--no-figures")
    assert quiet.returncode == 0 and "still being written" not in quiet.stderr
    with RunLock(run):
        busy = _run("report", str(run), "--no-figures")
    assert busy.returncode == 0, busy.stderr
    assert f"still being written (pid {os.getpid()})" in busy.stderr


# ------------------------------------------------------------------ trainer doors validate their input
def test_the_env_manager_validates_actions_seeds_and_task_ids_and_resets_all_or_nothing():
    from budget_envs.integrations.manager import BudgetMixEnvManager

    manager = BudgetMixEnvManager(ENV_ID, n=4, group_n=2, seed=0, level=1)
    try:
        manager.reset()
        turns = [env.unwrapped.turn for env in manager.envs]
        for bad in ("look", b"look", None, ["look"] * 3, ["look", None, "look", "look"]):
            with pytest.raises((TypeError, ValueError)):
                manager.step(bad)
        assert [env.unwrapped.turn for env in manager.envs] == turns  # nothing was played
        before = [env.unwrapped.task_id for env in manager.envs]
        for bad in (
            [{"seed": 1.9}, {}],
            [{"seed": True}, {}],
            [{}, {"task_id": "no-such-task"}],
            [{}, {"task_id": 10**6}],
            [{"taskid": 0}, {}],
        ):
            with pytest.raises((TypeError, ValueError)):
                manager.reset(bad)
            assert [env.unwrapped.task_id for env in manager.envs] == before  # none reset
        manager.reset([{"task_id": 1, "seed": 3}, {"task_id": manager.task_ids[2]}])
        assert [env.unwrapped.task_id for env in manager.envs] == [
            manager.task_ids[1], manager.task_ids[1], manager.task_ids[2], manager.task_ids[2]
        ]  # fmt: skip
    finally:
        manager.close()


def test_the_skyrl_env_takes_task_indices_and_refuses_non_text_actions():
    from budget_envs.integrations.skyrl import BudgetMixTextEnv

    env = BudgetMixTextEnv(ENV_ID, {"budget": 5, "env_kwargs": {"level": 1}}, {"task_id": 2})
    env.init(None)
    assert env.env.unwrapped.task_id == env.env.unwrapped.task_ids[2]
    with pytest.raises(TypeError):
        env.step(None)
    assert env.turns == 0
    with pytest.raises(TypeError):
        BudgetMixTextEnv(ENV_ID, {"budget": 5}, {"seed": 1.9})


# ------------------------------------------------------------------ inputs that were taken silently
@pytest.mark.parametrize("env_id", [ENV_ID, "BudgetMix/WebShop-v0"])
def test_unknown_reset_options_and_absurd_budgets_are_errors(env_id):
    import gymnasium as gym

    env = gym.make(env_id, budget=10, level=1)
    try:
        with pytest.raises(ValueError, match="unknown reset options"):
            env.reset(seed=0, options={"taskid": 0})
        for budget in (10**20, 10_001):
            with pytest.raises(ValueError, match="at most 10,000"):
                env.reset(seed=0, options={"budget": budget})
        _, info = env.reset(seed=0, options={"budget": 10_000, "task_id": 0})
        assert info["budget"]["limit"] == 10_000
    finally:
        env.close()
    with pytest.raises(ValueError, match="at most 10,000"):
        gym.make(env_id, budget=10**20, level=1)
    with pytest.raises(ValueError, match="at most 10,000"):
        gym.make(env_id, budget="5..20000", level=1)


def test_a_forged_snapshot_is_a_mismatch_and_changes_nothing():
    import dataclasses

    import gymnasium as gym

    from budget_envs.errors import SnapshotMismatch

    env = gym.make(ENV_ID, budget=None, level=1)
    base = env.unwrapped
    env.reset(seed=0, options={"task_id": 0})
    env.step(base.oracle_actions()[0])
    good = base.snapshot()
    env.step(base.oracle_actions()[0])
    here = (base.turn, base.cost_to_go(), base.current_info()["state_hash"])
    forged = [
        "not a snapshot",
        {"task_id": good.task_id},
        dataclasses.replace(good, scope=5),
        dataclasses.replace(good, trace=(("step",),)),
        dataclasses.replace(good, trace=(("exec", "rm -rf"),)),
        dataclasses.replace(good, turn=-1),
        dataclasses.replace(good, reset_rng="state"),
        # a well-formed trace that does not replay (the replay path: no native state)
        dataclasses.replace(good, payload=None, trace=good.trace + (("step", '{"x": 1}'),) * 2),
        dataclasses.replace(good, payload="garbage"),
    ]
    for snap in forged:
        with pytest.raises(SnapshotMismatch):
            base.restore(snap)
        assert (base.turn, base.cost_to_go(), base.current_info()["state_hash"]) == here
    assert base.restore(good) == good.observation
    env.close()


# ------------------------------------------------------------------ half-sent requests and floods
def test_serve_drops_half_sent_headers_and_caps_open_connections():
    from budget_envs.service.http_limits import DEFAULT_HEADER_TIMEOUT, max_connections_for

    cap = max_connections_for(8)  # 64 for --max-sessions 8
    with budgetmix_serve(ENV_ID, "--max-sessions", "8") as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        slow = []
        for _ in range(cap + 16):  # half a request head each, never finished
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            slow.append(sock)
        start = time.monotonic()
        closed = 0
        for sock in slow:  # every one is dropped: at once over the cap, or at the timeout
            sock.settimeout(DEFAULT_HEADER_TIMEOUT + 30)
            try:
                data = sock.recv(1024)
            except ConnectionResetError:
                data = b""
            closed += data == b""
            sock.close()
        waited = time.monotonic() - start
        assert closed == len(slow)
        # The server answers a whole request at once afterwards.
        assert requests.get(srv.url + "/health", timeout=10).ok
        assert "Traceback" not in srv.log()
    print(f"\n{len(slow)} half-sent requests all dropped within {waited:.1f} s")


def test_a_hidden_budget_can_be_left_out_of_info():
    import gymnasium as gym

    shown = gym.make(ENV_ID, budget=5, level=1)  # the default: info["budget"] even when hidden
    _, info = shown.reset(seed=0)
    assert info["budget"] == {"limit": 5, "used": 0, "remaining": 5}
    shown.close()
    env = gym.make(ENV_ID, budget=5, level=1, budget_info=False)
    _, info = env.reset(seed=0)
    assert "budget" not in info
    for turn in range(1, 6):
        _, _, terminated, truncated, info = env.step("")
        assert "budget" not in info
    assert truncated and not terminated and info["stop_reason"] == "budget"
    assert env.get_wrapper_attr("limit") == 5 and env.get_wrapper_attr("used") == 5
    env.close()
