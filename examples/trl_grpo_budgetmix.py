"""GRPO on a BudgetMix env with TRL: multi-turn episodes, a turn budget drawn per episode.

Real training with a model from the Hub (needs a GPU for anything but tiny models)::

    python examples/trl_grpo_budgetmix.py --env-id BudgetMix/TextWorld-v0 \\
        --env-kwargs '{"level": 2}' --budget 5-30 --visibility remaining \\
        --model Qwen/Qwen3-0.6B --steps 200

Smoke run on CPU (about a minute; a tiny model built offline, 2 GRPO steps)::

    HF_HUB_OFFLINE=1 python examples/trl_grpo_budgetmix.py --smoke

Needs ``pip install -e ".[trl]"`` in a clone of this repository (plus the env's own extra, e.g. ``[textworld]``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-id", default="BudgetMix/WebShop-v0")
    parser.add_argument("--env-kwargs", default='{"level": 1}', help="JSON constructor kwargs")
    parser.add_argument(
        "--budget", default="3-12", help='a budget spec: "T", "lo-hi", "T1,T2,..." or "log:lo..hi"'
    )
    parser.add_argument("--visibility", default="remaining")
    parser.add_argument(
        "--process-reward",
        type=float,
        default=0.1,
        help="scale of the ProcessReward progress signal (0: plain reward)",
    )
    parser.add_argument("--model", default="tiny", help='a model name or path, or "tiny"')
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--prompts", type=int, default=64, help="tasks in the prompt dataset")
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=512)
    parser.add_argument("--max-turn-tokens", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument(
        "--warm-start-steps",
        type=int,
        default=60,
        help="imitation steps on oracle episodes (tiny model only)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output-dir",
        default=None,
        help="trainer output (default: runs/trl_grpo_budgetmix; temp with --smoke)",
    )
    parser.add_argument("--smoke", action="store_true", help="a short CPU run with a tiny model")
    args = parser.parse_args(argv)
    if args.smoke:
        args.model, args.steps, args.prompts = "tiny", 2, 8
        args.max_completion_length, args.warm_start_steps, args.lr = 256, 10, 1e-3
        if args.output_dir is None:
            scratch = tempfile.TemporaryDirectory(prefix="trl_grpo_smoke_")
            args.output_dir = scratch.name  # removed when the process ends
    if args.output_dir is None:
        args.output_dir = "runs/trl_grpo_budgetmix"

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from budget_envs.integrations.trl import (
        BudgetMixRollout,
        env_reward,
        make_env_like,
        make_prompt_dataset,
        oracle_examples,
    )

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    start = time.time()
    rollout = BudgetMixRollout(
        args.env_id,
        budget=args.budget,
        visibility=args.visibility,
        process_reward=args.process_reward or None,
        max_turn_tokens=args.max_turn_tokens,
        seed=args.seed,
        env_kwargs=json.loads(args.env_kwargs),
    )
    if args.model == "tiny":
        from budget_envs.integrations.tiny_model import (
            build_tiny_model,
            build_tiny_tokenizer,
            warm_start,
        )

        env = make_env_like(rollout.env)
        corpus = []
        for seed in range(8):
            obs, info = env.reset(seed=seed)
            corpus += [obs, *info["admissible_actions"][:20], *env.unwrapped.oracle_actions()]
        tokenizer = build_tiny_tokenizer(corpus)
        model = build_tiny_model(tokenizer, seed=args.seed)
        if args.warm_start_steps:
            examples = oracle_examples(rollout, tokenizer, n_episodes=8, seed=args.seed)
            losses = warm_start(model, examples, steps=args.warm_start_steps, seed=args.seed)
            print(
                f"warm start: loss {losses[0]:.3f} -> {losses[-1]:.3f} "
                f"({time.time() - start:.0f}s)",
                flush=True,
            )
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(args.model)

    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        learning_rate=args.lr,
        temperature=1.0,
        bf16=False,
        use_cpu=not torch.cuda.is_available(),
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=args.seed,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=env_reward,
        args=config,
        train_dataset=make_prompt_dataset(rollout.env, args.prompts, seed=args.seed),
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    print(f"training ({time.time() - start:.0f}s)", flush=True)
    trainer.train()
    episodes = rollout.last_episodes
    print(
        f"done in {time.time() - start:.0f}s: last batch won {sum(e.won for e in episodes)}"
        f"/{len(episodes)}, budgets {[e.budget for e in episodes]}, "
        f"turns {[e.turns for e in episodes]}, stop reasons {[e.stop_reason for e in episodes]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
