"""The CLI speaks in one line: usage errors, --version, stratified --tasks, few-task warnings,
and a demo that fails under CI when a family is skipped."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from contract_helpers import TOY_ID, make

from budget_envs import cli
from budget_envs.eval.runner import load_records

TESTS = Path(__file__).resolve().parent
SCRIPT = Path(sys.executable).with_name("budgetmix")


def run(argv):
    out = io.StringIO()
    rc = cli.main(argv, stdin=io.StringIO(""), stdout=out)
    return rc, out.getvalue()


def script(*argv, env=None):
    return subprocess.run(
        [str(SCRIPT), *argv], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("BudgetMix/TooUse-v0", "BudgetMix/ToolUse-v0"),
        ("budgetmix/webshop-v0", "BudgetMix/WebShop-v0"),
        ("ALFWorld-v0", "BudgetMix/ALFWorld-v0"),
    ],
)
def test_unknown_id_is_one_line_with_did_you_mean(tmp_path, typed, meant):
    proc = script("eval", typed, "--out", str(tmp_path / "run"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"did you mean {meant!r}" in lines[0] and typed in lines[0]
    assert not (tmp_path / "run").exists()


def test_unknown_id_without_a_close_match_still_one_line(capsys):
    rc, _ = run(["play", "Zzz/Qqq-v9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "unknown env id 'Zzz/Qqq-v9'" in err[0] and "budgetmix list" in err[0]


def test_chat_agent_without_base_url_is_a_usage_error(tmp_path):
    # The toy id is registered by the test session only; a fresh process knows the product ids.
    proc = script(
        "eval", "BudgetMix/ToolUse-v0", "--agent", "chat:model=qwen", "--out", str(tmp_path / "r")
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "base_url" in lines[0] and "chat:base_url=" in lines[0]


def test_bad_plan_value_is_a_usage_error(tmp_path, capsys):
    rc, _ = run(["eval", TOY_ID, "--samples", "0", "--out", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "samples must be an int >= 1, got 0" in err[0]


def test_version():
    proc = script("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"budgetmix {version('budget-envs')}"


def _level_sets(level_count):
    from budget_envs.envs.tooluse import ToolUseEnv

    return {lv: set(ToolUseEnv(level=lv, tasks_per_level=50).task_ids) for lv in level_count}


def test_tasks_are_stratified_over_levels_and_recorded(tmp_path):
    run_dir = tmp_path / "run"
    rc, text = run(
        [
            "eval",
            "BudgetMix/ToolUse-v0",
            "--agent",
            "oracle",
            "--tasks",
            "10",
            "--samples",
            "1",
            "--no-oracle",
            "--env-kwargs",
            '{"tasks_per_level": 50}',
            "--out",
            str(run_dir),
            "--quiet",
        ]
    )
    assert rc == 0, text
    config = json.loads((run_dir / "config.json").read_text())
    chosen = config["task_selection"]["BudgetMix/ToolUse-v0"]
    assert chosen["stratified_by"] == "level"
    assert chosen["per_level"] == [{"level": lv, "tasks": 2} for lv in range(1, 6)]
    assert len(chosen["task_ids"]) == 10
    by_level = _level_sets(range(1, 6))
    for lv, ids in by_level.items():
        assert len(ids & set(chosen["task_ids"])) == 2, lv
    played = {r["task_id"] for r in load_records(run_dir)}
    assert played == set(chosen["task_ids"])
    assert all(played & ids for ids in by_level.values())


def test_unstratified_env_records_its_first_tasks(tmp_path):
    run_dir = tmp_path / "run"
    rc, _ = run(
        ["eval", TOY_ID, "--tasks", "3", "--samples", "1", "--out", str(run_dir), "--quiet"]
    )
    assert rc == 0
    chosen = json.loads((run_dir / "config.json").read_text())["task_selection"][TOY_ID]
    env = make(TOY_ID, budget=None)
    assert chosen["task_ids"] == list(env.unwrapped.task_ids[:3])
    assert chosen["stratified_by"] is None and chosen["per_level"] is None


def test_few_tasks_warning(tmp_path, capsys):
    small, large = tmp_path / "small", tmp_path / "large"
    rc, _ = run(["eval", TOY_ID, "--tasks", "3", "--samples", "2", "--out", str(small), "--quiet"])
    assert rc == 0
    err = capsys.readouterr().err
    assert f"fewer than 10 tasks back the confidence intervals ({TOY_ID}: 3)" in err
    rc, _ = run(["report", str(small), "--no-figures", "--boot", "50"])
    assert rc == 0
    assert f"({TOY_ID}: 3)" in capsys.readouterr().err
    rc, _ = run(["eval", TOY_ID, "--tasks", "10", "--samples", "1", "--out", str(large), "--quiet"])
    assert rc == 0
    assert "fewer than 10 tasks" not in capsys.readouterr().err
    rc, _ = run(["report", str(large), "--no-figures", "--boot", "50"])
    assert rc == 0
    assert "fewer than 10 tasks" not in capsys.readouterr().err


_DEMO = """
import sys
sys.path.insert(0, {tests!r})
import budget_envs
from budget_envs.registry import EnvEntry, register_env
from contract_helpers import register_toy, TOY_ID
register_toy()
register_env(EnvEntry(id="BudgetMixTest/Missing-v0", entry_point="budget_envs_no_such_family:Env",
                      default_budget=5, description="a family whose extra is not installed",
                      requires="no-such-extra"))
from budget_envs import cli
sys.exit(cli.main(["demo", "--env", TOY_ID, "--env", "BudgetMixTest/Missing-v0",
                   "--out", {out!r}, "--tasks", "2", "--samples", "1", "--probe-states", "1",
                   "--fault-turns", "1", "--workers", "1", "--no-figures", "--quiet",
                   "--no-train"]))
"""


def _run_demo(script: str, tmp_path, ci: str):
    """Run a demo script (``{tests}``, ``{out}`` filled in) in a fresh interpreter, with
    ``CI`` set to ``ci`` (unset when empty)."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = ci
    code = script.format(tests=str(TESTS), out=str(tmp_path / "demo"))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.mark.parametrize("ci", ["true", ""])
def test_demo_fails_under_ci_when_a_family_is_skipped(tmp_path, ci):
    proc = _run_demo(_DEMO, tmp_path, ci)
    assert "SKIPPED BudgetMixTest/Missing-v0" in proc.stdout, proc.stdout + proc.stderr
    assert "no-such-extra" in proc.stdout
    assert f"One oracle episode on {TOY_ID}" in proc.stdout  # the rest of the demo still ran
    if ci:
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "FAILED: 1 of 2 families were skipped" in proc.stdout
    else:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


_NO_RAY = """
import sys
sys.modules["ray"] = None  # as if the rllib extra were not installed
sys.path.insert(0, {tests!r})
from contract_helpers import register_toy, TOY_ID
register_toy()
from budget_envs import cli
sys.exit(cli.main(["demo", "--env", TOY_ID, "--out", {out!r}, "--tasks", "2", "--samples", "1",
                   "--probe-states", "1", "--fault-turns", "1", "--workers", "1", "--no-figures",
                   "--quiet"]))
"""


@pytest.mark.parametrize("ci", ["true", ""])
def test_demo_says_when_the_trained_pair_cannot_run(tmp_path, ci):
    proc = _run_demo(_NO_RAY, tmp_path, ci)
    assert "SKIPPED the trained pair: training needs ray" in proc.stdout, proc.stdout + proc.stderr
    assert f"One oracle episode on {TOY_ID}" in proc.stdout  # the reference part still ran
    assert not (tmp_path / "demo" / "trained").exists()
    if ci:
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "FAILED: the trained pair was skipped" in proc.stdout
    else:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_export_sft_unknown_id_and_missing_options_are_one_line(tmp_path):
    proc = script("export-sft", "BudgetMix/TooUse-v0", "--tasks", "2", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "did you mean 'BudgetMix/ToolUse-v0'" in lines[0]
    assert not (tmp_path / "o").exists()
    proc = script("export-sft", "BudgetMix/ToolUse-v0", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "--tasks" in proc.stderr and "Traceback" not in proc.stderr
    proc = script("export-sft", "BudgetMix/ToolUse-v0", "--tasks", "1", "--split", "dev")
    assert proc.returncode == 2 and "invalid choice: 'dev'" in proc.stderr


def test_eval_save_transcripts_on_the_toy_env(tmp_path):
    rc, text = run(
        ["eval", TOY_ID, "--agent", "oracle", "--tasks", "2", "--samples", "1"]
        + ["--out", str(tmp_path / "run"), "--quiet", "--save-transcripts"]
    )
    assert rc == 0 and "Transcripts:" in text
    rows = [json.loads(line) for line in (tmp_path / "run" / "transcripts.jsonl").open()]
    assert len(rows) == 2 and {r["stop_reason"] for r in rows} == {"won"}
    assert all(r["tools"] is None and r["messages"][0]["role"] == "system" for r in rows)
