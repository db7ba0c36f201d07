"""Prefix probes from the command line: ``budgetmix eval --prefix-turns``, the report, compare.

The replayed prefix of every probe reaches the source episode's ``state_hash`` at turn t; the
compare difference after the same failed prefixes is exactly 0 for an agent against itself and
the recomputed paired value for two agents.
"""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from budget_envs.registry import registered_ids

from budget_envs import cli
from budget_envs.eval.runner import EvalPlan, load_records, run_plan
from budget_envs.eval.runner.prefix import failed_sources, plan_prefix_jobs

TOOLUSE = "BudgetMix/ToolUse-v0"
EVAL = [
    "eval",
    TOOLUSE,
    "--agent",
    "random",
    "--agent",
    "eps=oracle:epsilon=0.3",
    "--tasks",
    "10",
    "--samples",
    "2",
    "--budgets",
    "10",
    "--fault-turns",
    "3",
    "--fault-kinds",
    "tool_error,stale_read",
    "--env-kwargs",
    '{"level": 1}',
    "--prefix-turns",
    "2,5",
    "--prefix-from",
    "random",
    "--prefix-episodes",
    "12",
    "--quiet",
]


def run(argv):
    out = io.StringIO()
    rc = cli.main(argv, stdout=out)
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def prefix_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("prefix-cli") / "run"
    rc, text = run(EVAL + ["--out", str(run_dir)])
    assert rc == 0, text
    assert "of them prefix probes" in text
    return run_dir, load_records(run_dir)


def _probes(records):
    return [r for r in records if r["record"] == "prefix"]


def test_cli_records_prefix_probes_that_reach_the_source_state_hash(prefix_run):
    _, records = prefix_run
    episodes = {r["key"]: r for r in records if r["record"] == "episode"}
    probes = _probes(records)
    assert probes
    assert {p["agent"] for p in probes} == {"random", "eps"}
    assert {p["source"] for p in probes} == {"random"}
    sources = {p["source_key"] for p in probes}
    # --prefix-episodes 12 over 10 tasks: 12 source episodes, every task among them.
    assert len(sources) == 12
    assert len({episodes[k]["task_id"] for k in sources}) == 10
    for p in probes:
        src = episodes[p["source_key"]]
        t = p["prefix_turns"]
        assert src["agent"] == "random" and not src["won"] and not src["error"]
        assert t in (2, 5) and t < src["turns"]
        assert p["error"] is None and p["reached"], p
        assert p["state_hash"] is not None
        assert p["state_hash"] == src["state_hashes"][t - 1]
        assert p["visibility"] == src["visibility"] and p["budget"] == src["budget"] == 10
        assert t <= p["turns"] <= src["budget"]
        assert p["won"] == (p["stop_reason"] == "won")
    # Both agents played every (source episode, t): the same prefixes, which compare pairs.
    pairs = {(p["source_key"], p["prefix_turns"]) for p in probes}
    assert len(probes) == 2 * len(pairs) == 2 * 2 * 12
    # The fault runs are among the sources, and their replays met the same fault.
    assert any(episodes[k]["fault_turn"] == 3 for k in sources)


def test_cli_resume_runs_nothing_twice(prefix_run):
    run_dir, records = prefix_run
    rc, text = run(EVAL + ["--out", str(run_dir), "--resume"])
    assert rc == 0 and "0 records written" in text
    assert len(load_records(run_dir)) == len(records)


def test_report_has_the_prefix_section_with_intervals(prefix_run, tmp_path):
    run_dir, _ = prefix_run
    rc, text = run(["report", str(run_dir), "--out", str(tmp_path), "--no-figures", "--boot", "50"])
    assert rc == 0
    assert "## Recovery from a failed prefix" in text
    assert "48 prefix probes" in text
    rows = list(csv.DictReader(open(tmp_path / "prefix_recovery.csv", encoding="utf-8")))
    assert {r["agent"] for r in rows} == {"random", "eps"}
    assert {r["prefix_turns"] for r in rows} == {"2", "5", "-1"}
    for r in rows:
        assert float(r["low"]) <= float(r["success"]) <= float(r["high"])
    eps = [r for r in rows if r["agent"] == "eps" and r["prefix_turns"] == "2"]
    assert float(eps[0]["success"]) > 0.5  # the eps agent recovers from most random prefixes


def _expected_diff(records, agent_a, agent_b, t=None):
    """B - A after the same prefixes, per task then averaged, recomputed from the records."""
    probes = [p for p in _probes(records) if t is None or p["prefix_turns"] == t]
    won = {(p["agent"], p["source_key"], p["prefix_turns"]): p["won"] for p in probes}
    per_task: dict[str, list[float]] = {}
    for p in probes:
        if p["agent"] != agent_a:
            continue
        key = (p["source_key"], p["prefix_turns"])
        b = won[(agent_b,) + key]
        per_task.setdefault(p["task_id"], []).append(float(b) - float(p["won"]))
    return float(np.mean([np.mean(v) for v in per_task.values()])), len(per_task)


def _prefix_rows(path):
    return list(csv.DictReader(open(path / "prefix_difference.csv", encoding="utf-8")))


def test_compare_two_agents_after_the_same_failed_prefixes(prefix_run, tmp_path):
    run_dir, records = prefix_run
    rc, text = run(
        [
            "compare",
            str(run_dir),
            str(run_dir),
            "--agent-a",
            "random",
            "--agent-b",
            "eps",
            "--out",
            str(tmp_path),
            "--no-figures",
            "--boot",
            "300",
        ]
    )
    assert rc == 0, text
    assert "after a failed prefix of random" in text and "by t: t=2:" in text
    assert "by damage:" in text and "prefix_difference.csv" in text
    rows = _prefix_rows(tmp_path)
    overall = [r for r in rows if r["prefix_turns"] == "-1" and r["damage"] == "all"]
    assert len(overall) == 1
    expected, tasks = _expected_diff(records, "random", "eps")
    assert expected > 0
    assert float(overall[0]["diff"]) == pytest.approx(expected, abs=1e-9)
    assert int(overall[0]["tasks"]) == tasks == 10 and int(overall[0]["pairs"]) == 24
    for t in (2, 5):
        (row,) = [r for r in rows if r["prefix_turns"] == str(t)]
        assert float(row["diff"]) == pytest.approx(_expected_diff(records, "random", "eps", t)[0])
    damage = [r for r in rows if r["damage"] != "all"]
    assert damage and sum(int(r["pairs"]) for r in damage) == 24
    for r in rows:
        assert float(r["low"]) <= float(r["diff"]) <= float(r["high"])
        assert float(r["diff"]) == pytest.approx(float(r["success_b"]) - float(r["success_a"]))
    md = (tmp_path / "compare.md").read_text(encoding="utf-8")
    assert "## After a failed prefix" in md and "| random | eps | random | all | all |" in md


def test_compare_an_agent_with_itself_is_exactly_zero(prefix_run, tmp_path):
    run_dir, _ = prefix_run
    rc, text = run(
        [
            "compare",
            str(run_dir),
            str(run_dir),
            "--agent-a",
            "eps",
            "--agent-b",
            "eps",
            "--out",
            str(tmp_path),
            "--no-figures",
            "--boot",
            "100",
        ]
    )
    assert rc == 0, text
    rows = _prefix_rows(tmp_path)
    assert len(rows) >= 3  # all, t=2, t=5 (plus the damage bins)
    for r in rows:
        assert (float(r["diff"]), float(r["low"]), float(r["high"])) == (0.0, 0.0, 0.0)
        assert r["success_a"] == r["success_b"]
    assert "B - A +0.000 [+0.000, +0.000] (24 paired probes, 10 tasks)" in text


def test_own_prefixes_are_not_paired_across_agents(tmp_path):
    run_dir = tmp_path / "own"
    argv = [
        "eval",
        TOOLUSE,
        "--agent",
        "random",
        "--agent",
        "r2=random",
        "--tasks",
        "3",
        "--samples",
        "1",
        "--budgets",
        "6",
        "--prefix-turns",
        "2",
        "--out",
        str(run_dir),
        "--quiet",
    ]
    rc, text = run(argv)
    assert rc == 0, text
    probes = _probes(load_records(run_dir))
    assert {(p["agent"], p["source"]) for p in probes} == {("random", "random"), ("r2", "r2")}
    rc, text = run(
        ["compare", str(run_dir), str(run_dir), "--agent-a", "random", "--agent-b", "r2"]
        + ["--out", str(tmp_path / "cmp"), "--no-figures", "--boot", "20"]
    )
    assert rc == 0 and "no prefix probed by both agents" in text
    assert not (tmp_path / "cmp" / "prefix_difference.csv").exists()


def test_prefix_options_are_checked(tmp_path, capsys):
    base = ["eval", TOOLUSE, "--agent", "random", "--tasks", "1", "--samples", "1", "--quiet"]
    rc, _ = run(base + ["--prefix-from", "random", "--out", str(tmp_path / "a")])
    assert rc == 2 and "--prefix-from needs --prefix-turns" in capsys.readouterr().err
    rc, _ = run(
        base
        + ["--prefix-turns", "2", "--prefix-from", "random=oracle", "--out", str(tmp_path / "b")]
    )
    assert rc == 2 and "another spec" in capsys.readouterr().err
    rc, _ = run(base + ["--prefix-turns", "2", "--prefix-episodes", "0", "--out", str(tmp_path)])
    assert rc == 2 and "prefix_episodes must be an int >= 1" in capsys.readouterr().err
    rc, _ = run(base + ["--prefix-turns", "0", "--out", str(tmp_path / "c")])
    assert rc == 2 and "prefix_turns must be ints >= 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="'nobody'"):
        EvalPlan(env_ids=[TOOLUSE], agents={"random": "random"}, prefix_from="nobody")


def test_a_reference_spec_joins_the_run_as_the_source(tmp_path):
    run_dir = tmp_path / "ref"
    rc, text = run(
        ["eval", TOOLUSE, "--agent", "oracle", "--tasks", "2", "--samples", "1", "--budgets", "6"]
        + ["--prefix-turns", "1", "--prefix-from", "random", "--out", str(run_dir), "--quiet"]
    )
    assert rc == 0, text
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    assert config["agents"] == {"oracle": "oracle", "random": "random"}
    assert config["prefix_from"] == "random" and config["prefix_turns"] == [1]
    probes = _probes(load_records(run_dir))
    assert probes and {p["source"] for p in probes} == {"random"}
    assert {p["agent"] for p in probes} == {"oracle", "random"}
    assert all(p["reached"] for p in probes)


def test_failed_sources_are_dealt_round_robin_over_tasks():
    recs = [
        {
            "record": "episode",
            "env_id": "E",
            "agent": "a",
            "task_index": task,
            "task_id": f"t{task}",
            "sample": sample,
            "budget": 5,
            "fault_turn": None,
            "won": (task, sample) == (1, 0),
            "error": None,
            "actions": ["x"] * 5,
            "key": f"k{task}{sample}",
        }
        for task in (2, 0, 1)
        for sample in (1, 0)
    ]
    order = [(r["task_index"], r["sample"]) for r in failed_sources(recs, env_id="E", agent="a")]
    assert order == [(0, 0), (1, 1), (2, 0), (0, 1), (2, 1)]
    assert len(failed_sources(recs, env_id="E", agent="a", episodes=2)) == 2
    assert failed_sources(recs, env_id="E", agent="a", min_turns=5) == []


@pytest.mark.parametrize("env_id", registered_ids())
def test_every_id_replays_a_failed_prefix_to_its_state_hash(env_id, tmp_path):
    plan = EvalPlan(
        env_ids=[env_id],
        agents={"random": "random", "oracle": "oracle"},
        tasks=2,
        samples=2,
        budgets=[6],
        prefix_turns=[3],
        prefix_from="random",
        prefix_episodes=2,
    )
    result = run_plan(plan, tmp_path / "run")
    assert result.errors == 0
    records = load_records(tmp_path / "run")
    failed = [r for r in records if r["agent"] == "random" and not r.get("won")]
    assert failed, "random is meant to fail some 6-turn episodes"
    assert result.prefix_total == len(plan_prefix_jobs(plan, records)) > 0
    episodes = {r["key"]: r for r in records if r["record"] == "episode"}
    probes = _probes(records)
    assert len(probes) == result.prefix_total
    for p in probes:
        src = episodes[p["source_key"]]
        assert p["reached"], p
        assert p["state_hash"] == src["state_hashes"][2]
        assert len(src["state_hashes"]) == src["turns"]


def test_worker_processes_write_the_same_prefix_probes(prefix_run, tmp_path):
    _, records = prefix_run
    rc, text = run(EVAL + ["--out", str(tmp_path / "w2"), "--workers", "2"])
    assert rc == 0, text

    def strip(recs):
        return sorted(
            ({k: v for k, v in r.items() if k != "wall_time"} for r in _probes(recs)),
            key=lambda r: r["key"],
        )

    mine = strip(load_records(tmp_path / "w2"))
    assert mine and mine == strip(records)
