"""Behaviour-cloning warm start of the action-scoring policy from the env's own oracle.

PPO from a random policy rarely sees a win on these families (the random agent wins none of the
level-1 ToolUse or ALFWorld tasks within their budgets), so its outcome reward has nothing to
reinforce. :func:`train` (``budgetmix train --warm-start-episodes N``) therefore first fits the
policy to the env's oracle, then runs PPO from there:

* :func:`collect_demonstrations` plays ``episodes`` training episodes. On each turn it records the
  state's arrays (exactly as :class:`~budget_envs.integrations.rllib.MaskedTextEnv` renders them
  for PPO) and which offered actions are among ``oracle_actions()``; it then plays an oracle
  action, or with probability ``explore`` a uniformly drawn offered action, so that states off the
  oracle's path are labelled too (the labels always come from the oracle at the state visited).
  States where no offered action is optimal (a lost task, or an optimal action the candidates do
  not hold) are skipped and counted.
* :func:`pretrain` minimises ``-log sum_{a optimal} pi(a | s)`` (the probability of playing some
  optimal action) over those states with Adam, in minibatches padded to their own largest action
  count (the module scores any number of action rows).

The value head is not fitted: PPO's first iterations do that. Every draw comes from generators
seeded by ``seed``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["BATCH_SIZE", "Demonstrations", "collect_demonstrations", "pretrain"]

#: States per gradient step of :func:`pretrain`.
BATCH_SIZE = 64
#: The first episode of a continued imitation (``collect_demonstrations(first_episode=...)``):
#: its reset seeds lie between those of one training seed's warm start and the next one's.
IMITATION_FIRST_EPISODE = 500_000


@dataclass
class Demonstrations:
    """Labelled states: ``states[i]`` holds the arrays cut to the state's ``n`` actions."""

    states: list[dict[str, np.ndarray]] = field(default_factory=list)
    targets: list[np.ndarray] = field(default_factory=list)
    episodes: int = 0
    wins: int = 0
    skipped: int = 0
    #: Env steps played to collect them (labelled and skipped states alike).
    steps: int = 0

    def __len__(self) -> int:
        return len(self.states)

    def summary(self) -> dict[str, Any]:
        """Counts for ``policy.json``."""
        return {
            "episodes": self.episodes,
            "env_steps": self.steps,
            "states": len(self.states),
            "skipped_states": self.skipped,
            "behaviour_win_rate": self.wins / self.episodes if self.episodes else 0.0,
        }


def collect_demonstrations(
    env_config: Mapping[str, Any],
    *,
    episodes: int,
    explore: float = 0.3,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    max_steps: int | None = None,
    first_episode: int = 0,
) -> Demonstrations:
    """Play ``episodes`` oracle episodes (with ``explore`` random turns) and label every state.

    ``env_config`` is the training env's config (:func:`~budget_envs.integrations.rllib.
    env_creator`'s keys), so the states are rendered and the tasks drawn as PPO's are. Episode
    ``e`` (counting from ``first_episode``) is reset with seed ``seed * 1_000_003 + e``. With
    ``max_steps``, collection stops after the episode whose env steps reach it (``episodes`` is
    then a cap), so the env steps spent exceed ``max_steps`` by less than one episode.
    """
    from budget_envs.integrations.rllib.env import env_creator

    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    if not isinstance(explore, (int, float)) or not 0.0 <= float(explore) <= 1.0:
        raise ValueError(f"explore must be in [0, 1], got {explore!r}")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)
                                  or max_steps < 1):  # fmt: skip
        raise ValueError(f"max_steps must be an int >= 1 or None, got {max_steps!r}")
    config = dict(env_config)
    config.pop("seed", None)
    env = env_creator(config)
    env.exact_slots = True  # the states are kept cut to their actions anyway
    rng = np.random.default_rng([int(seed), 7])
    demos = Demonstrations()
    try:
        for ep in range(first_episode, first_episode + episodes):
            if max_steps is not None and demos.steps >= max_steps:
                break
            obs, info = env.reset(seed=int(seed) * 1_000_003 + ep)
            done = False
            while not done:
                n = len(env.commands)
                good = set(env.env.unwrapped.oracle_actions() or ())
                target = np.array([c in good for c in env.commands], dtype=bool)
                if target.any():
                    demos.states.append(
                        {k: (v.copy() if k == "obs" else v[:n].copy()) for k, v in obs.items()}
                    )
                    demos.targets.append(target)
                    if rng.random() >= explore:
                        slot = int(rng.choice(np.flatnonzero(target)))
                    else:
                        slot = int(rng.integers(max(n, 1)))
                else:
                    demos.skipped += 1
                    slot = int(rng.integers(max(n, 1)))
                obs, _, terminated, truncated, info = env.step(slot)
                demos.steps += 1
                done = terminated or truncated
            demos.episodes += 1
            demos.wins += bool(info.get("won"))
            if progress is not None:
                if max_steps is None:
                    progress(demos.episodes, episodes)
                else:
                    progress(min(demos.steps, max_steps), max_steps)
    finally:
        env.close()
    return demos


def _batch(demos: Demonstrations, idx: np.ndarray) -> tuple[dict[str, Any], Any]:
    import torch

    k = max(len(demos.targets[i]) for i in idx)
    out: dict[str, Any] = {}
    for key in demos.states[idx[0]]:
        rows = []
        for i in idx:
            arr = demos.states[i][key]
            if key != "obs":
                pad = [(0, k - arr.shape[0])] + [(0, 0)] * (arr.ndim - 1)
                arr = np.pad(arr, pad)
            rows.append(arr)
        out[key] = torch.as_tensor(np.stack(rows))
    target = np.zeros((len(idx), k), dtype=bool)
    for j, i in enumerate(idx):
        target[j, : len(demos.targets[i])] = demos.targets[i]
    return out, torch.as_tensor(target)


def pretrain(
    module: Any,
    demos: Demonstrations,
    *,
    epochs: int = 20,
    lr: float = 1e-3,
    batch_size: int = BATCH_SIZE,
    seed: int = 0,
    progress: Callable[[int, int, dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """Fit ``module``'s action scores to the oracle labels; one row per epoch.

    Each row: ``epoch``, ``loss`` (mean negative log-probability of playing an optimal action)
    and ``accuracy`` (share of states whose highest-scored action is optimal).
    """
    import torch

    if not len(demos):
        raise ValueError("no labelled states to learn from (every state was skipped)")
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    torch.manual_seed(int(seed))
    rng = np.random.default_rng([int(seed), 11])
    opt = torch.optim.Adam(module.parameters(), lr=float(lr))
    rows = []
    module.train()
    n = len(demos)
    for epoch in range(1, epochs + 1):
        total = correct = 0.0
        order = rng.permutation(n)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            obs, target = _batch(demos, idx)
            logits, _ = module._scores(obs)
            logp = torch.log_softmax(logits, dim=-1)
            masked = torch.where(target, logp, torch.full_like(logp, -1e9))
            loss = -torch.logsumexp(masked, dim=-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            best = logits.detach().argmax(dim=-1, keepdim=True)
            correct += float(target.gather(1, best).sum())
        row = {"epoch": float(epoch), "loss": total / n, "accuracy": correct / n}
        rows.append(row)
        if progress is not None:
            progress(epoch, epochs, row)
    module.eval()
    return rows
