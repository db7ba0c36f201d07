"""The policy loaders of the language-model trainers: a Hugging Face model folder, played.

``--trainer trl`` and ``--trainer sft`` both write a Hugging Face model folder with
``budgetmix_policy.json`` (how it was trained). The trainer table
(:mod:`budget_envs.integrations.trainers`) names these loaders; the trained-policy agent
(``--agent NAME=policy:DIR``) calls the one of the trainer that wrote the folder.

* :func:`load_lm`: what ``--trainer sft`` wrote, and a GRPO run resumed from it (``"render":
  "lm"``), plays as the ``lm`` agent, which renders episodes exactly as that training did.
* :func:`load_trl`: any other TRL folder plays as the TRL integration's own policy agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["load_lm", "load_trl"]


def load_lm(
    folder: Path,
    meta: Mapping[str, Any],
    *,
    seed: int = 0,
    greedy: bool = False,
    check_visibility: bool = True,
    trust: bool = False,
    device: str | None = None,
) -> Any:
    """The ``lm`` agent on ``folder`` on ``device`` (default the lm agent's), sampling at the
    temperature the folder was trained with (its policy file's ``temperature``: what a GRPO run
    wrote; else 0.7) or, ``greedy``, at 0; ``trust`` is unused (Hugging Face folders load
    safetensors only)."""
    from budget_envs.integrations.lm.agent import LMAgent

    return LMAgent(
        model=str(folder),
        seed=seed,
        check_visibility=check_visibility,
        show_actions=bool((meta.get("settings") or meta).get("show_actions", True)),
        temperature=0.0 if greedy else float(meta.get("temperature", 0.7)),
        name=f"policy:{Path(folder).name}",
        **({} if device is None else {"device": device}),
    )


def load_trl(
    folder: Path,
    meta: Mapping[str, Any],
    *,
    seed: int = 0,
    greedy: bool = False,
    check_visibility: bool = True,
    trust: bool = False,
    device: str | None = None,
) -> Any:
    """The TRL integration's policy agent on ``folder`` (it samples as its rollout did, so
    ``greedy`` is not its to change); a folder trained with the ``lm`` rendering goes to
    :func:`load_lm`."""
    if meta.get("render") == "lm":
        return load_lm(
            folder,
            meta,
            seed=seed,
            greedy=greedy,
            check_visibility=check_visibility,
            trust=trust,
            device=device,
        )
    try:
        from budget_envs.integrations import trl
    except ImportError as exc:
        raise ValueError(f"{folder}: a Hugging Face policy needs the TRL extra ({exc})") from None
    load = getattr(trl, "load_policy", None)
    if not callable(load):
        raise ValueError(
            f"{folder} is a Hugging Face model folder, but this install's TRL integration "
            "has no load_policy() to play it"
        )
    extra = {} if device is None else {"device": device}
    return load(str(folder), seed=seed, check_visibility=check_visibility, **extra)
