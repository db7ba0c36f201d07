"""TRL integration: BudgetMix episodes for ``GRPOTrainer`` (the optional ``trl`` extra).

Two ways in, both with the turn budget drawn per episode by the :class:`BudgetWrapper`:

* :class:`BudgetMixRollout` is a ``rollout_func``: it plays one multi-turn episode per prompt
  with the trainer's model and returns the token ids of the whole dialogue, with ``env_mask`` 0
  on the environment's tokens (so only the agent's tokens carry the loss), the sampling
  log-probabilities and the episode's env reward (``env_reward``; see :func:`env_reward`).
* :class:`BudgetMixToolEnv` is an ``environment_factory`` class: TRL runs the generation loop
  and calls its tools (``act(command)`` for text envs; one typed method per tool for the tool-use
  family); at truncation a tool raises :class:`BudgetExhausted`, which TRL hands back to the
  model as a tool error.

``import budget_envs`` never imports torch or trl: they load inside the functions here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from budget_envs._util import require, tool_call_action
from budget_envs.errors import BudgetExhausted, EpisodeOver
from budget_envs.integrations.common import DEFAULT_BUDGET, make_env, make_env_like

__all__ = [
    "BudgetExhausted",
    "BudgetMixRollout",
    "BudgetMixToolEnv",
    "EpisodeOver",
    "RolloutEpisode",
    "SYSTEM_PROMPT",
    "env_reward",
    "make_env",
    "make_env_like",
    "make_prompt_dataset",
    "oracle_examples",
    "task_prompt",
]

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are an agent in a text environment. Each turn, reply with exactly one action and "
    "nothing else."
)
_TASK_TAG = re.compile(r"\[task_id=([^\]\s]+)\]")
_MARK_A, _MARK_U = "\x1fASSISTANT\x1f", "\x1fUSER\x1f"


def _require() -> None:
    require("torch", "trl", extra="trl", what="the TRL integration")


def task_prompt(task_id: str) -> str:
    """The dataset prompt that names a task; :class:`BudgetMixRollout` plays that task."""
    return f"Play the BudgetMix task [task_id={task_id}]."


def make_prompt_dataset(env: gym.Env, n: int, seed: int = 0) -> Any:
    """A ``datasets.Dataset`` of ``n`` prompts, each naming a task drawn with ``seed``.

    GRPO repeats each prompt ``num_generations`` times; every repeat plays the same task (so
    the group's advantages compare like with like) under its own budget draw.
    """
    from datasets import Dataset

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    ids = list(env.unwrapped.task_ids)
    rng = np.random.default_rng(seed)
    picks = [ids[int(i)] for i in rng.integers(len(ids), size=n)]
    return Dataset.from_dict({"prompt": [task_prompt(t) for t in picks], "task_id": picks})


def env_reward(
    completions: Sequence[Any], env_reward: Sequence[float], **kwargs: Any
) -> list[float]:
    """GRPO reward function: the episode's env reward that the rollout returned."""
    return [float(r) for r in env_reward]


def _user_text(obs: str, info: dict[str, Any], show_actions: bool) -> str:
    text = obs
    if show_actions and info.get("admissible_actions"):
        text += "\nActions: " + ", ".join(info["admissible_actions"][:20])
    return text


@dataclass
class RolloutEpisode:
    """One played episode: token ids, the loss mask, log-probs and the outcome."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    won: bool = False
    turns: int = 0
    budget: int = 0
    actions: list[str] = field(default_factory=list)
    #: Why the episode ended: the env's ``info["stop_reason"]`` (``won``, ``lost``, ``budget``)
    #: or a trainer-side reason: ``context`` (the next turn would not fit in
    #: ``max_completion_length``).
    stop_reason: str = "context"


class _Dialogue:
    """Renders a dialogue with any chat template, turn by turn, as token ids.

    The text between an assistant reply and the next generation (end of turn, user header,
    observation, assistant header) is read off the template once, by rendering a probe dialogue.
    """

    def __init__(self, tokenizer: Any, system_prompt: str | None) -> None:
        self.tok = tokenizer
        self.system_prompt = system_prompt
        probe = self._messages("U0") + [
            {"role": "assistant", "content": _MARK_A},
            {"role": "user", "content": _MARK_U},
        ]
        text = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
        after = text[text.index(_MARK_A) + len(_MARK_A) :]
        self.before_obs, _, self.after_obs = after.partition(_MARK_U)
        eos = tokenizer.eos_token or ""
        self.eos_id = tokenizer.eos_token_id
        ends_with_eos = bool(eos) and self.before_obs.startswith(eos)
        self.before_obs_no_eos = self.before_obs[len(eos) :] if ends_with_eos else self.before_obs

    def _messages(self, first: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return msgs + [{"role": "user", "content": first}]

    def prompt_ids(self, first: str) -> list[int]:
        text = self.tok.apply_chat_template(
            self._messages(first), tokenize=False, add_generation_prompt=True
        )
        return self.tok.encode(text, add_special_tokens=False)

    def env_ids(self, obs: str, reply_ended: bool) -> list[int]:
        head = self.before_obs_no_eos if reply_ended else self.before_obs
        return self.tok.encode(head + obs + self.after_obs, add_special_tokens=False)


class BudgetMixRollout:
    """A GRPO ``rollout_func`` that plays multi-turn BudgetMix episodes.

    Each prompt (already repeated ``num_generations`` times by GRPO) becomes one episode; a
    prompt made by :func:`task_prompt` fixes the task, any other prompt gets a task drawn from
    the seeded generator (the same for every repeat of that prompt in one call). The budget of
    every episode is drawn by the env's :class:`BudgetWrapper`, so repeats of one task see
    different budgets. Per turn the model writes one reply (at most ``max_turn_tokens``); its
    first line is the action; the env's answer is appended as a user turn with ``env_mask`` 0.
    The episode ends when the env terminates or truncates, or when the next turn would not fit
    in the trainer's ``max_completion_length``.

    Returns ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` and, for reward
    functions, ``env_reward`` (the episode's summed reward), ``won``, ``turns``, ``budget`` and
    ``stop_reason`` (``won``, ``lost``, ``budget``, or ``context`` when the completion length ran
    out first).

    Example:
        Needs a model and a trainer, so this one is not run as a test::

            rollout = BudgetMixRollout("BudgetMix/WebShop-v0", budget=(4, 12))
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
        system_prompt: str | None = SYSTEM_PROMPT,
        show_actions: bool = True,
        max_turn_tokens: int = 24,
        seed: int = 0,
        env_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """Build the env (an id with wrapper options, or a ready env) and the task generator.

        Args:
            env: a BudgetMix id, or an env already wrapped in a BudgetWrapper.
            budget, visibility, faults: the wrapper options of ``gymnasium.make`` (with an id).
            process_reward: scale of the :class:`ProcessReward` signal added to the reward.
            system_prompt: the system message (None for none).
            show_actions: list the admissible actions under each observation.
            max_turn_tokens: the longest reply of one turn, in tokens.
            seed: seeds the first reset (task draws and the budget stream).
            env_kwargs: extra constructor kwargs of the env (with an id).
        """
        if isinstance(max_turn_tokens, bool) or not isinstance(max_turn_tokens, int):
            raise TypeError(f"max_turn_tokens must be an int, got {max_turn_tokens!r}")
        if max_turn_tokens < 1:
            raise ValueError(f"max_turn_tokens must be at least 1, got {max_turn_tokens!r}")
        if isinstance(env, str):
            env = make_env(
                env,
                budget=budget,
                visibility=visibility,
                faults=faults,
                process_reward=process_reward,
                **(env_kwargs or {}),
            )
        elif not isinstance(env, gym.Env):
            raise TypeError(f"env must be an env id or a gymnasium.Env, got {env!r}")
        self.env = env
        self.system_prompt = system_prompt
        self.show_actions = bool(show_actions)
        self.max_turn_tokens = int(max_turn_tokens)
        self.seed = int(seed)
        self.rng = np.random.default_rng(seed)
        self._seeded = False
        self._dialogue: _Dialogue | None = None
        self.last_episodes: list[RolloutEpisode] = []

    # ------------------------------------------------------------------ GRPO entry point
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        _require()
        tokenizer = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        args = trainer.args
        limit = int(getattr(args, "max_completion_length", 256) or 256)
        temperature = float(getattr(args, "temperature", 1.0) or 1.0)
        episodes = self.play(
            prompts, model, tokenizer, max_completion_length=limit, temperature=temperature
        )
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": [e.logprobs for e in episodes],
            "env_mask": [e.env_mask for e in episodes],
            "env_reward": [e.reward for e in episodes],
            "won": [e.won for e in episodes],
            "turns": [e.turns for e in episodes],
            "budget": [e.budget for e in episodes],
            "stop_reason": [e.stop_reason for e in episodes],
        }

    def play(
        self,
        prompts: Sequence[Any],
        model: Any,
        tokenizer: Any,
        *,
        max_completion_length: int = 256,
        temperature: float = 1.0,
    ) -> list[RolloutEpisode]:
        """Play one episode per prompt with ``model``; exactly ``len(prompts)`` episodes."""
        _require()
        if self._dialogue is None or self._dialogue.tok is not tokenizer:
            self._dialogue = _Dialogue(tokenizer, self.system_prompt)
        drawn: dict[str, str] = {}
        episodes = []
        was_training = model.training
        model.eval()  # no dropout while sampling, so the log-probs match the sampler
        try:
            for prompt in prompts:
                key = prompt if isinstance(prompt, str) else repr(prompt)
                task_id = self._task_for(key, drawn)
                episodes.append(
                    self._episode(task_id, model, tokenizer, max_completion_length, temperature)
                )
        finally:
            model.train(was_training)
        self.last_episodes = episodes
        return episodes

    # ------------------------------------------------------------------ internals
    def _task_for(self, prompt: str, drawn: dict[str, str]) -> str:
        match = _TASK_TAG.search(prompt)
        if match:
            return match.group(1)
        if prompt not in drawn:
            ids = self.env.unwrapped.task_ids
            drawn[prompt] = ids[int(self.rng.integers(len(ids)))]
        return drawn[prompt]

    def _reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        options = {"task_id": task_id}
        if not self._seeded:
            self._seeded = True
            return self.env.reset(seed=self.seed, options=options)
        # No seed: the BudgetWrapper keeps drawing from its stream, so budgets vary per episode.
        return self.env.reset(options=options)

    def _episode(self, task_id, model, tokenizer, limit, temperature) -> RolloutEpisode:
        import torch

        dialogue = self._dialogue
        obs, info = self._reset(task_id)
        ep = RolloutEpisode(
            prompt_ids=dialogue.prompt_ids(_user_text(obs, info, self.show_actions)),
            budget=int(info.get("budget", {}).get("limit", 0)),
        )
        device = next(model.parameters()).device
        context = list(ep.prompt_ids)
        while True:
            room = limit - len(ep.completion_ids)
            if room < 2:
                break
            new_tokens = min(self.max_turn_tokens, room)
            with torch.no_grad():
                out = model.generate(
                    input_ids=torch.tensor([context], device=device),
                    attention_mask=torch.ones((1, len(context)), dtype=torch.long, device=device),
                    max_new_tokens=new_tokens,
                    do_sample=True,
                    temperature=temperature,
                    top_k=0,
                    top_p=1.0,
                    output_logits=True,
                    return_dict_in_generate=True,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                )
            reply = out.sequences[0, len(context) :].tolist()
            # Generation stops at EOS; anything after it would be padding.
            if tokenizer.eos_token_id in reply:
                reply = reply[: reply.index(tokenizer.eos_token_id) + 1]
            logps = [
                float(torch.log_softmax(logits[0].float() / temperature, dim=-1)[tok])
                for logits, tok in zip(out.logits, reply)
            ]
            ep.completion_ids += reply
            ep.env_mask += [1] * len(reply)
            ep.logprobs += logps
            context += reply
            text = tokenizer.decode(reply, skip_special_tokens=True).strip()
            action = text.splitlines()[0].strip() if text else ""
            obs, reward, terminated, truncated, info = self.env.step(action)
            ep.actions.append(action)
            ep.reward += float(reward)
            ep.turns += 1
            if terminated or truncated:
                ep.won = bool(info.get("won", False))
                ep.stop_reason = info.get("stop_reason") or ("budget" if truncated else "lost")
                break
            env_ids = dialogue.env_ids(
                _user_text(obs, info, self.show_actions),
                reply_ended=bool(reply) and reply[-1] == tokenizer.eos_token_id,
            )
            if len(ep.completion_ids) + len(env_ids) + 2 > limit:
                break  # the next turn would not fit: stop here, like a token-budget truncation
            ep.completion_ids += env_ids
            ep.env_mask += [0] * len(env_ids)
            ep.logprobs += [0.0] * len(env_ids)
            context += env_ids
        return ep


def oracle_examples(
    rollout: BudgetMixRollout, tokenizer: Any, n_episodes: int = 16, seed: int = 0
) -> list[tuple[list[int], list[int]]]:
    """Token ids and loss masks of oracle episodes, rendered exactly as the rollout renders them.

    For a warm start (:func:`budget_envs.integrations.tiny_model.warm_start`): the mask is 1 on
    the agent's tokens only.
    """
    _require()
    dialogue = _Dialogue(tokenizer, rollout.system_prompt)
    env = make_env_like(rollout.env)
    base = env.unwrapped
    ids = list(base.task_ids)
    rng = np.random.default_rng(seed)
    out = []
    eos = tokenizer.eos_token_id
    for k in range(n_episodes):
        obs, info = env.reset(seed=seed + k, options={"task_id": ids[int(rng.integers(len(ids)))]})
        tokens = dialogue.prompt_ids(_user_text(obs, info, rollout.show_actions))
        mask = [0] * len(tokens)
        for _ in range(200):
            best = base.oracle_actions()
            if not best:
                break
            reply = tokenizer.encode(best[0], add_special_tokens=False) + [eos]
            tokens += reply
            mask += [1] * len(reply)
            obs, _, terminated, truncated, info = env.step(best[0])
            if terminated or truncated:
                break
            env_ids = dialogue.env_ids(_user_text(obs, info, rollout.show_actions), True)
            tokens += env_ids
            mask += [0] * len(env_ids)
        out.append((tokens, mask))
    return out


class BudgetMixToolEnv:
    """An ``environment_factory`` class for ``GRPOTrainer``: the env's actions as tools.

    TRL builds one instance per rollout, calls ``reset(**row)`` with the dataset row (a
    ``task_id`` column picks the task) and exposes :meth:`act` as a tool (for an env with an
    OpenAI tools schema, one method per tool instead, see :meth:`factory`). Every call is one turn
    of the budget; the call that uses the last turn, and any call after it, raises
    :class:`BudgetExhausted` with the observation, so the model learns the budget ran out.
    :meth:`get_reward` gives the episode's summed reward.

    Subclass with the env's options fixed, or use :meth:`factory`::

        GRPOTrainer(..., environment_factory=BudgetMixToolEnv.factory(
            "BudgetMix/WebShop-v0", budget=(5, 20), visibility="remaining"))
    """

    env_id: str = ""
    env_options: dict[str, Any] = {}

    def __init__(self) -> None:
        if not self.env_id:
            raise TypeError(
                "BudgetMixToolEnv needs an env id: use BudgetMixToolEnv.factory(env_id, ...)"
            )
        opts = dict(self.env_options)
        self._seed = int(opts.pop("seed", 0))
        self.env = make_env(self.env_id, **opts)
        self.reward = 0.0
        self.over: str | None = None
        self._resets = 0

    @classmethod
    def factory(
        cls, env_id: str, *, seed: int = 0, **options: Any
    ) -> Callable[[], BudgetMixToolEnv]:
        """A zero-argument callable building instances for ``env_id`` (options as in make_env).

        When the env publishes an OpenAI tools schema (``info["tools"]``, the tool-use family),
        every tool becomes a method of its own (its call is sent as the env's JSON tool call)
        instead of the generic :meth:`act`.
        """
        if not isinstance(env_id, str) or not env_id:
            raise TypeError(f"env_id must be a non-empty str, got {env_id!r}")
        name = "BudgetMixToolEnv_" + re.sub(r"\W", "_", env_id)
        attrs: dict[str, Any] = {"env_id": env_id, "env_options": {**options, "seed": seed}}
        probe = make_env(env_id, **options)
        try:
            _, info = probe.reset(seed=seed)
        finally:
            probe.close()
        schemas = info.get("tools") or []
        if schemas:
            attrs["act"] = None  # the env's own tools replace the generic text channel
            for schema in schemas:
                fn = schema.get("function", schema)
                if fn["name"] in ("reset", "get_reward") or fn["name"].startswith("_"):
                    raise ValueError(
                        f"{env_id} has a tool named {fn['name']!r}, which TRL reserves"
                    )
                attrs[fn["name"]] = _schema_method(fn)
        return type(name, (cls,), attrs)

    def reset(self, **row: Any) -> str:
        """Start an episode (on ``row["task_id"]`` when given); returns the first observation."""
        options = {"task_id": row["task_id"]} if row.get("task_id") is not None else None
        seed = self._seed if self._resets == 0 else None
        self._resets += 1
        obs, info = self.env.reset(seed=seed, options=options)
        self.reward = 0.0
        self.over = None
        return "\n" + _user_text(obs, info, True)

    def act(self, command: str) -> str:
        """Send one command to the environment; each call uses one turn of the budget.

        Args:
            command: The action to take, as text (for example "go east" or "search[red shoes]").

        Returns:
            What the environment answers.
        """
        return self._run(str(command))

    def _run(self, action: str) -> str:
        """Play one turn; raise at the end of the budget (see the class docstring)."""
        if self.over == "budget":
            raise BudgetExhausted(
                "Budget exhausted: no turns are left in this episode; no action can run."
            )
        if self.over is not None:
            raise EpisodeOver(f"The episode is over ({self.over}); no action can run.")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.reward += float(reward)
        if terminated:
            self.over = info.get("stop_reason") or ("won" if info.get("won") else "lost")
            return obs
        if truncated:
            self.over = "budget"
            limit = info.get("budget", {}).get("limit", "?")
            raise BudgetExhausted(
                f"Budget exhausted: that was turn {limit} of {limit}, the last one; "
                f"the episode ends unsolved. Last observation: {obs}"
            )
        return _user_text(obs, info, True)

    def get_reward(self) -> float:
        """The episode's summed reward (with ProcessReward when configured)."""
        return self.reward


def _schema_method(fn: dict[str, Any]) -> Callable[..., str]:
    """A method for one OpenAI tool schema, typed and documented so TRL can render its schema."""
    import inspect

    tool_name = fn["name"]
    params = fn.get("parameters", {}) or {}
    props = params.get("properties", {}) or {}
    required = set(params.get("required", []) or [])
    kinds = {"string": str, "integer": int, "number": float, "boolean": bool}

    def method(self: BudgetMixToolEnv, **kwargs: Any) -> str:
        return self._run(tool_call_action(tool_name, kwargs))

    sig = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    doc_args = []
    for pname, spec in props.items():
        kind = kinds.get(spec.get("type"), str)
        if pname in required:
            sig.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, annotation=kind))
            annotations[pname] = kind
        else:
            sig.append(
                inspect.Parameter(
                    pname, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind | None
                )
            )
            annotations[pname] = kind | None
        doc_args.append(f"    {pname}: {' '.join(str(spec.get('description', pname)).split())}")
    annotations["return"] = str
    method.__signature__ = inspect.Signature(sig, return_annotation=str)
    method.__annotations__ = annotations
    method.__name__ = method.__qualname__ = tool_name
    description = " ".join(str(fn.get("description", tool_name)).split())
    method.__doc__ = (
        description
        + ("\n\nArgs:\n" + "\n".join(doc_args) if doc_args else "")
        + "\n\nReturns:\n    The tool's JSON result."
    )
    return method
