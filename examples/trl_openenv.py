"""GRPO with TRL against a served BudgetMix env (``budgetmix serve``), through
``environment_factory`` as TRL's own OpenEnv examples do: one client session per rollout, the
env's action as the model's one tool, the env's reward as ``get_reward``.

Serve an env, then train against it::

    budgetmix serve BudgetMix/ToolUse-v0 --budget 5-20 --visibility remaining --port 8000 &
    python examples/trl_openenv.py --url http://127.0.0.1:8000 --model Qwen/Qwen3-0.6B

Smoke run on CPU (starts its own server; a tiny model built offline, 2 GRPO steps)::

    HF_HUB_OFFLINE=1 python examples/trl_openenv.py --smoke

Needs ``pip install -e ".[trl,openenv]"`` in a clone of this repository.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import requests


class ServedEnv:
    """One rollout's session on the server. TRL calls ``reset`` per rollout; ``act`` is the tool.

    Every ``act`` sends a request id new to the session, so a retried call is applied once.
    """

    url = "http://127.0.0.1:8000"

    def __init__(self) -> None:
        from budget_envs.service import RemoteEnv

        self._env = RemoteEnv(self.url)
        self.reward = 0.0
        self.done = False

    def reset(self, **kwargs) -> str:
        seed = kwargs.get("seed")
        obs, info = self._env.reset(seed=None if seed is None else int(seed))
        self.reward, self.done = 0.0, False
        return obs

    def act(self, action: str) -> str:
        """Send one action to the environment and read what it answers.

        Args:
            action: the action text (for ToolUse, the tool-call JSON).

        Returns:
            The environment's observation.
        """
        if self.done:
            return "The episode is over."
        obs, reward, terminated, truncated, info = self._env.step(action)
        self.reward += reward
        self.done = terminated or truncated
        return obs

    def get_reward(self) -> float:
        return float(self.reward)


def _start_server(env_id: str, budget: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "budget_envs.cli", "serve", env_id, "--budget", budget]
        + ["--visibility", "remaining", "--port", str(port)],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(600):
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).ok:
                return proc
        except requests.RequestException:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the env server did not start")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=None, help="a running budgetmix serve (default: start)")
    parser.add_argument("--env-id", default="BudgetMix/ToolUse-v0")
    parser.add_argument("--budget", default="3-8")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--model", default="tiny", help='a model name or path, or "tiny"')
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--smoke", action="store_true", help="a short CPU run with a tiny model")
    args = parser.parse_args(argv)
    scratch = None
    if args.smoke:
        args.model, args.steps, args.prompts, args.max_completion_length = "tiny", 2, 8, 96
        scratch = tempfile.TemporaryDirectory(prefix="trl_openenv_smoke_")
        args.output_dir = args.output_dir or scratch.name
    args.output_dir = args.output_dir or "runs/trl_openenv"

    server = None
    if args.url is None:
        server = _start_server(args.env_id, args.budget, args.port)
        args.url = f"http://127.0.0.1:{args.port}"
    ServedEnv.url = args.url
    try:
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        import torch
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer

        torch.manual_seed(args.seed)
        instruction = "Solve the task. Use the act tool once per turn; it returns what you see."
        dataset = Dataset.from_list(
            [
                {"prompt": [{"role": "user", "content": instruction}], "seed": args.seed + i}
                for i in range(args.prompts)
            ]
        )
        if args.model == "tiny":
            from budget_envs.integrations.tiny_model import build_tiny_model, build_tiny_tokenizer

            probe = ServedEnv()
            corpus = [probe.reset(seed=s) for s in range(4)] + [instruction]
            tokenizer = build_tiny_tokenizer(corpus)
            model = build_tiny_model(tokenizer, seed=args.seed)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
            model = AutoModelForCausalLM.from_pretrained(args.model)
        config = GRPOConfig(
            output_dir=args.output_dir,
            max_steps=args.steps,
            per_device_train_batch_size=args.num_generations,
            num_generations=args.num_generations,
            max_completion_length=args.max_completion_length,
            use_cpu=not torch.cuda.is_available(),
            bf16=False,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            seed=args.seed,
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=model,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            environment_factory=ServedEnv,
        )
        start = time.time()
        trainer.train()
        rewards = [h.get("reward") for h in trainer.state.log_history if "reward" in h]
        print(f"done in {time.time() - start:.0f}s: {len(rewards)} steps, rewards {rewards}")
    finally:
        if server is not None:
            server.terminate()
            server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
