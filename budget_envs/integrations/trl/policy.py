"""A policy folder: what :func:`~budget_envs.integrations.trl.training.train` writes
(:func:`save_policy`) and what plays it in the eval harness (:class:`PolicyAgent`, an
:class:`~budget_envs.eval.agents.Agent`; :func:`load_policy`).

A policy folder is a Hugging Face model folder (model, tokenizer, generation config) plus
``budgetmix_policy.json`` (:data:`POLICY_FILE`): the settings it was trained with. The agent
renders and samples exactly as the rollout did (the same token state, the same stop rules), so
the eval harness measures the policy that was trained.

Nothing heavy is imported until a function runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from budget_envs.integrations.trl.base import _require, _seed
from budget_envs.integrations.trl.dialogue import _Dialogue, _TokenEpisode, _user_text
from budget_envs.integrations.trl.generation import HFTurnGenerator
from budget_envs.integrations.trl.scoring import SCORING_MODES

__all__ = ["POLICY_FILE", "PolicyAgent", "load_policy", "save_policy"]

#: The file in a policy folder that holds how the policy plays (prompt, limits, sampling).
POLICY_FILE = "budgetmix_policy.json"


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


class PolicyAgent:
    """A saved policy (a folder written by ``train``) as an eval-harness agent.

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
        device: str | None = None,
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
        self.device = None if device in (None, "") else str(device)
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
        # The generator holds the model: a pickled agent reloads both in its new process.
        state.update(_model=None, _tokenizer=None, _dialogue=None, _state=None, _generator=None)
        return state

    def _load(self) -> None:
        _require()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self.threads:
            torch.set_num_threads(int(self.threads))
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir, padding_side="left")
        self._model = AutoModelForCausalLM.from_pretrained(self.model_dir, use_safetensors=True)
        if self.device is not None:
            self._model.to(self.device)
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
        self._generator = HFTurnGenerator.for_tokenizer(self._model, config, self._tokenizer)

    def reset(self, *, env_id: str, observation: str, info: Mapping[str, Any], seed: int) -> None:
        """Start an episode: render the first observation as the prompt."""
        if self.check_visibility:
            from budget_envs.integrations.common import check_trained_visibility

            check_trained_visibility(self.name, self.settings.get("visibility", "hidden"), info)
        if self._model is None:
            self._load()
        self._state = _TokenEpisode(
            self._dialogue,
            _user_text(observation, dict(info), bool(self.settings.get("show_actions", True))),
            int(self.settings.get("max_completion_length", 512)),
            int(self.settings.get("max_turn_tokens", 24)),
            self._generator.eos_token_ids,
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
        offered = list(info.get("candidate_actions") or [])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seed(self.seed, self._episode_seed, self._turn))
            if self.settings.get("actions") in SCORING_MODES and offered:
                reply, logp = self._scored(context, offered, st.room())
            else:
                cap = min(st.max_turn_tokens, st.room())
                replies, logps = self._generator.generate([context], cap)
                reply, logp = replies[0], logps[0]
        self._tokens["prompt_tokens"] += len(context)
        self._tokens["completion_tokens"] += len(reply)
        self._tokens["requests"] += 1
        action = st.take_reply(reply, logp)
        return "" if action is None else action

    def _scored(
        self, context: list[int], offered: list[str], room: int
    ) -> tuple[list[int], list[float]]:
        """The offered action the model's scores draw (as in training; see ``scoring``)."""
        from budget_envs.integrations.trl.scoring import candidate_ids, choose, score_candidates

        end = self._generator.eos_token_ids[0]
        _, cands = candidate_ids(self._tokenizer, offered, end, room)
        if not cands:
            return [], []
        scores = score_candidates(self._model, context, cands)
        temperature = self._model.generation_config.temperature
        mode = str(self.settings.get("actions"))
        pick = choose(scores, 1.0 if temperature is None else float(temperature), mode=mode)
        return cands[pick], scores[pick]

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
    device: str | None = None,
) -> PolicyAgent:
    """A policy folder written by ``train`` as an eval agent (what ``policy:DIR`` plays).

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
        device=device,
    )
