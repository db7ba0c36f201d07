"""The action-scoring PPO RLModule (DRRN-style) and the episode metrics callback.

Imports torch and RLlib at import time: reach it through :mod:`budget_envs.integrations.rllib`,
which imports this module only when the class is asked for.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

__all__ = ["ActionScoringTorchModule", "BudgetMetricsCallback", "score_actions"]

_MASKED = -1e9
#: The keys :class:`~budget_envs.integrations.rllib.MaskedTextEnv` observations hold.
OBS_KEYS = frozenset({"obs", "actions", "action_feats", "action_mask"})


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers)


class ActionScoringTorchModule(TorchRLModule, ValueFunctionAPI):
    """One shared network scores every offered action; PPO's policy is the softmax of the scores.

    The state vector goes through an MLP (``h_s``); each action's tokens are averaged in an
    embedding bag, joined with its action-vs-state features and put through another MLP (``h_a``);
    the score of an action is an MLP of ``[h_s, h_a, h_s * h_a]``. Empty slots get -1e9, so any
    number of actions up to the slot count is playable and none is favoured by its position.
    The value head reads ``h_s`` only.

    Only the offered rows are computed (gathered by the mask before the networks, scattered back
    after), so the slot count costs neither forward nor backward.

    ``model_config`` keys: ``hidden`` (width, default 128), ``embed`` (token embedding size,
    default 64), ``packed`` (default True; False scores every slot, padding included: the old
    path, kept for benchmarks; the same log-probabilities), ``torch_threads`` (when set, the
    torch threads of the process that builds the module: env runners and learners).
    """

    def setup(self) -> None:
        space = self.observation_space
        if not isinstance(space, spaces.Dict) or set(space) != OBS_KEYS:
            raise ValueError(
                "ActionScoringTorchModule needs MaskedTextEnv's Dict observation space with keys "
                f"{sorted(OBS_KEYS)}, got {space!r}"
            )
        cfg = dict(self.model_config or {})
        hidden = int(cfg.get("hidden", 128))
        embed = int(cfg.get("embed", 64))
        state_dim = space["obs"].shape[0]
        vocab = int(space["actions"].high.max()) + 1
        n_feats = space["action_feats"].shape[1]
        self.state_net = _mlp([state_dim, hidden, hidden])
        self.tokens = nn.EmbeddingBag(vocab, embed, mode="sum", padding_idx=0)
        self.action_net = _mlp([embed + n_feats, hidden, hidden])
        self.scorer = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.vf = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.packed = bool(cfg.get("packed", True))
        threads = cfg.get("torch_threads")
        if threads:
            # Every process that builds the module (env runners, learner) runs one small network:
            # two threads on two shared cores fight (batch-1 inference 1.4 ms vs 24 ms under load).
            torch.set_num_threads(int(threads))

    def _scores(self, obs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits of every slot (-1e9 where no action is offered) and the state embedding."""
        return self._packed_scores(obs) if self.packed else self._dense_scores(obs)

    def _packed_scores(self, obs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits of every slot (-1e9 where no action is offered) and the state embedding.

        Only the offered rows go through the action MLPs and the scorer: they are gathered by
        the mask before the networks and scattered back into a -1e9 row after, so a state's cost,
        forward and backward, is its offered actions, not the slot count.
        """
        h_s = self.state_net(obs["obs"])
        mask = obs["action_mask"] > 0.5
        b, k = mask.shape
        rows, cols = mask.nonzero(as_tuple=True)
        toks = obs["actions"][rows, cols].long()
        counts = (toks > 0).sum(-1, keepdim=True).clamp(min=1).float()
        bag = self.tokens(toks) / counts
        h_a = self.action_net(torch.cat([bag, obs["action_feats"][rows, cols]], dim=-1))
        h = h_s[rows]
        scores = self.scorer(torch.cat([h, h_a, h * h_a], dim=-1)).squeeze(-1)
        logits = torch.full((b, k), _MASKED, dtype=scores.dtype, device=scores.device)
        logits = logits.index_put((rows, cols), scores)
        return logits, h_s

    def _dense_scores(self, obs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """The same logits computed at every slot, padding included: the reference the packed
        path is tested against, and what ``model_config["packed"] = False`` runs."""
        h_s = self.state_net(obs["obs"])
        toks = obs["actions"].long()
        b, k, n = toks.shape
        counts = (toks > 0).sum(-1, keepdim=True).clamp(min=1).float()
        bag = self.tokens(toks.reshape(b * k, n)).reshape(b, k, -1) / counts
        h_a = self.action_net(torch.cat([bag, obs["action_feats"]], dim=-1))
        h = h_s.unsqueeze(1).expand(-1, k, -1)
        logits = self.scorer(torch.cat([h, h_a, h * h_a], dim=-1)).squeeze(-1)
        logits = torch.where(obs["action_mask"] > 0.5, logits, torch.full_like(logits, _MASKED))
        return logits, h_s

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        logits, _ = self._scores(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: logits}

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        logits, h_s = self._scores(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: logits, Columns.EMBEDDINGS: h_s}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> Any:
        if embeddings is None:
            embeddings = self.state_net(batch[Columns.OBS]["obs"])
        return self.vf(embeddings).squeeze(-1)


def score_actions(
    module: ActionScoringTorchModule, arrays: dict[str, np.ndarray], n_actions: int
) -> np.ndarray:
    """Action probabilities of one state (the first ``n_actions`` slots), without Ray."""
    with torch.no_grad():
        obs = {k: torch.as_tensor(v).unsqueeze(0) for k, v in arrays.items()}
        logits = module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS][0]
    logits = logits[: max(1, n_actions)].double()
    probs = torch.softmax(logits - logits.max(), dim=0).numpy()
    return probs / probs.sum()


class BudgetMetricsCallback(RLlibCallback):
    """Logs per episode: win rate, turns, budget limit and used, invalid-action rate.

    Reads the slim ``info`` of :class:`~budget_envs.integrations.rllib.MaskedTextEnv` (``won``,
    ``invalid_action``, ``budget``); results appear under ``env_runners`` as ``win_rate``,
    ``turns``, ``budget_limit``, ``budget_used`` and ``invalid_action_rate``.
    """

    def on_episode_end(self, *, episode: Any, metrics_logger: Any = None, **kwargs: Any) -> None:
        if metrics_logger is None:
            return
        infos = episode.get_infos()
        steps = infos[1:] if len(infos) > 1 else []
        last = infos[-1] if infos else {}
        budget = last.get("budget") or {}
        turns = len(steps)
        invalid = sum(bool(i.get("invalid_action")) for i in steps)
        values = {
            "win_rate": float(bool(last.get("won"))),
            "turns": float(turns),
            "budget_limit": float(budget.get("limit", math.nan)),
            "budget_used": float(budget.get("used", turns)),
            "invalid_action_rate": invalid / turns if turns else 0.0,
        }
        for key, value in values.items():
            metrics_logger.log_value(key, value, reduce="mean", window=100)
