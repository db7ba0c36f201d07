"""In-process language models: prepared weights (:mod:`.models`), the ``lm`` eval agent
(:mod:`.agent`) over a batched generator that keeps each episode's KV cache (:mod:`.engine`).

Nothing heavy is imported until a function runs: torch and transformers load inside them.
"""
