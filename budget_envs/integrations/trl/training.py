"""GRPO training end to end, and a trained policy as an eval agent (the ``trl`` extra).

* :func:`train` - an optional warm start (supervised steps on oracle episodes), then GRPO
  through :class:`~budget_envs.integrations.trl.BudgetMixRollout`; the policy is saved as a
  Hugging Face model folder (model, tokenizer, generation config and ``budgetmix_policy.json``,
  the settings it was trained with), the warm start beside it in ``warm_start/``.
* :class:`PolicyAgent` - a saved policy as an :class:`~budget_envs.eval.agents.Agent`: it renders
  and samples exactly as the rollout did (the same token state, the same stop rules), so the
  eval harness measures the policy that was trained.

Nothing heavy is imported until a function runs.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from budget_envs.integrations.common import DEFAULT_BUDGET, make_env_like
from budget_envs.integrations.trl.base import _require, _seed
from budget_envs.integrations.trl.data import make_prompt_dataset, oracle_examples
from budget_envs.integrations.trl.dialogue import (
    SYSTEM_PROMPT,
    _Dialogue,
    _TokenEpisode,
    _user_text,
)
from budget_envs.integrations.trl.generation import HFTurnGenerator
from budget_envs.integrations.trl.rollout import BudgetMixRollout, env_reward

__all__ = ["POLICY_FILE", "PolicyAgent", "load_policy", "train"]

logger = logging.getLogger(__name__)

#: The file in a policy folder that holds how the policy plays (prompt, limits, sampling).
POLICY_FILE = "budgetmix_policy.json"
#: The folder (inside ``out_dir``) holding the warm-started model, before any GRPO step.
WARM_START_DIR = "warm_start"


def _corpus(rollout: BudgetMixRollout, task_ids: Sequence[str], limit: int = 16) -> list[str]:
    """Texts of the training tasks (first observations, admissible and oracle actions) for the
    tiny model's tokenizer."""
    env = make_env_like(rollout.env)
    base = env.unwrapped
    texts: list[str] = [rollout.system_prompt or ""]
    try:
        for task_id in list(task_ids)[:limit]:
            obs, info = env.reset(seed=0, options={"task_id": task_id})
            texts.append(_user_text(obs, info, rollout.show_actions))
            for _ in range(50):
                best = base.oracle_actions()
                if not best:
                    break
                texts.append(best[0])
                obs, _, terminated, truncated, info = env.step(best[0])
                texts.append(_user_text(obs, info, rollout.show_actions))
                if terminated or truncated:
                    break
    finally:
        env.close()
    return texts


def save_policy(
    model: Any,
    tokenizer: Any,
    path: str | os.PathLike[str],
    settings: Mapping[str, Any],
) -> Path:
    """Save ``model`` and ``tokenizer`` as a Hugging Face folder with ``budgetmix_policy.json``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / POLICY_FILE).write_text(json.dumps(dict(settings), indent=2) + "\n", encoding="utf-8")
    return path


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
    show_actions: bool = True,
    system_prompt: str | None = SYSTEM_PROMPT,
    chat_template_kwargs: dict[str, Any] | None = None,
    tiny_hidden_size: int = 64,
    tiny_layers: int = 2,
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
        max_turn_tokens, show_actions, system_prompt, process_reward: the rollout's settings.
        chat_template_kwargs: GRPOConfig's ``chat_template_kwargs`` (e.g. ``{"enable_thinking":
            False}`` for Qwen3).
        tiny_hidden_size, tiny_layers: the size of the tiny model.

    Returns:
        Metrics: ``wall_time`` (seconds), ``warm_start_loss`` (first, last), ``log_history``
        (the trainer's logs), ``reward`` (mean env reward per step), ``stop_reasons`` (counts
        over every training episode), ``model_dir``, ``warm_start_dir``, ``train_tasks``.
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be an int >= 0, got {iterations!r}")
    _require()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    start = time.perf_counter()
    out = Path(out_dir)
    template_kwargs = dict(chat_template_kwargs or {})
    rollout = BudgetMixRollout(
        env_id,
        budget=budget,
        visibility=visibility,
        process_reward=process_reward,
        system_prompt=system_prompt,
        show_actions=show_actions,
        max_turn_tokens=max_turn_tokens,
        seed=seed,
        env_kwargs=env_kwargs,
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
    losses: list[float] = []
    torch.manual_seed(seed)
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
        policy = AutoModelForCausalLM.from_pretrained(model)
    policy.generation_config.do_sample = True
    policy.generation_config.temperature = float(temperature)
    warm_dir = save_policy(policy, tokenizer, out / WARM_START_DIR, settings)

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

    stop_counts: dict[str, int] = {}

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
    config = GRPOConfig(
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
        save_strategy="no",
        logging_steps=1,
        seed=int(seed),
        disable_tqdm=True,
    )

    def counting_rollout(batch_prompts: list[Any], trainer: Any) -> dict[str, list]:
        result = rollout(batch_prompts, trainer)
        for word in result["stop_reason"]:
            stop_counts[word] = stop_counts.get(word, 0) + 1
        return result

    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=env_reward,
        args=config,
        train_dataset=make_prompt_dataset(rollout.env, prompts, seed=seed, task_ids=tasks),
        processing_class=tokenizer,
        rollout_func=counting_rollout,
        callbacks=[_Progress()],
    )
    # With disable_tqdm, transformers adds a callback that prints every log dict to stdout;
    # the logs go to `progress` and the log instead.
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return metrics(
        save_policy(trainer.model, tokenizer, out, settings), list(trainer.state.log_history)
    )


class PolicyAgent:
    """A saved policy (a folder written by :func:`train`) as an eval-harness agent.

    It plays as the rollout did: the same system prompt, observation rendering and chat
    template settings (from ``budgetmix_policy.json``), the same token state (only new text is
    encoded), sampling with the saved generation config (``temperature`` overrides it), the
    same stop rules: once a reply does not end within ``max_turn_tokens`` or the token limit is
    reached, the agent sends empty (invalid) actions until the budget ends the episode, which
    counts as not solved, as in training. Sampling is seeded by the episode seed.

    With ``check_visibility`` (the default) it refuses an episode whose budget visibility
    differs from the training's (the eval runner hands agents ``info["budget"]`` exactly when
    the budget is shown), as the RLlib policy agent does.

    The model loads on first use, so the agent pickles cheaply into eval worker processes.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        name: str = "policy",
        temperature: float | None = None,
        threads: int | None = None,
        seed: int = 0,
        check_visibility: bool = True,
    ) -> None:
        if not isinstance(check_visibility, bool):
            raise TypeError(f"check_visibility must be true or false, got {check_visibility!r}")
        self.model_dir = str(model_dir)
        settings_path = Path(self.model_dir) / POLICY_FILE
        if not settings_path.is_file():
            raise FileNotFoundError(
                f"{self.model_dir!r} is not a BudgetMix policy folder: no {POLICY_FILE}"
            )
        self.settings = json.loads(settings_path.read_text(encoding="utf-8"))
        self.name = name
        self.temperature = temperature
        self.threads = threads
        self.seed = int(seed)
        self.check_visibility = check_visibility
        self._model: Any = None
        self._tokenizer: Any = None
        self._dialogue: _Dialogue | None = None
        self._state: _TokenEpisode | None = None
        self._episode_seed = 0
        self._turn = 0
        self._tokens = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_model=None, _tokenizer=None, _dialogue=None, _state=None)
        return state

    def _load(self) -> None:
        _require()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self.threads:
            torch.set_num_threads(int(self.threads))
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir, padding_side="left")
        self._model = AutoModelForCausalLM.from_pretrained(self.model_dir)
        self._model.eval()
        self._dialogue = _Dialogue(
            self._tokenizer,
            self.settings.get("system_prompt"),
            self.settings.get("chat_template_kwargs") or {},
        )
        config = self._model.generation_config
        config.do_sample = True
        if self.temperature is not None:
            config.temperature = float(self.temperature)
        eos = self._tokenizer.eos_token_id
        self._eos_ids = [eos] if isinstance(eos, int) else list(eos)
        config.eos_token_id = self._eos_ids
        config.pad_token_id = self._tokenizer.pad_token_id
        self._generator = HFTurnGenerator(
            self._model,
            config,
            pad_token_id=self._tokenizer.pad_token_id,
            eos_token_ids=self._eos_ids,
            temperature=config.temperature or 1.0,
        )

    def reset(self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int) -> None:
        """Start an episode: render the first observation as the prompt."""
        if self.check_visibility:
            trained = self.settings.get("visibility", "hidden")
            shown = "budget" in info
            if (trained != "hidden") != shown:
                from budget_envs.errors import AgentError

                raise AgentError(
                    f"{self.name} was trained with visibility={trained!r} but this evaluation "
                    f"{'shows' if shown else 'hides'} the budget; evaluate with --visibility "
                    f"{trained} (or pass check_visibility=false)"
                )
        if self._model is None:
            self._load()
        self._state = _TokenEpisode(
            self._dialogue,
            _user_text(observation, dict(info), bool(self.settings.get("show_actions", True))),
            int(self.settings.get("max_completion_length", 512)),
            int(self.settings.get("max_turn_tokens", 24)),
            self._eos_ids,
        )
        self._episode_seed = int(seed)
        self._turn = 0
        self._tokens = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0}

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        """The next action: one sampled reply, with the new observation appended first."""
        import torch

        st = self._state
        if st is None:
            raise RuntimeError("PolicyAgent.act called before reset")
        if self._turn > 0 and not st.over:
            show = bool(self.settings.get("show_actions", True))
            st.take_observation(_user_text(observation, dict(info), show))
        self._turn += 1
        if st.over:
            return ""
        context = st.context()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seed(self.seed, self._episode_seed, self._turn))
            cap = min(st.max_turn_tokens, st.room())
            replies, logps = self._generator.generate([context], cap)
        self._tokens["prompt_tokens"] += len(context)
        self._tokens["completion_tokens"] += len(replies[0])
        self._tokens["requests"] += 1
        action = st.take_reply(replies[0], logps[0])
        return "" if action is None else action

    def usage(self) -> dict[str, int]:
        """Token counts of the current episode."""
        return dict(self._tokens)


def load_policy(
    model_dir: str | os.PathLike[str],
    *,
    seed: int = 0,
    check_visibility: bool = True,
    name: str | None = None,
    temperature: float | None = None,
    threads: int | None = None,
) -> PolicyAgent:
    """A policy folder written by :func:`train` as an eval agent (what ``policy:DIR`` plays).

    Returns a :class:`PolicyAgent` named ``name`` (default ``policy:<folder name>``); it refuses
    an evaluation whose budget visibility differs from the training's unless
    ``check_visibility`` is False.
    """
    return PolicyAgent(
        model_dir,
        name=name or f"policy:{Path(model_dir).name}",
        seed=seed,
        check_visibility=check_visibility,
        temperature=temperature,
        threads=threads,
    )
