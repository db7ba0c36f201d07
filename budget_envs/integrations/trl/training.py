"""GRPO training end to end (the ``trl`` extra): :func:`train` runs an optional warm start
(supervised steps on oracle episodes), then GRPO through
:class:`~budget_envs.integrations.trl.rollout.BudgetMixRollout`; the policy is saved as a policy
folder (:mod:`~budget_envs.integrations.trl.policy`), the warm start beside it in
``warm_start/``.

Nothing heavy is imported until a function runs.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from budget_envs.integrations.common import DEFAULT_BUDGET, make_env_like
from budget_envs.integrations.trl.base import _require
from budget_envs.integrations.trl.data import (
    _oracle_turns,
    make_prompt_dataset,
    oracle_examples,
)
from budget_envs.integrations.trl.dialogue import STOP_REASONS, SYSTEM_PROMPT, _user_text
from budget_envs.integrations.trl.policy import save_policy
from budget_envs.integrations.trl.rollout import BudgetMixRollout, env_reward

__all__ = ["WARM_START_DIR", "train"]

logger = logging.getLogger(__name__)

#: The folder (inside ``out_dir``) holding the warm-started model, before any GRPO step.
WARM_START_DIR = "warm_start"


def _corpus(rollout: BudgetMixRollout, task_ids: Sequence[str], limit: int = 16) -> list[str]:
    """Texts of the training tasks (first observations, admissible and oracle actions) for the
    tiny model's tokenizer."""
    env = make_env_like(rollout.env)
    texts: list[str] = [rollout.system_prompt or ""]
    try:
        for task_id in list(task_ids)[:limit]:
            obs, info = env.reset(seed=0, options={"task_id": task_id})
            texts.append(_user_text(obs, info, rollout.show_actions))
            for action, text, _ in _oracle_turns(env, rollout.show_actions, 50):
                texts += [action, text]
    finally:
        env.close()
    return texts


#: One row per rollout batch of GRPO: what ``budgetmix train --trainer trl`` leaves to plot.
METRICS_FILE = "metrics.csv"
#: Where ``checkpoint_every`` saves the policy during GRPO (``step-NNNN`` folders).
CHECKPOINTS_DIR = "checkpoints"
#: Where ``checkpoint_every`` also keeps the trainer's own last checkpoint (model, optimizer,
#: scheduler and RNG states: ``checkpoint-N``), which ``resume=True`` continues.
TRAINER_DIR = "trainer"

_METRIC_COLUMNS = (
    "step",
    "episodes",
    "reward",
    "win_rate",
    *(f"stop_{word}" for word in STOP_REASONS),
    "invalid_share",
    "budget_mean",
    "turns_mean",
    "tokens_mean",
    "wall_s",
)


def _sft_settings(model: str) -> dict[str, Any] | None:
    """The SFT settings of a folder ``budgetmix train --trainer sft`` wrote (else None)."""
    import json

    meta_file = Path(str(model)) / "budgetmix_policy.json"
    if not meta_file.is_file():
        return None
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except ValueError:
        return None
    if not isinstance(meta, dict):
        return None
    if meta.get("trainer") == "sft":
        return dict(meta.get("settings") or {})
    if meta.get("render") == "lm":  # a GRPO run resumed from one
        return {"show_actions": meta.get("show_actions", True)}
    return None


def _metrics_row(step: int, result: dict[str, list], start: float) -> dict[str, Any]:
    """The metrics of one rollout batch: reward, win rate, the share of each stop reason, the
    share of turns the env answered as invalid, the mean budget drawn, turns and episode tokens
    (prompt and completion)."""
    n = max(len(result["env_reward"]), 1)
    row: dict[str, Any] = {
        "step": int(step),
        "episodes": len(result["env_reward"]),
        "reward": sum(float(r) for r in result["env_reward"]) / n,
        "win_rate": sum(1 for w in result["won"] if w) / n,
    }
    for word in STOP_REASONS:
        row[f"stop_{word}"] = sum(1 for s in result["stop_reason"] if s == word) / n
    turns = sum(int(t) for t in result["turns"])
    invalid = sum(int(x) for x in result.get("invalid") or [])
    row["invalid_share"] = invalid / turns if turns else 0.0
    row["budget_mean"] = sum(int(b) for b in result["budget"]) / n
    row["turns_mean"] = sum(int(t) for t in result["turns"]) / n
    row["tokens_mean"] = (
        sum(len(p) + len(c) for p, c in zip(result["prompt_ids"], result["completion_ids"])) / n
    )
    row["wall_s"] = round(time.perf_counter() - start, 2)
    return row


def _last_trainer_checkpoint(out: Path) -> Path | None:
    """The trainer checkpoint of the latest step under ``out/trainer`` (None: none)."""
    found = [
        (int(p.name.rsplit("-", 1)[1]), p)
        for p in (out / TRAINER_DIR).glob("checkpoint-*")
        if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit()
    ]
    return max(found)[1] if found else None


def _rows_until(path: Path, step: int) -> list[dict[str, Any]]:
    """The rows of ``metrics.csv`` up to GRPO step ``step`` (what a resumed run keeps)."""
    import csv

    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    kept = []
    for row in rows:
        if int(row["step"]) > step:
            break
        kept.append(
            {k: (int(v) if k in ("step", "episodes") else float(v)) for k, v in row.items()}
        )
    return kept


def _resume_point(out: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The trainer checkpoint a stopped run in ``out`` continues and its metrics rows so far."""
    from budget_envs.integrations.trl.policy import POLICY_FILE

    if (out / POLICY_FILE).is_file():
        raise FileExistsError(f"{out} holds a finished policy: nothing to resume")
    last = _last_trainer_checkpoint(out)
    if last is None or not (out / WARM_START_DIR).is_dir():
        raise FileNotFoundError(
            f"{out}: nothing to resume (no GRPO checkpoint in {out / TRAINER_DIR}; a run "
            "leaves one every checkpoint_every steps)"
        )
    step = int(last.name.rsplit("-", 1)[1])
    return last, _rows_until(out / METRICS_FILE, step)


def _write_metrics(path: Path, rows: list[dict[str, Any]]) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=_METRIC_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def _initial_policy(
    model: str,
    rollout: BudgetMixRollout,
    tasks: Sequence[str],
    *,
    seed: int,
    warm_start_steps: int,
    warm_start_episodes: int,
    warm_start_lr: float,
    tiny_hidden_size: int,
    tiny_layers: int,
    template_kwargs: dict[str, Any],
) -> tuple[Any, Any, list[float]]:
    """The policy GRPO starts from, its tokenizer and the warm start's losses: the tiny model
    built and warm-started here, or a model folder or name loaded as it is."""
    losses: list[float] = []
    if model == "tiny":
        from budget_envs.integrations.tiny_model import (
            build_tiny_model,
            build_tiny_tokenizer,
            warm_start,
        )

        tokenizer = build_tiny_tokenizer(_corpus(rollout, tasks))
        policy = build_tiny_model(
            tokenizer, hidden_size=tiny_hidden_size, num_layers=tiny_layers, seed=seed
        )
        if warm_start_steps:
            examples = oracle_examples(
                rollout,
                tokenizer,
                n_episodes=warm_start_episodes,
                seed=seed,
                task_ids=tasks,
                chat_template_kwargs=template_kwargs,
            )
            losses = warm_start(
                policy, examples, steps=warm_start_steps, lr=warm_start_lr, seed=seed
            )
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left")
        policy = AutoModelForCausalLM.from_pretrained(model, use_safetensors=True)
    return policy, tokenizer, losses


def _progress_callback(
    progress: Callable[[dict[str, Any]], None] | None,
    every: int,
    out: Path,
    tokenizer: Any,
    settings: dict[str, Any],
) -> Any:
    """The trainer callback that reports each log to ``progress`` (and the log) and saves the
    policy every ``every`` GRPO steps in ``out/checkpoints/step-NNNN``."""
    from transformers import TrainerCallback

    class _Progress(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
            if progress is not None:
                progress({"step": state.global_step})

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: D102
            if not logs:
                return
            logger.info("GRPO step %d: %s", state.global_step, logs)
            if progress is not None:
                progress({"step": state.global_step, **logs})

        def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: D102
            if every and state.global_step % every == 0 and model is not None:
                where = out / CHECKPOINTS_DIR / f"step-{state.global_step:04d}"
                save_policy(model, tokenizer, where, {**settings, "step": state.global_step})

    return _Progress()


def _grpo_config(
    out: Path,
    *,
    iterations: int,
    batch_size: int,
    num_generations: int,
    max_completion_length: int,
    learning_rate: float,
    temperature: float,
    beta: float,
    template_kwargs: dict[str, Any],
    seed: int,
    save_every: int = 0,
    lr_scheduler_type: str | None = None,
) -> Any:
    """GRPOConfig for ``iterations`` steps on this machine (CPU unless CUDA is there; its own
    checkpoint every ``save_every`` steps, the last one kept, else none; a log every step, no
    bar)."""
    import torch
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out / "trainer"),
        max_steps=int(iterations),
        per_device_train_batch_size=int(batch_size),
        num_generations=int(num_generations),
        max_completion_length=int(max_completion_length),
        learning_rate=float(learning_rate),
        temperature=float(temperature),
        beta=float(beta),
        chat_template_kwargs=template_kwargs or None,
        bf16=False,
        use_cpu=not torch.cuda.is_available(),
        report_to="none",
        save_strategy="steps" if save_every else "no",
        save_steps=int(save_every) or 500,
        save_total_limit=1,
        **({"lr_scheduler_type": lr_scheduler_type} if lr_scheduler_type else {}),
        logging_steps=1,
        seed=int(seed),
        disable_tqdm=True,
    )


def _run_grpo(
    policy: Any,
    tokenizer: Any,
    rollout: BudgetMixRollout,
    config: Any,
    *,
    dataset: Any,
    out: Path,
    settings: dict[str, Any],
    report_to: str | Sequence[str] | None,
    callback: Any,
    stop_counts: dict[str, int],
    start: float,
    rows: list[dict[str, Any]] | None = None,
    resume_from: Path | None = None,
    max_env_steps: int | None = None,
) -> Any:
    """GRPO through ``rollout``: each rollout batch's metrics row goes to ``metrics.csv`` after
    ``rows`` (and the sink) and its stop reasons into ``stop_counts``; ``resume_from``: the
    trainer checkpoint to continue. Returns the trainer after training."""
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from budget_envs.integrations.tracking import MetricsSink

    rows_csv: list[dict[str, Any]] = list(rows or [])
    sink = MetricsSink(out, report_to, config={"trainer": "trl", **settings})

    def counting_rollout(batch_prompts: list[Any], trainer: Any) -> dict[str, list]:
        result = rollout(batch_prompts, trainer)
        for word in result["stop_reason"]:
            stop_counts[word] = stop_counts.get(word, 0) + 1
        row = _metrics_row(trainer.state.global_step + 1, result, start)
        rows_csv.append(row)
        _write_metrics(out / METRICS_FILE, rows_csv)
        sink.log(row, row["step"])
        return result

    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=env_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=counting_rollout,
        callbacks=[callback, _env_step_stop(rows_csv, max_env_steps)],
    )
    # With disable_tqdm, transformers adds a callback that prints every log dict to stdout;
    # the logs go to `progress` and the log instead.
    trainer.remove_callback(PrinterCallback)
    try:
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    finally:
        sink.close()
    return trainer


def env_steps(rows: Sequence[dict[str, Any]]) -> int:
    """The env steps (turns) the episodes of these ``metrics.csv`` rows took."""
    return int(round(sum(float(r["turns_mean"]) * int(r["episodes"]) for r in rows)))


def _env_step_stop(rows: list[dict[str, Any]], limit: int | None) -> Any:
    """A trainer callback that ends GRPO after the step at which the episodes so far (``rows``,
    the metrics rows) reach ``limit`` env steps (None: never)."""
    from transformers import TrainerCallback

    class _Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # noqa: D102
            if limit is not None and env_steps(rows) >= limit:
                control.should_training_stop = True

    return _Stop()


def _rollout_for(env_id: str, model: str, *, show_actions: bool, **kwargs: Any) -> BudgetMixRollout:
    """The rollout GRPO plays: the suite's rendering, or (a ``--trainer sft`` folder) the
    prompts the model was fine-tuned on."""
    render = "suite"
    trained_by = _sft_settings(model)
    if trained_by is not None:
        # A `--trainer sft` folder: GRPO resumes it on the prompts it was fine-tuned on.
        render = "lm"
        show_actions = bool(trained_by.get("show_actions", show_actions))
    return BudgetMixRollout(env_id, show_actions=show_actions, render=render, **kwargs)


def train(
    env_id: str,
    *,
    budget: Any = DEFAULT_BUDGET,
    visibility: str = "hidden",
    env_kwargs: dict[str, Any] | None = None,
    seed: int = 0,
    out_dir: str | os.PathLike[str],
    iterations: int = 20,
    progress: Callable[[dict[str, Any]], None] | None = None,
    model: str = "tiny",
    train_tasks: Sequence[str] | None = None,
    prompts: int = 64,
    warm_start_steps: int = 60,
    warm_start_episodes: int = 32,
    warm_start_lr: float = 3e-3,
    num_generations: int = 4,
    batch_size: int = 8,
    max_completion_length: int = 512,
    max_turn_tokens: int = 24,
    learning_rate: float = 1e-3,
    temperature: float = 1.0,
    beta: float = 0.0,
    process_reward: float | None = None,
    process_max_cost: int = 100,
    show_actions: bool = True,
    system_prompt: str | None = SYSTEM_PROMPT,
    chat_template_kwargs: dict[str, Any] | None = None,
    tiny_hidden_size: int = 64,
    tiny_layers: int = 2,
    actions: str = "generate",
    report_to: str | Sequence[str] | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    max_env_steps: int | None = None,
    lr_scheduler_type: str | None = None,
) -> dict[str, Any]:
    """Train a policy on ``env_id``: warm start (tiny model), then GRPO via ``rollout_func``.

    Args:
        env_id, budget, visibility, env_kwargs: the env and its BudgetWrapper (``budget`` is a
            spec: a range draws a new T per episode, which is BudgetMix training).
        seed: seeds the model, the warm start, the prompts and every rollout draw.
        out_dir: the trained policy is saved here as a Hugging Face model folder (loadable by
            ``from_pretrained`` and by :class:`PolicyAgent`); the warm start in
            ``out_dir/warm_start``.
        iterations: GRPO steps; 0 saves the warm-started model as the policy.
        progress: called once as GRPO starts (``{"step": 0}``), then with each log dict of the
            trainer (step, reward, loss, stop reasons).
        model: ``"tiny"`` (the offline tiny model, built and warm-started here) or a model name
            or path for ``from_pretrained`` (no warm start).
        train_tasks: the task ids to train on (default: every task of the env); keep
            evaluation tasks out of it.
        prompts: prompts in the GRPO dataset (tasks drawn from ``train_tasks``).
        warm_start_steps, warm_start_episodes, warm_start_lr: the supervised warm start on
            oracle episodes (tiny model only; 0 steps: none).
        num_generations, batch_size, max_completion_length, learning_rate, temperature, beta:
            the GRPOConfig settings of the same names (``batch_size`` per device).
        max_turn_tokens, show_actions, system_prompt, process_reward, process_max_cost: the
            rollout's settings.
        chat_template_kwargs: GRPOConfig's ``chat_template_kwargs`` (e.g. ``{"enable_thinking":
            False}`` for Qwen3).
        tiny_hidden_size, tiny_layers: the size of the tiny model.
        actions: ``"score"``: every reply is an offered action drawn from the model's scores
            of them (:mod:`~budget_envs.integrations.trl.scoring`), in training and when the
            folder plays; ``"generate"``: replies are written token by token.
        report_to: also log every ``metrics.csv`` row to TensorBoard and/or W&B
            (:mod:`~budget_envs.integrations.tracking`).
        checkpoint_every: every this many GRPO steps, save the policy as it is then in
            ``out_dir/checkpoints/step-NNNN`` (a folder that plays and evaluates as the final
            one; 0: none), and keep the trainer's own last checkpoint in ``out_dir/trainer``.
        resume: continue a run in ``out_dir`` that was stopped: from its last trainer
            checkpoint (a run with ``checkpoint_every``), with the settings it was started
            with; the metrics rows after that step are played again, with the same draws.
        max_env_steps: end GRPO after the step at which its episodes have taken this many env
            steps (``iterations`` stays the most steps it runs): arms of a study trained to the
            same env steps whatever their budget (None: ``iterations`` steps).
        lr_scheduler_type: GRPOConfig's (None: its default, linear decay over ``iterations``;
            ``"constant"`` when ``max_env_steps`` may end a run early).

    Returns:
        Metrics: ``wall_time`` (seconds), ``warm_start_loss`` (first, last), ``log_history``
        (the trainer's logs), ``reward`` (mean env reward per step), ``stop_reasons`` (counts
        over every training episode), ``model_dir``, ``warm_start_dir``, ``train_tasks``.
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be an int >= 0, got {iterations!r}")
    if (
        isinstance(checkpoint_every, bool)
        or not isinstance(checkpoint_every, int)
        or checkpoint_every < 0
    ):
        raise ValueError(f"checkpoint_every must be an int >= 0, got {checkpoint_every!r}")
    _require()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch

    start = time.perf_counter()
    out = Path(out_dir)
    template_kwargs = dict(chat_template_kwargs or {})
    rollout = _rollout_for(
        env_id,
        model,
        budget=budget,
        visibility=visibility,
        process_reward=process_reward,
        process_max_cost=process_max_cost,
        system_prompt=system_prompt,
        show_actions=show_actions,
        max_turn_tokens=max_turn_tokens,
        seed=seed,
        env_kwargs=env_kwargs,
        actions=actions,
    )
    tasks = list(rollout.env.unwrapped.task_ids if train_tasks is None else train_tasks)
    if not tasks:
        raise ValueError(f"train_tasks must name at least one task, got {train_tasks!r}")
    settings = {
        "env_id": env_id,
        "visibility": visibility,
        "env_kwargs": dict(env_kwargs or {}),
        **rollout.to_json(),
        "max_completion_length": int(max_completion_length),
        "chat_template_kwargs": template_kwargs,
        "temperature": float(temperature),
    }
    torch.manual_seed(seed)
    resume_from, rows = _resume_point(out) if resume else (None, [])
    warm_dir = out / WARM_START_DIR
    policy, tokenizer, losses = _initial_policy(
        str(warm_dir) if resume else model,
        rollout,
        tasks,
        seed=seed,
        warm_start_steps=warm_start_steps,
        warm_start_episodes=warm_start_episodes,
        warm_start_lr=warm_start_lr,
        tiny_hidden_size=tiny_hidden_size,
        tiny_layers=tiny_layers,
        template_kwargs=template_kwargs,
    )
    policy.generation_config.do_sample = True
    policy.generation_config.temperature = float(temperature)
    if not resume:
        save_policy(policy, tokenizer, warm_dir, settings)
    stop_counts: dict[str, int] = {}
    if rows:  # a resumed run: its episodes so far seed the next draws; its clock goes on
        rollout._episodes = sum(int(r["episodes"]) for r in rows)
        start -= float(rows[-1]["wall_s"])
        for word in STOP_REASONS:
            count = round(sum(r[f"stop_{word}"] * r["episodes"] for r in rows))
            if count:
                stop_counts[word] = int(count)

    def metrics(model_dir: Path, history: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "wall_time": time.perf_counter() - start,
            "warm_start_loss": (losses[0], losses[-1]) if losses else None,
            "log_history": history,
            "reward": [h["reward"] for h in history if "reward" in h],
            "stop_reasons": stop_counts,
            "model_dir": str(model_dir),
            "warm_start_dir": str(warm_dir),
            "train_tasks": tasks,
        }

    if iterations == 0:  # the warm start alone (GRPOConfig's max_steps=0 means whole epochs)
        return metrics(save_policy(policy, tokenizer, out, settings), [])
    config = _grpo_config(
        out,
        iterations=iterations,
        batch_size=batch_size,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        learning_rate=learning_rate,
        temperature=temperature,
        beta=beta,
        template_kwargs=template_kwargs,
        seed=seed,
        save_every=checkpoint_every,
        lr_scheduler_type=lr_scheduler_type,
    )

    trainer = _run_grpo(
        policy,
        tokenizer,
        rollout,
        config,
        dataset=make_prompt_dataset(rollout.env, prompts, seed=seed, task_ids=tasks),
        out=out,
        settings=settings,
        report_to=report_to,
        callback=_progress_callback(progress, checkpoint_every, out, tokenizer, settings),
        stop_counts=stop_counts,
        start=start,
        rows=rows,
        resume_from=resume_from,
        max_env_steps=max_env_steps,
    )
    return metrics(
        save_policy(trainer.model, tokenizer, out, settings), list(trainer.state.log_history)
    )
