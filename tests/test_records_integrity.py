"""A run folder under attack loses nothing: two writers, another plan on ``--resume``, bad record
lines, a full or read-only disk, a file in the way, and ``compare`` asked for an agent a run does
not have. Through the real ``budgetmix`` console script, in subprocesses.

Disks: where the tests may mount (root, CAP_SYS_ADMIN) the full and read-only file systems are
real: a small tmpfs mounted by the test, filled up or remounted read-only, unmounted afterwards.
Elsewhere the same failures come from a per-file size limit on the eval process
(``RLIMIT_FSIZE``: the writes fail with EFBIG instead of ENOSPC) and from ``chmod a-w`` (EACCES
instead of EROFS).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from budget_envs.errors import OutDirError, RunInUse, UnknownAgent
from budget_envs.eval.report import compare_runs
from budget_envs.eval.runner import load_records
from budget_envs.eval.runner.folder import RunLock, plan_differences, write_config
from budget_envs.eval.runner.records import scan_records

BUDGETMIX = str(Path(sys.executable).with_name("budgetmix"))
ENV = "BudgetMix/ToolUse-v0"
PLAN = ["--agent", "random", "--agent", "oracle", "--tasks", "4", "--samples", "5"]
EPISODES = 40  # 4 tasks x 5 samples x 2 agents


def _capable(bit: int) -> bool:
    """Whether this process has capability ``bit`` (``CapEff`` of /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False  # pragma: no cover - no capabilities on this system


#: Mount a small tmpfs (CAP_SYS_ADMIN, i.e. root): real full and read-only file systems.
#: Without it: RLIMIT_FSIZE and chmod a-w (a process without CAP_DAC_OVERRIDE obeys it).
MOUNTS = _capable(21)


def budgetmix(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BUDGETMIX, *map(str, args)], capture_output=True, text=True, timeout=300, **kwargs
    )


def eval_args(out, *extra) -> list[str]:
    return ["eval", ENV, *PLAN, "--out", str(out), "--quiet", *extra]


def one_error_line(proc: subprocess.CompletedProcess, command: str) -> str:
    """The refusal: a non-zero exit and one line ``budgetmix COMMAND: ...``, no traceback."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"budgetmix {command}: "), lines[0]
    return lines[0]


def keys(run: Path) -> list[str]:
    return [r["key"] for r in load_records(run)]


def report_counts(run: Path) -> tuple[int, int]:
    """(episodes, single-step probes) as ``budgetmix report`` counts them."""
    proc = budgetmix("report", run, "--no-figures", "--out", run.parent / f"{run.name}_report")
    assert proc.returncode == 0, proc.stderr
    found = re.search(r"(\d+) episodes, (\d+) single-step probes", proc.stdout)
    assert found, proc.stdout
    return int(found[1]), int(found[2])


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run of the plan (copied by the tests that change it)."""
    run = tmp_path_factory.mktemp("finished") / "run"
    proc = budgetmix(*eval_args(run))
    assert proc.returncode == 0, proc.stderr
    assert len(set(keys(run))) == EPISODES
    return run


def copy_of(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest)
    return dest


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    """A tmpfs of ``size`` mounted at ``path`` for the block (needs CAP_SYS_ADMIN)."""
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def read_only(path: Path) -> None:
    """Make the file system at ``path`` read-only (remount the tmpfs; else chmod a-w)."""
    if MOUNTS:
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        return
    for p in sorted(path.rglob("*"), reverse=True) + [path]:
        p.chmod(p.stat().st_mode & ~0o222)


# ---------------------------------------------------------------------- one writer per folder
def test_two_evals_started_at_once_one_writes_the_other_is_refused(tmp_path):
    run = tmp_path / "run"
    procs = [
        subprocess.Popen(
            [BUDGETMIX, *eval_args(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [(p.communicate(timeout=300), p.returncode) for p in procs]
    codes = sorted(rc for _, rc in outs)
    assert codes == [0, 2], outs
    ((_, err), _) = next(o for o in outs if o[1] == 2)
    (line,) = [line for line in err.splitlines() if line.strip()]
    # Refused by the lock while the other writes, or (when the other finished first) because
    # the folder holds its records; either way nothing is written twice.
    assert line.startswith("budgetmix eval: ") and str(run) in line
    assert "is in use" in line or "already holds records" in line, line
    assert sorted(keys(run)) == sorted(set(keys(run))) and len(keys(run)) == EPISODES
    assert report_counts(run) == (EPISODES, 0)


def _wait_stopped(pid: int, timeout: float = 10.0) -> None:
    """Until ``pid`` and its children are stopped (state T in /proc), or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for p in [pid, *_children(pid)]:
            with contextlib.suppress(OSError):
                states.append(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0])
        if all(st in ("T", "t", "Z", "X") for st in states):
            return
        time.sleep(0.005)


def test_second_writer_is_refused_naming_the_folder_and_the_holder_pid(tmp_path):
    run = tmp_path / "run"
    first = subprocess.Popen(
        [BUDGETMIX, *eval_args(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    records = run / "records.jsonl"
    while first.poll() is None and not (records.exists() and records.read_bytes().count(b"\n")):
        time.sleep(0.005)
    os.killpg(first.pid, signal.SIGSTOP)  # pause the first writer mid-run, holding its lock
    _wait_stopped(first.pid)  # a stop is delivered late on a loaded machine: a write can land
    try:
        written = records.read_bytes().count(b"\n")
        assert first.poll() is None and 0 < written < EPISODES, "the first eval was not mid-run"
        second = budgetmix(*eval_args(run))
        line = one_error_line(second, "eval")
        assert f"{run} is in use" in line and f"pid {first.pid}" in line, line
        resumed = budgetmix(*eval_args(run, "--resume"))  # --resume is a writer too
        assert f"pid {first.pid}" in one_error_line(resumed, "eval")
        assert records.read_bytes().count(b"\n") == written, "a refused writer wrote"
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert f"{EPISODES} records written" in out
    assert sorted(keys(run)) == sorted(set(keys(run))) and len(keys(run)) == EPISODES
    assert report_counts(run) == (EPISODES, 0)


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def test_a_killed_writers_lock_does_not_block_even_while_its_workers_linger(tmp_path):
    run = tmp_path / "run"
    first = subprocess.Popen(
        [BUDGETMIX, *eval_args(run, "--workers", "2")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    records = run / "records.jsonl"
    try:
        while first.poll() is None and not (
            records.exists()
            and records.read_bytes().count(b"\n")
            and len(_children(first.pid)) >= 2
        ):
            time.sleep(0.005)
        workers = _children(first.pid)
        for pid in workers:  # forked workers that outlive their driver, frozen
            os.kill(pid, signal.SIGSTOP)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        assert len(workers) >= 2 and first.returncode == -signal.SIGKILL
        assert (run / ".lock").read_text().split() == [str(first.pid)]  # a stale lock file
        done = len(load_records(run))
        assert 0 < done < EPISODES, "the first eval was not mid-run"
        again = budgetmix(*eval_args(run, "--resume"))
        assert again.returncode == 0, again.stderr
        assert f"({done} already done" in again.stdout
    finally:
        # the group may be empty by now (the frozen workers can have exited before the freeze)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
    assert sorted(keys(run)) == sorted(set(keys(run))) and len(keys(run)) == EPISODES


def test_lock_in_process_names_the_holder_and_frees_on_release(tmp_path):
    with RunLock(tmp_path):
        with pytest.raises(RunInUse) as info:
            RunLock(tmp_path).acquire()
        assert info.value.pid == os.getpid() and info.value.path == str(tmp_path)
    with RunLock(tmp_path):  # released: free again
        pass


# ---------------------------------------------------------------------- --resume and the plan
@pytest.mark.parametrize(
    ("change", "says"),
    [
        (["--samples", "3"], "samples: 5 recorded, 3 given"),
        (
            ["--agent", "eps=oracle:epsilon=0.3"],
            'agents: {"oracle": "oracle", "random": "random"} rec',
        ),
        (["--seed", "7"], "seed: 0 recorded, 7 given"),
    ],
    ids=["samples", "agents", "seed"],
)
def test_resume_with_another_plan_is_refused_naming_the_difference(
    finished, tmp_path, change, says
):
    run = copy_of(finished, tmp_path / "run")
    before = {name: (run / name).read_bytes() for name in ("records.jsonl", "config.json")}
    proc = budgetmix(*eval_args(run, "--resume", *change))
    line = one_error_line(proc, "eval")
    assert f"cannot resume {run} with another plan" in line and says in line, line
    assert {name: (run / name).read_bytes() for name in before} == before
    same = budgetmix(*eval_args(run, "--resume"))
    assert (
        same.returncode == 0
        and f"0 records written to {run} ({EPISODES} already done" in same.stdout
    )


def test_plan_differences_list_each_field_recorded_and_given():
    recorded = {"samples": 5, "agents": {"a": "random"}, "seed": 0}
    given = {"samples": 3, "agents": {"a": "random", "b": "oracle"}, "seed": 0}
    assert plan_differences(recorded, given) == [
        ("samples", 5, 3),
        ("agents", {"a": "random"}, {"a": "random", "b": "oracle"}),
    ]


@pytest.mark.parametrize("config", [b"", b'{"env_ids": ["BudgetMix/Too'], ids=["empty", "torn"])
def test_resume_rewrites_an_empty_or_torn_config_when_every_record_belongs(
    finished, tmp_path, config
):
    run = copy_of(finished, tmp_path / "run")
    (run / "config.json").write_bytes(config)  # what an older version's crash left
    other = budgetmix(*eval_args(run, "--resume", "--samples", "3"))
    line = one_error_line(other, "eval")
    assert "so the plan its 40 records were made with cannot be known" in line, line
    assert (run / "config.json").read_bytes() == config
    same = budgetmix(*eval_args(run, "--resume"))
    assert same.returncode == 0, same.stderr
    assert "config.json was " in same.stderr and "rewritten from the plan given" in same.stderr
    assert json.loads((run / "config.json").read_text()) == json.loads(
        (finished / "config.json").read_text()
    )


# ---------------------------------------------------------------------- bad lines
def _spoil(run: Path) -> dict[str, str]:
    """Spoil four records' lines, one of each kind; returns kind -> the spoiled record's key."""
    path = run / "records.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    spoiled = {}
    for i, kind in ((3, "not UTF-8"), (10, "torn JSON"), (17, "not an object"), (25, "no key")):
        rec = json.loads(lines[i])
        spoiled[kind] = rec["key"]
        if kind == "not UTF-8":
            lines[i] = lines[i].replace(b'"task_id": "', b'"task_id": "\xff\xfe', 1)
        elif kind == "torn JSON":
            lines[i] = lines[i][: len(lines[i]) // 2] + b"\n"
        elif kind == "not an object":
            lines[i] = json.dumps(list(rec.items())).encode() + b"\n"
        else:
            del rec["key"]
            lines[i] = json.dumps(rec).encode() + b"\n"
    path.write_bytes(b"".join(lines))
    return spoiled


COUNTED = "4 bad lines (1 not UTF-8, 1 torn JSON, 1 not an object, 1 no key)"


def test_bad_lines_are_skipped_counted_and_rerun_by_resume(finished, tmp_path):
    run = copy_of(finished, tmp_path / "run")
    spoiled = _spoil(run)
    good = [line for line in (run / "records.jsonl").read_bytes().splitlines() if line.strip()]
    scan = scan_records(run)
    assert scan.bad_lines == 4 and scan.summary() == COUNTED
    assert not set(spoiled.values()) & {r["key"] for r in scan.records}

    report = budgetmix("report", run, "--no-figures")
    assert report.returncode == 0 and COUNTED in report.stderr, report.stderr
    assert f"{EPISODES - 4} episodes" in report.stdout

    again = budgetmix(*eval_args(run, "--resume"))
    assert again.returncode == 0, again.stderr
    assert COUNTED in again.stderr
    assert f"4 records written to {run} ({EPISODES - 4} already done" in again.stdout
    after = (run / "records.jsonl").read_bytes().splitlines()
    assert after[: len(good)] == good, "a line was lost or changed"
    assert sorted(keys(run)) == sorted(set(keys(run))) and len(keys(run)) == EPISODES
    assert set(spoiled.values()) <= set(keys(run))
    assert report_counts(run) == (EPISODES, 0)


# ---------------------------------------------------------------------- a full disk at start
@contextlib.contextmanager
def full_disk(tmp_path: Path, lock_fits: bool):
    """A folder on a full file system (room for the run's lock file or not), the keyword
    arguments that run a process on it, and ``free()`` that makes room for a run. Mounting: a
    1 MiB tmpfs filled up (its last 4 KiB page left free for the lock). Else: RLIMIT_FSIZE on
    the process."""
    if MOUNTS:
        with tmpfs(tmp_path / "disk", "1m") as disk:
            filler = disk / "filler"
            filler.write_bytes(b"x" * ((1020 if lock_fits else 1024) * 1024))
            yield disk, {}, filler.unlink
        return
    room = 16 if lock_fits else 0

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (room, resource.RLIM_INFINITY))

    disk = tmp_path / "disk"
    disk.mkdir()
    yield disk, {"preexec_fn": limit}, lambda: None


@pytest.mark.parametrize("lock_fits", [False, True], ids=["no-room", "room-for-the-lock"])
def test_full_disk_at_start_is_one_line_and_leaves_nothing_that_blocks_resume(tmp_path, lock_fits):
    with full_disk(tmp_path, lock_fits) as (disk, kwargs, free):
        run = disk / "run"
        full = budgetmix(*eval_args(run), **kwargs)
        line = one_error_line(full, "eval")
        reason = "No space left on device (ENOSPC)" if MOUNTS else "File too large (EFBIG)"
        assert reason in line, line
        if lock_fits:
            assert f"cannot write {run / 'config.json'}: {reason}" in line, line
        else:
            assert f"cannot write the run folder {run}: {reason}" in line, line
        left = sorted(p.name for p in run.iterdir())
        assert left == [".lock"], left  # no config.json (empty or torn), no temp file, no records
        free()
        again = budgetmix(*eval_args(run, "--resume"))
        assert again.returncode == 0, again.stderr
        assert json.loads((run / "config.json").read_text())["samples"] == 5
        assert sorted(keys(run)) == sorted(set(keys(run))) and len(keys(run)) == EPISODES


def test_config_write_on_a_full_disk_keeps_the_old_config(tmp_path):
    with full_disk(tmp_path, lock_fits=True) as (disk, _, _free):
        path = disk / "config.json"
        path.write_bytes(b'{"samples": 5}\n')  # on a tmpfs: on the one page left free
        reason = r"No space left on device \(ENOSPC\)" if MOUNTS else r"File too large \(EFBIG\)"
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if not MOUNTS:
            resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))
        try:
            with pytest.raises(OutDirError, match=reason):
                write_config(path, {"samples": 5, "pad": "y" * 8192})
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        assert json.loads(path.read_text()) == {"samples": 5}
        assert not [p.name for p in disk.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------------- read-only, not a folder
def test_read_only_folders_are_one_line_for_eval_report_and_compare(finished, tmp_path):
    ctx = tmpfs(tmp_path / "disk", "4m") if MOUNTS else contextlib.nullcontext(tmp_path / "disk")
    with ctx as disk:
        disk.mkdir(exist_ok=True)
        run = copy_of(finished, disk / "run")
        read_only(disk)
        try:
            reason = "Read-only file system (EROFS)" if MOUNTS else "Permission denied (EACCES)"
            resumed = one_error_line(budgetmix(*eval_args(run, "--resume")), "eval")
            assert f"cannot write the run folder {run}: {reason}" in resumed, resumed
            new = one_error_line(budgetmix(*eval_args(disk / "new")), "eval")
            assert f"cannot create the run folder {disk / 'new'}: {reason}" in new, new
            report = one_error_line(budgetmix("report", run, "--no-figures"), "report")
            assert f"cannot write the report to {run / 'report'}: {reason}" in report, report
            compare = budgetmix("compare", run, run, "--agent-a", "random", "--agent-b", "oracle")
            line = one_error_line(compare, "compare")
            assert f"cannot write the comparison to {run / 'compare'}: {reason}" in line, line
            assert keys(run) == keys(finished)
        finally:
            if not MOUNTS:
                for p in [disk, *disk.rglob("*")]:
                    p.chmod(p.stat().st_mode | 0o200)


def test_a_file_in_the_way_is_one_line(finished, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder\n")
    for out in (blocker, blocker / "run"):
        line = one_error_line(budgetmix(*eval_args(out)), "eval")
        assert str(out) in line and "a file is in the way" in line, line
    line = one_error_line(budgetmix("report", finished, "--out", blocker), "report")
    assert f"cannot write the report to {blocker}: a file is in the way" in line, line
    compare = budgetmix(
        "compare",
        finished,
        finished,
        "--agent-a",
        "random",
        "--agent-b",
        "oracle",
        "--out",
        blocker,
    )
    line = one_error_line(compare, "compare")
    assert f"cannot write the comparison to {blocker}: a file is in the way" in line, line
    assert blocker.read_text() == "not a folder\n"


# ---------------------------------------------------------------------- compare
@pytest.mark.parametrize("which", ["a", "b"])
def test_compare_refuses_an_agent_the_run_does_not_have(finished, tmp_path, which):
    agents = {"a": "random", "b": "oracle", which: "nobody"}
    proc = budgetmix(
        "compare",
        finished,
        finished,
        "--agent-a",
        agents["a"],
        "--agent-b",
        agents["b"],
        "--out",
        tmp_path / "cmp",
    )
    line = one_error_line(proc, "compare")
    assert f"run {which.upper()} has no agent 'nobody'; its agents: oracle, random" in line, line
    assert not (tmp_path / "cmp").exists()
    records = load_records(finished)
    with pytest.raises(UnknownAgent) as info:
        compare_runs(records, records, **{f"agent_{k}": v for k, v in agents.items()})
    assert info.value.agents == ["oracle", "random"] and info.value.agent == "nobody"
