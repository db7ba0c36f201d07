"""The chat agent against a real OpenAI-compatible server: ``transformers serve`` on CPU.

The server hosts the suite's offline tiny model from a local folder (``save_pretrained``), is
started here on a free loopback port, and stopped afterwards. It needs ``budget-envs[serve,trl]``
(part of ``all``); under CI a missing piece fails the tests instead of skipping them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from contract_helpers import TOY_ID

from budget_envs.cli import main
from budget_envs.eval.chat import ChatAgent
from budget_envs.eval.runner import load_records

for _module in ("aiohttp", "fastapi", "uvicorn", "torch", "transformers", "trl"):
    pytest.importorskip(_module, reason="needs budget-envs[serve,trl] (in the 'all' extra)")

ENV_IDS = ["BudgetMix/ToolUse-v0", "BudgetMix/TextWorld-v0"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(base_url, model)`` of ``transformers serve`` hosting the tiny model."""
    from budget_envs.integrations.tiny_model import build_tiny_model, build_tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny-model")
    tokenizer = build_tiny_tokenizer()
    build_tiny_model(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    yield from _serve(folder, folder)


@pytest.fixture(scope="module")
def served_smollm2(tmp_path_factory):
    """``(base_url, model)`` of ``transformers serve`` hosting the prepared SmolLM2 folder."""
    from budget_envs.integrations.lm.models import prepare_model

    yield from _serve(prepare_model("smollm2-135m"), tmp_path_factory.mktemp("smollm2-serve"))


def _serve(folder, logs):
    import requests

    port = _free_port()
    log = open(logs / "serve.log", "w", encoding="utf-8")
    cmd = [
        sys.executable,
        "-c",
        "from transformers.cli.transformers import main; main()",
        "serve",
        str(folder),
        "--device",
        "cpu",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                log.flush()
                pytest.fail(
                    f"transformers serve exited with {proc.returncode}: "
                    + (logs / "serve.log").read_text()[-2000:]
                )
            try:
                if requests.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                pytest.fail("transformers serve did not answer within 300 s")
            time.sleep(0.25)
        yield base_url, str(folder)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_eval_end_to_end_records_every_turn(served, tmp_path, capsys):
    base_url, model = served
    out = tmp_path / "run"
    spec = f"tiny=chat:base_url={base_url},model={model},max_tokens=8,temperature=0.7,seed=1"
    argv = ["eval", *ENV_IDS, "--agent", spec, "--tasks", "2", "--samples", "2"]
    rc = main([*argv, "--budgets", "3", "--out", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    recs = load_records(out)
    assert {r["env_id"] for r in recs} == set(ENV_IDS) and len(recs) == 8
    for rec in recs:
        assert rec["error"] is None and rec["turns"] >= 1
        assert len(rec["agent_turns"]) == rec["turns"] == rec["tokens"]["requests"]
        for turn in rec["agent_turns"]:
            assert turn["finish_reason"] in ("stop", "length", "tool_calls")
            assert turn["prompt_tokens"] > 0 and 0 < turn["completion_tokens"] <= 8
    # a turn the server cut at max_tokens is an invalid turn, not a crash
    assert any(t["finish_reason"] == "length" for r in recs for t in r["agent_turns"])


def _first_prompt_tokens(agent: ChatAgent, env_id: str, info: dict) -> int:
    agent.reset(env_id=env_id, observation="You are in a room.", info=info, seed=0)
    agent.act("You are in a room.", info)
    (turn,) = agent.turn_log()
    return turn["prompt_tokens"]


def test_chat_template_kwargs_in_extra_body_change_the_rendered_prompt(served):
    base_url, model = served
    plain = ChatAgent(base_url=base_url, model=model, max_tokens=4)
    no_think = ChatAgent(
        base_url=base_url,
        model=model,
        max_tokens=4,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert plain.preflight() == no_think.preflight() and model in plain.preflight()
    a = _first_prompt_tokens(plain, TOY_ID, {})
    b = _first_prompt_tokens(no_think, TOY_ID, {})
    # Qwen3's template adds an empty think block to the generation prompt when thinking is off
    assert b > a
    plain.close()
    no_think.close()


def test_the_tools_schema_reaches_the_prompt(served):
    import gymnasium as gym

    base_url, model = served
    env = gym.make("BudgetMix/ToolUse-v0")
    _, info = env.reset(seed=0)
    env.close()
    assert info["tools"]
    with_tools = ChatAgent(base_url=base_url, model=model, max_tokens=4)
    without = ChatAgent(base_url=base_url, model=model, max_tokens=4, tools="never")
    env_id = "BudgetMix/ToolUse-v0"
    assert _first_prompt_tokens(with_tools, env_id, info) > _first_prompt_tokens(
        without, env_id, info
    )
    with_tools.close()
    without.close()


@pytest.mark.serve_model
def test_the_chat_agent_plays_smollm2_behind_transformers_serve(served_smollm2, tmp_path, capsys):
    """The chat agent against a real pretrained model on loopback: the same SmolLM2 folder the
    ``lm`` agent plays in process, every family's first id, the offered actions listed."""
    from budget_envs.registry import families

    base_url, model = served_smollm2
    ids = [rows[0].id for rows in families().values() if rows[0].id.startswith("BudgetMix/")]
    spec = (
        f"smol=chat:base_url={base_url},model={model},max_tokens=16,temperature=0,show_actions=true"
    )
    out = tmp_path / "run"
    argv = ["eval", *ids, "--agent", spec, "--tasks", "1", "--samples", "1", "--budgets", "2"]
    argv += ["--env-kwargs", '{"level": 1}', "--out", str(out), "--quiet"]
    assert main(argv) == 0, capsys.readouterr().err
    recs = load_records(out)
    assert len(recs) == len(ids)
    for rec in recs:
        assert rec["error"] is None, rec["error"]
        assert rec["tokens"]["prompt_tokens"] > 0 and rec["tokens"]["requests"] == rec["turns"]
