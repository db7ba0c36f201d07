"""The trainer table is the one place that names the trainers.

``budgetmix train --trainer`` and ``budgetmix study --trainer`` offer its rows, ``budgetmix
train`` takes each row's default iterations and extra from it, the study's spec takes the rows
marked for the study, and the trained-policy agent picks the loader of the row that wrote a
folder. A row added to a monkeypatched table shows up in each of them; every row's train
function, settings class and policy loader import.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from budget_envs import cli
from budget_envs.integrations import trainers
from budget_envs.integrations.trainers import (
    TRAINER_TABLE,
    TrainerEntry,
    read_policy_folder,
    study_trainers,
    trainer_entry,
    trainer_names,
)

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "BudgetMix/ToolUse-v0"


def _choices(help_text: str) -> list[str]:
    found = re.search(r"--trainer \{([^}]*)\}", help_text)
    assert found, help_text
    return found.group(1).split(",")


def _help(*command: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "budget_envs.cli", *command, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_commands_offer_the_tables_trainers():
    names = [entry.name for entry in TRAINER_TABLE]
    assert names == trainer_names() and {"rllib", "trl", "sft"} <= set(names)
    assert _choices(_help("train")) == names
    studied = [entry.name for entry in TRAINER_TABLE if entry.study]
    assert studied == study_trainers() and studied and studied != names
    assert _choices(_help("study")) == studied


@pytest.mark.parametrize("entry", TRAINER_TABLE, ids=lambda e: e.name)
def test_each_rows_train_function_settings_and_loader_import(entry):
    assert callable(entry.train_function())
    config = entry.config_class()
    assert config is None or dataclasses.is_dataclass(config)
    assert callable(entry.policy_loader())
    assert entry.requires and entry.modules and entry.unit


def test_rllib_train_takes_its_config_whole_or_builds_it_from_keywords(tmp_path):
    import inspect

    from budget_envs.integrations.rllib import RLlibTrainConfig, train

    assert trainer_entry("rllib").config_class() is RLlibTrainConfig
    fields = {f.name: f.default for f in dataclasses.fields(RLlibTrainConfig)}
    # every setting is a field with its default: train's own parameters are the hooks alone
    assert set(inspect.signature(train).parameters) == {
        "env_id",
        "config",
        "progress",
        "warm_start_progress",
        "options",
    }
    assert fields["gamma"] == 0.99 and fields["max_actions"] == 256 and len(fields) == 32
    # more imitation continues a policy: it needs one to resume
    assert fields["imitation_steps"] == 0
    with pytest.raises(ValueError, match="needs resume=True"):
        RLlibTrainConfig(out_dir=tmp_path / "p", iterations=0, imitation_steps=10)
    assert (
        RLlibTrainConfig(
            out_dir=tmp_path / "p",
            iterations=0,
            imitation_steps=10,
            resume=True,
            warm_start_episodes=0,
        ).settings()["imitation_steps"]
        == 10
    )
    config = RLlibTrainConfig(out_dir=tmp_path / "p", iterations=1)
    assert config.minibatch == 512 and config.settings()["minibatch_size"] == 512
    with pytest.raises(ValueError, match=r"minibatch_size \(300\) must be at most"):
        train(ENV_ID, config, train_batch_size=256, minibatch_size=300)  # keywords replace fields
    with pytest.raises(ValueError, match="gamma must be in"):
        train(ENV_ID, out_dir=tmp_path / "p", iterations=1, gamma=0.0)  # keywords build it
    with pytest.raises(TypeError, match="nope"):
        train(ENV_ID, out_dir=tmp_path / "p", iterations=1, nope=1)
    with pytest.raises(TypeError, match="RLlibTrainConfig"):
        train(ENV_ID, {"out_dir": str(tmp_path / "p"), "iterations": 1})
    assert not (tmp_path / "p").exists()


def _write_policy(folder: Path, name: str, meta: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / name).write_text(json.dumps(meta))
    return folder


def test_the_policy_file_names_the_trainer_that_reads_a_folder(tmp_path):
    cases = {
        "r": ("policy.json", {"trainer": "rllib"}, "rllib"),
        "t": ("budgetmix_policy.json", {"visibility": "hidden"}, "trl"),  # TRL writes no key
        "s": ("budgetmix_policy.json", {"trainer": "sft"}, "sft"),
    }
    for folder, (file, meta, trainer) in cases.items():
        entry, read = read_policy_folder(_write_policy(tmp_path / folder, file, meta))
        assert entry.name == trainer and entry.policy_file == file and read == meta
    bad = _write_policy(tmp_path / "bad", "budgetmix_policy.json", {"trainer": "rllib"})
    with pytest.raises(ValueError, match=r"trainer 'rllib' is not one that writes"):
        read_policy_folder(bad)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="policy.json, budgetmix_policy.json"):
        read_policy_folder(tmp_path / "hf")


# ---------------------------------------------------------------------- a row of our own
class _ToyPlayer:
    """Plays the first offered action."""

    def __init__(self, folder, meta, *, seed, greedy, check_visibility, trust):
        self.name = f"toy:{Path(folder).name}"
        self.meta = meta

    def reset(self, *, env_id, observation, info, seed):
        pass

    def act(self, observation, info):
        return info["candidate_actions"][0]


def _toy_train(env_id, *, out_dir, iterations, budget, visibility, env_kwargs, seed, report_to):
    folder = Path(out_dir)
    folder.mkdir(parents=True)
    meta = {"trainer": "toy", "env_id": env_id, "iterations": iterations, "seed": seed}
    (folder / "toy_policy.json").write_text(json.dumps(meta))


@pytest.fixture
def toy_row(monkeypatch):
    """The real table plus a fourth trainer that the study takes."""
    row = TrainerEntry(
        name="toy",
        description="writes a folder whose player plays the first offered action",
        train=_toy_train,
        config=None,
        policy_file="toy_policy.json",
        agent=_ToyPlayer,
        requires="toy",
        modules=("json",),
        default_iterations=7,
        unit="toy steps",
        study=True,
    )
    monkeypatch.setattr(trainers, "TRAINER_TABLE", (*TRAINER_TABLE, row))
    return row


def test_a_new_row_is_offered_trained_studied_and_played(toy_row, tmp_path, capsys):
    parser = cli.build_parser()
    train_help = _sub_help(parser, "train")
    assert _choices(train_help) == [*(e.name for e in TRAINER_TABLE), "toy"]
    assert _choices(_sub_help(parser, "study")) == [
        *(e.name for e in TRAINER_TABLE if e.study),
        "toy",
    ]
    assert "toy steps (toy, default 7)" in " ".join(train_help.split())

    out = tmp_path / "policy"
    assert cli.main(["train", ENV_ID, "--trainer", "toy", "--seed", "3", "--out", str(out)]) == 0
    assert f"--agent p=policy:{out}" in capsys.readouterr().out
    meta = json.loads((out / "toy_policy.json").read_text())
    assert meta["iterations"] == 7 and meta["seed"] == 3  # the row's default iterations

    from budget_envs.eval.agents import make_agent

    agent = make_agent(f"policy:{out}")
    assert agent.trainer == "toy" and agent.name == "toy:policy"
    from budget_envs.integrations.common import make_env

    env = make_env(ENV_ID, level=1)
    obs, info = env.reset(seed=0)
    agent.reset(env_id=ENV_ID, observation=obs, info=info, seed=0)
    assert agent.act(obs, info) == info["candidate_actions"][0]
    env.close()

    from budget_envs.study import quick_spec

    spec = dataclasses.replace(quick_spec(), trainer="toy")
    assert spec.trainer == "toy"
    with pytest.raises(ValueError, match=r"one the study trains with \['rllib', 'trl', 'toy'\]"):
        dataclasses.replace(quick_spec(), trainer="sft")


def _sub_help(parser, name: str) -> str:
    import argparse

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name].format_help()


def test_a_missing_extra_is_one_line_naming_it(toy_row, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(
        trainers,
        "TRAINER_TABLE",
        (*TRAINER_TABLE, dataclasses.replace(toy_row, modules=("no_such_module_xyz",))),
    )
    rc = cli.main(["train", ENV_ID, "--trainer", "toy", "--out", str(tmp_path / "never")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert '--trainer toy needs the toy extra: pip install -e ".[toy]"' in err[0]
    assert not (tmp_path / "never").exists()


def test_every_trainer_the_study_takes_has_a_train_stage():
    from budget_envs.study.stages import TRAIN_STAGES

    assert sorted(TRAIN_STAGES) == sorted(study_trainers())
