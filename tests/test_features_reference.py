"""The featurizer's arrays equal a plain re-reading of its documented rules.

``Featurizer`` is tuned for speed (bucket counts with ``np.bincount``, the observation split into
words once, the history vector kept while the last actions stay the same, per-action token
caches). This test recomputes every array of every state with the slow, literal rules of
:mod:`budget_envs.integrations.rllib.features`'s docstring and asserts they are the same bit for
bit, on seeded random play of every registered id, with the budget hidden and shown.
"""

from __future__ import annotations

import re
import warnings
import zlib
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from budget_envs.registry import registered_ids

import budget_envs  # noqa: F401
from budget_envs.integrations.rllib.features import (
    N_ACTION_FEATS,
    FeatureSpec,
    Featurizer,
    hash_features,
    offered_actions,
)

IDS = [i for i in registered_ids() if i.startswith("BudgetMix/")]
_WORD = re.compile(r"[a-z0-9]+")
_BOILER = {"tool", "calls", "name", "arguments"}


def _ref_hash(text: str, dim: int) -> np.ndarray:
    out = np.zeros(dim, dtype=np.float32)
    words = _WORD.findall(text.lower())
    grams = words + [f"{a} {b}" for a, b in zip(words, words[1:])]
    for gram in grams:
        out[zlib.crc32(gram.encode()) % dim] += 1.0
    if grams:
        out = np.log1p(out)
        out /= out.max()
    return out


def _is_id(tok: str) -> bool:
    return len(tok) >= 5 and any(c.isdigit() for c in tok)


def _toks(text: str) -> list[str]:
    return [t for t in _WORD.findall(text.lower()) if t not in _BOILER]


class _Reference:
    """The documented rules, written out with no caching."""

    def __init__(self, spec: FeatureSpec, goal: str) -> None:
        self.spec, self.goal = spec, goal
        self.history = set(_toks(goal))
        self.played: Counter[str] = Counter()
        self.last: list[str] = []
        self.turn = 0

    def record(self, action: str) -> None:
        self.turn += 1
        self.played[action] += 1
        self.last = (self.last + [action])[-3:]

    def encode(self, obs: str, info: dict) -> dict[str, np.ndarray]:
        s = self.spec
        obs_toks = set(_toks(obs))
        self.history |= obs_toks
        budget = np.zeros(3, dtype=np.float32)
        b = info.get("budget")
        if s.budget_shown(b):
            limit = float(b["limit"])
            budget[:] = (b["remaining"] / limit, b["used"] / limit, min(limit / s.max_budget, 1))
        state = np.concatenate(
            [
                _ref_hash(obs, s.obs_dim),
                _ref_hash(self.goal, s.goal_dim),
                _ref_hash(" ".join(self.last), s.hist_dim),
                np.array([min(self.turn, 100) / 100.0]),
                np.clip(budget, 0, 1),
            ]
        ).astype(np.float32)
        actions = offered_actions(info)
        toks = np.zeros((s.max_actions, s.action_tokens), dtype=np.float32)
        feats = np.zeros((s.max_actions, N_ACTION_FEATS), dtype=np.float32)
        mask = np.zeros(s.max_actions, dtype=np.float32)
        goal = set(_toks(self.goal))
        for i, action in enumerate(actions):
            at = _toks(action)
            ids = {t for t in at if _is_id(t)}
            words = {t for t in at if not _is_id(t)}
            for j, t in enumerate(at[: s.action_tokens]):
                toks[i, j] = 1 + zlib.crc32(("<id>" if _is_id(t) else t).encode()) % (s.vocab - 1)

            def share(a: set, b: set) -> float:
                return len(a & b) / len(a) if a else 0.0

            feats[i] = (
                share(words, goal),
                share(words, obs_toks),
                share(ids, obs_toks),
                share(ids, self.history),
                float(bool(ids)),
                min(self.played[action], 3) / 3.0,
                float(bool(self.last) and action == self.last[-1]),
            )
            mask[i] = 1.0
        if not actions:
            mask[0] = 1.0
        return {"obs": state, "actions": toks, "action_feats": feats, "action_mask": mask}


def test_hash_features_matches_the_literal_rule():
    for text in ["", "go to fridge 1", "A a a b!", "x " * 500, "tool calls name arguments 12345"]:
        for dim in (7, 256):
            assert np.array_equal(hash_features(text, dim), _ref_hash(text, dim)), (text, dim)


@pytest.mark.parametrize("env_id", IDS, ids=IDS)
def test_featurizer_equals_the_documented_rules(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(env_id, budget=8)
    rng = np.random.default_rng(3)
    # One featurizer per visibility, its caches kept over its two episodes (one task repeats).
    featurizers = [
        Featurizer(
            FeatureSpec(obs_dim=256, goal_dim=64, hist_dim=64, max_actions=2048, visibility=v)
        )
        for v in ("hidden", "remaining", "final_warning")
    ]
    states = 0
    try:
        for episode in range(6):
            feat = featurizers[episode % 3]
            spec = feat.spec
            obs, info = env.reset(seed=episode % 4)
            feat.reset(info.get("goal", ""))
            ref = _Reference(spec, str(info.get("goal", "") or ""))
            while True:
                arrays, actions = feat.encode(obs, info)
                expected = ref.encode(obs, info)
                assert actions == offered_actions(info)
                for key, value in expected.items():
                    assert arrays[key].dtype == np.float32, key
                    assert np.array_equal(arrays[key], value), (env_id, episode, states, key)
                states += 1
                # Offered actions mostly, an action played twice and junk sometimes.
                roll = rng.random()
                if roll < 0.1 or not actions:
                    action = "tool calls 12345 <junk>"
                elif roll < 0.2 and ref.last:
                    action = ref.last[-1]
                else:
                    action = actions[int(rng.integers(len(actions)))]
                feat.record(action)
                ref.record(action)
                obs, _, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    break
    finally:
        env.close()
    assert states >= 3
