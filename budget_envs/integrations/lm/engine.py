"""Batched generation for many live conversations, each keeping its KV cache between turns.

:class:`Conversation` is one episode's token state: every id of the conversation so far and,
for the ids already run through the model, their keys and values per layer. A turn appends new
ids (the end of the last reply, the next observation with its chat markup) and asks for a
reply; only the ids without keys and values are run through the model (the *prefill*), so at
turn 10 an episode costs its new observation, not its whole history.

:class:`BatchGenerator.generate` serves one turn of many conversations at once: each
conversation's new ids are prefilled on its own cache (prefill is bound by arithmetic, so
batching it buys little on a CPU and costs padding), then every reply is decoded together, one
token per conversation per forward pass (decoding is bound by reading the weights, so a batch of
8 costs little more than one). For the batched decoding the caches are laid side by side in
preallocated buffers, each right-aligned (left padding masked out; rotary positions are baked
into the cached keys, so each row keeps its own positions); a row whose reply ended leaves the
batch (rows still decoding are kept first). After the call each conversation gets its own cache
back, holding exactly its own ids.

Sampling draws from each conversation's own seeded ``torch.Generator`` (temperature, top-p, or
greedy when the temperature is 0), so a reply depends on its conversation and seed, not on which
others shared the batch (up to float rounding of a batched matmul).

torch loads inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BatchGenerator", "Conversation", "Reply", "Request"]


@dataclass
class Conversation:
    """One episode's token state: ``ids`` so far; keys and values of the first ``cached``."""

    ids: list[int] = field(default_factory=list)
    cached: int = 0
    kv: list[tuple[Any, Any]] | None = None  # per layer: keys, values (1, heads, cached, dim)

    def drop_cache(self) -> None:
        self.kv, self.cached = None, 0


@dataclass
class Request:
    """A turn: the conversation (its ``ids`` already extended) and how to sample the reply."""

    conversation: Conversation
    max_new_tokens: int
    seed: int
    temperature: float = 0.0
    top_p: float = 1.0
    #: Score these replies (ids, each ending with the end-of-turn id) and take one, instead of
    #: writing a reply (see :mod:`budget_envs.integrations.trl.scoring`).
    candidates: list[list[int]] | None = None
    #: How the candidates' scores are combined: ``"score"`` (summed) or ``"score-mean"``.
    scoring: str = "score"


@dataclass
class Reply:
    """The sampled ids (with the end-of-turn id when the reply ended) and what the turn cost."""

    ids: list[int]
    ended: bool  # an end-of-turn id closed the reply (else it hit max_new_tokens)
    prefilled: int  # ids run through the model before decoding (the turn's prompt cost)


class BatchGenerator:
    """One reply per conversation, all decoded together (see the module docstring).

    Args:
        model: a transformers causal LM whose layers all attend to the full context.
        eos_ids: the ids that end a reply (the chat template's end of turn).
        keep_cache: keep each conversation's keys and values between turns; False re-sends the
            whole conversation every turn (what a stateless server costs; the benchmarks'
            baseline).
    """

    def __init__(self, model: Any, eos_ids: Sequence[int], *, keep_cache: bool = True) -> None:
        import torch

        self.model = model
        self.eos_ids = sorted({int(e) for e in eos_ids})
        self.keep_cache = bool(keep_cache)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self._eos = torch.tensor(self.eos_ids, device=self.device)

    # ------------------------------------------------------------------ prefill
    def _prefill(self, conv: Conversation) -> tuple[Any, int]:
        """Run ``conv``'s ids without cache through the model; its last position's logits."""
        import torch
        from transformers.cache_utils import DynamicCache

        if not self.keep_cache:
            conv.drop_cache()
        if conv.cached >= len(conv.ids):  # nothing new: re-run the last id for its logits
            self._crop(conv, len(conv.ids) - 1)
        new = conv.ids[conv.cached :]
        cache = DynamicCache()
        for layer, (k, v) in enumerate(conv.kv or []):
            cache.update(k, v, layer)
        ids = torch.tensor([new], dtype=torch.long, device=self.device)
        pos = torch.arange(conv.cached, conv.cached + len(new), device=self.device)[None]
        out = self.model(
            input_ids=ids, position_ids=pos, cache=cache, use_cache=True, logits_to_keep=1
        )
        conv.kv = [(layer.keys, layer.values) for layer in out.cache.layers]
        conv.cached = len(conv.ids)
        return out.logits[0, -1].float(), len(new)

    @staticmethod
    def _crop(conv: Conversation, length: int) -> None:
        if conv.kv is None or length <= 0:
            conv.drop_cache()
            return
        conv.kv = [(k[:, :, :length], v[:, :, :length]) for k, v in conv.kv]
        conv.cached = length

    # ------------------------------------------------------------------ sampling
    @staticmethod
    def _sample(logits: Any, req: Request, gen: Any) -> int:
        import torch

        if req.temperature <= 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / req.temperature, dim=-1)
        if req.top_p < 1.0:
            sorted_p, order = probs.sort(descending=True)
            keep = sorted_p.cumsum(0) - sorted_p < req.top_p
            probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_p[keep])
        cdf = probs.cumsum(0)
        draw = torch.rand((), generator=gen, dtype=cdf.dtype) * cdf[-1]
        draw = torch.minimum(draw, torch.nextafter(cdf[-1], torch.zeros_like(cdf[-1])))
        return int(torch.searchsorted(cdf, draw[None], right=True)[0])

    def _choose(self, req: Request, logits: Any, gen: Any) -> list[int]:
        """The candidate reply drawn from the model's scores of them (on the kept cache)."""
        from budget_envs.integrations.trl.scoring import choose, score_candidates

        conv, cands = req.conversation, req.candidates or []
        scores = score_candidates(self.model, conv.ids, cands, kv=conv.kv, last_logits=logits)
        return list(cands[choose(scores, req.temperature, gen, req.scoring)])

    # ------------------------------------------------------------------ a turn
    def generate(self, requests: Sequence[Request]) -> list[Reply]:
        """One reply for each request's conversation; each conversation's ``ids`` and cache
        are extended by the reply (the last sampled id has no cached keys yet)."""
        import torch

        from budget_envs.integrations.trl.decoding import _slot_cache

        replies: list[Reply] = []
        if not requests:
            return replies
        gens = [torch.Generator().manual_seed(int(r.seed) % 2**63) for r in requests]
        first, prefilled = [], []
        with torch.no_grad():
            for req in requests:
                logits, n = self._prefill(req.conversation)
                first.append(logits)
                prefilled.append(n)
            tokens = [
                self._choose(r, lg, g) if r.candidates else [self._sample(lg, r, g)]
                for lg, r, g in zip(first, requests, gens)
            ]
            live = [
                i
                for i, r in enumerate(requests)
                if not r.candidates and tokens[i][0] not in self.eos_ids and r.max_new_tokens > 1
            ]
            if live:
                self._decode(requests, tokens, gens, live, _slot_cache())
        for req, toks, n in zip(requests, tokens, prefilled):
            conv = req.conversation
            conv.ids.extend(toks)
            replies.append(Reply(ids=toks, ended=toks[-1] in self.eos_ids, prefilled=n))
        return replies

    def _decode(
        self,
        requests: Sequence[Request],
        tokens: list[list[int]],
        gens: list[Any],
        live: list[int],
        slots: Any,
    ) -> None:
        """Decode the ``live`` requests together until each reply ends; their caches gain the
        ids fed here (every sampled id but the last)."""
        import torch

        convs = [requests[i].conversation for i in live]
        lengths = [c.cached for c in convs]
        width = max(lengths)
        steps = max(requests[i].max_new_tokens for i in live) - 1
        rows = len(live)
        slots.reserve(width + steps)
        for layer in range(len(convs[0].kv)):
            k0, v0 = convs[0].kv[layer]
            empty = k0.new_zeros((rows, k0.shape[1], 0, k0.shape[3]))
            slots.update(empty, empty, layer)  # allocates the layer's zeroed buffers
            buffers = slots.layers[layer]
            for row, conv in enumerate(convs):  # each row right-aligned, in place
                k, v = conv.kv[layer]
                buffers.keys[row, :, width - k.shape[2] : width] = k[0]
                buffers.values[row, :, width - v.shape[2] : width] = v[0]
            buffers.length = width
        low = torch.finfo(self.dtype).min
        bias = torch.full((rows, width + steps), low, dtype=self.dtype, device=self.device)
        for row, n in enumerate(lengths):
            bias[row, width - n : width] = 0.0
        bias[:, width:] = 0.0  # decoded columns: only live rows are ever fed, and read them
        position = torch.tensor(lengths, dtype=torch.long, device=self.device)[:, None]
        order = list(range(rows))  # physical row -> index into ``live``
        fed = [0] * rows  # ids fed to each row's cache in this call
        n = rows
        for step in range(steps):
            index = [live[order[p]] for p in range(n)]
            last = torch.tensor([[tokens[i][-1]] for i in index], device=self.device)
            out = self.model(
                input_ids=last,
                attention_mask=bias[:n, None, None, : width + step + 1],
                position_ids=position[:n],
                cache=slots,
                use_cache=True,
            )
            position[:n] += 1
            logits = out.logits[:, -1].float()
            ended = []
            for p in range(n):
                j = order[p]
                fed[j] += 1
                i = live[j]
                token = self._sample(logits[p], requests[i], gens[i])
                tokens[i].append(token)
                if token in self.eos_ids or len(tokens[i]) >= requests[i].max_new_tokens:
                    ended.append(p)
            if ended:
                keep = [p for p in range(n) if p not in ended]
                m = len(keep)
                holes = [p for p in ended if p < m]
                movers = [p for p in keep if p >= m]
                if holes:
                    a = torch.tensor(holes + movers, device=self.device)
                    b = torch.tensor(movers + holes, device=self.device)
                    slots.move_rows(a, b)
                    bias[a] = bias[b]
                    position[a] = position[b]
                    for h, mv in zip(holes, movers):
                        order[h], order[mv] = order[mv], order[h]
                n = m
            if n == 0:
                break
        # Each conversation takes its own columns back: its cache, then the ids fed here.
        for p in range(rows):
            j = order[p]
            conv, base, grown = convs[j], lengths[j], fed[j]
            kv = []
            for layer in slots.layers:
                k = torch.cat(
                    [
                        layer.keys[p : p + 1, :, width - base : width],
                        layer.keys[p : p + 1, :, width : width + grown],
                    ],
                    dim=2,
                )
                v = torch.cat(
                    [
                        layer.values[p : p + 1, :, width - base : width],
                        layer.values[p : p + 1, :, width : width + grown],
                    ],
                    dim=2,
                )
                kv.append((k, v))
            conv.kv = kv
            conv.cached = base + grown
        # The slot cache's layers point back at it (a cycle only the garbage collector frees):
        # drop its buffers now, or every call's buffers wait for a collection.
        for layer in slots.layers:
            layer.keys = layer.values = None
        slots.layers.clear()
