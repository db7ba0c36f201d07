"""PPO on a BudgetMix env with RLlib: one shared network scores every action the state offers.

Real training (a turn budget drawn per episode, the budget shown to the policy as features;
``budgetmix train`` does the same with checkpoints, metrics and a learning curve)::

    python examples/rllib_ppo_budgetmix.py --env-id BudgetMix/TextWorld-v0 \\
        --env-kwargs '{"level": 1, "seeds": 20}' --budget 4-16 --iterations 50 --num-cpus 4

Smoke run on CPU (2 iterations, about a minute)::

    python examples/rllib_ppo_budgetmix.py --smoke

Needs ``pip install -e ".[rllib]"`` in a clone of this repository (plus the env's own extra, e.g. ``[textworld]``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-id", default="BudgetMix/WebShop-v0")
    parser.add_argument("--env-kwargs", default='{"level": 1}', help="JSON constructor kwargs")
    parser.add_argument(
        "--budget", default="4-12", help='a budget spec: "T", "lo-hi", "T1,T2,..." or "log:lo..hi"'
    )
    parser.add_argument("--visibility", default="hidden")
    parser.add_argument(
        "--process-reward",
        type=float,
        default=0.0,
        help="scale of the ProcessReward progress signal (0: plain reward)",
    )
    parser.add_argument("--max-actions", type=int, default=256, help="action slots")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--train-batch-size", type=int, default=512)
    parser.add_argument("--num-env-runners", type=int, default=0)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="2 short iterations on CPU")
    args = parser.parse_args(argv)
    if args.smoke:
        args.iterations, args.train_batch_size = 2, 256

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray

    from budget_envs.integrations.rllib import ppo_config

    env_config = {
        "env_id": args.env_id,
        "budget": args.budget,
        "visibility": args.visibility,
        "process_reward": args.process_reward or None,
        "max_actions": args.max_actions,
        "seed": args.seed,
        "env_kwargs": json.loads(args.env_kwargs),
    }
    start = time.time()
    ray.init(
        num_cpus=args.num_cpus,
        include_dashboard=False,
        object_store_memory=256 * 1024 * 1024,
        log_to_driver=True,
    )
    try:
        algo = ppo_config(
            env_config,
            train_batch_size=args.train_batch_size,
            minibatch_size=min(128, args.train_batch_size),
            num_env_runners=args.num_env_runners,
            seed=args.seed,
        ).build_algo()
        for i in range(args.iterations):
            result = algo.train()
            runners = result["env_runners"]
            print(
                f"iter {i + 1}: return {runners.get('episode_return_mean', float('nan')):.3f} "
                f"len {runners.get('episode_len_mean', float('nan')):.1f} "
                f"episodes {runners.get('num_episodes', 0)} ({time.time() - start:.0f}s)",
                flush=True,
            )
        algo.stop()
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
