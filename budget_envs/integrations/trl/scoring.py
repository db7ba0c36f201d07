"""Acting by scoring the offered actions: the reply is one of ``info["candidate_actions"]``.

Instead of writing a reply token by token, the model scores every offered action as the reply
of this turn (``"score"``: the sum of the log-probabilities of its tokens, the end-of-turn token
included; ``"score-mean"``: their mean, which does not favour short replies) and the action is
drawn from the softmax of those scores at the sampling temperature (the highest at
temperature 0). At temperature 1 that draw is the model's own distribution over
replies, restricted to the offered ones. A model too small to copy ids it has seen (or never
fine-tuned to the format) still acts validly; what it must learn is which offered action is
right. The chosen reply's tokens and their log-probabilities go into the transcript as a
generated reply would, so GRPO trains on them unchanged.

The context is run through the model once per turn (or its kept cache is used); the candidates
are then run side by side on copies of that cache, ``chunk`` at a time.

torch loads inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ACTION_MODES", "SCORING_MODES", "candidate_ids", "choose", "score_candidates"]

#: How a policy turns a turn into an action: write a reply, or score the offered actions.
ACTION_MODES = ("generate", "score", "score-mean")
#: The modes that choose among the offered actions; ``"score-mean"`` averages per token.
SCORING_MODES = ("score", "score-mean")


def check_mode(value: Any) -> str:
    """``value`` if it is an action mode, else a ValueError naming the modes."""
    if value not in ACTION_MODES:
        raise ValueError(f"actions must be one of {list(ACTION_MODES)}, got {value!r}")
    return str(value)


def candidate_ids(
    tokenizer: Any, actions: Sequence[Any], end_id: int, room: int | None = None
) -> tuple[list[str], list[list[int]]]:
    """The offered actions as replies: each action's ids and the end-of-turn id, without
    duplicates or empty actions; with ``room``, only replies of at most ``room`` ids."""
    texts: list[str] = []
    ids: list[list[int]] = []
    seen: set[str] = set()
    for action in actions:
        text = str(action)
        if not text.strip() or text in seen:
            continue
        seen.add(text)
        row = list(tokenizer.encode(text, add_special_tokens=False)) + [int(end_id)]
        if room is not None and len(row) > room:
            continue
        texts.append(text)
        ids.append(row)
    return texts, ids


def score_candidates(
    model: Any,
    context: Sequence[int],
    candidates: Sequence[Sequence[int]],
    *,
    kv: Sequence[tuple[Any, Any]] | None = None,
    last_logits: Any = None,
    chunk: int = 16,
) -> list[list[float]]:
    """Each candidate's per-token log-probabilities as the continuation of ``context``.

    ``kv`` (per layer: keys and values of every id of ``context``, batch 1) and
    ``last_logits`` (the logits after its last id) skip running the context again.
    """
    import torch
    from transformers.cache_utils import DynamicCache

    from budget_envs.integrations.trl.decoding import _generation_names

    if not candidates:
        return []
    name = _generation_names()[0]
    device = next(model.parameters()).device
    with torch.no_grad():
        if kv is None or last_logits is None:
            ids = torch.tensor([list(context)], dtype=torch.long, device=device)
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            kv = [(layer.keys, layer.values) for layer in getattr(out, name).layers]
            last_logits = out.logits[0, -1]
        first = torch.log_softmax(last_logits.float(), dim=-1)
        start = len(context)
        result: list[list[float]] = []
        for at in range(0, len(candidates), max(1, int(chunk))):
            rows = [list(c) for c in candidates[at : at + max(1, int(chunk))]]
            scores = [[float(first[row[0]])] for row in rows]
            width = max(len(row) for row in rows) - 1
            if width > 0:
                n = len(rows)
                cache = DynamicCache()
                for layer, (k, v) in enumerate(kv):
                    cache.update(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1), layer)
                # Right padding: under causal attention no real id sees a padded one.
                feed = [row[:-1] + [row[0]] * (width - len(row) + 1) for row in rows]
                ids = torch.tensor(feed, dtype=torch.long, device=device)
                pos = torch.arange(start, start + width, device=device)[None].expand(n, -1)
                out = model(input_ids=ids, position_ids=pos, use_cache=True, **{name: cache})
                logp = torch.log_softmax(out.logits.float(), dim=-1)
                for r, row in enumerate(rows):
                    targets = torch.tensor(row[1:], dtype=torch.long, device=device)
                    picked = logp[r, : len(row) - 1].gather(1, targets[:, None])[:, 0]
                    scores[r] += [float(x) for x in picked]
            result += scores
        return result


def choose(
    scores: Sequence[Sequence[float]],
    temperature: float,
    generator: Any = None,
    mode: str = "score",
) -> int:
    """The index of the chosen candidate: drawn from the softmax of the summed (``mode``
    ``"score-mean"``: averaged) scores at ``temperature`` (the highest, first on ties, at 0),
    from ``generator`` (torch's global generator when None)."""
    import torch

    mean = check_mode(mode) == "score-mean"
    totals = torch.tensor(
        [sum(s) / (len(s) if mean and s else 1) for s in scores], dtype=torch.float64
    )
    if temperature <= 0 or len(totals) == 1:
        return int(torch.argmax(totals))
    probs = torch.softmax(totals / float(temperature), dim=0)
    return int(torch.multinomial(probs, 1, generator=generator)[0])
