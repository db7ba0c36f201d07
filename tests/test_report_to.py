"""``budgetmix train --report-to``: every trainer's metrics rows reach TensorBoard and W&B, read
back with TensorBoard's own event reader and from W&B's offline run files, equal to the rows of
``metrics.csv``."""

from __future__ import annotations

import csv
import json
import math
import os
import threading

import pytest

from budget_envs.cli import main
from budget_envs.integrations.tracking import SCALAR_NAMES, check_report_to, scalars

#: The scalar names every trainer's logs share where it has the quantity.
SHARED = [
    "env_reward",
    "win_rate",
    "stop_budget_share",
    "invalid_share",
    "budget",
    "tokens_per_episode",
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    # No WANDB_MODE and no key: the sink's own rule makes the run offline.
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))


def _csv_rows(folder):
    with open(folder / "metrics.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _tensorboard(folder):
    """{tag: [(step, value)]} from the event files under folder/runs/."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (run,) = list((folder / "runs").iterdir())
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _wandb_records(path):
    """The records of a ``.wandb`` file: a 7-byte header (``:W&B``, magic 0xBEE1, version 0),
    then LevelDB-log chunks in 32 KiB blocks (checksum u32, length u16, type u8: full, first,
    middle, last); a block tail under 7 bytes is padding."""
    import struct

    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0)
    pos, block, parts = 7, 32768, b""
    while pos + 7 <= len(data):
        room = block - pos % block
        if room < 7:
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:  # zeroed tail
            continue
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            yield parts
            parts = b""


def _wandb_history(folder):
    """The history rows of the one offline W&B run under folder/wandb/, read from its
    ``.wandb`` file with W&B's own protobuf record type."""
    from wandb.proto import wandb_internal_pb2

    (run_dir,) = list((folder / "wandb").glob("offline-run-*"))
    (path,) = list(run_dir.glob("*.wandb"))
    rows = []
    for data in _wandb_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return rows


def _expected(rows, step_key):
    """{scalar name: [(step, value)]} the rows should have logged."""
    out: dict[str, list] = {}
    for row in rows:
        for name, value in scalars(row).items():
            out.setdefault(f"train/{name}", []).append((int(row[step_key]), value))
    return out


def _check(folder, step_key, shared):
    rows = _csv_rows(folder)
    assert rows
    want = _expected(rows, step_key)
    assert set(shared) <= {k.split("/", 1)[1] for k in want}, sorted(want)
    board = _tensorboard(folder)
    assert set(want) <= set(board), sorted(set(want) - set(board))
    for tag, points in want.items():
        assert [s for s, _ in board[tag]] == [s for s, _ in points], tag
        assert [v for _, v in board[tag]] == pytest.approx([v for _, v in points], rel=1e-5)
    history = _wandb_history(folder)
    logged = [h for h in history if any(k.startswith("train/") for k in h)]
    assert len(logged) == len(rows)
    for h, row in zip(logged, rows):
        assert h["_step"] == int(row[step_key])
        for name, value in scalars(row).items():
            assert math.isclose(h[f"train/{name}"], value, rel_tol=1e-9), name


def test_trl_rows_reach_tensorboard_and_wandb(tmp_path, capsys):
    import mcp  # noqa: F401  (an LLM library in the process: W&B would suggest Weave on stderr)

    out = tmp_path / "grpo"
    argv = ["train", "BudgetMix/ToolUse-v0", "--trainer", "trl", "--budget", "3"]
    argv += ["--env-kwargs", '{"level": 1}', "--iterations", "2", "--batch-size", "4"]
    argv += ["--trl-kwargs", '{"warm_start_steps": 2}', "--out", str(out), "--quiet"]
    assert main([*argv, "--report-to", "tensorboard,wandb"]) == 0
    # W&B's service is stopped with the run: no thread, child process or variable left behind.
    assert not [t.name for t in threading.enumerate() if t.name.startswith("wandb")]
    assert "WANDB_SERVICE" not in os.environ
    printed = capsys.readouterr()  # W&B prints nothing of its own
    assert "wandb" not in printed.out.lower() and "wandb:" not in printed.err.lower()
    _check(out, "step", SHARED)  # TRL's rows have every shared scalar


def test_sft_rows_reach_tensorboard_and_wandb(tmp_path):
    out = tmp_path / "sft"
    sft = json.dumps({"model": "scratch", "episodes": 4, "max_steps": 3, "batch_size": 2})
    argv = ["train", "BudgetMix/ToolUse-v0", "--trainer", "sft", "--budget", "6"]
    argv += ["--env-kwargs", '{"level": 1}', "--sft-kwargs", sft, "--out", str(out), "--quiet"]
    assert main([*argv, "--report-to", "tensorboard,wandb"]) == 0
    _check(out, "step", ["loss"])


@pytest.mark.slow
def test_rllib_rows_reach_tensorboard_and_wandb(tmp_path):
    out = tmp_path / "ppo"
    argv = ["train", "BudgetMix/ToolUse-v0", "--trainer", "rllib", "--budget", "6"]
    argv += ["--env-kwargs", '{"level": 1}', "--iterations", "2", "--batch-size", "128"]
    argv += ["--warm-start-episodes", "0", "--out", str(out), "--quiet", "--num-cpus", "2"]
    assert main([*argv, "--report-to", "tensorboard,wandb"]) == 0
    _check(out, "iteration", ["env_reward", "win_rate", "invalid_share", "budget"])


def test_report_to_is_checked_before_any_work(tmp_path, capsys):
    assert check_report_to("none") == [] and check_report_to(None) == []
    assert check_report_to("TensorBoard, wandb,tensorboard") == ["tensorboard", "wandb"]
    with pytest.raises(ValueError, match="report_to"):
        check_report_to("mlflow")
    out = tmp_path / "x"
    argv = ["train", "BudgetMix/ToolUse-v0", "--trainer", "trl", "--out", str(out)]
    assert main([*argv, "--report-to", "mlflow"]) == 2
    assert "--report-to" in capsys.readouterr().err and not out.exists()
    # Every shared name comes from a column some trainer writes.
    assert set(SCALAR_NAMES.values()) == set(SHARED)
