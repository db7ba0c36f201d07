"""The async chat agent and the async driver, against the test server in its own process."""

from __future__ import annotations

import email.utils
import json
import socket

import aiohttp  # noqa: E402, F401  (the chat agent needs budget-envs[chat]; a missing extra fails)
import gymnasium as gym
import pytest
from budget_envs.registry import registered_ids
from chat_server import TEXT_ACTIONS, chat_server
from contract_helpers import TOY_ID

from budget_envs.cli import main
from budget_envs.errors import PreflightError
from budget_envs.eval.agents import make_agent, parse_spec, spec_from_mapping
from budget_envs.eval.chat import LENGTH_NOTE, ChatAgent, Clock, split_reasoning
from budget_envs.eval.runner import EvalPlan, load_records, plan_jobs, run_episode, run_plan
from budget_envs.eval.runner.async_driver import EnvPool
from budget_envs.eval.runner.worker import Worker


@pytest.fixture(scope="module")
def server():
    with chat_server(think=True) as s:
        yield s


@pytest.fixture
def fresh(server):
    server.clear()
    return server


class FakeClock(Clock):
    """A clock that never waits: it records every sleep asked for and advances its time."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _agent(server, **kw) -> ChatAgent:
    kw.setdefault("timeout", 10.0)
    return ChatAgent(base_url=server.url, model="test-model", **kw)


def _one_turn(agent, observation="You are in a room.", info=None):
    info = info or {"goal": "Find the key."}
    agent.reset(env_id="BudgetMix/TextWorld-v0", observation=observation, info=info, seed=7)
    return agent.act(observation, info)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------- requests
def test_passthrough_reaches_the_server_and_only_fields_set_are_sent(fresh):
    extra = {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20}
    agent = _agent(
        fresh,
        temperature=0.6,
        top_p=0.9,
        stop=["\n", "###"],
        seed=3,
        presence_penalty=0.1,
        frequency_penalty=0.2,
        reasoning_effort="low",
        max_completion_tokens=64,
        extra_body=extra,
    )
    _one_turn(agent)
    plain = _agent(fresh)
    _one_turn(plain)
    sent, bare = fresh.requests()
    assert {k: v for k, v in sent.items() if k != "messages"} == {
        "model": "test-model",
        "temperature": 0.6,
        "top_p": 0.9,
        "stop": ["\n", "###"],
        "seed": (3 * 1_000_003 + 7) % 2**31,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "reasoning_effort": "low",
        "max_completion_tokens": 64,
        "chat_template_kwargs": {"enable_thinking": False},
        "top_k": 20,
    }
    assert sorted(bare) == ["messages", "model"]
    agent.close()
    plain.close()


def test_reasoning_models_get_max_completion_tokens_and_no_sampling(fresh):
    agent = ChatAgent(base_url=fresh.url, model="o3-mini", temperature=0.7, max_tokens=50)
    assert agent.reasoning_model
    _one_turn(agent)
    (sent,) = fresh.requests()
    assert sent["max_completion_tokens"] == 50
    assert not {"temperature", "max_tokens", "top_p"} & set(sent)
    assert not ChatAgent(base_url=fresh.url, model="qwen3-8b").reasoning_model
    assert ChatAgent(base_url=fresh.url, model="openai/gpt-5-mini").reasoning_model
    agent.close()


def test_spec_values_are_json_and_round_trip():
    spec = (
        'chat:base_url=http://127.0.0.1:1/v1,model=qwen,stop=["\\n","###"],'
        'extra_body={"chat_template_kwargs": {"enable_thinking": false}, "top_k": 20},top_p=0.95'
    )
    kind, kwargs = parse_spec(spec)
    assert kind == "chat" and kwargs["stop"] == ["\n", "###"] and kwargs["top_p"] == 0.95
    assert kwargs["extra_body"] == {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20}
    assert parse_spec(spec_from_mapping({"kind": kind, **kwargs})) == (kind, kwargs)
    agent = make_agent(spec)
    assert agent.stop == ["\n", "###"] and agent.seed is None
    assert make_agent({"kind": "chat", "base_url": "http://x/v1", "model": "m"}).model == "m"
    with pytest.raises(ValueError, match="key=value"):
        parse_spec("chat:model=m,oops")


# ---------------------------------------------------------------------- replies
def test_a_think_reply_yields_the_action_after_the_block(fresh):
    agent = _agent(fresh)
    action = _one_turn(agent)
    assert action in TEXT_ACTIONS
    (turn,) = agent.turn_log()
    assert turn["reasoning"].startswith("digest ") and turn["action"] == action
    assert turn["finish_reason"] == "stop" and turn["prompt_tokens"] > 0
    # the next request's history holds the action, not the thinking
    agent.act("Next room.", {})
    history = fresh.requests()[-1]["messages"]
    assert history[2] == {"role": "assistant", "content": action}
    # a server's reasoning field is kept as reasoning too, with its token count
    fresh.script(
        [{"message": {"content": "go west", "reasoning_content": "west is open"}}],
    )
    assert agent.act("Room 3.", {}) == "go west"
    assert agent.turn_log()[-1]["reasoning"] == "west is open"
    assert split_reasoning("<think>unfinished") == ("", "unfinished")
    assert split_reasoning("opened in the prompt</think> take key") == (
        "take key",
        "opened in the prompt",
    )
    agent.close()


def test_a_reply_cut_by_length_is_an_invalid_turn_with_feedback(fresh, tmp_path):
    fresh.script([{"message": {"content": "<think>I should go"}, "finish_reason": "length"}])
    plan = EvalPlan(
        env_ids=[TOY_ID],
        agents={"llm": f"chat:base_url={fresh.url},model=test-model"},
        tasks=1,
        samples=1,
        budgets=[2],
    )
    result = run_plan(plan, tmp_path / "run")
    assert result.errors == 0
    (rec,) = load_records(tmp_path / "run")
    assert rec["turns"] == 2 and rec["error"] is None
    first, second = rec["agent_turns"]
    assert first["finish_reason"] == "length" and first["invalid"] == "length"
    assert first["action"] == "" and first["reasoning"] == "I should go"
    assert second["finish_reason"] == "stop" and "invalid" not in second
    last_user = fresh.requests()[-1]["messages"][-1]
    assert last_user["role"] == "user" and last_user["content"].startswith(LENGTH_NOTE)


# ---------------------------------------------------------------------- retries
def test_retry_after_schedules_the_retry_that_many_seconds_later(fresh):
    clock = FakeClock()
    agent = _agent(fresh, clock=clock, backoff=0.5)
    fresh.script([{"status": 429, "headers": {"Retry-After": "2"}, "body": {"error": "slow down"}}])
    assert _one_turn(agent) in TEXT_ACTIONS
    assert clock.sleeps == [2.0]
    # the HTTP-date form, against the injected clock's now
    when = email.utils.formatdate(clock.now + 5, usegmt=True)
    fresh.script([{"status": 503, "headers": {"Retry-After": when}, "body": {}}])
    agent.act("again", {})
    assert clock.sleeps[1] == pytest.approx(5.0, abs=1.0)
    # no header: exponential backoff with jitter, between half and all of backoff * 2**(n-1)
    fresh.script([{"status": 500, "body": {}}, {"status": 500, "body": {}}])
    agent.act("and again", {})
    first, second = clock.sleeps[2:]
    assert 0.25 <= first <= 0.5 and 0.5 <= second <= 1.0
    assert agent.usage()["retries"] == 4 and len(agent.turn_log()) == 3
    agent.close()


# ---------------------------------------------------------------------- preflight
def test_a_dead_server_fails_the_preflight_in_one_line_with_exit_2(tmp_path, capsys):
    url = f"http://127.0.0.1:{_free_port()}/v1"
    rc = main(
        ["eval", TOY_ID, "--agent", f"chat:base_url={url},model=m", "--out", str(tmp_path / "r")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "no OpenAI-compatible server answers" in err[0] and url in err[0]
    assert not (tmp_path / "r").exists()
    # A named agent: the line leads with the name the run gives it, not its spec.
    spec = f"smart=chat:base_url={url},model=gpt-x"
    rc = main(["eval", TOY_ID, "--agent", spec, "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "smart: no OpenAI-compatible server" in err[0], err
    assert "chat:gpt-x" not in err[0]


def test_the_preflight_names_a_missing_model_and_a_bad_key(fresh, monkeypatch):
    with pytest.raises(PreflightError, match="'nope' is not served .* 'test-model'"):
        ChatAgent(base_url=fresh.url, model="nope").preflight()
    assert ChatAgent(base_url=fresh.url, model="test-model").preflight() == ["test-model"]
    with chat_server(api_key="sk-right") as guarded:
        monkeypatch.setenv("BUDGETMIX_TEST_KEY", "sk-wrong")
        agent = ChatAgent(
            base_url=guarded.url, model="test-model", api_key_env="BUDGETMIX_TEST_KEY"
        )
        with pytest.raises(PreflightError, match=r"refused the API key from \$BUDGETMIX_TEST_KEY"):
            agent.preflight()
        monkeypatch.setenv("BUDGETMIX_TEST_KEY", "sk-right")
        assert agent.preflight() == ["test-model"]
        agent.close()


# ---------------------------------------------------------------------- the async driver
def _records(run_dir) -> dict[str, dict]:
    return {
        r["key"]: {k: v for k, v in r.items() if k != "wall_time"} for r in load_records(run_dir)
    }


CONCURRENCY_IDS = [TOY_ID, *registered_ids()]


@pytest.mark.parametrize("env_id", CONCURRENCY_IDS)
def test_concurrency_1_and_64_give_the_same_records(fresh, tmp_path, env_id):
    runs = {}
    for concurrency in (1, 64):
        plan = EvalPlan(
            env_ids=[env_id],
            agents={"llm": f"chat:base_url={fresh.url},model=test-model,concurrency={concurrency}"},
            tasks=3,
            samples=3,
            budgets=[3],
        )
        try:
            result = run_plan(plan, tmp_path / f"c{concurrency}")
        except gym.error.DependencyNotInstalled as exc:
            pytest.skip(f"{env_id}: {exc}")
        assert result.errors == 0 and result.ran == 9
        runs[concurrency] = _records(tmp_path / f"c{concurrency}")
    assert len(runs[1]) == 9 and runs[1] == runs[64]
    # every turn is in the record, with its finish_reason and usage
    for rec in runs[64].values():
        assert len(rec["agent_turns"]) == rec["turns"] == rec["tokens"]["requests"]
        assert all(t["finish_reason"] and t["prompt_tokens"] > 0 for t in rec["agent_turns"])
    # the replies depend on each conversation: episodes did not all get the same actions
    actions = {tuple(t["action"] for t in r["agent_turns"]) for r in runs[64].values()}
    assert len(actions) > 1


def test_the_async_driver_writes_what_the_one_at_a_time_driver_writes(fresh, tmp_path):
    spec = f"chat:base_url={fresh.url},model=test-model"
    plan = EvalPlan(env_ids=["BudgetMix/ToolUse-v0"], agents={"llm": spec}, tasks=2, samples=2)
    run_plan(plan, tmp_path / "async")
    worker = Worker({"llm": spec})
    jobs = plan_jobs(plan)
    assert len(jobs) == 4
    sync = {}
    for job in jobs:
        rec = run_episode(job, worker.agent("llm"), worker.env(job, job.env_id, {}))
        sync[rec.key] = {k: v for k, v in rec.__dict__.items() if k != "wall_time"}
    worker.close()
    assert sync == _records(tmp_path / "async")
    # the tools schema went with every ToolUse request
    requests = fresh.requests()
    assert requests and all(r.get("tools") for r in requests)


def test_resume_skips_what_the_concurrent_run_finished(fresh, tmp_path):
    spec = f"chat:base_url={fresh.url},model=test-model"
    plan = EvalPlan(env_ids=[TOY_ID], agents={"llm": spec}, tasks=2, samples=3, budgets=[2])
    first = run_plan(plan, tmp_path / "run")
    again = run_plan(plan, tmp_path / "run", resume=True)
    assert (first.ran, again.ran, again.skipped) == (6, 0, 6)


def test_live_web_shop_envs_share_one_server():
    worker = Worker({"random": "random"})
    pool = EnvPool(worker, {})
    plan = EvalPlan(env_ids=["BudgetMix/WebShop-v0"], agents={"random": "random"}, tasks=1)
    job = plan_jobs(plan)[0]
    envs = [pool.acquire(job) for _ in range(3)]
    try:
        owner, *siblings = envs
        assert owner.unwrapped.server is not None
        assert all(e.unwrapped.server is None for e in siblings)
        assert {e.unwrapped.base_url for e in envs} == {owner.unwrapped.base_url}
        for env in envs:
            obs, info = env.reset(seed=job.seed, options={"task_id": job.task_index})
            assert info["task_id"] == job.task_id
        pool.release(job, siblings[0])
        assert pool.acquire(job) is siblings[0]
    finally:
        pool.close()
        worker.close()


def test_agent_config_file_and_concurrency_flag(fresh, tmp_path):
    config = tmp_path / "agent.yaml"
    config.write_text(
        "kind: chat\n"
        "name: tiny\n"
        f"base_url: {fresh.url}\n"
        "model: test-model\n"
        'stop: ["\\n", "###"]\n'
        "extra_body:\n"
        "  chat_template_kwargs: {enable_thinking: false, extra: 'a,b'}\n",
        encoding="utf-8",
    )
    out = tmp_path / "run"
    args = ["eval", TOY_ID, "--agent-config", str(config), "--concurrency", "8"]
    rc = main(
        [*args, "--tasks", "1", "--samples", "2", "--budgets", "2", "--out", str(out), "--quiet"]
    )
    assert rc == 0
    recs = load_records(out)
    assert len(recs) == 2 and {r["agent"] for r in recs} == {"tiny"}
    saved = json.loads((out / "config.json").read_text())["agents"]["tiny"]
    assert parse_spec(saved)[1]["concurrency"] == 8
    sent = fresh.requests()[-1]
    assert sent["stop"] == ["\n", "###"]
    assert sent["chat_template_kwargs"] == {"enable_thinking": False, "extra": "a,b"}
