"""A tiny causal LM built fully offline, for smoke runs and CI of the trainer integrations.

A byte-level BPE tokenizer is trained in milliseconds on a small corpus (ideally transcripts of
the env it will play) and wrapped in ``PreTrainedTokenizerFast`` with the Qwen3 chat template
that TRL ships and can parse (tool calls included); the model is a 2-layer Llama with random
weights (about 100k parameters). :func:`warm_start` teaches it a little from oracle transcripts,
so that GRPO sees some successful episodes. Nothing touches the network.

It is a test fixture, not a useful agent: users pass a real model name to the examples.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from budget_envs._util import require

__all__ = ["SPECIAL_TOKENS", "build_tiny_model", "build_tiny_tokenizer", "warm_start"]

logger = logging.getLogger(__name__)

#: Chat markup of the Qwen3 template; ``<|im_end|>`` ends a turn and is the EOS token.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: Tool-call markup stays decodable text (not special), so TRL's parser sees it after decoding.
MARKUP_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)

_BASE_CORPUS = (
    "You are an agent. Reply with one action per turn. Turns left: 3 of 10. "
    "go north go south go east go west look take key open door inventory examine "
    "search[red shoes] click[buy now] click[next >] click[< prev] click[back to search] "
    '{"tool_calls": [{"name": "find_customer", "arguments": {"email": "a@b.c"}}]} '
    "The quick brown fox jumps over the lazy dog. 0123456789 $12.50 ,.;:!?()[]{}<>=+-*/\"'"
)


def _require() -> None:
    require("tokenizers", "torch", "transformers", "trl", extra="trl", what="the tiny model")


def build_tiny_tokenizer(corpus: Iterable[str] = (), vocab_size: int = 1024) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``corpus`` (plus a base text).

    Any text encodes (bytes are the fallback), so the corpus only affects how compact it is.
    The chat template is TRL's Qwen3 template with its response parser, so tool calls parse.
    """
    _require()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import add_response_schema, qwen3_chat_template

    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 300:
        raise ValueError(f"vocab_size must be an int of at least 300, got {vocab_size!r}")
    texts = [_BASE_CORPUS, *MARKUP_TOKENS, *[str(t) for t in corpus]]
    model = Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    model.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=model,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        padding_side="left",
    )
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tok.add_tokens(list(MARKUP_TOKENS))
    tok.chat_template = qwen3_chat_template
    add_response_schema(tok)
    return tok


def build_tiny_model(
    tokenizer: Any, *, hidden_size: int = 64, num_layers: int = 2, seed: int = 0
) -> Any:
    """A randomly initialised 2-layer Llama sized to ``tokenizer`` (seeded, float32, CPU)."""
    _require()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    for name, value in (("hidden_size", hidden_size), ("num_layers", num_layers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    gen = torch.random.fork_rng()
    with gen:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model


def warm_start(
    model: Any,
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    steps: int = 60,
    batch_size: int = 8,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Supervised steps on ``(token_ids, loss_mask)`` pairs (mask 1 on tokens to learn).

    A random model never emits a valid action; a minute of imitation on oracle transcripts (see
    :func:`budget_envs.integrations.trl.oracle_examples`) gets it to sometimes succeed, which is
    what gives GRPO a reward difference to learn from. Returns the loss of every step.
    """
    _require()
    import torch

    if not examples:
        raise ValueError("warm_start needs at least one example")
    gen = torch.Generator().manual_seed(seed)
    optim = torch.optim.AdamW(model.parameters(), lr=lr)
    was_training = model.training
    model.train()
    losses = []
    pad = model.config.pad_token_id or 0
    for _ in range(steps):
        idx = torch.randint(len(examples), (min(batch_size, len(examples)),), generator=gen)
        batch = [examples[int(i)] for i in idx]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        attn = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (tokens, mask) in enumerate(batch):
            n = len(tokens)
            ids[row, :n] = torch.tensor(tokens)
            attn[row, :n] = 1
            keep = torch.tensor(list(mask), dtype=torch.bool)
            labels[row, :n] = torch.where(keep, torch.tensor(tokens), torch.tensor(-100))
        out = model(input_ids=ids, attention_mask=attn, labels=labels)
        optim.zero_grad()
        out.loss.backward()
        optim.step()
        losses.append(float(out.loss.detach()))
    model.train(was_training)
    logger.info("warm start: loss %.3f -> %.3f over %d steps", losses[0], losses[-1], steps)
    return losses
