"""Does GRPO through the batched rollout learn? Warm start, GRPO, then the eval harness.

On CPU with the offline tiny model (random init, built here): a deliberately short supervised
warm start on oracle episodes of the training games, GRPO through ``BudgetMixRollout``
(ProcessReward off: outcome reward only, a new budget T per episode), then both checkpoints
(warm start and GRPO) play held-out games in the eval harness (``run_plan``) on the same tasks
and episode seeds; the gain is ``compare_runs``' paired bootstrap difference of Pass@(1,T)
over those tasks (what ``budgetmix compare`` prints). Writes ``metrics.json``, the eval run and
a figure (reward per GRPO step; win rates before and after with the gain's interval)::

    HF_HUB_OFFLINE=1 python examples/trl_learning_curve.py --out runs/trl_learning \\
        --figure docs/img/trl_learning_curve.png

The defaults play TextWorld coin collector at level 1 (the coin is in the starting room: the
winning reply is ``take coin``, the same words in every game), games 0-23 train, 24-47
evaluate, T=2 at evaluation (one turn above the optimum). Needs ``pip install -e
".[trl,textworld,plots]"`` in a clone of this repository; the games are generated on first use (``budgetmix
prepare`` caches them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-id", default="BudgetMix/TextWorld-CoinCollector-v0")
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--train-tasks", type=int, default=24, help="games 0..N-1 train")
    parser.add_argument("--eval-tasks", type=int, default=24, help="the next N games evaluate")
    parser.add_argument("--budget", default="1-3", help="training budget range lo-hi")
    parser.add_argument("--eval-budget", type=int, default=2)
    parser.add_argument("--samples", type=int, default=4, help="eval episodes per task")
    parser.add_argument("--iterations", type=int, default=30, help="GRPO steps")
    parser.add_argument("--warm-start-steps", type=int, default=10, help="kept short on purpose")
    parser.add_argument("--warm-start-episodes", type=int, default=24)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--warm-start-lr", type=float, default=3e-3)
    parser.add_argument("--lr", type=float, default=1e-3, help="GRPO learning rate")
    parser.add_argument("--num-generations", type=int, default=8, help="episodes per prompt")
    parser.add_argument("--batch-size", type=int, default=32, help="episodes per GRPO step")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-turn-tokens", type=int, default=12)
    parser.add_argument("--max-completion-length", type=int, default=768)
    parser.add_argument("--workers", type=int, default=1, help="eval processes")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/trl_learning")
    parser.add_argument("--figure", default=None, help="where to save the figure (PNG)")
    args = parser.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gymnasium
    import torch

    import budget_envs  # noqa: F401  (registers the ids)
    from budget_envs.eval.report import compare_runs
    from budget_envs.eval.runner import EvalPlan, load_records, run_plan
    from budget_envs.integrations.trl import PolicyAgent, train

    torch.set_num_threads(args.threads)
    lo, hi = (int(x) for x in args.budget.split("-"))
    n_train, n_eval = args.train_tasks, args.eval_tasks
    env_kwargs = {"level": args.level, "seeds": list(range(n_train + n_eval))}
    probe = gymnasium.make(args.env_id, budget=None, **env_kwargs)
    task_ids = list(probe.unwrapped.task_ids)  # one game per seed, in seed order
    probe.close()
    train_ids, eval_ids = task_ids[:n_train], task_ids[n_train:]
    out = Path(args.out)
    start = time.perf_counter()

    def report(logs: dict) -> None:
        if "reward" in logs:
            print(f"step {logs['step']}: reward {logs['reward']:.3f}", flush=True)

    metrics = train(
        args.env_id,
        budget=(lo, hi),
        visibility="hidden",
        env_kwargs=env_kwargs,
        seed=args.seed,
        out_dir=out / "policy",
        iterations=args.iterations,
        progress=report,
        train_tasks=train_ids,
        warm_start_steps=args.warm_start_steps,
        warm_start_episodes=args.warm_start_episodes,
        tiny_hidden_size=args.hidden_size,
        tiny_layers=args.layers,
        warm_start_lr=args.warm_start_lr,
        learning_rate=args.lr,
        num_generations=args.num_generations,
        batch_size=args.batch_size,
        temperature=args.temperature,
        max_turn_tokens=args.max_turn_tokens,
        max_completion_length=args.max_completion_length,
        process_reward=None,
    )
    train_time = time.perf_counter() - start
    print(f"trained in {train_time:.0f}s; warm start loss {metrics['warm_start_loss']}")

    plan = EvalPlan(
        env_ids=[args.env_id],
        agents={
            "warm_start": PolicyAgent(metrics["warm_start_dir"], seed=args.seed, threads=1),
            "grpo": PolicyAgent(metrics["model_dir"], seed=args.seed, threads=1),
        },
        tasks=eval_ids,
        samples=args.samples,
        budgets=[args.eval_budget],
        visibility="hidden",
        track_oracle=False,
        seed=args.seed,
        env_kwargs=env_kwargs,
    )
    eval_dir = out / "eval"
    run_plan(plan, eval_dir, resume=True, workers=args.workers)
    records = load_records(eval_dir)
    comp = compare_runs(records, records, agent_a="warm_start", agent_b="grpo", figures=False)[0]
    wins = {
        a: [r["won"] for r in records if r["agent"] == a and not r.get("error")]
        for a in ("warm_start", "grpo")
    }
    rate = {a: sum(w) / len(w) for a, w in wins.items()}
    gain, low, high = float(comp.diff[0, -1]), float(comp.low[0, -1]), float(comp.high[0, -1])
    wall = time.perf_counter() - start
    summary = {
        "env_id": args.env_id,
        "level": args.level,
        "train_task_ids": train_ids,
        "eval_task_ids": eval_ids,
        "seed": args.seed,
        "samples": args.samples,
        "eval_budget": args.eval_budget,
        "win_rate_warm_start": rate["warm_start"],
        "win_rate_grpo": rate["grpo"],
        "gain": gain,
        "gain_low": low,
        "gain_high": high,
        "train_seconds": train_time,
        "wall_seconds": wall,
        "reward_per_step": metrics["reward"],
        "stop_reasons": metrics["stop_reasons"],
        "warm_start_loss": metrics["warm_start_loss"],
    }
    (out / "metrics.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(
        f"held-out win rate (T={args.eval_budget}, {len(eval_ids)} tasks x {args.samples}): "
        f"warm start {rate['warm_start']:.3f}, GRPO {rate['grpo']:.3f}; "
        f"gain {gain:+.3f} [95% paired bootstrap {low:+.3f}, {high:+.3f}]; wall {wall:.0f}s"
    )
    if args.figure:
        _figure(summary, Path(args.figure))
    return 0


def _figure(summary: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[2, 1])
    rewards = summary["reward_per_step"]
    ax1.plot(range(1, len(rewards) + 1), rewards, marker=".", color="tab:blue")
    ax1.set(xlabel="GRPO step", ylabel="mean env reward (training batch)", ylim=(-0.02, 1.02))
    ax1.set_title("training reward (outcome only, a new T per episode)", fontsize=9)
    before, after = summary["win_rate_warm_start"], summary["win_rate_grpo"]
    bars = ax2.bar(["warm start", "GRPO"], [before, after], color=["tab:gray", "tab:blue"])
    ax2.bar_label(bars, fmt="%.3f", fontsize=8)
    ax2.set(ylabel=f"held-out win rate, T={summary['eval_budget']}", ylim=(0, 1.08))
    ax2.set_title(
        f"gain {summary['gain']:+.2f}, 95% paired CI "
        f"[{summary['gain_low']:+.2f}, {summary['gain_high']:+.2f}]",
        fontsize=9,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
