"""Reference agents, and the chat agent against a local chat-completions server started here."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from contract_helpers import TOY_ID

from budget_envs.errors import PreflightError
from budget_envs.eval.agents import (
    Agent,
    AgentError,
    ChatAgent,
    OracleAgent,
    RandomAgent,
    make_agent,
    tool_call_action,
)
from budget_envs.eval.runner import EvalPlan, load_records, run_plan

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "add two ints",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            },
        },
    }
]


class ChatServer:
    """A scripted chat-completions server on 127.0.0.1.

    Each script entry is ``(status, reply, delay)``: ``reply`` is a message dict (or raw text for
    a non-JSON body). When the script runs out, it answers "look".
    """

    def __init__(self):
        self.script: list[tuple[int, object, float]] = []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # the chat agent's preflight: the served models
                payload = json.dumps({"object": "list", "data": [{"id": "test-model"}]}).encode()
                self.send_response(200 if self.path == "/v1/models" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                status, reply, delay = (
                    server.script.pop(0) if server.script else (200, {"content": "look"}, 0)
                )
                if self.path != "/v1/chat/completions":
                    status, reply = 404, "not found"
                if delay:
                    time.sleep(delay)
                if isinstance(reply, dict):
                    payload = json.dumps(
                        {
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", **reply},
                                    "finish_reason": "stop",
                                }
                            ],
                            "usage": {
                                "prompt_tokens": 10,
                                "completion_tokens": 2,
                                "total_tokens": 12,
                            },
                        }
                    ).encode()
                else:
                    payload = str(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    with ChatServer() as s:
        yield s


def _agent(server, **kw):
    kw.setdefault("backoff", 0.01)
    kw.setdefault("timeout", 2.0)
    return ChatAgent(base_url=server.url, model="test-model", **kw)


def test_plain_reply_and_request_shape(server, monkeypatch):
    monkeypatch.setenv("BUDGETMIX_TEST_KEY", "sk-test")
    server.script = [
        (200, {"content": "go east\nbecause the door is east"}, 0),
        (200, {"content": "`take key`"}, 0),
    ]
    agent = _agent(server, api_key_env="BUDGETMIX_TEST_KEY", temperature=0.7, max_tokens=32)
    assert isinstance(agent, Agent)
    agent.reset(
        env_id="BudgetMix/TextWorld-v0",
        observation="You are in a room.",
        info={"goal": "Find the key."},
        seed=4,
    )
    assert agent.act("You are in a room.", {}) == "go east"
    assert agent.act("Room 2. A key lies here.", {}) == "take key"
    first, second = server.requests
    assert (
        first["model"] == "test-model" and first["temperature"] == 0.7 and first["max_tokens"] == 32
    )
    assert "text adventure" in first["messages"][0]["content"]
    assert "Find the key." in first["messages"][1]["content"]
    assert "tools" not in first
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert second["messages"][-1]["content"] == "Room 2. A key lies here."
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    assert agent.usage() == {
        "prompt_tokens": 20,
        "completion_tokens": 4,
        "requests": 2,
        "retries": 0,
    }


def test_no_key_no_header(server, monkeypatch):
    monkeypatch.delenv("BUDGETMIX_ABSENT_KEY", raising=False)
    agent = _agent(server, api_key_env="BUDGETMIX_ABSENT_KEY")
    agent.reset(env_id="X/Y-v0", observation="o", info={}, seed=0)
    agent.act("o", {})
    assert "Authorization" not in server.headers[0]


def test_native_tool_calls(server):
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
    }
    broken = {
        "id": "call_2",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 2,'},
    }
    server.script = [
        (200, {"content": None, "tool_calls": [call]}, 0),
        (200, {"content": None, "tool_calls": [broken]}, 0),
    ]
    agent = _agent(server)
    agent.reset(
        env_id="BudgetMix/ToolUse-v0",
        observation="Add 2 and 3.",
        info={"goal": "Add 2 and 3.", "tools": TOOLS},
        seed=0,
    )
    action = agent.act("Add 2 and 3.", {"tools": TOOLS})
    assert json.loads(action) == {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}
    assert json.loads(action) == json.loads(tool_call_action("add", {"a": 2, "b": 3}))
    action2 = agent.act("5", {"tools": TOOLS})
    # broken argument JSON goes to the env as is (the env answers it as an invalid turn)
    assert json.loads(action2)["tool_calls"][0]["arguments"] == '{"a": 2,'
    first, second = server.requests
    assert (
        first["tools"] == TOOLS and "calling the provided tools" in first["messages"][0]["content"]
    )
    msgs = second["messages"]
    assert msgs[2]["role"] == "assistant" and msgs[2]["tool_calls"][0]["id"] == "call_1"
    assert msgs[3] == {"role": "tool", "tool_call_id": "call_1", "content": "5"}


def test_server_errors_are_retried_then_succeed(server):
    server.script = [(500, "oops", 0), (503, "busy", 0), (200, {"content": "look"}, 0)]
    agent = _agent(server, retries=3)
    agent.reset(env_id="X/Y-v0", observation="o", info={}, seed=0)
    assert agent.act("o", {}) == "look"
    assert len(server.requests) == 3 and agent.usage()["retries"] == 2


def test_timeouts_are_retried_then_give_up(server):
    server.script = [(200, {"content": "slow"}, 1.0), (200, {"content": "fast"}, 0)]
    agent = _agent(server, retries=1, timeout=0.3)
    agent.reset(env_id="X/Y-v0", observation="o", info={}, seed=0)
    assert agent.act("o", {}) == "fast"
    server.script = [(200, {"content": "slow"}, 1.0)] * 2
    agent.reset(env_id="X/Y-v0", observation="o", info={}, seed=0)
    with pytest.raises(AgentError, match="2 attempts"):
        agent.act("o", {})


def test_client_errors_are_not_retried(server):
    server.script = [(400, "bad request: unknown model", 0)]
    agent = _agent(server, retries=3)
    agent.reset(env_id="X/Y-v0", observation="o", info={}, seed=0)
    with pytest.raises(AgentError, match="HTTP 400"):
        agent.act("o", {})
    assert len(server.requests) == 1


def test_history_window(server):
    agent = _agent(server, history=2)
    agent.reset(env_id="X/Y-v0", observation="start", info={}, seed=0)
    for i in range(5):
        agent.act(f"obs {i}", {})
    msgs = server.requests[-1]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[1]["content"] == "start" and msgs[-1]["content"] == "obs 4"


def test_teacher_forcing_builds_the_prefix(server):
    agent = _agent(server)
    agent.reset(env_id="X/Y-v0", observation="start", info={}, seed=0)
    agent.teacher_force("go east", "Room 2.", {})
    agent.act("Room 2.", {})
    msgs = server.requests[-1]["messages"]
    assert [(m["role"], m["content"]) for m in msgs[1:]] == [
        ("user", "start"),
        ("assistant", "go east"),
        ("user", "Room 2."),
    ]


def test_runner_with_chat_agent_records_tokens_and_errors(server, tmp_path):
    # the server answers "look" forever: every episode runs out of turns, with tokens counted
    plan = EvalPlan(
        env_ids=[TOY_ID],
        agents={"chat": _agent(server)},
        tasks=1,
        samples=2,
        budgets=[3],
        probe_states=1,
    )
    run_plan(plan, tmp_path / "ok")
    recs = load_records(tmp_path / "ok")
    eps = [r for r in recs if r["record"] == "episode"]
    assert all(r["error"] is None and not r["won"] and r["turns"] == 3 for r in eps)
    assert all(r["tokens"]["requests"] == 3 and r["tokens"]["prompt_tokens"] == 30 for r in eps)
    assert [r["correct"] for r in recs if r["record"] == "probe"] == [False]
    # a dead endpoint: the preflight refuses it before anything is written
    dead = ChatAgent(
        base_url="http://127.0.0.1:9/v1", model="m", retries=1, backoff=0.01, timeout=0.5
    )
    with pytest.raises(PreflightError, match="no OpenAI-compatible server answers"):
        run_plan(
            EvalPlan(env_ids=[TOY_ID], agents={"dead": dead}, tasks=1, samples=2, budgets=[3]),
            tmp_path / "dead",
        )
    assert not (tmp_path / "dead").exists()


def test_random_and_oracle_agents_are_seeded():
    info = {"admissible_actions": ["a", "b", "c", "d"]}

    def run(agent, seed):
        agent.reset(env_id="X/Y-v0", observation="", info=info, seed=seed)
        return [agent.act("", info) for _ in range(20)]

    assert run(RandomAgent(seed=1), 5) == run(RandomAgent(seed=1), 5)
    assert run(RandomAgent(seed=1), 5) != run(RandomAgent(seed=1), 6)
    assert (
        json.loads(RandomAgent().act("", {"admissible_actions": ["add"], "tools": TOOLS}))[
            "tool_calls"
        ][0]["name"]
        == "add"
    )
    oracle = OracleAgent(epsilon=0.5, seed=2)
    oracle.bind_oracle(lambda: ["best"])
    picks = run(oracle, 3)
    oracle2 = OracleAgent(epsilon=0.5, seed=2)
    oracle2.bind_oracle(lambda: ["best"])
    assert picks == run(oracle2, 3) and 0 < picks.count("best") < 20
    exact = OracleAgent()
    exact.bind_oracle(lambda: ["best"])
    assert set(run(exact, 0)) == {"best"}
    with pytest.raises(AgentError):
        OracleAgent().act("", info)


def test_agent_specs_and_argument_checks():
    assert isinstance(make_agent("random"), RandomAgent)
    assert make_agent("oracle:eps=0.25").epsilon == 0.25
    chat = make_agent("chat:base_url=http://127.0.0.1:1/v1,model=qwen,temperature=0.5,history=4")
    assert (chat.model, chat.temperature, chat.history) == ("qwen", 0.5, 4)
    for bad in ("nope", "oracle:epsilon", "oracle:colour=1", ""):
        with pytest.raises(ValueError):
            make_agent(bad)
    with pytest.raises(ValueError):
        OracleAgent(epsilon=1.5)
    with pytest.raises(ValueError):
        ChatAgent(base_url="ftp://x", model="m")
    with pytest.raises(ValueError):
        ChatAgent(base_url="http://x", model="m", retries=-1)
