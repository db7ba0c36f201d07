"""EnvActorPool: envs in Ray actors, stepped in batches; the eval runner's Ray mode on it.

One local Ray for the module (``address="local"``, 2 CPUs, its own, shut down after), so a Ray
someone else started on this machine is never joined or stopped.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import ray  # noqa: E402  (the ray extra; a missing extra fails)
import toy_env  # noqa: E402
from contract_helpers import TOY_ID, make, policy_action  # noqa: E402

from budget_envs.eval.runner import EvalPlan, load_records, plan_jobs, run_plan  # noqa: E402
from budget_envs.service.ray_pool import EnvActorPool, SnapshotRef  # noqa: E402

TOOLUSE = "BudgetMix/ToolUse-v0"


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    # The toy env lives in the tests folder, which Ray workers cannot import: ship it by value.
    ray.cloudpickle.register_pickle_by_value(toy_env)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(toy_env)


def _strip(records):
    return sorted(
        json.dumps({k: v for k, v in r.items() if k != "wall_time"}, sort_keys=True)
        for r in records
    )


def test_pool_batches_equal_in_process_envs(local_ray):
    seeds = [3, 4, 5, 6]
    locals_ = [make(TOOLUSE, budget=5) for _ in seeds]
    rngs = [np.random.default_rng(s) for s in seeds]
    with EnvActorPool(TOOLUSE, 2, envs_per_actor=2, budget=5) as pool:
        assert pool.num_envs == 4 and pool.n_actors == 2
        assert [pool.actor_of(i) for i in range(4)] == [0, 0, 1, 1]
        got = pool.reset_batch(seeds=seeds)
        want = [env.reset(seed=s) for env, s in zip(locals_, seeds, strict=True)]
        assert got == want
        infos = [info for _, info in want]
        done = [False] * 4
        steps = 0
        for turn in range(6):
            live = [i for i in range(4) if not done[i]]
            if not live:
                break
            actions = [
                "not a tool call" if turn == 1 else policy_action(locals_[i], infos[i], rngs[i])
                for i in live
            ]
            got = pool.step_batch(actions, indices=live)
            for i, action, result in zip(live, actions, got, strict=True):
                expected = locals_[i].step(action)
                assert result == expected, (i, turn, action)
                infos[i] = expected[4]
                done[i] = expected[2] or expected[3]
                steps += 1
        assert steps >= 8
        # the oracle, the snapshot and restore reach the envs in the actors
        assert pool.call("oracle_actions", indices=[0]) == [locals_[0].unwrapped.oracle_actions()]
        assert pool.get_attr("won") == [env.unwrapped.won for env in locals_]


def test_pool_envs_snapshot_restore_and_bad_input(local_ray):
    with EnvActorPool(TOOLUSE, 2, budget=None) as pool:
        obs, info = pool.reset_batch(seeds=0, options={"task_id": 1})[1]
        env = pool.env(1)
        assert type(env.unwrapped).oracle_actions  # the family's oracle is visible on the type
        before = env.unwrapped.cost_to_go()
        ref = env.unwrapped.snapshot()
        assert isinstance(ref, SnapshotRef) and ref.index == 1
        env.step(env.unwrapped.oracle_actions()[0])
        assert env.unwrapped.cost_to_go() == before - 1
        env.unwrapped.restore(ref)
        assert env.unwrapped.cost_to_go() == before
        # bad input to an env is a turn with feedback, never an exception; the state is kept
        bad = pool.step_batch(["", "{not json"])
        assert [r[4]["invalid_action"] for r in bad] == [True, True]
        assert pool.call("cost_to_go", indices=[1]) == [before]
        assert pool.call("state_hash", indices=[1]) == [info["state_hash"]]
        with pytest.raises(AttributeError, match="is a method"):
            pool.get_attr("cost_to_go")


def test_pool_checks_its_arguments(local_ray):
    with pytest.raises(ValueError, match="n_actors must be a positive int, got 0"):
        EnvActorPool(TOOLUSE, 0)
    with pytest.raises(ValueError, match="envs_per_actor must be a positive int, got 'x'"):
        EnvActorPool(TOOLUSE, 1, envs_per_actor="x")
    with EnvActorPool(TOY_ID, 1, envs_per_actor=2, budget=4) as pool:
        with pytest.raises(ValueError, match="got 1 values for 2 envs"):
            pool.step_batch(["go east"])
        with pytest.raises(IndexError, match=r"in \[0, 2\), got 5"):
            pool.reset_batch(indices=[5])
        with pytest.raises(ValueError, match="must not repeat"):
            pool.reset_batch(indices=[0, 0])
        with pytest.raises(TypeError, match="one action per env"):
            pool.step_batch("go east")
        # runtime-registered ids reach the actors; switching configuration keeps the old env
        pool.reset_batch(seeds=[0, 1])
        pool.configure(budget=2, indices=[1])
        pool.reset_batch(seeds=[1], indices=[1])  # a new configuration is a new env
        first = pool.step_batch(["go east", "go east"])
        second = pool.step_batch(["go east", "go east"])
        assert [r[4]["budget"]["limit"] for r in first] == [4, 2]
        assert second[1][3] and not second[0][3]  # env 1's budget of 2 is spent


RUNNER_IDS = [TOY_ID, TOOLUSE, "BudgetMix/WebShop-v0", "BudgetMix/TextWorld-CoinCollector-v0"]


@pytest.mark.parametrize("env_id", RUNNER_IDS)
def test_ray_runner_records_equal_local_runner(local_ray, env_id, tmp_path):
    plan = EvalPlan(
        env_ids=[env_id],
        agents={"random": "random", "eps": "oracle:epsilon=0.3"},
        tasks=2,
        samples=2,
        budgets=[8],
        fault_turns=[2],
        probe_states=2,
        prefix_turns=[3],
        prefix_from="random",
        prefix_episodes=3,
    )
    jobs = plan_jobs(plan)
    assert any(j.key.startswith("probe|") for j in jobs) and any("fault=2" in j.key for j in jobs)
    run_plan(plan, tmp_path / "ray", ray="auto")
    run_plan(plan, tmp_path / "local")
    a, b = load_records(tmp_path / "local"), load_records(tmp_path / "ray")
    prefix = [r for r in b if r["record"] == "prefix"]
    # Prefix probes replayed on the actors reach the recorded state, as they do locally.
    assert prefix and all(r["reached"] for r in prefix)
    assert len(b) == len(jobs) + len(prefix) and not any(r.get("error") for r in b)
    assert _strip(a) == _strip(b)


@pytest.mark.parametrize("env_id", ["BudgetMix/ToolUse-v0"])
def test_the_manager_on_ray_actors_equals_the_manager_in_process(local_ray, env_id):
    """``BudgetMixEnvManager(..., ray=...)``: 12 envs in 3 actors of half a CPU each, the same
    observations, rewards, dones and infos as in process, turn after turn, junk replies too."""
    from budget_envs.integrations.manager import BudgetMixEnvManager

    kwargs = {"level": 2} if "WebShop" in env_id else {}
    here = BudgetMixEnvManager(env_id, 12, group_n=3, budget=4, seed=5, **kwargs)
    there = BudgetMixEnvManager(
        env_id, 12, group_n=3, budget=4, seed=5, ray="local", actors=3, num_cpus=0.5, **kwargs
    )
    try:
        assert there._pool.n_actors == 3 and len(there.envs) == 12
        assert list(there.task_ids) == list(here.task_ids)
        a, b = here.reset(), there.reset()
        assert a == b
        for turn in range(5):  # past the budget: done envs are ignored on both sides
            infos = a[1] if turn == 0 else a[3]
            replies = [
                (i["candidate_actions"] or [""])[0] if k % 3 else "\x00{broken"
                for k, i in enumerate(infos)
            ]
            a, b = here.step(replies), there.step(replies)
            assert a[0] == b[0] and a[3] == b[3]
            assert a[1].tolist() == b[1].tolist() and a[2].tolist() == b[2].tolist()
        assert a[2].all()
    finally:
        here.close()
        there.close()
