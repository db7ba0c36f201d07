"""Transcripts (``budgetmix eval --save-transcripts``) and SFT data (``budgetmix export-sft``):
rows that ``datasets`` loads across families, that a chat template renders, and that replay to
the same episode, through parallel workers, kills and resumes."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import datasets
import gymnasium as gym
import pytest

from budget_envs import cli
from budget_envs.eval.runner import (
    CONFIG_FILE,
    RECORDS_FILE,
    TRANSCRIPTS_FILE,
    EvalPlan,
    load_records,
    load_transcripts,
    replay_row,
    run_plan,
    transcript_features,
)
from budget_envs.eval.runner.shown import message_action

TOOLUSE, ALFWORLD = "BudgetMix/ToolUse-v0", "BudgetMix/ALFWorld-v0"
#: A ToolUse submit that is wrong for every task: the episode is lost.
WRONG_SUBMIT = '{"tool_calls":[{"name":"submit","arguments":{"answer":"987654.32"}}]}'


class HostileAgent:
    """An empty action, then one with NUL characters, then (ToolUse) a wrong submit or (text
    families) the oracle."""

    name = "hostile"

    def bind_oracle(self, fn):
        self.oracle = fn

    def reset(self, *, env_id, observation, info, seed):
        self.turn = 0

    def act(self, observation, info):
        self.turn += 1
        if self.turn == 1:
            return ""
        if self.turn == 2:
            return "\x00go\x00 north\x00"
        if info.get("tools"):
            return WRONG_SUBMIT
        return self.oracle()[0]


def run(argv):
    out = io.StringIO()
    rc = cli.main(argv, stdin=io.StringIO(""), stdout=out)
    return rc, out.getvalue()


def load(*paths, **kwargs):
    files = [str(p) for p in paths]
    return datasets.load_dataset("json", data_files=files, split="train", **kwargs)


def replay_independently(row):
    """Step a fresh env (made here with gymnasium.make) through the row's assistant actions and
    check every observation message, the per-turn budget and fault, and the stop reason."""
    faults = json.loads(row["fault_spec"])
    if row["fault_seed"] >= 0:
        faults = {**faults, "seed": row["fault_seed"]}
    env = gym.make(
        row["env_id"],
        budget=row["budget"],
        visibility=row["visibility"],
        faults=faults,
        **json.loads(row["env_kwargs"]),
    )
    obs, info = env.reset(
        seed=row["seed"], options={"task_id": row["task_index"], "budget": row["budget"]}
    )
    messages = row["messages"]
    assert [m["role"] for m in messages[:2]] == ["system", "user"]
    assert obs in messages[1]["content"] and info["task_id"] == row["task_id"]
    i, turn, done = 2, 0, False
    while i < len(messages):
        said = messages[i]
        assert said["role"] == "assistant" and not done
        obs, _, terminated, truncated, info = env.step(message_action(said))
        calls = said.get("tool_calls") or []
        answers = messages[i + 1 : i + 1 + max(1, len(calls))]
        assert answers[0]["content"] == obs
        assert answers[0]["role"] == ("tool" if calls else "user")
        assert [a.get("tool_call_id") for a in answers if calls] == [c["id"] for c in calls]
        entry = row["turns"][turn]
        assert entry["budget_left"] == info["budget"]["remaining"]
        assert entry["fault_kind"] == info.get("fault", {}).get("kind", "")
        assert entry["fault_executed"] == (info.get("fault", {}).get("executed") or "")
        i, turn, done = i + 1 + len(answers), turn + 1, terminated or truncated
    env.close()
    assert done and turn == row["num_turns"] == len(row["turns"])
    assert info["stop_reason"] == row["stop_reason"] == row["turns"][-1]["stop_reason"]
    return [message_action(m) for m in messages if m["role"] == "assistant"]


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    """ToolUse and ALFWorld, oracle / random / hostile agents, with and without a fault."""
    run_dir = tmp_path_factory.mktemp("mixed") / "run"
    plan = EvalPlan(
        env_ids=[TOOLUSE, ALFWORLD],
        agents={"oracle": "oracle", "random": "random", "hostile": HostileAgent()},
        tasks=2,
        samples=1,
        budgets=[12],
        fault_turns=[2],
        fault_kinds=("drop",),
        transcripts=True,
    )
    result = run_plan(plan, run_dir)
    assert result.errors == 0
    return run_dir


def test_mixed_run_has_one_row_per_episode_with_every_outcome(mixed_run):
    records = load_records(mixed_run)
    rows = load_transcripts(mixed_run)
    assert len(records) == 24
    assert sorted(r["key"] for r in rows) == sorted(r["key"] for r in records)
    assert {r["env_id"] for r in rows} == {TOOLUSE, ALFWORLD}
    assert {"won", "lost", "budget"} <= {r["stop_reason"] for r in rows}
    fired = [t for r in rows for t in r["turns"] if t["fault_kind"]]
    assert fired and {t["fault_kind"] for t in fired} == {"drop"}
    hostile = [r for r in rows if r["agent"] == "hostile"]
    said = [m["content"] for r in hostile for m in r["messages"] if m["role"] == "assistant"]
    assert "" in said and "\x00go\x00 north\x00" in said
    tool_rows = [r for r in rows if r["env_id"] == TOOLUSE]
    assert all(json.loads(r["tools"]) for r in tool_rows)
    assert all(r["tools"] is None for r in rows if r["env_id"] == ALFWORLD)
    calls = [c for r in tool_rows for m in r["messages"] for c in m.get("tool_calls", [])]
    assert calls and all(isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls)


def test_mixed_run_loads_with_datasets_and_keeps_column_types(mixed_run, tmp_path):
    path = mixed_run / TRANSCRIPTS_FILE
    ds = load(path)
    assert ds.num_rows == 24
    features = ds.features
    for name in ("env_kwargs", "fault_spec", "tools", "stop_reason", "agent_spec"):
        assert features[name].dtype == "string", name
    for name in ("seed", "budget", "task_index", "fault_seed", "first_success_turn"):
        assert features[name].dtype == "int64", name
    rows = load_transcripts(mixed_run)
    assert [r["messages"] for r in ds] == [r["messages"] for r in rows]
    # A file whose loader chunks start with text-family rows only (a large file): with the
    # explicit features every chunk gets the same types; messages gain the keys they lack, None.
    ordered = tmp_path / "ordered.jsonl"
    text_first = sorted(rows, key=lambda r: r["env_id"] != ALFWORLD)
    ordered.write_text("".join(json.dumps(r) + "\n" for r in text_first))
    typed = load(ordered, features=transcript_features(), chunksize=4096)
    assert typed.num_rows == 24

    def given(messages):
        return [{k: v for k, v in m.items() if v is not None} for m in messages]

    assert [given(r["messages"]) for r in typed] == [r["messages"] for r in text_first]
    assert [r["turns"] for r in typed] == [r["turns"] for r in text_first]


def test_rows_render_through_a_chat_template(mixed_run):
    from budget_envs.integrations.tiny_model import build_tiny_tokenizer

    tok = build_tiny_tokenizer(["go east"])
    ds = load(mixed_run / TRANSCRIPTS_FILE)
    for env_id in (TOOLUSE, ALFWORLD):
        row = next(r for r in ds if r["env_id"] == env_id and r["agent"] == "oracle")
        tools = json.loads(row["tools"]) if row["tools"] else None
        text = tok.apply_chat_template(row["messages"], tools=tools, tokenize=False)
        assert row["messages"][1]["content"] in text
        assert row["messages"][-1]["content"] in text
        if tools:
            call = next(m for m in row["messages"] if m.get("tool_calls"))["tool_calls"][0]
            assert call["function"]["name"] in text and "<tool_call>" in text
            assert "<tool_response>" in text


def test_every_row_replays_to_the_same_episode(mixed_run):
    rows = load_transcripts(mixed_run)
    loaded = load(mixed_run / TRANSCRIPTS_FILE)
    assert len(rows) == loaded.num_rows == 24
    for row, arrow_row in zip(rows, loaded):
        # From the datasets row (after the Arrow round trip) and from the JSON line.
        assert replay_independently(arrow_row) == replay_independently(row)
        assert replay_row(row) == row
    assert any(r["won"] for r in rows) and any(not r["won"] for r in rows)


def _eval_argv(out, *extra):
    return [
        "eval",
        TOOLUSE,
        "--agent",
        "oracle",
        "--agent",
        "eps=oracle:epsilon=0.5",
        "--tasks",
        "3",
        "--samples",
        "2",
        "--budgets",
        "8",
        "--fault-turns",
        "2",
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def _by_key(rows):
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)), "an episode has two rows"
    return {r["key"]: r for r in rows}


def test_parallel_killed_and_resumed_runs_write_each_row_once(tmp_path):
    whole = tmp_path / "whole"
    rc, text = run(_eval_argv(whole, "--save-transcripts", "--workers", "2"))
    assert rc == 0 and f"Transcripts: {whole / TRANSCRIPTS_FILE}" in text
    reference = _by_key(load_transcripts(whole))
    assert len(reference) == len(load_records(whole)) == 24
    # A kill after 10 records: every row was written before its record, so the file has rows
    # whose records never came, and a torn last line.
    killed = tmp_path / "killed"
    shutil.copytree(whole, killed)
    lines = (killed / RECORDS_FILE).read_bytes().splitlines(keepends=True)
    (killed / RECORDS_FILE).write_bytes(b"".join(lines[:10]))
    with open(killed / TRANSCRIPTS_FILE, "ab") as fh:
        fh.write(b'{"key": "episode|torn')
    rc, _ = run(_eval_argv(killed, "--save-transcripts", "--workers", "2", "--resume"))
    assert rc == 0
    assert _by_key(load_transcripts(killed)) == reference
    assert len((killed / TRANSCRIPTS_FILE).read_bytes().splitlines()) == 24
    # A second writer into a finished folder is refused, and the rows stay as they are.
    before = (whole / TRANSCRIPTS_FILE).read_bytes()
    assert run(_eval_argv(whole, "--save-transcripts"))[0] == 2
    assert (whole / TRANSCRIPTS_FILE).read_bytes() == before
    # A resume must keep the plan, transcripts included.
    assert run(_eval_argv(whole, "--resume"))[0] == 2
    assert (whole / TRANSCRIPTS_FILE).read_bytes() == before


def test_episodes_recorded_without_rows_get_them_by_replay(tmp_path):
    plan = dict(
        env_ids=[TOOLUSE],
        agents={"oracle": "oracle", "eps": "oracle:epsilon=0.5"},
        tasks=2,
        samples=2,
        budgets=[8],
    )
    run_plan(EvalPlan(**plan, transcripts=True), tmp_path / "a")
    run_plan(EvalPlan(**plan), tmp_path / "b")
    assert not (tmp_path / "b" / TRANSCRIPTS_FILE).exists()
    # A lost config.json is rewritten from the plan given; the recorded episodes then get
    # their rows by replaying their actions (checked against their observation digests).
    (tmp_path / "b" / CONFIG_FILE).unlink()
    run_plan(EvalPlan(**plan, transcripts=True), tmp_path / "b", resume=True)
    assert _by_key(load_transcripts(tmp_path / "b")) == _by_key(load_transcripts(tmp_path / "a"))


def test_export_sft_rows_load_render_and_replay(tmp_path):
    from budget_envs.integrations.tiny_model import build_tiny_tokenizer

    out = tmp_path / "sft"
    rc, text = run(
        ["export-sft", TOOLUSE, "--tasks", "3", "--split", "test", "--agent", "oracle-eps0.5"]
        + ["--out", str(out), "--quiet", "--env-kwargs", '{"level": [1, 2]}']
    )
    assert rc == 0 and "3 episodes written" in text
    rc, _ = run(
        ["export-sft", ALFWORLD, "--tasks", "2", "--split", "valid", "--budget", "30"]
        + ["--out", str(out), "--quiet"]
    )
    assert rc == 0
    # the rows, and the writer lock eval's run folders hold too (no temp file left behind)
    assert sorted(p.name for p in out.iterdir()) == [".lock", "test.jsonl", "valid.jsonl"]
    ds = load(out / "test.jsonl", out / "valid.jsonl")
    assert ds.num_rows == 5
    rows = load_transcripts(out / "test.jsonl") + load_transcripts(out / "valid.jsonl")
    assert {r["agent"] for r in rows} == {"oracle-eps0.5", "oracle"}
    assert all(r["task_id"].startswith("test/") for r in rows if r["env_id"] == TOOLUSE)
    agreed = [t["oracle_agreed"] for r in rows for t in r["turns"]]
    assert set(agreed) == {0, 1}  # oracle-eps: some turns the oracle's, some random
    tok = build_tiny_tokenizer(["go east"])
    for row, arrow_row in zip(rows, ds):
        replay_independently(arrow_row)
        assert replay_row(row) == row
        tools = json.loads(row["tools"]) if row["tools"] else None
        assert row["messages"][-1]["content"] in tok.apply_chat_template(
            row["messages"], tools=tools, tokenize=False
        )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--tasks", "0"], "--tasks must be at least 1"),
        (["--tasks", "2", "--budget", "0"], "--budget must be at least 1"),
        (["--tasks", "2", "--agent", "nope"], "unknown agent kind 'nope'"),
        (["--tasks", "2", "--env-kwargs", '{"split": "valid"}'], "differs from split 'train'"),
    ],
)
def test_export_sft_usage_errors_are_one_line(tmp_path, capsys, argv, says):
    rc, _ = run(["export-sft", TOOLUSE, "--out", str(tmp_path / "o"), "--quiet", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and says in err[0], err
    assert not Path(tmp_path / "o").exists() or not any(Path(tmp_path / "o").iterdir())
