"""The parts of :class:`~budget_envs.integrations.trl.generation.HFTurnGenerator`'s decoding loop
that need none of its state: the cache written in place (``_slot_cache``), sampling by inverse CDF
(``_sample_rows``), which models the loop serves exactly (``_lean_decoding_fits``), and how
transformers names and builds its cache (``_generation_names``, ``_plain_dynamic_cache``).

torch and transformers load inside the functions.
"""

from __future__ import annotations

from typing import Any


def _sample_rows(probs: Any) -> Any:
    """One token per row drawn from ``probs`` (rows of a distribution), by inverse CDF.

    The same distribution as ``torch.multinomial(probs, 1)`` from one uniform draw per row of
    torch's seeded generator; ``multinomial`` runs an exponential race over the whole
    vocabulary, which at batch 8 costs more than the tiny model's forward pass. A token of
    probability 0 (filtered out by top-k, top-p or min-p) is never drawn: the draw stays
    strictly below the total mass, and the first index whose cumulative mass exceeds it has
    mass of its own.
    """
    import torch

    cdf = probs.cumsum(dim=-1)
    top = cdf[:, -1:]
    draw = torch.rand(top.shape, dtype=cdf.dtype, device=cdf.device) * top
    draw = torch.minimum(draw, torch.nextafter(top, torch.zeros_like(top)))
    return torch.searchsorted(cdf, draw, right=True).squeeze(1)


def _lean_decoding_fits(model: Any, generation_config: Any) -> bool:
    """Whether :meth:`HFTurnGenerator._decode` computes exactly what HF's sampling loop would.

    It needs a decoder-only model whose every layer attends to the full context (no sliding
    window), with SDPA or eager attention (both take an additive 4D mask as given), plain
    sampling or greedy search (one sequence per row, no beams, no assistant model), no cache
    kind or compilation configured by the user, and a ``generate`` that takes a decoding
    function (``custom_generate``) and the cache as ``cache``.
    """
    import inspect

    try:
        from transformers.generation.utils import GenerationMixin
    except ImportError:  # pragma: no cover - transformers is required by the extra
        return False
    if "custom_generate" not in inspect.signature(GenerationMixin.generate).parameters:
        return False
    if _generation_names()[0] != "cache":
        return False
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        if any(t != "full_attention" for t in layer_types):
            return False
    elif getattr(text, "sliding_window", None) is not None and getattr(
        text, "use_sliding_window", True
    ):
        return False
    g = generation_config
    return (
        g.use_cache is not False
        and getattr(g, "cache_implementation", None) is None
        and getattr(g, "compile_config", None) is None
        and (g.num_beams or 1) == 1
        and (g.num_return_sequences or 1) == 1
        and getattr(g, "assistant_early_exit", None) is None
        and getattr(g, "prompt_lookup_num_tokens", None) is None
    )


def _slot_layer_class() -> Any:
    """One layer of :func:`_slot_cache`: keys and values in a buffer grown to the cache's
    ``capacity``, written in place."""
    from transformers.cache_utils import CacheLayerMixin

    class SlotLayer(CacheLayerMixin):
        is_sliding = False
        is_compileable = False
        is_croppable = False

        def __init__(self, owner: Any) -> None:
            super().__init__()
            self.owner = owner
            self.length = 0

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            self.device = key_states.device
            self.is_initialized = True

        def _room(self, buf: Any, like: Any) -> Any:
            import torch

            need = self.owner.capacity
            if buf is not None and buf.shape[2] >= need:
                return buf
            rows, heads, _, dim = like.shape if buf is None else buf.shape
            # Zeros, not empty: columns a row never wrote are masked out, and must be finite.
            grown = torch.zeros((rows, heads, need, dim), dtype=like.dtype, device=like.device)
            if buf is not None:
                grown[:, :, : self.length] = buf[:, :, : self.length]
            return grown

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.keys = self._room(self.keys, key_states)
            self.values = self._room(self.values, value_states)
            end = self.length + key_states.shape[-2]
            fed = key_states.shape[0]  # the first rows: the rows still decoding
            self.keys[:fed, :, self.length : end] = key_states
            self.values[:fed, :, self.length : end] = value_states
            self.length = end
            return self.keys[:fed, :, :end], self.values[:fed, :, :end]

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.length + query_length, 0

        def get_seq_length(self) -> int:
            return self.length

        def get_max_length(self) -> int:
            return -1

    return SlotLayer


def _slot_cache() -> Any:
    """A transformers ``Cache`` whose layers keep keys and values in preallocated buffers.

    ``reserve(n)`` makes room for ``n`` columns (growing by copy, at most once per call);
    ``update`` writes the new columns in place and returns views of the used ones; ``select``
    keeps the given rows. Every layer holds the same columns, so ``length`` is the cache's.
    """
    from transformers.cache_utils import Cache

    SlotLayer = _slot_layer_class()

    class SlotCache(Cache):
        def __init__(self) -> None:
            self.capacity = 0
            super().__init__(layer_class_to_replicate=lambda: SlotLayer(self))

        @property
        def length(self) -> int:
            return self.layers[0].length if self.layers else 0

        def reserve(self, columns: int) -> None:
            self.capacity = max(self.capacity, int(columns))

        def gather(self, columns: Any) -> None:
            """Keep, per row, the given cached columns (rows x width), in that order."""
            for layer in self.layers:
                if layer.keys is None:
                    continue
                for name in ("keys", "values"):
                    buf = getattr(layer, name)
                    rows, heads, _, dim = buf.shape
                    index = columns[:, None, :, None].expand(rows, heads, columns.shape[1], dim)
                    kept = buf[:, :, : layer.length].gather(2, index)
                    buf[:, :, : columns.shape[1]] = kept
                layer.length = columns.shape[1]

        def move_rows(self, rows: Any, sources: Any) -> None:
            """Row ``rows[i]`` of every buffer takes the contents of row ``sources[i]``."""
            for layer in self.layers:
                if layer.keys is not None:
                    layer.keys[rows] = layer.keys[sources]
                    layer.values[rows] = layer.values[sources]

        def select(self, index: Any) -> None:
            for layer in self.layers:
                if layer.keys is not None:
                    layer.keys = layer.keys.index_select(0, index)
                    layer.values = layer.values.index_select(0, index)

    return SlotCache()


def _generation_names() -> tuple[str, str]:
    """The name of ``generate``'s cache argument and of its output field (renamed in 5.x)."""
    try:
        from transformers.generation.utils import GenerateDecoderOnlyOutput
    except ImportError:  # pragma: no cover - transformers is required by the extra
        return "past_key_values", "past_key_values"
    fields = getattr(GenerateDecoderOnlyOutput, "__dataclass_fields__", {})
    name = "cache" if "cache" in fields else "past_key_values"
    return name, name


def _plain_dynamic_cache(cache: Any) -> bool:
    """Whether ``cache`` is a ``DynamicCache`` of full-attention layers (safe to extend)."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover
        return False
    if type(cache) is not DynamicCache:
        return False
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)
