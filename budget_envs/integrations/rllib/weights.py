"""An RLlib policy's module as safetensors weights plus JSON: what ``--agent policy:DIR`` loads.

RLlib's own checkpoint (``checkpoint/``) restores a module by unpickling
``class_and_ctor_args.pkl``, and unpickling runs whatever code the file names: a policy folder
someone handed you could run anything during a plain ``budgetmix eval``. So every checkpoint
``budgetmix train --trainer rllib`` writes is followed by ``module.safetensors`` (the module's
tensors, nothing else) and a ``module`` entry in ``policy.json`` (the model settings as JSON);
the policy agent builds :class:`~budget_envs.integrations.rllib.module.ActionScoringTorchModule`
from the folder's feature spec and those settings and loads the tensors, reading no pickle.

A folder without ``module.safetensors`` (an older one, or one made by hand) would need the
pickle: it is refused with :class:`~budget_envs.errors.UntrustedPolicy` unless the caller trusts
it (``trust=True``, ``--trust-policy``). ``train --resume`` restores the algorithm from
``checkpoint/`` (optimizer and counters too), which is pickle: resume only folders you trained.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from budget_envs.errors import UntrustedPolicy

__all__ = [
    "MODULE_FILE",
    "OLD_MODULE_NAMES",
    "alias_moved_modules",
    "check_loadable",
    "load_module",
    "module_path",
    "save_module",
]

#: The module's weights in a policy folder.
MODULE_FILE = "module.safetensors"
#: The model settings a module is rebuilt from (``policy.json``'s ``module`` entry).
_MODEL_KEYS = ("hidden", "embed", "packed")


def module_path(policy_dir: str | os.PathLike) -> Path:
    """Where the RLModule of a policy folder's checkpoint lies."""
    return (
        Path(policy_dir)
        / "checkpoint"
        / "learner_group"
        / "learner"
        / "rl_module"
        / ("default_policy")
    )


def save_module(
    algo: Any, out: str | os.PathLike, meta: dict[str, Any], meta_path: str | os.PathLike
) -> None:
    """Write ``algo``'s module to ``out/module.safetensors``, set ``meta["module"]`` (its
    settings) and write ``meta`` to ``meta_path``.

    Both files are replaced atomically (a temp name, then ``os.replace``).
    """
    from safetensors.torch import save_file

    module = algo.get_module()
    cfg = dict(getattr(module, "model_config", None) or {})
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in module.state_dict().items()}
    out = Path(out)
    tmp = out / f".{MODULE_FILE}.{os.getpid()}.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out / MODULE_FILE)
    meta["module"] = {
        "class": "ActionScoringTorchModule",
        "model_config": {k: cfg[k] for k in _MODEL_KEYS if k in cfg},
        "action_space_n": int(module.action_space.n),
    }
    meta_path = Path(meta_path)
    tmp_meta = meta_path.with_name(f".{meta_path.name}.{os.getpid()}.tmp")
    tmp_meta.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp_meta, meta_path)


def check_loadable(folder: str | os.PathLike, *, trust: bool = False) -> None:
    """Raise :class:`~budget_envs.errors.UntrustedPolicy` when ``folder`` could only load by
    unpickling and ``trust`` is false; reads nothing but the folder's listing."""
    folder = Path(folder)
    if not trust and not (folder / MODULE_FILE).is_file():
        raise UntrustedPolicy(
            f"{folder}: no {MODULE_FILE}; loading its RLlib checkpoint would unpickle "
            "class_and_ctor_args.pkl, which can run any code. Pass --trust-policy "
            "(trust=True) only for a folder you trained yourself"
        )


def load_module(folder: str | os.PathLike, meta: Mapping[str, Any], *, trust: bool = False) -> Any:
    """The policy folder's module, in eval mode, built without unpickling anything.

    Raises:
        UntrustedPolicy: the folder has no ``module.safetensors`` and ``trust`` is false.
        ValueError: ``policy.json``'s ``module`` entry or the weights do not fit the module.
    """
    import torch
    from gymnasium import spaces

    from budget_envs.integrations.rllib.features import FeatureSpec

    folder = Path(folder)
    weights = folder / MODULE_FILE
    if not weights.is_file():
        check_loadable(folder, trust=trust)
        return _load_pickled(folder)
    entry = meta.get("module")
    if not isinstance(entry, Mapping) or entry.get("class") != "ActionScoringTorchModule":
        raise ValueError(
            f"{folder}/policy.json: its 'module' entry must name ActionScoringTorchModule "
            f"with its model_config, got {entry!r}"
        )
    cfg = entry.get("model_config") or {}
    if not isinstance(cfg, Mapping) or set(cfg) - set(_MODEL_KEYS):
        raise ValueError(f"{folder}/policy.json: module model_config {cfg!r} is not understood")
    n = entry.get("action_space_n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{folder}/policy.json: module action_space_n {n!r} is not a count")
    from safetensors.torch import load_file

    from budget_envs.integrations.rllib.module import ActionScoringTorchModule

    spec = FeatureSpec.from_dict(meta["features"])
    module = ActionScoringTorchModule(
        observation_space=spec.observation_space(),
        action_space=spaces.Discrete(n),
        inference_only=True,
        model_config={**dict(cfg), "torch_threads": None},
    )
    try:
        state = load_file(str(weights))
    except Exception as exc:  # safetensors' own errors: a truncated or foreign file
        raise ValueError(f"{weights} is not a safetensors file ({exc})") from None
    try:
        module.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    except RuntimeError as exc:
        raise ValueError(
            f"{weights} does not fit the module policy.json describes: {exc}"
        ) from None
    module.eval()
    return module


#: The names the module of :class:`~budget_envs.integrations.rllib.module.ActionScoringTorchModule`
#: and the metrics callback had before the RLlib integration became a package: RLlib pickles
#: both by reference, so checkpoints written then record these names.
OLD_MODULE_NAMES = ("budget_envs.integrations.rllib_module",)


def alias_moved_modules() -> None:
    """Let a checkpoint pickled before the move find its classes: each of
    :data:`OLD_MODULE_NAMES` is registered in ``sys.modules`` as
    :mod:`budget_envs.integrations.rllib.module` (RLlib swallows the import error of an old
    name and builds a bare ``RLModule`` instead)."""
    import sys

    from budget_envs.integrations.rllib import module

    for old in OLD_MODULE_NAMES:
        sys.modules.setdefault(old, module)


def _load_pickled(folder: Path) -> Any:
    from ray.rllib.core.rl_module.rl_module import RLModule

    alias_moved_modules()
    where = module_path(folder)
    if not where.exists():
        raise ValueError(f"{folder}: no RLlib module checkpoint at {where}")
    module = RLModule.from_checkpoint(str(where.resolve()))  # a URI: relative paths fail
    module.eval()
    return module
