"""The ``lm`` agent's speed: live episodes decoded together against one at a time, and the kept
KV cache against re-sending the conversation every turn (SmolLM2-135M-Instruct, CPU).

Run: ``.venv/bin/python -m pytest benchmarks/bench_lm.py --benchmark-only -p no:cacheprovider``
(after ``budgetmix prepare model smollm2-135m``).

Every episode plays ToolUse level 1 under greedy decoding with ``max_tokens=16`` and the offered
actions not listed, so every path plays exactly the same tokens. The first turn of every
episode (its long first prompt) is played in the setup, untimed; the timed call plays the next
``TURNS`` turns, the steady state of a long episode.

* ``lm-batch-8`` / ``lm-batch-32``: a turn of 8 (32) live episodes decoded together (role
  ``ours``) against the same turns of 8 episodes played one at a time (``baseline``); the ratio
  printed is seconds per turn, batched / one at a time (below 1: batching pays).
* ``lm-kept-cache``: one episode's turns with each episode's KV cache kept (``ours``) against the
  whole conversation re-sent each turn (``baseline``); ``extra_info`` holds the prefill tokens
  per turn of both.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

ENV_ID = "BudgetMix/ToolUse-v0"
TURNS = 2
FIRST = 1  # turns played in the setup


def _agent(**kw):
    from budget_envs.integrations.lm.agent import LMAgent

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    agent = LMAgent(model="smollm2-135m", temperature=0, max_tokens=16, show_actions=False, **kw)
    agent._load()
    return agent


@pytest.fixture(scope="module")
def agent():
    return _agent()


@pytest.fixture(scope="module")
def resend():
    return _agent(keep_cache=False)


class _Live:
    """``n`` live episodes on their own envs; ``turn(groups)`` plays one turn of each group of
    episodes as one batch."""

    def __init__(self, agent, n: int) -> None:
        import gymnasium as gym

        import budget_envs  # noqa: F401

        self.agent = agent
        self.envs = [gym.make(ENV_ID, level=1, budget=50) for _ in range(n)]
        self.eps, self.obs = [], []
        for i, env in enumerate(self.envs):
            obs, info = env.reset(seed=i)
            self.eps.append(agent.open_episode(env_id=ENV_ID, observation=obs, info=info, seed=i))
            self.obs.append((obs, info))

    def turn(self, batched: bool) -> None:
        groups = [list(range(len(self.eps)))] if batched else [[i] for i in range(len(self.eps))]
        for group in groups:
            reqs = [self.eps[i].prepare(*self.obs[i]) for i in group]
            for i, reply in zip(group, self.agent.engine.generate(reqs)):
                action = self.eps[i].finish(reply)
                obs, _, _, _, info = self.envs[i].step(action)
                self.obs[i] = (obs, info)

    def prefilled(self) -> list[int]:
        return [t["prefilled"] for ep in self.eps for t in ep.turn_log()[FIRST:]]

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _run(benchmark, agent, n: int, batched: bool) -> _Live:
    state = {}

    def setup():
        if "live" in state:
            state["live"].close()
        live = _Live(agent, n)
        for _ in range(FIRST):
            live.turn(batched)
        state["live"] = live
        return (), {}

    def timed():
        for _ in range(TURNS):
            state["live"].turn(batched)

    benchmark.pedantic(timed, setup=setup, rounds=1, iterations=1)
    return state["live"]


@pytest.mark.parametrize("n", [8, 32])
def test_lm_batched(benchmark, agent, n):
    live = _run(benchmark, agent, n, batched=True)
    benchmark.extra_info.update(
        {"compare": f"lm-batch-{n}", "role": "ours", "calls": n * TURNS, "live": n}
    )
    live.close()


def test_lm_one_at_a_time(benchmark, agent):
    live = _run(benchmark, agent, 8, batched=False)
    benchmark.extra_info.update(
        {"compare": ["lm-batch-8", "lm-batch-32"], "role": "baseline", "calls": 8 * TURNS}
    )
    live.close()


def test_lm_single_episode(benchmark, agent):
    live = _run(benchmark, agent, 1, batched=True)
    benchmark.extra_info.update({"live": 1, "calls": TURNS})
    live.close()


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "resent"])
def test_lm_cache(benchmark, agent, resend, kept):
    live = _run(benchmark, agent if kept else resend, 1, batched=True)
    tokens = live.prefilled()
    benchmark.extra_info.update(
        {
            "compare": "lm-kept-cache",
            "role": "ours" if kept else "baseline",
            "calls": TURNS,
            "prefill_tokens_per_turn": sum(tokens) / len(tokens),
        }
    )
    live.close()
