"""The rollout's generation back ends: one call per turn for a batch of token contexts.

Both have ``generate(contexts, max_new_tokens) -> (replies, logprobs)``: the sampled ids of each
reply (up to and including its end-of-turn token) and their log-probabilities, and count their
calls in ``calls``.

* :class:`HFTurnGenerator`: a transformers model; it keeps the KV cache from one turn to the next
  and, for the models it serves exactly, runs its own decoding loop
  (:mod:`~budget_envs.integrations.trl.decoding`).
* :class:`VLLMTurnGenerator`: TRL's own vLLM generation object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from budget_envs.integrations.trl.decoding import (
    _generation_names,
    _lean_decoding_fits,
    _plain_dynamic_cache,
    _sample_rows,
    _slot_cache,
)


class HFTurnGenerator:
    """One ``generate`` call of a transformers model for a batch of left-padded contexts.

    ``generation_config`` carries the sampling settings (GRPOConfig's temperature, top_p, top_k,
    min_p, repetition_penalty and generation_kwargs when built by the trainer); only
    ``max_new_tokens`` changes per call. Log-probabilities are those of the sampled ids under
    ``log_softmax(logits / temperature)`` of the raw logits, which is what GRPO's forward pass
    computes for the same ids.

    The KV cache of one call is kept for the next (``reuse_cache``): when every new context
    extends a context of the previous call (the rollout's next turn: the reply, then the env's
    tokens), only the new tokens are run through the model. Without it every turn re-runs the
    whole history, and at batch 8 that prefill is a third of a turn's time. The cache keeps the
    previous call's layout; positions that hold no token of a row (left padding, the tokens
    generated after a row's reply ended, the padding of the new segment) are masked out, and
    position ids count only unmasked tokens, so every row sees exactly its own sequence. Rows
    of episodes that ended are dropped from the cache. A cache that is not a plain
    ``DynamicCache`` (sliding window, static, quantized) is not reused.

    For a decoder whose layers all attend to the full context (SDPA or eager attention, no
    beams, no configured cache kind), the ``generate`` call runs :meth:`_decode` as its
    decoding loop: HF's logits processors and stopping criteria, sampling by inverse CDF
    (:func:`_sample_rows`), over a cache whose preallocated buffers are written in place and a
    preallocated mask of which one column is set per step. On a small model HF's own loop
    spends most of a step rebuilding the mask and concatenating the cache, so a batch-8 step
    cost about twice a batch-1 step; in this loop it costs little more. Other models keep HF's
    loop (:func:`_lean_decoding_fits` decides).
    """

    def __init__(
        self,
        model: Any,
        generation_config: Any,
        *,
        pad_token_id: int,
        eos_token_ids: Sequence[int],
        temperature: float = 1.0,
        reuse_cache: bool = True,
    ) -> None:
        self.model = model
        self.generation_config = generation_config
        self.pad_token_id = int(pad_token_id)
        self.eos_token_ids = [int(e) for e in eos_token_ids]
        self.temperature = float(temperature or 1.0)
        # A configured cache kind (static, quantized, ...) is the user's: never pass our own.
        self.reuse_cache = (
            bool(reuse_cache)
            and generation_config.use_cache is not False
            and getattr(generation_config, "cache_implementation", None) is None
        )
        #: Decode with :meth:`_decode` (a cache written in place) instead of HF's loop; models
        #: it cannot serve exactly (see :func:`_lean_decoding_fits`) use HF's own loop.
        self.lean = _lean_decoding_fits(model, generation_config)
        self._slots: Any = None
        self._layout: Any = None
        self.calls = 0
        self.reused = 0  # calls that extended the previous call's cache
        self._kv: Any = None  # the cache of the last call
        self._kv_ids: Any = None  # (rows, cached width): the ids laid out as in the cache
        self._kv_mask: Any = None  # (rows, cached width): 1 where a row's own token is cached
        self._kv_rows: list[list[int]] = []  # per row, the ids whose keys/values are cached

    @classmethod
    def for_tokenizer(
        cls, model: Any, generation_config: Any, tokenizer: Any, *, reuse_cache: bool = True
    ) -> HFTurnGenerator:
        """A generator that pads with ``tokenizer``'s padding id and ends a reply at its
        end-of-turn ids (both also set on ``generation_config``), at the config's temperature."""
        eos = tokenizer.eos_token_id
        eos_ids = [eos] if isinstance(eos, int) else list(eos)
        generation_config.pad_token_id = tokenizer.pad_token_id
        generation_config.eos_token_id = eos_ids
        return cls(
            model,
            generation_config,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_ids=eos_ids,
            temperature=generation_config.temperature or 1.0,
            reuse_cache=reuse_cache,
        )

    def _match(self, contexts: Sequence[Sequence[int]]) -> list[int] | None:
        """The cached row each context extends (in order), or None when one extends none."""
        if self._kv is None:
            return None
        rows, start = [], 0
        for ctx in contexts:
            for r in range(start, len(self._kv_rows)):
                done = self._kv_rows[r]
                if len(ctx) > len(done) and list(ctx[: len(done)]) == done:
                    rows.append(r)
                    start = r + 1
                    break
            else:
                return None
        return rows

    def generate(
        self, contexts: Sequence[Sequence[int]], max_new_tokens: int
    ) -> tuple[list[list[int]], list[list[float]]]:
        import copy

        import torch

        self.calls += 1
        device = next(self.model.parameters()).device
        rows = self._match(contexts) if self.reuse_cache else None
        lean = self.lean
        cache = None
        if rows is None:
            done = [[] for _ in contexts]
            head_ids = torch.zeros((len(contexts), 0), dtype=torch.long)
            head_mask = torch.zeros((len(contexts), 0), dtype=torch.long)
            if lean:
                self._slots = _slot_cache()
        else:
            self.reused += 1
            index = torch.tensor(rows, dtype=torch.long)
            done = [self._kv_rows[r] for r in rows]
            head_ids, head_mask = self._kv_ids[index], self._kv_mask[index]
            if lean:
                if rows != list(range(len(self._kv_rows))):
                    self._slots.select(index.to(device))
                head_ids, head_mask = self._repack(head_ids, head_mask, device)
            else:
                cache = self._kv
                cache.batch_select_indices(index.to(device))
        self._kv = None  # consumed; set again below when the new cache is usable
        tails = [list(ctx[len(d) :]) for ctx, d in zip(contexts, done)]
        width = max(len(t) for t in tails)
        ids = torch.full((len(contexts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, tail in enumerate(tails):
            ids[row, width - len(tail) :] = torch.tensor(tail, dtype=torch.long)
            mask[row, width - len(tail) :] = 1
        ids, mask = torch.cat([head_ids, ids], dim=1), torch.cat([head_mask, mask], dim=1)
        config = copy.deepcopy(self.generation_config)
        config.max_new_tokens = int(max_new_tokens)
        config.min_new_tokens = None
        config.max_length = None
        config.output_logits = True
        config.return_dict_in_generate = True
        cache_name = _generation_names()[0]
        if lean:
            self._layout = mask.to(device)
            kwargs: dict[str, Any] = {"custom_generate": self._decode}
        else:
            kwargs = {} if cache is None else {cache_name: cache}
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                generation_config=config,
                **kwargs,
            )
        total = ids.shape[1]
        new = out.sequences[:, total:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu()  # (B, new, V)
        logps = torch.log_softmax(logits / self.temperature, dim=-1)
        chosen = logps.gather(-1, new[:, : logps.shape[1]].unsqueeze(-1)).squeeze(-1)
        replies, reply_logps = [], []
        for row in range(new.shape[0]):
            seq = new[row].tolist()
            cut = next((i + 1 for i, t in enumerate(seq) if t in self.eos_token_ids), len(seq))
            replies.append(seq[:cut])
            reply_logps.append(chosen[row, :cut].tolist())
        if lean:
            self._keep_slots(out, contexts, replies)
        elif self.reuse_cache:
            self._keep(out, contexts, replies, mask, total, new.shape[1])
        return replies, reply_logps

    def _repack(self, head_ids: Any, head_mask: Any, device: Any) -> tuple[Any, Any]:
        """Drop the cached columns no row owns any more: each row's own columns, in order,
        right-aligned in the fewest columns (keys keep their rotary positions, and attention
        does not depend on the order of the keys it sees)."""
        import torch

        counts = head_mask.sum(dim=1)
        width = int(counts.max()) if counts.numel() else 0
        if width == head_mask.shape[1]:
            return head_ids, head_mask
        total = head_mask.shape[1]
        # A row's other columns first, then its own in order; keep the last ``width``.
        key = head_mask * total + torch.arange(total)
        order = key.argsort(dim=1, stable=True)[:, total - width :]
        self._slots.gather(order.to(device))
        return head_ids.gather(1, order), head_mask.gather(1, order)

    def _decode(
        self,
        model: Any,
        input_ids: Any,
        logits_processor: Any,
        stopping_criteria: Any,
        generation_config: Any,
        **_: Any,
    ) -> Any:
        """The decoding loop ``generate`` runs (its ``custom_generate``): HF's sampling step with
        HF's logits processors and stopping criteria, over a cache written in place.

        The new segment (every row's tail, left-padded) is run once with a mask built here; then
        each step feeds one token per live row with a view of a preallocated additive mask (one
        column set per step) and the rows' position ids, so no step rebuilds a mask or copies the
        cache. A row whose reply ended is fed its last token once (its keys and values belong to
        the next turn's context) and then leaves the batch: the rows still decoding are kept
        first in the cache's buffers (a finished row swaps places with a live one), and each step
        runs the model on them alone. Its columns after the reply are masked out for every later
        query. At the end the rows are put back in the call's order.
        """
        import torch
        from transformers.generation.utils import GenerateDecoderOnlyOutput

        slots, valid = self._slots, self._layout.bool()
        rows, total = input_ids.shape
        start = slots.length
        width = total - start
        steps = int(generation_config.max_new_tokens)
        slots.reserve(total + steps)
        dtype = next(model.parameters()).dtype
        low = torch.finfo(dtype).min
        device = input_ids.device
        # After a reply ends its row holds generate's padding token, as in HF's own loop.
        pad = generation_config._pad_token_tensor
        fill = self.pad_token_id if pad is None else int(pad)
        seq = torch.full((rows, total + steps), fill, dtype=torch.long, device=device)
        seq[:, :total] = input_ids
        bias = torch.full((rows, total + steps), low, dtype=dtype, device=device)
        bias[:, :total].masked_fill_(valid, 0.0)
        # The segment: causal within it, every cached column of the row before it; a padding
        # query sees itself, so no row of the mask is empty.
        allowed = valid[:, None, :].expand(rows, width, total).clone()
        allowed[:, :, start:] &= torch.ones((width, width), dtype=torch.bool, device=device).tril()
        diag = torch.arange(width, device=device)
        allowed[:, diag, start + diag] = True
        seg_bias = torch.zeros(allowed.shape, dtype=dtype, device=device)
        seg_bias.masked_fill_(~allowed, low)
        positions = (valid.long().cumsum(dim=1) - 1).clamp(min=0)
        cache_name = _generation_names()[0]
        out = model(
            input_ids=input_ids[:, start:],
            attention_mask=seg_bias[:, None],
            position_ids=positions[:, start:],
            use_cache=True,
            logits_to_keep=1,
            **{cache_name: slots},
        )
        position = valid.long().sum(dim=1, keepdim=True)
        # Physical row i of every buffer below (and of the cache) holds the call's row order[i];
        # rows [0, fed) were fed by the last forward pass, and ended[i] says row i's reply ended.
        order = torch.arange(rows, device=device)
        ended = torch.zeros(rows, dtype=torch.bool, device=device)
        fed = rows
        raw: list[tuple[Any, Any]] = []
        cur = total
        while True:
            logits = out.logits[:, -1]
            n = fed
            if bool(ended[:fed].any()):
                n = int((~ended[:fed]).sum())
                gone = ended[:n].nonzero().squeeze(1)  # ended rows in the live part
                back = (~ended[n:fed]).nonzero().squeeze(1) + n  # live rows behind it
                moved = torch.cat([gone, back])
                source = torch.cat([back, gone])
                for buf in (seq, bias, position, order, ended):
                    buf[moved] = buf[source]
                slots.move_rows(moved, source)
                logits = logits.clone()
                logits[moved] = logits[source]
                logits = logits[:n]
            logits = logits.to(copy=True, dtype=torch.float32)
            raw.append((order[:n].clone(), logits))
            scores = logits_processor(seq[:n, :cur], logits)
            if generation_config.do_sample:
                token = _sample_rows(torch.softmax(scores, dim=-1))
            else:
                token = torch.argmax(scores, dim=-1)
            seq[:n, cur] = token
            cur += 1
            stop = stopping_criteria(seq[:n, :cur], None)
            if bool(stop.all()):
                break
            ended[:n] = stop
            bias[:n, cur - 1] = 0.0
            out = model(
                input_ids=token[:, None],
                attention_mask=bias[:n, None, None, :cur],
                position_ids=position[:n],
                use_cache=True,
                **{cache_name: slots},
            )
            position[:n] += 1
            fed = n
        if not bool((order == torch.arange(rows, device=device)).all()):
            back_to_call = order.argsort()
            seq, bias = seq[back_to_call], bias[back_to_call]
            slots.select(back_to_call)
        self._layout = bias[:, : cur - 1] == 0
        vocab = raw[0][1].shape[-1]
        step_logits = []
        for rows_of_step, step in raw:
            full = step.new_zeros((rows, vocab))
            full[rows_of_step] = step
            step_logits.append(full)
        return GenerateDecoderOnlyOutput(sequences=seq[:, :cur], logits=tuple(step_logits))

    def _keep_slots(
        self, out: Any, contexts: Sequence[Sequence[int]], replies: list[list[int]]
    ) -> None:
        """After a lean call: the ids laid out as cached, which of them each row owns."""
        cached = self._slots.length
        self._kv = self._slots if self.reuse_cache else None
        self._kv_ids = out.sequences[:, :cached].cpu()
        self._kv_mask = self._layout.long().cpu()
        grown = len(out.logits) - 1  # the last sampled token was never fed
        self._kv_rows = [list(ctx) + reply[:grown] for ctx, reply in zip(contexts, replies)]

    def _keep(
        self,
        out: Any,
        contexts: Sequence[Sequence[int]],
        replies: list[list[int]],
        mask: Any,
        total: int,
        steps: int,
    ) -> None:
        """Keep the call's cache for the next turn, with its layout and the rows' cached ids."""
        import torch

        cache = getattr(out, _generation_names()[1], None)
        # The last sampled token was never fed to the model: the cache stops one short.
        cached = total + steps - 1
        if steps < 1 or not _plain_dynamic_cache(cache) or cache.get_seq_length() != cached:
            return
        grown = torch.zeros((len(replies), steps - 1), dtype=torch.long)
        for row, reply in enumerate(replies):
            grown[row, : min(len(reply), steps - 1)] = 1
        self._kv = cache
        self._kv_ids = out.sequences[:, :cached].cpu()
        self._kv_mask = torch.cat([mask, grown], dim=1)
        self._kv_rows = [list(ctx) + reply[: steps - 1] for ctx, reply in zip(contexts, replies)]


class VLLMTurnGenerator:
    """Generation through TRL's own vLLM generation object (``trainer.vllm_generation``).

    Every turn sends one context per episode of this rank, finished ones included (a one-token
    stand-in), because in server mode TRL gathers the prompts of all ranks and slices the answer
    by rank assuming equal counts. The sampling settings are the ones TRL gave that object; the
    per-turn token cap is set on it for the call. Log-probabilities are vLLM's (top-1 kept).
    """

    def __init__(self, vllm_generation: Any, *, filler_id: int) -> None:
        self.vllm = vllm_generation
        self.filler_id = int(filler_id)
        self.calls = 0

    def generate(
        self, contexts: Sequence[Sequence[int]], max_new_tokens: int
    ) -> tuple[list[list[int]], list[list[float]]]:
        self.calls += 1
        saved = self.vllm.max_completion_length
        self.vllm.max_completion_length = int(max_new_tokens)
        try:
            _, completion_ids, logprobs, _ = self.vllm.generate(
                prompts=[list(c) for c in contexts], images=None, num_generations=1
            )
        finally:
            self.vllm.max_completion_length = saved
        logps = [[float(lp[0]) for lp in seq] for seq in logprobs]
        return [list(c) for c in completion_ids], logps
