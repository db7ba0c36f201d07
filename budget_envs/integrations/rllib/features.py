"""What an action-scoring policy sees: fixed-size arrays from an observation, its info and the
episode so far. No torch, no ray: the training adapter and the evaluation agent share this code,
so a trained policy's inputs are rendered exactly as in training.

For every turn :class:`Featurizer` builds::

    obs           Box(0, 1, (obs_dim + goal_dim + hist_dim + 4,))   the state
    actions       Box(0, vocab - 1, (max_actions, action_tokens))    token ids of each action
    action_feats  Box(0, 1, (max_actions, N_ACTION_FEATS))           action-vs-state features
    action_mask   Box(0, 1, (max_actions,))                          1 where an action exists

``obs`` holds hashed word and word-pair counts (``zlib.crc32``, the same in every process) of the
observation, of the goal and of the last three actions, the turn number over 100 and three budget
features (turns left and used over T, T over ``max_budget``). The budget features are zero unless
the visibility shows the budget on this turn (``"remaining"`` or a template: every turn;
``"final_warning"``: while at most ``warn_within`` turns are left), so a budget-hidden policy's
input does not depend on T.

The actions are ``info["candidate_actions"]`` when the env offers them (tool use: full tool calls;
web shop: concrete searches) and ``info["admissible_actions"]`` otherwise. Each is a bag of up to
``action_tokens`` hashed tokens (long tokens with digits, i.e. ids, all share one token, since a
hashed id means nothing in another task) plus :data:`ACTION_FEATS`, which relate the action to the
state: which of its words and ids appear in the goal, the observation and the history, and how
often it was played. More actions than ``max_actions`` raise :class:`TooManyActions`; nothing is
ever cut silently.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from gymnasium import spaces

from budget_envs.errors import TooManyActions

__all__ = [
    "ACTION_FEATS",
    "FeatureSpec",
    "Featurizer",
    "TooManyActions",
    "hash_features",
    "offered_actions",
]

_WORD = re.compile(r"[a-z0-9]+")
#: JSON boilerplate of a tool call: in every call, so it says nothing about one.
_BOILERPLATE = frozenset({"tool", "calls", "name", "arguments"})
_ID_TOKEN = "<id>"

#: The per-action features, in order.
ACTION_FEATS: tuple[str, ...] = (
    "words_in_goal",
    "words_in_observation",
    "ids_in_observation",
    "ids_in_history",
    "has_ids",
    "times_played",
    "is_last_action",
)
N_ACTION_FEATS = len(ACTION_FEATS)
_VISIBILITIES = ("hidden", "remaining", "final_warning")


def hash_features(text: str, dim: int, bigrams: bool = True) -> np.ndarray:
    """Hashed bag of words (and word pairs) of ``text`` in ``dim`` buckets, scaled into [0, 1].

    Buckets come from ``zlib.crc32`` (the same in every process); counts are log-scaled and
    divided by the largest, so the vector is in [0, 1] whatever the text length.

    Example:
        >>> v = hash_features("go to fridge 1", 16)
        >>> v.shape, float(v.max())
        ((16,), 1.0)
    """
    return _hash_words(_WORD.findall(text.lower()), dim, bigrams)


def _buckets(words: list[str], dim: int, bigrams: bool = True) -> np.ndarray:
    """The bucket of every word (and word pair) of ``words``."""
    grams = words + ([f"{a} {b}" for a, b in zip(words, words[1:])] if bigrams else [])
    crc = zlib.crc32
    buckets = np.fromiter((crc(g.encode()) for g in grams), dtype=np.int64, count=len(grams))
    return buckets % dim


def _scaled_counts(buckets: np.ndarray, dim: int) -> np.ndarray:
    """Bucket counts, log-scaled and divided by the largest (zeros when there is none)."""
    if not len(buckets):
        return np.zeros(dim, dtype=np.float32)
    out = np.bincount(buckets, minlength=dim).astype(np.float32)
    np.log1p(out, out=out)
    out /= out.max()
    return out


def _hash_words(words: list[str], dim: int, bigrams: bool = True) -> np.ndarray:
    """:func:`hash_features` of a text already split into ``words``."""
    return _scaled_counts(_buckets(words, dim, bigrams), dim)


def _is_id(token: str) -> bool:
    # Tokens are runs of [a-z0-9]: one holds a digit exactly when it is not all letters.
    return len(token) >= 5 and not token.isalpha()


def _tokens(text: str) -> list[str]:
    return [t for t in _WORD.findall(text.lower()) if t not in _BOILERPLATE]


def offered_actions(info: Mapping[str, Any]) -> list[str]:
    """The actions a policy chooses among: the env's candidates, else the admissible actions."""
    if "candidate_actions" in info:
        return list(info["candidate_actions"] or [])
    return list(info.get("admissible_actions") or [])


@dataclass(frozen=True)
class FeatureSpec:
    """The sizes and the visibility that fix a policy's inputs (saved with every checkpoint)."""

    obs_dim: int = 1024
    goal_dim: int = 256
    hist_dim: int = 256
    max_actions: int = 512
    action_tokens: int = 16
    vocab: int = 8192
    visibility: str = "hidden"
    warn_within: int = 3
    max_budget: int = 100

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "visibility":
                if not isinstance(value, str) or not value:
                    raise ValueError(f"visibility must be a non-empty str, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{f.name} must be a positive int, got {value!r}")
        if self.vocab < 2:
            raise ValueError(f"vocab must be at least 2, got {self.vocab!r}")

    @property
    def state_dim(self) -> int:
        """Length of the ``obs`` vector."""
        return self.obs_dim + self.goal_dim + self.hist_dim + 4

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the checkpoint's ``features`` entry)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureSpec:
        """The spec saved by :meth:`to_dict`; unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        extra = sorted(set(data) - known)
        if extra:
            raise ValueError(f"unknown feature settings {extra}; expected some of {sorted(known)}")
        return cls(**dict(data))

    def observation_space(self) -> spaces.Dict:
        """The Gymnasium space of :meth:`Featurizer.encode`'s arrays."""
        k = self.max_actions
        return spaces.Dict(
            {
                "obs": spaces.Box(0.0, 1.0, (self.state_dim,), np.float32),
                "actions": spaces.Box(
                    0.0, float(self.vocab - 1), (k, self.action_tokens), np.float32
                ),
                "action_feats": spaces.Box(0.0, 1.0, (k, N_ACTION_FEATS), np.float32),
                "action_mask": spaces.Box(0.0, 1.0, (k,), np.float32),
            }
        )

    def budget_shown(self, budget: Mapping[str, Any] | None) -> bool:
        """Whether this turn's budget is visible to the policy under :attr:`visibility`."""
        if not budget or not budget.get("limit") or self.visibility == "hidden":
            return False
        if self.visibility == "final_warning":
            return int(budget["remaining"]) <= self.warn_within
        return True


class Featurizer:
    """Turns (observation, info) into the arrays of :class:`FeatureSpec` (see the module doc).

    Call :meth:`reset` at the start of an episode, :meth:`encode` for every state, and
    :meth:`record` with every action that ran (the policy's or one forced on it).
    """

    def __init__(self, spec: FeatureSpec) -> None:
        if not isinstance(spec, FeatureSpec):
            raise TypeError(f"spec must be a FeatureSpec, got {spec!r}")
        self.spec = spec
        self._token_cache: dict[str, tuple[np.ndarray, frozenset, frozenset]] = {}
        self._goal_cache: dict[str, tuple[np.ndarray, frozenset]] = {}
        self._grams_cache: dict[str, tuple[list[str], np.ndarray]] = {}
        self.reset("")

    def reset(self, goal: str) -> None:
        """Start an episode with ``goal`` (``info["goal"]``)."""
        self.goal = str(goal or "")
        hit = self._goal_cache.get(self.goal)
        if hit is None:
            hit = (hash_features(self.goal, self.spec.goal_dim), frozenset(_tokens(self.goal)))
            if len(self._goal_cache) < 10_000:
                self._goal_cache[self.goal] = hit
        self._goal_vec, self._goal_tokens = hit
        self._history_tokens: set[str] = set(self._goal_tokens)
        self._played: Counter[str] = Counter()
        self._last: list[str] = []
        self._hist_key: tuple[str, ...] | None = None
        self._hist_vec = np.zeros(self.spec.hist_dim, dtype=np.float32)
        self.turn = 0

    def observe(self, observation: str) -> None:
        """An observation was shown (every state, including teacher-forced ones)."""
        self._history_tokens |= set(_tokens(observation))

    def record(self, action: str) -> None:
        """An action ran this turn (played or teacher-forced)."""
        self._played[action] += 1
        self._last = (self._last + [action])[-3:]
        self.turn += 1

    def _action_grams(self, action: str) -> tuple[list[str], np.ndarray]:
        """An action's words and the history buckets of its own words and word pairs."""
        hit = self._grams_cache.get(action)
        if hit is None:
            words = _WORD.findall(action.lower())
            hit = (words, _buckets(words, self.spec.hist_dim))
            if len(self._grams_cache) < 100_000:
                self._grams_cache[action] = hit
        return hit

    def _history_vec(self) -> np.ndarray:
        """``hash_features(" ".join(last actions), hist_dim)``, from per-action buckets: the words
        of the joined text are the actions' words in turn, so its grams are each action's own
        plus one word pair where two actions with words meet."""
        key = tuple(self._last)
        if key == self._hist_key:
            return self._hist_vec
        dim = self.spec.hist_dim
        parts = []
        prev = None
        for action in self._last:
            words, buckets = self._action_grams(action)
            if not words:
                continue
            if prev is not None:
                joint = zlib.crc32(f"{prev} {words[0]}".encode()) % dim
                parts.append(np.array([joint], dtype=np.int64))
            parts.append(buckets)
            prev = words[-1]
        empty = np.zeros(0, dtype=np.int64)
        vec = _scaled_counts(np.concatenate(parts) if parts else empty, dim)
        self._hist_key, self._hist_vec = key, vec
        return vec

    def _action_tokens(self, action: str) -> tuple[np.ndarray, frozenset, frozenset]:
        hit = self._token_cache.get(action)
        if hit is not None:
            return hit
        spec = self.spec
        toks = _tokens(action)
        is_id = [_is_id(t) for t in toks]
        ids = frozenset(t for t, i in zip(toks, is_id) if i)
        words = frozenset(t for t, i in zip(toks, is_id) if not i)
        row = np.zeros(spec.action_tokens, dtype=np.float32)
        shown = [(_ID_TOKEN if i else t) for t, i in zip(toks, is_id)][: spec.action_tokens]
        row[: len(shown)] = [1 + zlib.crc32(tok.encode()) % (spec.vocab - 1) for tok in shown]
        out = (row, words, ids)
        if len(self._token_cache) < 100_000:
            self._token_cache[action] = out
        return out

    def encode(
        self, observation: str, info: Mapping[str, Any], *, exact: bool = False
    ) -> tuple[dict[str, np.ndarray], list[str]]:
        """The arrays for this state and the actions their slots stand for (slot k = actions[k]).

        ``exact=True`` gives the action arrays exactly one row per offered action (at least one)
        instead of ``max_actions``: for code that scores states one at a time (the module scores
        any number of rows); the rows are the same.

        Raises:
            TooManyActions: the state offers more than ``max_actions`` actions (not with
                ``exact``).
        """
        spec = self.spec
        actions = offered_actions(info)
        if len(actions) > spec.max_actions and not exact:
            raise TooManyActions(
                f"{len(actions)} actions are offered but the policy has max_actions="
                f"{spec.max_actions} slots; raise max_actions (no action is ever dropped)"
            )
        obs_words = _WORD.findall(observation.lower())
        obs_tokens = set(obs_words) - _BOILERPLATE
        self._history_tokens |= obs_tokens
        budget = np.zeros(3, dtype=np.float32)
        b = info.get("budget")
        if spec.budget_shown(b):
            limit = float(b["limit"])
            budget[:] = (
                b["remaining"] / limit,
                b["used"] / limit,
                min(limit / spec.max_budget, 1.0),
            )
        state = np.concatenate(
            [
                _hash_words(obs_words, spec.obs_dim),
                self._goal_vec,
                self._history_vec(),
                np.array([min(self.turn, 100) / 100.0], dtype=np.float32),
                np.clip(budget, 0.0, 1.0),
            ]
        )
        k = max(len(actions), 1) if exact else spec.max_actions
        toks = np.zeros((k, spec.action_tokens), dtype=np.float32)
        feats = np.zeros((k, N_ACTION_FEATS), dtype=np.float32)
        mask = np.zeros(k, dtype=np.float32)
        last = self._last[-1] if self._last else None
        goal, history, played = self._goal_tokens, self._history_tokens, self._played
        rows, rel = [], []
        for action in actions:
            row, words, ids = self._action_tokens(action)
            rows.append(row)
            nw, ni = len(words), len(ids)
            rel.append(
                (
                    len(words & goal) / nw if nw else 0.0,
                    len(words & obs_tokens) / nw if nw else 0.0,
                    len(ids & obs_tokens) / ni if ni else 0.0,
                    len(ids & history) / ni if ni else 0.0,
                    1.0 if ni else 0.0,
                    min(played[action], 3) / 3.0 if action in played else 0.0,
                    1.0 if action == last else 0.0,
                )
            )
        n = len(actions)
        if n:
            toks[:n] = rows
            feats[:n] = rel
            mask[:n] = 1.0
        if not actions:
            mask[0] = 1.0  # never all-masked: slot 0 then plays an (invalid) empty turn
        arrays = {"obs": state, "actions": toks, "action_feats": feats, "action_mask": mask}
        return arrays, actions
