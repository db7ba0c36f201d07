"""Vector envs along a researcher's first loop: mixed outcomes on one step, mixed families in one
vector env, one type per info key, and the records' figures unchanged by the typed infos.

Gymnasium's vector envs batch ``info`` into one typed array per key (nested dicts recursively),
so a value that is an int in one sub-env and None in another raised ``TypeError``; and a vector
env needs one observation and one action space for every sub-env.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from budget_envs.registry import entry_for, registered_ids
from contract_helpers import make

from budget_envs.core import MAX_TEXT_LENGTH
from budget_envs.info import INFO_VALUE_TYPES, NO_TURN

IDS = registered_ids()
PRODUCT_IDS = [i for i in IDS if i.startswith("BudgetMix/")]
#: The ToolUse budget of the mixed-outcome runs: every sub-env ends on this turn.
END = 8
LOSE = '{"tool_calls":[{"name":"submit","arguments":{"answer":"0.00"}}]}'
#: Small settings per family, so generated games stay few (TextWorld: two level-1 games).
SMALL = {
    "BudgetMix/ToolUse-v0": {"level": 1},
    "BudgetMix/WebShop-v0": {"level": 1},
    "BudgetMix/TextWorld-v0": {"level": 1, "tasks_per_level": 2},
    "BudgetMix/TextWorld-CoinCollector-v0": {"level": 1, "tasks_per_level": 2},
    "BudgetMix/TextWorld-TreasureHunter-v0": {"level": 1, "tasks_per_level": 2},
    "BudgetMix/TextWorld-Cooking-v0": {"level": 1, "tasks_per_level": 2},
    "BudgetMix/ALFWorld-v0": {},
}
#: One id per family, for the mixed-family vector envs.
FAMILY_IDS = sorted({entry_for(i).family: i for i in reversed(PRODUCT_IDS)}.values())


def _small(env_id: str) -> dict:
    return dict(SMALL.get(env_id, {}))


@pytest.fixture(scope="module", autouse=True)
def games_generated_beforehand():
    """Generate the games the vector runs play before any vector env exists (generation is a
    one-off cost of the family, not part of the loop under test)."""
    for env_id in FAMILY_IDS:
        env = make(env_id, budget=None, **_small(env_id))
        unwrapped = env.unwrapped
        if hasattr(unwrapped, "game_path"):
            for task in unwrapped.task_ids[:2]:
                assert unwrapped.game_path(task).exists()
        env.close()


class Cycle(gym.Wrapper):
    """Resets cycle through the first two tasks from ``start`` (autoreset included)."""

    def __init__(self, env, start=0):
        super().__init__(env)
        self._count = start

    def reset(self, *, seed=None, options=None):
        options = dict(options or {})
        options.setdefault("task_id", self._count % 2)
        self._count += 1
        return self.env.reset(seed=seed, options=options)


# ---------------------------------------------------------------------- one type per key
def _types(value, path, out):
    if isinstance(value, dict):
        out.setdefault(path, set()).add("dict")
        for key, item in value.items():
            _types(item, (*path, key), out)
    else:
        assert isinstance(value, INFO_VALUE_TYPES), (path, value)
        name = type(value).__name__
        out.setdefault(path, set()).add(name)


def test_every_info_key_has_one_type_across_every_id():
    """Won, lost, budget-ended and faulted episodes of every id: each key (at any depth) has one
    type, so any mix of envs batches."""
    seen: dict[tuple, set[str]] = {}
    outcomes: dict[str, set[str]] = {}
    for env_id in IDS:
        env = make(
            env_id,
            budget=(3, 12),
            faults={"kinds": None, "rate": 0.25, "seed": 0},
            **_small(env_id),
        )
        env = Cycle(env)
        rng = np.random.default_rng(0)
        for episode in range(6):
            obs, info = env.reset(seed=episode)
            _types(info, (), seen)
            while True:
                best = env.unwrapped.oracle_actions()
                if episode % 2 == 0 and best:
                    action = best[0]
                else:
                    offered = info["candidate_actions"] or [""]
                    action = offered[int(rng.integers(len(offered)))]
                obs, reward, terminated, truncated, info = env.step(action)
                _types(info, (), seen)
                if terminated or truncated:
                    outcomes.setdefault(env_id, set()).add(info["episode_summary"]["stop_reason"])
                    break
        env.close()
    mixed = {path: kinds for path, kinds in seen.items() if len(kinds) > 1}
    assert not mixed, mixed
    assert seen[("episode_summary", "first_success_turn")] == {"int"}
    assert seen[("fault", "executed")] == {"str"}
    assert seen[("fault", "cost_before")] == {"int"}
    ends = set().union(*outcomes.values())
    assert {"won", "budget"} <= ends, outcomes


# ---------------------------------------------------------------------- mixed outcomes
def _plan_action(role, turn, cost, best):
    """The action of sub-env ``role`` on 1-based ``turn`` so that every role ends on turn END:
    win (invalid turns, then the oracle), lose (a premature submit), budget (invalid turns),
    fault (as win, but a drop fault takes the winning turn)."""
    if role == "lose":
        return LOSE if turn == END else ""
    if role == "budget":
        return ""
    return best[0] if END - turn + 1 <= cost else ""


ROLES = ("win", "lose", "budget", "fault")


def _role_env(role):
    faults = {"kinds": "drop", "at_turn": END, "seed": 0} if role == "fault" else None
    return Cycle(make("BudgetMix/ToolUse-v0", level=1, budget=END, faults=faults))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_win_lose_budget_and_fault_end_on_the_same_step(mode):
    fns = [lambda role=role: _role_env(role) for role in ROLES]
    if mode == "sync":
        venv = gym.vector.SyncVectorEnv(fns)
    else:
        venv = gym.vector.AsyncVectorEnv(fns, shared_memory=False)
    assert venv.single_action_space == _role_env("win").action_space
    obs, infos = venv.reset(seed=list(range(len(ROLES))))
    rounds = 3
    try:
        for _ in range(rounds):
            for turn in range(1, END + 1):
                costs = venv.call("cost_to_go")
                best = venv.call("oracle_actions")
                assert all(c <= END - 1 for c in costs), costs  # the plan fits the budget
                actions = [
                    _plan_action(role, turn, costs[i], best[i]) for i, role in enumerate(ROLES)
                ]
                obs, rewards, terms, truncs, infos = venv.step(actions)
                if turn < END:
                    assert not (terms.any() or truncs.any()), (turn, terms, truncs)
            assert terms.tolist() == [True, True, False, False]
            assert truncs.tolist() == [False, False, True, True]
            summary = infos["episode_summary"]
            assert infos["_episode_summary"].all()
            assert summary["won"].tolist() == [True, False, False, False]
            assert summary["first_success_turn"].tolist() == [END, NO_TURN, NO_TURN, NO_TURN]
            assert list(summary["stop_reason"]) == ["won", "lost", "budget", "budget"]
            assert infos["_fault"].tolist() == [False, False, False, True]
            assert infos["fault"]["kind"][3] == "drop" and infos["fault"]["executed"][3] == ""
            assert rewards.tolist()[0] == 1.0
            # the next step autoresets every sub-env (Gymnasium's next-step autoreset)
            obs, rewards, terms, truncs, infos = venv.step([""] * len(ROLES))
            assert infos["budget"]["used"].tolist() == [0] * len(ROLES)
            assert not (terms.any() or truncs.any())
    finally:
        venv.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_with_mixed_outcomes_and_faults(mode):
    """gymnasium.make_vec, as a user writes it: random faults, so wins, losses, budget ends and
    faults fall on the same steps in changing mixes, over many autoresets."""
    venv = gym.make_vec(
        "BudgetMix/ToolUse-v0",
        num_envs=4,
        vectorization_mode=mode,  # async with its defaults: shared memory on
        budget=END,
        level=1,
        faults={"kinds": ["drop", "slip"], "rate": 0.2, "seed": 0},
    )
    obs, infos = venv.reset(seed=0)
    turn = np.ones(4, dtype=int)
    ends: dict[str, int] = {}
    mixed_steps = faulted_end_steps = 0
    done_before = np.zeros(4, dtype=bool)
    try:
        for _ in range(120):
            costs = venv.call("cost_to_go")
            best = venv.call("oracle_actions")
            actions = []
            for i in range(4):
                role = ROLES[i] if costs[i] <= END else "budget"
                if done_before[i] or (role in ("win", "fault") and not best[i]):
                    actions.append("")
                else:
                    actions.append(_plan_action(role, int(turn[i]), costs[i], best[i]))
            obs, rewards, terms, truncs, infos = venv.step(actions)
            over = terms | truncs
            reasons = set()
            for i in np.flatnonzero(over & ~done_before):
                reason = infos["episode_summary"]["stop_reason"][i]
                ends[reason] = ends.get(reason, 0) + 1
                reasons.add(reason)
                if "_fault" in infos and infos["_fault"][i]:
                    faulted_end_steps += 1
            mixed_steps += len(reasons) > 1
            turn = np.where(over | done_before, 1, turn + 1)
            done_before = over
    finally:
        venv.close()
    assert ends.get("won", 0) and ends.get("lost", 0) and ends.get("budget", 0), ends
    assert mixed_steps >= 3 and faulted_end_steps >= 1, (mixed_steps, faulted_end_steps)


# ---------------------------------------------------------------------- mixed families
def test_every_product_id_has_the_same_spaces():
    """Every registered product id (the test-only toy env keeps its own, smaller bounds)."""
    assert len(PRODUCT_IDS) >= 7, PRODUCT_IDS
    spaces = {}
    for env_id in PRODUCT_IDS:
        env = make(env_id, **_small(env_id))
        spaces[env_id] = (env.observation_space, env.action_space)
        assert env.action_space.max_length == MAX_TEXT_LENGTH
        assert env.observation_space.max_length == MAX_TEXT_LENGTH
        env.close()
    first = next(iter(spaces.values()))
    assert all(pair == first for pair in spaces.values()), spaces


@pytest.mark.parametrize("mode", ["sync", "async", "async-pipes"])
def test_one_vector_env_mixes_every_family(mode):
    assert len(FAMILY_IDS) == 4, FAMILY_IDS
    fns = [
        lambda env_id=env_id: Cycle(
            make(
                env_id,
                budget=(2, 5),
                faults={"kinds": ["slip", "drop", "garble"], "rate": 0.3, "seed": 1},
                **_small(env_id),
            )
        )
        for env_id in FAMILY_IDS
    ]
    if mode == "sync":
        venv = gym.vector.SyncVectorEnv(fns)
    elif mode == "async":
        venv = gym.vector.AsyncVectorEnv(fns)
    else:
        venv = gym.vector.AsyncVectorEnv(fns, shared_memory=False)
    rng = np.random.default_rng(0)
    obs, infos = venv.reset(seed=[1, 2, 3, 4])
    assert sorted(set(infos["task_id"])) == sorted(infos["task_id"])
    ends = np.zeros(len(FAMILY_IDS), dtype=int)
    invalid = 0
    try:
        for _ in range(24):
            actions = []
            for i in range(len(FAMILY_IDS)):
                offered = infos["candidate_actions"][i] or [""]
                actions.append(offered[int(rng.integers(len(offered)))])
            obs, rewards, terms, truncs, infos = venv.step(actions)
            assert all(
                isinstance(o, str) and venv.single_observation_space.contains(o) for o in obs
            )
            ends += terms | truncs
            faulted = infos.get("_fault", np.zeros(len(FAMILY_IDS), dtype=bool))
            invalid += int(np.sum(infos["invalid_action"] & ~faulted))
    finally:
        venv.close()
    assert (ends >= 2).all(), ends  # every family ended episodes and autoreset
    assert invalid == 0  # candidates are sendable in every family


# ---------------------------------------------------------------------- records unchanged
def test_records_keep_null_and_figures_follow_the_outcomes(tmp_path):
    """The typed infos (-1, "") never reach the records: a lost episode's first success turn and
    a dropped fault's executed action stay null, and Pass@(1,T) and recovery computed by the
    metrics equal the same figures counted from each record's won and turns."""
    from budget_envs.eval.metrics import first_success_matrix, pass_at_kt, recovery_table
    from budget_envs.eval.runner import EvalPlan, load_records, run_plan

    plan = EvalPlan(
        env_ids=["BudgetMix/ToolUse-v0"],
        agents={"eps": "oracle:epsilon=0.5", "random": "random"},
        tasks=4,
        samples=3,
        budgets=[10],
        fault_turns=[1, 2],
        fault_kinds=("drop", "slip"),
        env_kwargs={"level": 1},
    )
    run_plan(plan, tmp_path)
    records = [r for r in load_records(tmp_path) if r.get("record", "episode") == "episode"]
    won = [r for r in records if r["won"]]
    lost = [r for r in records if not r["won"]]
    dropped = [f for r in records for f in r["faults"] if f["effect"] == "dropped"]
    assert won and lost and dropped, (len(won), len(lost), len(dropped))
    for r in records:
        if r["won"]:
            assert r["first_success_turn"] == r["turns"] and r["stop_reason"] == "won"
        else:
            assert r["first_success_turn"] is None
        for f in r["faults"]:
            assert isinstance(f["cost_before"], int) and f["cost_before"] >= 0
            assert (f["executed"] is None) == (f["effect"] == "dropped"), f
    for agent in ("eps", "random"):
        clean = [r for r in records if r["agent"] == agent and r["fault_turn"] is None]
        for t in (3, 6, 10):
            tasks, matrix = first_success_matrix(clean, t)
            got = float(pass_at_kt(matrix, [1], [t])[0, 0])
            by_task = {}
            for r in clean:
                by_task.setdefault(r["task_id"], []).append(r["won"] and r["turns"] <= t)
            want = float(np.mean([np.mean(v) for v in by_task.values()]))
            assert got == pytest.approx(want), (agent, t)
        faulted = [r for r in records if r["agent"] == agent]
        rows = recovery_table(faulted)
        assert {row.fault_turn for row in rows} == {1, 2}
        for row in rows:
            group = [r for r in faulted if r["fault_turn"] == row.fault_turn]
            assert row.success == pytest.approx(np.mean([r["won"] for r in group]))
