"""The GRPO ``rollout_func``: :class:`BudgetMixRollout` plays one multi-turn episode per prompt,
all the episodes of a batch together; :func:`env_reward` is its reward function."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from budget_envs.integrations.common import DEFAULT_BUDGET, env_and_maker
from budget_envs.integrations.trl.base import _check_draw_options, _require, _seed
from budget_envs.integrations.trl.dialogue import (
    _TASK_TAG,
    STOP_REASONS,
    SYSTEM_PROMPT,
    RolloutEpisode,
    _Dialogue,
    _stop_reason,
    _TokenEpisode,
    _user_text,
)
from budget_envs.integrations.trl.generation import HFTurnGenerator, VLLMTurnGenerator
from budget_envs.integrations.trl.scoring import (
    SCORING_MODES,
    candidate_ids,
    check_mode,
    choose,
    score_candidates,
)

logger = logging.getLogger(__name__)


def env_reward(
    completions: Sequence[Any],
    env_reward: Sequence[float],
    stop_reason: Sequence[str] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """GRPO reward function: the episode's env reward that the rollout returned.

    It also logs the share of each stop reason in the batch (``stop_reason/<word>``) through
    TRL's ``log_metric``, so the training log says which limit ended the episodes.
    """
    if stop_reason is not None and log_metric is not None and len(stop_reason):
        for word in STOP_REASONS:
            log_metric(
                f"stop_reason/{word}", sum(s == word for s in stop_reason) / len(stop_reason)
            )
    return [float(r) for r in env_reward]


@contextlib.contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """``model`` in eval mode while it samples (no dropout, so the log-probs match the
    sampler's), then back in the mode it was in."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


class BudgetMixRollout:
    """A GRPO ``rollout_func`` that plays multi-turn BudgetMix episodes, batched.

    Each prompt (already repeated ``num_generations`` times by GRPO) becomes one episode; a
    prompt made by :func:`task_prompt` fixes the task, any other prompt gets a task drawn from a
    generator seeded by (seed, rank, episode), shared by the repeats of that prompt. Budgets are
    drawn per episode by the env's :class:`BudgetWrapper`, seeded by (seed, rank, episode), or
    one per group with ``budget_per="group"``. Each turn, one generation call serves every live
    episode of the batch; the reply's action is :func:`action_from_reply` of its text (a
    reasoning block stays in the trained ids but is not played). The env's answer is appended
    as a user turn with ``env_mask`` 0.

    An episode ends with a ``stop_reason`` of :data:`STOP_REASONS`: the env terminated (``won``
    or ``lost``) or truncated (``budget``); a reply did not end within ``max_turn_tokens``; or
    the next turn would not fit in the trainer's ``max_completion_length``.

    Under the trainer, generation runs under TRL's ``unwrap_model_for_generation`` with the
    trainer's ``generation_config`` (GRPOConfig's sampling settings and generation_kwargs), the
    prompt is rendered with GRPOConfig's ``chat_template_kwargs``, the sampler is seeded per
    (seed, rank, step); with ``use_vllm=True`` generation goes through ``trainer.vllm_generation``
    (:class:`VLLMTurnGenerator`).

    Returns ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` and, for reward
    functions, ``env_reward`` (the episode's summed reward), ``won``, ``turns``, ``budget``,
    ``task_id`` and ``stop_reason``.

    Example:
        Needs a model and a trainer, so this one is not run as a test::

            rollout = BudgetMixRollout("BudgetMix/ToolUse-v0", budget=(4, 12))
            trainer = GRPOTrainer(model, reward_funcs=env_reward, rollout_func=rollout, ...)
    """

    def __init__(
        self,
        env: str | gym.Env,
        *,
        budget: Any = DEFAULT_BUDGET,
        visibility: str = "hidden",
        faults: Any = None,
        process_reward: float | None = None,
        process_max_cost: int = 100,
        system_prompt: str | None = SYSTEM_PROMPT,
        show_actions: bool = True,
        max_turn_tokens: int = 24,
        budget_per: str = "episode",
        seed: int = 0,
        env_kwargs: dict[str, Any] | None = None,
        render: str = "suite",
        actions: str = "generate",
    ) -> None:
        """Build the env (an id with wrapper options, or a ready env) and the task generator.

        Args:
            env: a BudgetMix id, or an env already wrapped in a BudgetWrapper (the batch plays
                on copies made with :func:`make_env_like`).
            budget, visibility, faults: the wrapper options of ``gymnasium.make`` (with an id).
            process_reward: scale of the :class:`ProcessReward` signal added to the reward.
            process_max_cost: that signal's ``max_cost`` (the cost-to-go a lost task counts as).
            system_prompt: the system message (None for none).
            show_actions: list the admissible actions under each observation.
            max_turn_tokens: the longest reply of one turn, in tokens.
            budget_per: ``"episode"`` (a budget draw per episode) or ``"group"`` (one per
                prompt group, shared by its repeats).
            seed: seeds every task, budget and sampler draw (with the rank and episode/step).
            env_kwargs: extra constructor kwargs of the env (with an id).
            render: ``"suite"`` (``system_prompt``, the observation and its admissible actions
                on one line) or ``"lm"``: every episode rendered as the ``lm`` agent renders it
                (the family's system prompt, the offered actions one a line; the action taken
                out of a reply as that agent does), so a model from ``--trainer sft`` trains on
                the prompts it was fine-tuned on and plays after as ``lm:``.
            actions: ``"generate"`` (write each reply) or ``"score"``: each turn's reply is one
                of ``info["candidate_actions"]``, drawn from the model's scores of them at the
                sampling temperature (:mod:`~budget_envs.integrations.trl.scoring`; a turn
                with nothing offered is written). Not with vLLM.
        """
        self.actions = check_mode(actions)
        if render not in ("suite", "lm"):
            raise ValueError(f"render must be 'suite' or 'lm', got {render!r}")
        self.render = render
        if isinstance(max_turn_tokens, bool) or not isinstance(max_turn_tokens, int):
            raise TypeError(f"max_turn_tokens must be an int, got {max_turn_tokens!r}")
        if max_turn_tokens < 1:
            raise ValueError(f"max_turn_tokens must be at least 1, got {max_turn_tokens!r}")
        _check_draw_options(budget_per, seed)
        env, self._make = env_and_maker(
            env,
            budget=budget,
            visibility=visibility,
            faults=faults,
            process_reward=process_reward,
            process_max_cost=process_max_cost,
            env_kwargs=env_kwargs,
        )
        self.env = env
        self._pool: list[gym.Env] = [env]
        self.system_prompt = system_prompt
        self.show_actions = bool(show_actions)
        self.max_turn_tokens = int(max_turn_tokens)
        self.budget_per = budget_per
        self.seed = int(seed)
        self._episodes = 0  # episodes started on this rank: the episode index of the seeds
        self._calls: dict[int, int] = {}  # rollout calls per trainer step (sampler seeds)
        self._dialogue: _Dialogue | None = None
        self.last_episodes: list[RolloutEpisode] = []
        self.last_generation_calls = 0
        #: Keep the KV cache from one turn to the next (see :class:`HFTurnGenerator`).
        self.reuse_cache = True
        self.last_cache_reuses = 0

    def to_json(self) -> dict[str, Any]:
        """The settings a policy needs to play as it was trained (see ``PolicyAgent``)."""
        return {
            "system_prompt": self.system_prompt,
            "show_actions": self.show_actions,
            "max_turn_tokens": self.max_turn_tokens,
            "render": self.render,
            "actions": self.actions,
        }

    # ------------------------------------------------------------------ GRPO entry point
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        _require()
        import torch
        from trl.models.utils import unwrap_model_for_generation

        tokenizer = trainer.processing_class
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer
        args = trainer.args
        rank = int(trainer.accelerator.process_index)
        step = int(trainer.state.global_step)
        call = self._calls.get(step, 0)
        self._calls = {step: call + 1}
        limit = int(trainer.max_completion_length)
        kwargs = dict(getattr(trainer, "chat_template_kwargs", None) or {})
        training = trainer.model.training
        group = trainer.num_generations if training else trainer.num_generations_eval
        group = int(group or 1)
        sampler_seed = _seed(self.seed, rank, step, call, 1)
        eos_ids = list(trainer.eos_token_ids)
        if trainer.use_vllm:
            if self.actions in SCORING_MODES:
                raise ValueError("actions='score' needs the model in process, not vLLM")
            gen = VLLMTurnGenerator(trainer.vllm_generation, filler_id=eos_ids[0])
            return self._as_output(
                self._play_all(prompts, gen, tokenizer, limit, kwargs, rank, group, eos_ids, True)
            )
        device = trainer.accelerator.device
        devices = [device] if device.type == "cuda" else []
        with (
            torch.random.fork_rng(devices=devices),
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=args.ds3_gather_for_generation,
                generation_kwargs=trainer.generation_kwargs,
                gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
            ) as model,
        ):
            torch.manual_seed(sampler_seed)
            gen = HFTurnGenerator(
                model,
                trainer.generation_config,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_ids=eos_ids,
                temperature=trainer.temperature,
                reuse_cache=self.reuse_cache,
            )
            with _eval_mode(model):
                episodes = self._play_all(
                    prompts, gen, tokenizer, limit, kwargs, rank, group, eos_ids, False
                )
        return self._as_output(episodes)

    @staticmethod
    def _as_output(episodes: list[RolloutEpisode]) -> dict[str, list]:
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": [e.logprobs for e in episodes],
            "env_mask": [e.env_mask for e in episodes],
            "env_reward": [e.reward for e in episodes],
            "won": [e.won for e in episodes],
            "turns": [e.turns for e in episodes],
            "budget": [e.budget for e in episodes],
            "task_id": [e.task_id for e in episodes],
            "stop_reason": [e.stop_reason for e in episodes],
            "invalid": [e.invalid for e in episodes],
        }

    def play(
        self,
        prompts: Sequence[Any],
        model: Any,
        tokenizer: Any,
        *,
        max_completion_length: int = 256,
        generation_config: Any = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        sampler_seed: int | None = None,
        rank: int = 0,
    ) -> list[RolloutEpisode]:
        """Play one episode per prompt with ``model``, outside a trainer; ``len(prompts)``
        episodes, batched like the trainer path (repeats of one prompt form a group).

        ``generation_config`` defaults to sampling at temperature 1 with no top-k/top-p
        filtering; ``sampler_seed`` (default: from the seed and the episode counter) seeds it.
        """
        _require()
        import torch
        from transformers import GenerationConfig

        if generation_config is None:
            generation_config = GenerationConfig(
                do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=None
            )
        seed = _seed(self.seed, rank, self._episodes, 2) if sampler_seed is None else sampler_seed
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            gen = HFTurnGenerator.for_tokenizer(
                model, generation_config, tokenizer, reuse_cache=self.reuse_cache
            )
            with _eval_mode(model):
                return self._play_all(
                    prompts,
                    gen,
                    tokenizer,
                    int(max_completion_length),
                    dict(chat_template_kwargs or {}),
                    rank,
                    0,
                    gen.eos_token_ids,
                    False,
                )

    # ------------------------------------------------------------------ internals
    def _groups(self, prompts: Sequence[Any], group: int) -> list[int]:
        """The group index of each prompt: blocks of ``group`` (the trainer's num_generations),
        or runs of equal prompts when ``group`` is 0."""
        if group > 0:
            return [i // group for i in range(len(prompts))]
        out, last, g = [], object(), -1
        for p in prompts:
            key = p if isinstance(p, str) else repr(p)
            if key != last:
                g, last = g + 1, key
            out.append(g)
        return out

    def _task_for(self, prompt: Any, draw_seed: int) -> str:
        text = prompt if isinstance(prompt, str) else json.dumps(prompt, default=str)
        match = _TASK_TAG.search(text)
        if match:
            return match.group(1)
        ids = self.env.unwrapped.task_ids
        return ids[int(np.random.default_rng(draw_seed).integers(len(ids)))]

    def _envs(self, n: int) -> list[gym.Env]:
        while len(self._pool) < n:
            self._pool.append(self._make())
        return self._pool[:n]

    def _play_all(
        self,
        prompts: Sequence[Any],
        gen: Any,
        tokenizer: Any,
        limit: int,
        template_kwargs: dict[str, Any],
        rank: int,
        group: int,
        eos_ids: Sequence[int],
        lockstep: bool,
    ) -> list[RolloutEpisode]:
        if limit < 2:
            raise ValueError(f"max_completion_length must be at least 2, got {limit!r}")
        if (
            self._dialogue is None
            or self._dialogue.tok is not tokenizer
            or self._dialogue.kwargs != template_kwargs
        ):
            self._dialogue = _Dialogue(tokenizer, self.system_prompt, template_kwargs)
        dialogue = self._dialogue
        envs = self._envs(len(prompts))
        groups = self._groups(prompts, group)
        first_of: dict[int, int] = {}
        group_budget: dict[int, int] = {}
        states: list[_TokenEpisode] = []
        for i, (prompt, env) in enumerate(zip(prompts, envs)):
            index = self._episodes
            self._episodes += 1
            g = groups[i]
            first = first_of.setdefault(g, index)
            task_id = self._task_for(prompt, _seed(self.seed, rank, first, 3))
            seed = _seed(self.seed, rank, index, 0)
            options: dict[str, Any] = {"task_id": task_id}
            if self.budget_per == "group" and g in group_budget:
                options["budget"] = group_budget[g]
            with contextlib.suppress(AttributeError):
                # A budget schedule follows this rank's episode count, not one env's.
                env.set_wrapper_attr("episodes", index)
            obs, info = env.reset(seed=seed, options=options)
            budget = int(info.get("budget", {}).get("limit", 0))
            group_budget.setdefault(g, budget)
            if self.render == "lm":
                st = self._lm_episode(tokenizer, obs, info, limit, eos_ids)
            else:
                st = _TokenEpisode(
                    dialogue,
                    _user_text(obs, info, self.show_actions),
                    limit,
                    self.max_turn_tokens,
                    eos_ids,
                )
            st.ep.budget, st.ep.task_id, st.ep.seed = budget, task_id, seed
            st.offered = list(info.get("candidate_actions") or [])
            states.append(st)
        calls_before = gen.calls
        while True:
            live = [i for i, st in enumerate(states) if not st.over]
            if lockstep and not self._any_rank_live(bool(live)):
                break
            if not lockstep and not live:
                break
            if lockstep:
                # The same cap on every rank (the server applies one); rooms clip per episode.
                # Every episode of this rank takes part (see VLLMTurnGenerator).
                contexts = [st.context() if not st.over else [gen.filler_id] for st in states]
                replies, logps = gen.generate(contexts, self.max_turn_tokens)
                replies, logps = [replies[i] for i in live], [logps[i] for i in live]
            else:
                replies, logps = self._replies(gen, tokenizer, [states[i] for i in live])
            for i, reply, lp in zip(live, replies, logps):
                st, env = states[i], envs[i]
                action = st.take_reply(reply, lp)
                if action is None:
                    continue
                obs, reward, terminated, truncated, info = env.step(action)
                st.ep.actions.append(action)
                st.ep.reward += float(reward)
                st.ep.turns += 1
                st.ep.invalid += int(bool(info.get("invalid_action", False)))
                if terminated or truncated:
                    st.over = True
                    st.ep.won = bool(info.get("won", False))
                    st.ep.stop_reason = _stop_reason(info, terminated)
                    continue
                st.offered = list(info.get("candidate_actions") or [])
                st.take_observation(self._next_text(obs, info))
        episodes = [st.ep for st in states]
        self.last_episodes = episodes
        self.last_generation_calls = gen.calls - calls_before
        self.last_cache_reuses = int(getattr(gen, "reused", 0))
        if logger.isEnabledFor(logging.INFO):
            counts = {w: sum(e.stop_reason == w for e in episodes) for w in STOP_REASONS}
            logger.info("rollout: %d episodes, stop reasons %s", len(episodes), counts)
        return episodes

    def _replies(
        self, gen: Any, tokenizer: Any, states: Sequence[_TokenEpisode]
    ) -> tuple[list[list[int]], list[list[float]]]:
        """One reply per live episode: written by ``gen``, or (``actions="score"``) chosen
        among each episode's offered actions."""
        replies: list[list[int]] = [[] for _ in states]
        logps: list[list[float]] = [[] for _ in states]
        written = list(range(len(states)))
        if self.actions in SCORING_MODES:
            written = []
            end = tokenizer.eos_token_id
            end = int(end if isinstance(end, int) else list(end)[0])
            for j, st in enumerate(states):
                if not st.offered:
                    written.append(j)
                    continue
                _, cands = candidate_ids(tokenizer, st.offered, end, st.room())
                if cands:  # none fitting leaves an empty reply: the token limit ends it
                    scores = score_candidates(gen.model, st.context(), cands)
                    pick = choose(scores, gen.temperature, mode=self.actions)
                    replies[j], logps[j] = cands[pick], scores[pick]
        if written:
            rooms = [states[j].room() for j in written]
            new_tokens = min(self.max_turn_tokens, max(rooms))
            out, lps = gen.generate([states[j].context() for j in written], new_tokens)
            for j, reply, lp in zip(written, out, lps):
                replies[j], logps[j] = reply, lp
        return replies, logps

    def _agent_info(self, info: dict[str, Any]) -> dict[str, Any]:
        # What the lm agent would see: no budget unless it is shown.
        visible = self.env.get_wrapper_attr("visibility") != "hidden"
        return {k: v for k, v in info.items() if visible or k != "budget"}

    def _lm_episode(
        self, tokenizer: Any, obs: str, info: dict[str, Any], limit: int, eos_ids: Sequence[int]
    ) -> _TokenEpisode:
        from budget_envs.eval.prompts import MAX_SHOWN_ACTIONS, reply_action
        from budget_envs.integrations.lm.agent import episode_dialogue, render_first

        shown = self._agent_info(info)
        dialogue = episode_dialogue(tokenizer, self.env.spec.id, shown, native_tools=False)
        first = render_first(obs, shown, self.show_actions, MAX_SHOWN_ACTIONS)
        st = _TokenEpisode(dialogue, first, limit, self.max_turn_tokens, eos_ids)
        st.parse = reply_action
        return st

    def _next_text(self, obs: str, info: dict[str, Any]) -> str:
        if self.render != "lm":
            return _user_text(obs, info, self.show_actions)
        from budget_envs.eval.prompts import MAX_SHOWN_ACTIONS
        from budget_envs.integrations.lm.agent import next_text

        return next_text(obs, self._agent_info(info), self.show_actions, MAX_SHOWN_ACTIONS)

    @staticmethod
    def _any_rank_live(mine: bool) -> bool:
        """Whether any rank still has a live episode (vLLM server mode gathers every turn)."""
        try:
            import torch.distributed as dist
        except ImportError:  # pragma: no cover - torch is required by the extra
            return mine
        if not (dist.is_available() and dist.is_initialized()):
            return mine
        import torch

        flag = torch.tensor([1 if mine else 0])
        if dist.get_backend() == "nccl":
            flag = flag.cuda()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())
