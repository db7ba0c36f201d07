"""Faults in the machinery itself, each made real: a records file that cannot grow (a child
process under ``RLIMIT_FSIZE``), an eval driver killed by ``SIGKILL``, worker processes killed
mid-run, the web shop server stopped or killed mid-episode, a chat endpoint answering garbage.
Each test checks what the user sees and what the records hold afterwards."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from contract_helpers import TOY_ID

from budget_envs.eval.agents import OracleAgent
from budget_envs.eval.runner import EvalPlan, load_records, plan_jobs, run_plan

TESTS = Path(__file__).resolve().parent
LINUX = sys.platform.startswith("linux")
linux_only = pytest.mark.skipif(not LINUX, reason="reads /proc and uses RLIMIT_FSIZE")


def _strip(records):
    return sorted(
        json.dumps({k: v for k, v in r.items() if k != "wall_time"}, sort_keys=True)
        for r in records
    )


def _whole_lines(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n"), "a torn last line was left behind"
    return [json.loads(line) for line in text.splitlines()]


def _children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry))
    return out


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has exited already


def _wait_gone(pids: set[int], limit: float) -> set[int]:
    deadline = time.monotonic() + limit
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if _running(p)}
        time.sleep(0.05)
    return alive


# ---------------------------------------------------------------------- a full records disk
_CLI_RUN = textwrap.dedent(
    """
    import resource, sys
    sys.path.insert(0, {tests!r})
    limit = int(sys.argv[2])
    if limit:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    import budget_envs
    from contract_helpers import register_toy, TOY_ID
    register_toy()
    from budget_envs.cli import main
    sys.exit(main(["eval", TOY_ID, "--agent", "oracle:epsilon=0.3", "--tasks", "4",
                   "--samples", "5", "--budgets", "12", "--out", sys.argv[1], "--quiet"]
                  + sys.argv[3:]))
    """
)


@linux_only
@pytest.mark.parametrize("workers", ["1", "2"])
def test_full_records_disk_is_one_clear_line_and_resume_finishes(tmp_path, workers):
    script = tmp_path / "run.py"
    script.write_text(_CLI_RUN.format(tests=str(TESTS)))
    run = tmp_path / "run"
    args = [sys.executable, str(script), str(run)]
    # 6000 bytes: config.json fits, the records file fills up after a few records.
    full = subprocess.run(
        args + ["6000", "--workers", workers], capture_output=True, text=True, timeout=300
    )
    lines = [line for line in full.stderr.splitlines() if line.strip()]
    assert full.returncode == 1, full.stderr
    assert len(lines) == 1, full.stderr
    assert "records.jsonl" in lines[0] and "--resume" in lines[0] and "File too large" in lines[0]
    records = run / "records.jsonl"
    kept = _whole_lines(records)
    assert 0 < len(kept) < 20 and records.stat().st_size <= 6000
    again = subprocess.run(
        args + ["0", "--workers", workers, "--resume"], capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    after = _whole_lines(records)
    assert after[: len(kept)] == kept, "records written before the disk filled were lost"
    assert len(after) == 20 and len({r["key"] for r in after}) == 20
    fresh = subprocess.run(
        args[:2] + [str(tmp_path / "fresh"), "0"], capture_output=True, text=True, timeout=300
    )
    assert fresh.returncode == 0, fresh.stderr
    assert _strip(after) == _strip(load_records(tmp_path / "fresh"))


# ---------------------------------------------------------------------- a killed driver
_DRIVER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    import budget_envs
    from contract_helpers import register_toy, TOY_ID
    register_toy()
    from budget_envs.eval.agents import OracleAgent
    from budget_envs.eval.runner import EvalPlan, run_plan

    class SlowOracle(OracleAgent):
        def act(self, observation, info):
            time.sleep(0.05)
            return super().act(observation, info)

    if __name__ == "__main__":
        plan = EvalPlan(env_ids=[TOY_ID], agents={{"slow": SlowOracle(epsilon=0.3, seed=1)}},
                        tasks=6, samples=10, budgets=[12], seed=5)
        run_plan(plan, sys.argv[1], workers=2, chunk=1, start_method=sys.argv[2])
    """
)


@linux_only
def test_workers_exit_when_the_driver_is_killed(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER.format(tests=str(TESTS)))
    run = tmp_path / "run"
    driver = subprocess.Popen([sys.executable, str(script), str(run), "fork"])
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        records = run / "records.jsonl"
        while time.monotonic() < deadline:
            workers = _children(driver.pid)
            if len(workers) >= 2 and records.exists() and records.read_text().count("\n") >= 2:
                break
            time.sleep(0.05)
        assert len(workers) >= 2, "the driver never started its two workers"
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        left = _wait_gone(workers, 5.0)
        assert not left, f"workers {sorted(left)} outlived their driver by more than 5 s"
    finally:
        driver.kill()
        for pid in workers:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


_ORPHAN = textwrap.dedent(
    """
    import multiprocessing, sys, time
    from budget_envs.eval.runner.local import watch_parent

    def child(parent):
        watch_parent(parent, interval=0.1, use_prctl=False)
        time.sleep(600)

    if __name__ == "__main__":
        import os
        proc = multiprocessing.get_context(sys.argv[1]).Process(target=child, args=(os.getpid(),))
        proc.start()
        print(proc.pid, flush=True)
        time.sleep(600)
    """
)


@linux_only
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_polling_watch_alone_ends_an_orphaned_worker(tmp_path, start_method):
    # Without PR_SET_PDEATHSIG (other systems) the getppid() poll must do it alone.
    script = tmp_path / "orphan.py"
    script.write_text(_ORPHAN)
    parent = subprocess.Popen(
        [sys.executable, str(script), start_method], stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    try:
        assert _running(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert not _wait_gone({child}, 5.0), "the orphaned child kept running"
    finally:
        parent.kill()
        if _running(child):
            os.kill(child, signal.SIGKILL)


_WATCHED = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    from budget_envs.eval.runner.local import watch_parent

    def child(parent, use_prctl):
        # The getppid() poll first looks after an hour: only the kernel's signal can act here.
        watch_parent(parent, interval=3600, use_prctl=use_prctl)
        print(os.getpid(), flush=True)  # the watch is in place
        time.sleep(600)

    if __name__ == "__main__":
        context = multiprocessing.get_context(sys.argv[1])
        proc = context.Process(target=child, args=(os.getpid(), sys.argv[2] == "1"))
        proc.start()
        time.sleep(600)
    """
)

_SUBREAPER = textwrap.dedent(
    """
    import ctypes, json, os, signal, subprocess, sys, time

    # Orphans are re-parented to this process (PR_SET_CHILD_SUBREAPER), so it can wait for the
    # watched child once the child's parent is gone and read how the child ended.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    script, start_method, use_prctl = sys.argv[1:4]
    parent = subprocess.Popen(
        [sys.executable, script, start_method, use_prctl], stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()

    def poll():
        # (pid, status); (0, 0) while it runs. The orphan is re-parented to this process as its
        # parent exits; until the kernel has done so, waitpid says it is not our child.
        give_up = time.monotonic() + 10
        while True:
            try:
                return os.waitpid(child, os.WNOHANG)
            except ChildProcessError:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.01)

    # A parent-death signal is sent while the parent exits, before wait() returns.
    first = poll()
    out = {"alive_after_parent": first == (0, 0)}
    if use_prctl == "0":
        os.kill(child, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        pid, status = first if first[0] else poll()
        first = (0, 0)
        if pid:
            break
        if time.monotonic() > deadline:  # never signalled: end it so the test can report
            os.kill(child, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.02)
    out["signal"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    out["exit"] = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    print(json.dumps(out), flush=True)
    """
)


def _orphan_end(tmp_path, start_method, use_prctl):
    """How a worker watching its parent with the poll out of play ends once the parent is
    killed: ``{"alive_after_parent", "signal", "exit"}``."""
    script = tmp_path / "watched.py"
    script.write_text(_WATCHED)
    harness = tmp_path / "subreaper.py"
    harness.write_text(_SUBREAPER)
    run = subprocess.run(
        [sys.executable, str(harness), str(script), start_method, "1" if use_prctl else "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@linux_only
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_the_kernel_parent_death_signal_alone_ends_an_orphaned_worker(tmp_path, start_method):
    # PR_SET_PDEATHSIG on its own: the worker dies of the kernel's SIGTERM, not of the poll's
    # exit status (ORPHAN_EXIT), which could not have run yet.
    end = _orphan_end(tmp_path, start_method, use_prctl=True)
    assert end["signal"] == signal.SIGTERM and end["exit"] is None, end


@linux_only
def test_without_the_death_signal_and_the_poll_an_orphan_lives_on(tmp_path):
    # The control for the test above: the same worker without prctl outlives its parent, so
    # the SIGTERM there came from PR_SET_PDEATHSIG.
    end = _orphan_end(tmp_path, "fork", use_prctl=False)
    assert end["alive_after_parent"] and end["signal"] == signal.SIGKILL, end


# ---------------------------------------------------------------------- killed workers
class _KillsItsWorker(OracleAgent):
    """Kills the process it runs in on task 1 while ``flag`` exists (once, if ``once``)."""

    def __init__(self, flag: str, once: bool, **kw):
        super().__init__(**kw)
        self.flag, self.once = flag, once

    def reset(self, *, env_id, observation, info, seed):
        super().reset(env_id=env_id, observation=observation, info=info, seed=seed)
        if info["task_id"] == "toy-001" and os.path.exists(self.flag):
            if self.once:
                os.unlink(self.flag)
            os.kill(os.getpid(), signal.SIGKILL)


def _plan(agent):
    return EvalPlan(env_ids=[TOY_ID], agents={"a": agent}, tasks=3, samples=4, budgets=[12])


@linux_only
def test_a_killed_worker_is_replaced_and_nothing_is_lost(tmp_path):
    flag = tmp_path / "kill-once"
    flag.write_text("")
    agent = _KillsItsWorker(str(flag), once=True, epsilon=0.3, seed=2)
    result = run_plan(_plan(agent), tmp_path / "run", workers=2, chunk=2)
    assert not flag.exists(), "the agent never killed its worker"
    recs = load_records(tmp_path / "run")
    assert result.errors == 0 and len(recs) == len(plan_jobs(_plan(agent)))
    run_plan(_plan(OracleAgent(epsilon=0.3, seed=2)), tmp_path / "plain")
    assert _strip(recs) == _strip(load_records(tmp_path / "plain"))


@linux_only
def test_workers_that_keep_dying_leave_error_records_and_resume_finishes(tmp_path):
    flag = tmp_path / "kill-always"
    flag.write_text("")
    agent = _KillsItsWorker(str(flag), once=False, epsilon=0.3, seed=2)
    result = run_plan(_plan(agent), tmp_path / "run", workers=2, chunk=2)
    recs = load_records(tmp_path / "run")
    failed = [r for r in recs if r["error"]]
    assert result.errors == len(failed) > 0
    assert all(r["error"].startswith("WorkerDied") and "--resume" in r["error"] for r in failed)
    assert {r["task_id"] for r in failed} >= {"toy-001"}
    good = [r for r in recs if not r["error"]]
    flag.unlink()
    again = run_plan(_plan(agent), tmp_path / "run", workers=2, resume=True)
    assert again.skipped == len(good) and again.errors == 0
    final = [r for r in load_records(tmp_path / "run") if not r["error"]]
    assert final[: len(good)] == good
    assert len({r["key"] for r in final}) == len(final) == len(plan_jobs(_plan(agent)))


# ---------------------------------------------------------------------- the web shop server
def _shop(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make("BudgetMix/WebShop-v0", level=3, **kw)


def _oracle_episode(env, stop_at=None):
    unwrapped = env.unwrapped
    obs, info = env.reset(seed=1, options={"task_id": 0})
    seen = [obs]
    for turn in range(30):
        if turn == stop_at:
            unwrapped.server.stop()  # the real server: listening socket and connections closed
        best = unwrapped.oracle_actions()
        obs, reward, terminated, truncated, info = env.step(best[0])
        seen.append((obs, reward, terminated, info["score"]))
        if terminated or truncated:
            break
    return seen


def test_own_shop_server_stopped_mid_episode_is_restarted_with_the_episode_intact():
    plain, hit = _shop(), _shop()
    try:
        first = _oracle_episode(plain)
        old = hit.unwrapped.base_url
        second = _oracle_episode(hit, stop_at=2)
        assert hit.unwrapped.base_url != old and hit.unwrapped.server.alive
        assert len(first) > 3 and first == second
    finally:
        plain.close()
        hit.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "budget_envs.cli", "serve-web", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("serve-web did not come up")


class _KillsTheServer(OracleAgent):
    """Follows the oracle; on the 3rd turn of the 2nd episode it SIGKILLs the shop server."""

    def __init__(self, pid: int, **kw):
        super().__init__(**kw)
        self.pid, self.episodes, self.turn = pid, 0, 0

    def reset(self, **kw):
        super().reset(**kw)
        self.episodes += 1
        self.turn = 0

    def act(self, observation, info):
        self.turn += 1
        if self.episodes == 2 and self.turn == 3 and _running(self.pid):
            os.kill(self.pid, signal.SIGKILL)
            assert not _wait_gone({self.pid}, 10.0)
        return super().act(observation, info)


def test_external_shop_server_killed_mid_episode_is_an_error_record_and_resume_finishes(tmp_path):
    port = _free_port()
    server = _serve(port)
    url = f"http://127.0.0.1:{port}"
    plan = EvalPlan(
        env_ids=["BudgetMix/WebShop-v0"],
        agents={"o": _KillsTheServer(server.pid, seed=0)},
        tasks=[0, 1, 2],
        samples=1,
        env_kwargs={"base_url": url, "level": 3, "timeout": 5.0},
    )
    try:
        result = run_plan(plan, tmp_path / "run")
        assert server.poll() is not None, "the server was not killed"
        recs = _whole_lines(tmp_path / "run" / "records.jsonl")
        assert [bool(r["error"]) for r in recs] == [False, True, True]
        assert result.errors == 2
        assert all(
            r["error"].startswith("WebShopServerError") and url in r["error"] for r in recs[1:]
        )
        assert "\n" not in recs[1]["error"] and "did not answer" in recs[1]["error"]
        server = _serve(port)  # the operator starts it again
        again = run_plan(plan, tmp_path / "run", resume=True)
        assert again.skipped == 1 and again.ran == 2 and again.errors == 0
        final = [r for r in load_records(tmp_path / "run") if not r["error"]]
        assert final[0] == recs[0] and len({r["key"] for r in final}) == 3
        assert all(r["won"] for r in final)
    finally:
        server.kill()
        server.wait()


# ---------------------------------------------------------------------- a chat endpoint's garbage
class _GarbageEndpoint:
    """A real chat-completions endpoint on 127.0.0.1 answering ``body`` to every request
    (``body`` can be swapped while it runs)."""

    def __init__(self, body: bytes):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.body = body
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # the chat agent's preflight: GET /models lists the model
                body = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(endpoint.body)))
                self.end_headers()
                self.wfile.write(endpoint.body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _reply(content, **extra) -> bytes:
    return json.dumps(
        {"choices": [{"message": {"role": "assistant", **content}}], **extra}
    ).encode()


GARBAGE = {
    "not-json": b"<html>502 Bad Gateway</html>",
    "empty": b"",
    "bytes": b"\xff\xfe\x00garbage",
    "a-list": b"[1, 2, 3]",
    "choices-text": b'{"choices": "many"}',
    "no-choices": b'{"choices": []}',
    "message-text": b'{"choices": [{"message": "look"}]}',
    "content-number": _reply({"content": 42}),
    "tool-calls-text": _reply({"content": None, "tool_calls": "call it"}),
    "tool-calls-numbers": _reply({"content": None, "tool_calls": [1, 2]}),
}
#: Odd but usable replies: the episode plays on (the env answers a bad action as a turn).
USABLE = {
    "usage-text": _reply({"content": "look"}, usage={"prompt_tokens": "lots"}),
    "huge-content": _reply({"content": "x" * 2_000_000}),
    "bad-arguments": _reply(
        {"content": None, "tool_calls": [{"id": "1", "function": {"name": 7, "arguments": "{"}}]}
    ),
}


@pytest.mark.parametrize("kind", sorted(GARBAGE) + sorted(USABLE))
def test_chat_endpoint_answering_garbage_is_an_error_record_and_resume_finishes(tmp_path, kind):
    from budget_envs.eval.agents import ChatAgent

    garbage = kind in GARBAGE
    endpoint = _GarbageEndpoint(GARBAGE[kind] if garbage else USABLE[kind])
    try:
        agent = ChatAgent(base_url=endpoint.url, model="m", retries=1, backoff=0.0, timeout=5)
        plan = EvalPlan(env_ids=[TOY_ID], agents={"chat": agent}, tasks=2, samples=1, budgets=[4])
        result = run_plan(plan, tmp_path / "run")
        recs = _whole_lines(tmp_path / "run" / "records.jsonl")
        assert len(recs) == 2
        if garbage:
            assert result.errors == 2
            for r in recs:
                assert r["error"].startswith("AgentError: ") and "\n" not in r["error"]
                assert "malformed" in r["error"] or "unparseable" in r["error"]
        else:
            assert result.errors == 0 and all(r["turns"] == 4 for r in recs)
        endpoint.body = _reply({"content": "look"})  # the endpoint recovers
        again = run_plan(plan, tmp_path / "run", resume=True)
        assert again.ran == (2 if garbage else 0) and again.errors == 0
        final = [r for r in load_records(tmp_path / "run") if not r["error"]]
        assert len({r["key"] for r in final}) == 2
    finally:
        endpoint.close()
