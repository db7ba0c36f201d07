"""The one table of trainers, and everything shared code needs to know about one.

Each row names a trainer (``budgetmix train --trainer NAME``), says in a line what it trains,
and holds its settings object, its train function, the policy file its folders hold and the
agent that plays them, its pip extra (with the modules that extra brings), its default
iterations, and whether the study trains with it. The command line (``--trainer`` of ``train``
and ``study``), ``budgetmix train`` (default iterations, the extra's install hint), the study's
spec (which trainers it takes) and the trained-policy agent (which loader reads a folder) read
the table; none of them spells a trainer's name. Adding a row publishes a trainer in all of
them at once (the train command still maps its own flags for each trainer).

Functions, classes and loaders are ``"module:attr"`` strings, imported when first asked for:
importing this module loads no trainer (no torch, ray or trl). A row may hold the callables
themselves instead (for tests).

A **policy loader** (the ``agent`` column) builds the agent that plays a folder::

    agent(folder, meta, *, seed, greedy, check_visibility, trust) -> agent

``meta`` is the folder's policy file, parsed; the agent has the eval harness's ``reset`` and
``act`` (and ``teacher_force`` when it can replay an oracle prefix) and a ``name``.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "TRAINER_TABLE",
    "TrainerEntry",
    "read_policy_folder",
    "study_probes",
    "study_trainers",
    "trainer_entry",
    "trainer_names",
]


def _load(reference: str | Callable[..., Any]) -> Any:
    if callable(reference):
        return reference
    module_name, _, attr = reference.partition(":")
    return getattr(importlib.import_module(module_name), attr)


@dataclass(frozen=True)
class TrainerEntry:
    """One trainer.

    Attributes:
        name: the ``--trainer`` value, and the ``"trainer"`` key its policy files carry.
        description: one line for ``--help``.
        train: ``"module:function"`` of the train function, ``train(env_id, *, out_dir,
            budget, visibility, env_kwargs, seed, report_to, ...)`` (``budgetmix train`` also
            passes ``iterations`` unless its default is None); ``train``, ``config`` and
            ``agent`` may be the objects themselves instead of strings.
        config: ``"module:Class"`` of its settings dataclass (None: keyword arguments only).
        policy_file: the JSON file of the folders it writes, which says how they were trained.
        agent: ``"module:attr"`` of the policy loader that plays those folders (see the module
            docstring).
        requires: the pip extra it needs beyond the core install.
        modules: the modules that extra brings which training imports (checked, not imported,
            before a run, so a missing extra is one line naming it).
        default_iterations: ``--iterations`` when not given (None: the trainer decides).
        unit: what one iteration is, for ``--help`` (e.g. "PPO iterations").
        study: ``budgetmix study --trainer NAME`` trains with it.
        probes: its policies can be told an oracle prefix (``teacher_force``), so the study runs
            single-step probes on them.
    """

    name: str
    description: str
    train: str | Callable[..., Any]
    config: str | type | None
    policy_file: str
    agent: str | Callable[..., Any]
    requires: str
    modules: tuple[str, ...]
    default_iterations: int | None
    unit: str
    study: bool = False
    probes: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"name must be a word such as 'rllib', got {self.name!r}")
        for column in ("train", "agent") + (("config",) if self.config is not None else ()):
            value = getattr(self, column)
            if not callable(value) and not (isinstance(value, str) and ":" in value):
                raise TypeError(
                    f"{column} must be a 'module:attr' string or a callable, got {value!r}"
                )
        if not isinstance(self.policy_file, str) or not self.policy_file.endswith(".json"):
            raise ValueError(f"policy_file must name a JSON file, got {self.policy_file!r}")
        iterations = self.default_iterations
        if iterations is not None and (
            isinstance(iterations, bool) or not isinstance(iterations, int)
        ):
            raise TypeError(f"default_iterations must be an int or None, got {iterations!r}")

    def train_function(self) -> Callable[..., Any]:
        """The train function, imported now (ImportError or AttributeError when this install
        lacks it)."""
        return _load(self.train)

    def config_class(self) -> type | None:
        """The settings dataclass, imported now (None when the trainer takes keywords only)."""
        return None if self.config is None else _load(self.config)

    def policy_loader(self) -> Callable[..., Any]:
        """The policy loader, imported now."""
        return _load(self.agent)


#: Every trainer. Trainers add their rows here.
TRAINER_TABLE: tuple[TrainerEntry, ...] = (
    TrainerEntry(
        name="rllib",
        description="RLlib PPO of the action-scoring policy (scores every offered action)",
        train="budget_envs.integrations.rllib.training:train",
        config="budget_envs.integrations.rllib.config:RLlibTrainConfig",
        policy_file="policy.json",
        agent="budget_envs.integrations.rllib.agent:RLlibPolicy",
        requires="rllib",
        modules=("ray", "torch"),
        default_iterations=50,
        unit="PPO iterations",
        study=True,
        probes=True,
    ),
    TrainerEntry(
        name="trl",
        description="TRL GRPO of a language model, multi-turn episodes in the rollout",
        # The package's train, so an install without it says so (not an import error).
        train="budget_envs.integrations.trl:train",
        config=None,
        policy_file="budgetmix_policy.json",
        agent="budget_envs.integrations.hf_policy:load_trl",
        requires="trl",
        modules=("torch", "transformers", "trl"),
        default_iterations=20,
        unit="GRPO steps",
        study=True,
    ),
    TrainerEntry(
        name="sft",
        description="TRL SFT of a language model on the oracle's demonstrations",
        train="budget_envs.integrations.lm.sft:train_sft",
        config="budget_envs.integrations.lm.sft:SFTSettings",
        policy_file="budgetmix_policy.json",
        agent="budget_envs.integrations.hf_policy:load_lm",
        requires="lm",
        modules=("torch", "transformers", "trl", "peft"),
        default_iterations=None,
        unit="SFT steps",
    ),
)


def trainer_names() -> list[str]:
    """Every trainer's name, in table order (``--trainer``'s choices).

    >>> trainer_names()
    ['rllib', 'trl', 'sft']
    """
    return [entry.name for entry in TRAINER_TABLE]


def study_trainers() -> list[str]:
    """The trainers the study trains with (``budgetmix study --trainer``'s choices).

    >>> study_trainers()
    ['rllib', 'trl']
    """
    return [entry.name for entry in TRAINER_TABLE if entry.study]


def trainer_entry(name: str) -> TrainerEntry:
    """The row of trainer ``name``.

    Raises:
        ValueError: no row has that name (the message lists those that do).
    """
    for entry in TRAINER_TABLE:
        if entry.name == name:
            return entry
    raise ValueError(f"unknown trainer {name!r}; expected one of {trainer_names()}")


def read_policy_folder(folder: str | os.PathLike) -> tuple[TrainerEntry, dict[str, Any]]:
    """The trainer that wrote ``folder``, and the folder's policy file (parsed).

    The rows' policy files are looked for in table order; the first one the folder holds names
    its trainer in its ``"trainer"`` key, which must be a row that writes that file. A file
    without the key is the first such row's (TRL writes ``budgetmix_policy.json`` without one).

    Raises:
        ValueError: the folder holds no row's policy file, the file is not a JSON object, or it
            names a trainer that does not write it.
    """
    folder = Path(folder)
    files = list(dict.fromkeys(entry.policy_file for entry in TRAINER_TABLE))
    found = next((folder / name for name in files if (folder / name).is_file()), None)
    if found is None:
        raise ValueError(
            f"{folder} is not a policy folder of `budgetmix train`: it holds none of "
            f"{', '.join(files)} (a Hugging Face model without one plays as "
            "--agent NAME=lm:model=DIR)"
        )
    try:
        meta = json.loads(found.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{found} is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{found} must hold a JSON object, got {type(meta).__name__}")
    writers = [entry for entry in TRAINER_TABLE if entry.policy_file == found.name]
    name = meta.get("trainer", writers[0].name)
    for entry in writers:
        if entry.name == name:
            return entry, meta
    raise ValueError(
        f"{found}: trainer {name!r} is not one that writes {found.name} "
        f"({', '.join(entry.name for entry in writers)})"
    )


def study_probes(trainer: str, model: str | None = None) -> bool:
    """Whether a study's policies trained by ``trainer`` from ``model`` take single-step probes
    (an oracle prefix told through ``teacher_force``): the trainer's own row says so
    (``TrainerEntry.probes``), or ``trainer`` is ``trl`` and ``model`` is a folder that
    ``--trainer sft`` (or a GRPO run resumed from one) wrote. Such a folder's policies play as
    the ``lm`` agent, which replays a prefix as chat history."""
    if trainer_entry(trainer).probes:
        return True
    if trainer != "trl" or not model:
        return False
    try:
        entry, meta = read_policy_folder(model)
    except (OSError, ValueError):
        return False
    return entry.name == "sft" or meta.get("render") == "lm"
