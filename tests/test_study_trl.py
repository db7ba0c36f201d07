"""``budgetmix study --trainer trl``: the toy TRL study (:func:`trl_quick_spec`) trained and
evaluated end to end through the study's own stages, resumed without training again, a
half-written folder redone with the same bytes, and the CLI's ``--trainer``/``--model``.

The report modules are not run here (``tests/test_study.py`` covers them on the RLlib study).
"""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import pytest

from budget_envs.study.folder import policy_root, records_path, warm_root
from budget_envs.study.spec import arm_budget
from budget_envs.study.trl_stage import TRAIN_FILE, train_stage_trl, trl_quick_spec

VIS, SEED = "hidden", 0
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def _offline():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")  # the tiny model is built here: nothing may touch the Hub
        mp.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
        yield


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The toy study's folder after its train stage (no eval yet)."""
    pytest.importorskip("trl", reason='the TRL study needs the trl extra: "budget-envs[trl]"')
    from budget_envs.study.stages import train_stage

    spec = trl_quick_spec()
    out = tmp_path_factory.mktemp("trl_study")
    policies = train_stage(spec, out, report_to="tensorboard")
    return spec, out, policies


def _no_training(monkeypatch):
    import budget_envs.integrations.trl as trl

    def refuse(*args, **kwargs):
        raise AssertionError(f"trained again: {kwargs.get('out_dir')}")

    monkeypatch.setattr(trl, "train", refuse)


def test_every_arm_resumes_the_base_under_its_budget(toy):
    spec, out, policies = toy
    (fam,) = spec.families
    root = policy_root(out, fam, VIS, SEED)
    assert policies == [root / arm for arm in spec.arms]
    assert not list(root.glob("*.tmp"))
    base = _weights(root / "base")
    assert base.keys() == _weights(warm_root(out, fam, VIS, SEED)).keys()
    for arm in spec.arms:
        meta = json.loads((root / arm / TRAIN_FILE).read_text())
        assert meta["arm"] == arm and meta["model"] == "tiny" and meta["seed"] == SEED
        assert meta["budget"] == arm_budget(arm, fam.tight, fam.generous)
        settings = json.loads((root / arm / "budgetmix_policy.json").read_text())
        assert settings["visibility"] == VIS and settings["env_kwargs"] == fam.train_kwargs
        assert not (root / arm / "warm_start").exists()
        if arm == "base":
            assert meta["iterations"] == 0 and meta["warm_start_loss"] is not None
            continue
        # one GRPO step of 8 episodes per iteration, from the base's weights
        assert meta["iterations"] == fam.iterations == len(meta["reward"])
        assert sum(meta["stop_reasons"].values()) == 8 * fam.iterations
        # The tiny model wins no toy episode, so every GRPO group has one reward (no advantage)
        # and the arm must end exactly where it started: bit for bit the base.
        assert meta["reward"] == [0.0] * fam.iterations
        assert meta["frac_reward_zero_std"] == [1.0] * fam.iterations
        weights = _weights(root / arm)
        assert weights.keys() == base.keys()
        assert all(weights[k].equal(base[k]) for k in base)


def test_study_report_to_logs_every_trained_arm(toy):
    """``budgetmix study --report-to tensorboard``: each GRPO arm's metrics rows in TensorBoard
    (its own events, read back with TensorBoard's reader), the untrained base none."""
    import csv

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    spec, out, _ = toy
    (fam,) = spec.families
    root = policy_root(out, fam, VIS, SEED)
    for arm in spec.arms:
        runs = root / arm / "runs"
        if arm == "base":
            assert not runs.exists()
            continue
        (run,) = list(runs.iterdir())
        assert run.name == arm
        acc = EventAccumulator(str(run))
        acc.Reload()
        with open(root / arm / "metrics.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        got = [(e.step, e.value) for e in acc.Scalars("train/win_rate")]
        assert got == [(int(r["step"]), pytest.approx(float(r["win_rate"]))) for r in rows]
        assert len(got) == fam.iterations


def test_a_rerun_trains_nothing_again(toy, monkeypatch):
    spec, out, policies = toy
    stamps = {p: (p / "model.safetensors").stat().st_mtime_ns for p in policies}
    _no_training(monkeypatch)
    seen = []
    assert train_stage_trl(spec, out, progress=lambda *a: seen.append(a)) == policies
    assert seen[-1] == ("train", len(spec.arms), len(spec.arms))
    assert {p: (p / "model.safetensors").stat().st_mtime_ns for p in policies} == stamps


def test_a_half_written_warm_start_is_redone_with_the_same_bytes(toy, tmp_path, monkeypatch):
    spec, out, _ = toy
    (fam,) = spec.families
    import budget_envs.integrations.trl as trl

    shutil.copytree(out / "policies", tmp_path / "policies", copy_function=shutil.copy2)
    warm, root = warm_root(tmp_path, fam, VIS, SEED), policy_root(tmp_path, fam, VIS, SEED)
    shutil.rmtree(warm)
    shutil.rmtree(root / "base")
    (root / "warm.tmp").mkdir()
    (root / "warm.tmp" / "model.safetensors").write_bytes(b"killed half-way")
    rl_stamps = {a: (root / a / "model.safetensors").stat().st_mtime_ns for a in spec.rl_arms}
    calls, real = [], trl.train

    def counting(*args, **kwargs):
        calls.append(kwargs["iterations"])
        return real(*args, **kwargs)

    monkeypatch.setattr(trl, "train", counting)
    train_stage_trl(spec, tmp_path)
    assert calls == [0]  # the warm start alone; the finished RL arms are kept
    assert not (root / "warm.tmp").exists()
    again = warm_root(out, fam, VIS, SEED) / "model.safetensors"
    assert (warm / "model.safetensors").read_bytes() == again.read_bytes()  # same seed, same bytes
    assert (root / "base" / "model.safetensors").read_bytes() == again.read_bytes()
    assert {a: (root / a / "model.safetensors").stat().st_mtime_ns for a in spec.rl_arms} == (
        rl_stamps
    )


def test_the_eval_stage_plays_every_arm_as_a_policy_agent(toy, monkeypatch):
    spec, out, _ = toy
    (fam,) = spec.families
    from budget_envs.eval.agents import make_agent
    from budget_envs.study.stages import eval_stage, train_stage

    root = policy_root(out, fam, VIS, SEED)
    for arm in spec.arms:
        agent = make_agent(f"policy:{root / arm}")
        assert agent.trainer == "trl" and agent.player.settings["visibility"] == VIS
    # one worker: the episodes run in this process, which loads each policy once
    assert eval_stage(spec, out, workers=1) == [records_path(out, fam, VIS, SEED)]
    with gzip.open(records_path(out, fam, VIS, SEED), "rt") as fh:
        records = [json.loads(line) for line in fh]
    assert not any(r.get("error") for r in records)
    arms = {f"{a}@s{SEED}" for a in spec.arms}
    assert {r["agent"] for r in records} == arms | {"random"}
    # no single-step probes with TRL: its policy agent cannot replay an oracle prefix
    assert fam.probe_states > 0 and not [r for r in records if r["record"] == "probe"]
    for agent in arms:
        mine = [r for r in records if r["agent"] == agent and r["record"] == "episode"]
        clean = [r for r in mine if r["fault_turn"] is None]
        assert len(clean) == fam.eval_tasks * fam.eval_samples
        assert len(mine) - len(clean) == fam.eval_tasks * fam.fault_samples * len(fam.fault_turns)
        assert {r["budget"] for r in clean} == {max(fam.eval_budgets)}
    # the records cover the seed: a rerun of both stages neither trains nor plays
    _no_training(monkeypatch)
    assert train_stage(spec, out) == []


def test_the_study_command_picks_the_trl_spec():
    from budget_envs.cli import build_parser
    from budget_envs.commands.study import _pick_spec
    from budget_envs.errors import UsageError
    from budget_envs.study import full_spec, quick_spec

    parse = build_parser().parse_args
    args = parse(["study", "--quick", "--trainer", "trl"])
    assert (args.trainer, args.model) == ("trl", "tiny")
    assert _pick_spec(args) == trl_quick_spec()
    assert _pick_spec(parse(["study", "--quick"])) == quick_spec()
    spec = _pick_spec(parse(["study", "--trainer", "trl", "--model", "Qwen/Qwen3-0.6B"]))
    assert (spec.trainer, spec.model, spec.curve) == ("trl", "Qwen/Qwen3-0.6B", None)
    # the full design without the imitation arm, which the TRL stage has not (it refuses it)
    assert spec.families == full_spec().families and "imitation" in full_spec().arms
    assert spec.arms == [a for a in full_spec().arms if a != "imitation"]
    with pytest.raises(UsageError, match="--trainer trl"):
        _pick_spec(parse(["study", "--model", "Qwen/Qwen3-0.6B"]))
    with pytest.raises(UsageError, match="--device needs --trainer trl"):
        _pick_spec(parse(["study", "--device", "cuda"]))
    with pytest.raises(SystemExit):
        parse(["study", "--trainer", "ppo"])
    # the GPU spec: the full design, its arms playing on the device; the CPU writes no device
    gpu = _pick_spec(parse(["study", "--trainer", "trl", "--model", "m", "--device", "cuda"]))
    assert (gpu.families, gpu.device) == (full_spec().families, "cuda")
    assert "device" not in spec.to_json() and gpu.to_json()["device"] == "cuda"
    assert _pick_spec(parse(["study", "--trainer", "trl", "--device", "cpu"])).device is None


def test_a_study_on_a_device_plays_its_arms_there(tmp_path):
    """``--device cuda``: every arm's agent spec carries the device; an RLlib folder refuses
    one (it plays on the CPU only)."""
    from dataclasses import replace

    from budget_envs.integrations.policy_agent import PolicyAgent
    from budget_envs.study import quick_spec
    from budget_envs.study.stages import eval_plans

    spec = replace(trl_quick_spec(), device="cuda")
    (fam,) = spec.families
    plan = eval_plans(spec, tmp_path, fam, VIS, SEED)["episodes"]
    arms = {n: a for n, a in plan.agents.items() if "@s" in n}
    assert arms and all(a.endswith(",device=cuda") for a in arms.values())
    assert plan.agents["random"] == "random"
    with pytest.raises(ValueError, match="needs trainer 'trl'"):
        replace(quick_spec(), device="cuda")
    folder = tmp_path / "rllib"
    folder.mkdir()
    (folder / "policy.json").write_text(json.dumps({"trainer": "rllib"}))
    with pytest.raises(ValueError, match="CPU only"):
        PolicyAgent(path=folder, device="cuda")


def test_the_trl_stage_refuses_a_learning_curve_and_the_imitation_arm(tmp_path):
    from dataclasses import replace

    from budget_envs.study import quick_spec

    with pytest.raises(ValueError, match="curve=None"):
        train_stage_trl(replace(quick_spec(), trainer="trl"), tmp_path)
    with pytest.raises(ValueError, match="no 'imitation' arm"):
        train_stage_trl(replace(quick_spec(), trainer="trl", curve=None), tmp_path)


def test_a_killed_grpo_arm_resumes_and_ends_as_an_unkilled_one(tmp_path, monkeypatch):
    """A study killed half-way through an RL arm's GRPO (a session's end) continues that arm
    from its last trainer checkpoint on the next run, to the same weights as a run never
    killed; the finished folder keeps no checkpoint."""
    from dataclasses import replace

    import budget_envs.integrations.trl as trl
    import budget_envs.study.trl_stage as stage

    spec = trl_quick_spec()
    (fam,) = spec.families
    spec = replace(spec, families=[replace(fam, iterations=2)], arms=["base", "fixed_generous"])
    (fam,) = spec.families
    train_stage_trl(spec, tmp_path / "whole")
    monkeypatch.setattr(stage, "RESUME_EVERY", 1)
    real = trl.train

    class Killed(Exception):
        pass

    def killed_at_step_2(**kwargs):
        def progress(logs):
            if logs.get("step") == 2 and "loss" in logs:
                raise Killed

        return real(**kwargs, progress=progress if kwargs.get("iterations") else None)

    monkeypatch.setattr(trl, "train", killed_at_step_2)
    with pytest.raises(Killed):
        train_stage_trl(spec, tmp_path / "killed")
    root = policy_root(tmp_path / "killed", fam, VIS, SEED)
    tmp = root / "fixed_generous.tmp"
    assert sorted(p.name for p in (tmp / "trainer").glob("checkpoint-*")) == ["checkpoint-1"]
    resumed = []
    monkeypatch.setattr(trl, "train", lambda **kw: resumed.append(kw["resume"]) or real(**kw))
    train_stage_trl(spec, tmp_path / "killed")
    assert resumed == [True]
    assert not tmp.exists() and not (root / "fixed_generous" / "trainer").exists()
    whole = _weights(policy_root(tmp_path / "whole", fam, VIS, SEED) / "fixed_generous")
    again = _weights(root / "fixed_generous")
    assert whole.keys() == again.keys()
    assert all(bool((whole[k] == again[k]).all()) for k in whole)


def test_a_trl_study_from_an_sft_folder_runs_the_single_step_probes(tmp_path):
    """Policies GRPO trained from a ``--trainer sft`` folder play as the lm agent, which
    replays an oracle prefix: the study probes them (so C2 runs) and ``--check`` expects the
    probes; from the tiny model it runs none."""
    from dataclasses import replace

    from budget_envs.integrations.trainers import study_probes
    from budget_envs.study.check import _expected, _takes_probes
    from budget_envs.study.stages import eval_plans

    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "budgetmix_policy.json").write_text(json.dumps({"trainer": "sft", "settings": {}}))
    assert study_probes("rllib") and study_probes("trl", str(sft))
    assert not study_probes("trl", "tiny") and not study_probes("trl", str(tmp_path / "none"))
    for model, probes in (("tiny", 0), (str(sft), 1)):
        spec = replace(trl_quick_spec(), model=model)
        (fam,) = spec.families
        assert fam.probe_states == 1
        plan = eval_plans(spec, tmp_path / "study", fam, VIS, SEED)["episodes"]
        assert plan.probe_states == plan.offpath_probe_states == probes
        expected = _expected(spec, fam, VIS, "base@s0", _takes_probes(spec, tmp_path / "study"))
        assert expected["probes"] == expected["off-path probes"] == fam.eval_tasks * probes


def test_the_check_expects_probes_from_the_kept_base_record_where_the_base_is_gone(tmp_path):
    """A fresh clone has the study folder but not the SFT folder its base came from: the check
    reads the base's kept record (base-sft/) and finds the committed language-model cell as
    designed, probes included; without that record it would expect none."""
    from dataclasses import replace

    from budget_envs.study.check import _takes_probes, check_study
    from budget_envs.study.folder import BASE_RECORD
    from budget_envs.study.spec import StudySpec

    out = ROOT / "study" / "lm" / "study"
    spec = StudySpec.from_json(json.loads((out / "study.json").read_text()))
    spec = replace(spec, model=str(tmp_path / "not-here"))
    assert _takes_probes(spec, out) and not _takes_probes(spec, tmp_path)
    report = check_study(spec, out, unseen=False)
    assert report.problems == [] and report.deviations == []
    assert any(p.startswith("alfworld__hidden__s0: sizes, paired") for p in report.passed)
    shutil.copytree(out / "records", tmp_path / "records")
    (tmp_path / BASE_RECORD).mkdir()
    record = {"trainer": "rllib"}  # not an SFT base: no probes expected, so the sizes differ
    (tmp_path / BASE_RECORD / "budgetmix_policy.json").write_text(json.dumps(record))
    assert not _takes_probes(spec, tmp_path)
    shown = check_study(spec, tmp_path, unseen=False).problems
    assert any("probes 100 (spec 0)" in p for p in shown), shown


def test_every_trl_policy_has_a_train_record_a_reader_can_check(toy):
    """``train.json`` per policy, as the RLlib study's: the RL arms' GRPO steps and env steps
    from their metrics, and every arm's start is the base's weights (sha256)."""
    from budget_envs.study.provenance import TRAIN_FILE as RECORD
    from budget_envs.study.provenance import record_dir

    spec, out, _ = toy
    (fam,) = spec.families
    records = {
        arm: json.loads((record_dir(out, fam, VIS, SEED, arm) / RECORD).read_text())
        for arm in spec.arms
    }
    base = records["base"]
    assert base["kind"] == "start" and base["start_sha256"] is None
    for arm in spec.arms[1:]:
        rec = records[arm]
        assert rec["kind"] == "grpo" and rec["iterations"] == fam.iterations
        assert rec["start_sha256"] == base["result_sha256"]
        assert rec["episodes"] == 8 * fam.iterations
        with open(record_dir(out, fam, VIS, SEED, arm) / "metrics.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        turns = sum(float(r["turns_mean"]) * int(r["episodes"]) for r in rows)
        assert len(rows) == fam.iterations and rec["env_steps"] == round(turns)


def test_rl_arms_train_to_the_reference_arms_env_steps(tmp_path):
    """Every RL arm but ``fixed_generous`` trains until its episodes have taken the env steps
    ``fixed_generous`` took in its ``Family.iterations`` steps (read from its metrics); the
    reference must be trained first, and one that took no env step sets no limit."""
    from budget_envs.study.trl_stage import REFERENCE_ARM, _steps_of

    arms = ["base", REFERENCE_ARM, "mix", "fixed_tight"]
    with pytest.raises(ValueError, match="must be trained before mix"):
        _steps_of(tmp_path, "mix", arms)
    ref = tmp_path / REFERENCE_ARM
    ref.mkdir()
    (ref / TRAIN_FILE).write_text("{}")
    header = "step,episodes,turns_mean\n"
    (ref / "metrics.csv").write_text(header + "1,8,12.5\n2,8,10.0\n")
    assert _steps_of(tmp_path, "mix", arms) == 180 == _steps_of(tmp_path, "fixed_tight", arms)
    assert _steps_of(tmp_path, REFERENCE_ARM, arms) is None
    assert _steps_of(tmp_path, "mix", ["base", "mix"]) is None
    (ref / "metrics.csv").write_text(header + "1,8,0.0\n")
    assert _steps_of(tmp_path, "mix", arms) is None


@pytest.fixture(scope="module")
def lm_study(tmp_path_factory):
    """A TRL study cell from a small decoder that ``--trainer sft`` wrote: base, one RL arm and
    the imitation control (more SFT to the RL arm's env steps)."""
    from dataclasses import replace

    from budget_envs.integrations.lm.sft import train_sft

    root = tmp_path_factory.mktemp("lm_study")
    (fam,) = trl_quick_spec().families
    train_sft(
        fam.env_id,
        out_dir=root / "sft",
        budget=fam.generous,
        env_kwargs=dict(fam.train_kwargs),
        settings={"model": "scratch", "episodes": 4, "max_steps": 2, "scratch_hidden": 64},
    )
    spec = replace(
        trl_quick_spec(),
        model=str(root / "sft"),
        arms=["base", "fixed_generous", "mix", "imitation"],
    )
    policies = train_stage_trl(spec, root / "study")
    return spec, root / "study", policies


def test_the_imitation_control_spends_the_rl_arms_env_steps_on_more_sft(lm_study):
    from budget_envs.study.check import _training
    from budget_envs.study.provenance import TRAIN_FILE as RECORD
    from budget_envs.study.provenance import record_dir

    spec, out, policies = lm_study
    (fam,) = spec.families
    records = {
        arm: json.loads((record_dir(out, fam, VIS, SEED, arm) / RECORD).read_text())
        for arm in spec.arms
    }
    rl, imitation = records["fixed_generous"], records["imitation"]
    # GRPO from a scratch decoder's SFT folder trains at SCRATCH_LR; the record says its T
    from budget_envs.study.trl_stage import SCRATCH_LR, trl_train_options

    assert trl_train_options(spec, fam, VIS, SEED)["learning_rate"] == rl["lr"] == SCRATCH_LR
    assert rl["budget"] == fam.generous
    assert rl["kind"] == "grpo" and rl["env_steps"] >= 8  # acting by scoring: every turn counts
    assert imitation["kind"] == "sft" and imitation["gradient_updates"] >= 1
    # new oracle episodes until their turns reach the RL arms' mean: at most one episode more
    mean = round((rl["env_steps"] + records["mix"]["env_steps"]) / 2)
    assert mean <= imitation["env_steps"] < mean + fam.generous
    assert imitation["start_sha256"] == records["base"]["result_sha256"] == rl["start_sha256"]
    # the CLI keeps the imitation arm for a base that --trainer sft wrote, drops it otherwise
    from budget_envs.cli import build_parser
    from budget_envs.commands.study import _pick_spec

    picked = _pick_spec(
        build_parser().parse_args(["study", "--trainer", "trl", "--model", spec.model])
    )
    assert "imitation" in picked.arms
    # ... and, on the CPU, sizes the study for a language model (lm_cpu_spec)
    from dataclasses import replace

    from budget_envs.study.trl_stage import lm_cpu_spec

    assert picked == replace(lm_cpu_spec(), model=spec.model)
    assert [f.name for f in picked.families] == ["alfworld"]
    assert all(f.eval_tasks == 50 and f.eval_samples == 4 for f in picked.families)
    # scripts/gpu-check.sh's study cell: the pipeline check's sizes from that folder, on CUDA
    args = ["study", "--quick", "--trainer", "trl", "--model", spec.model, "--device", "cuda"]
    gpu = _pick_spec(build_parser().parse_args(args))
    assert gpu == replace(trl_quick_spec(), model=spec.model, device="cuda")
    said = []
    _training(spec, out, fam, VIS, SEED, said.append)
    assert said == []
    root = policy_root(out, fam, VIS, SEED)
    meta = json.loads((root / "imitation" / "budgetmix_policy.json").read_text())
    assert meta["trainer"] == "sft" and meta["actions"] == "score-mean"
    # every arm samples its scored actions at the study's temperature, as trained
    from budget_envs.integrations.policy_agent import PolicyAgent
    from budget_envs.study.trl_stage import LM_TEMPERATURE

    for arm in spec.arms:
        assert PolicyAgent(path=root / arm).player.temperature == LM_TEMPERATURE, arm
    assert PolicyAgent(path=root / "base", greedy=True).player.temperature == 0.0


def test_the_study_folder_keeps_the_sft_bases_record_and_names_the_model_by_it(lm_study):
    """The base's SFT record (no weights) is copied into the study folder, the same bytes, and
    the side-by-side table names the model by it, not by the path it was trained in."""
    from budget_envs.study.folder import BASE_RECORD
    from budget_envs.study.verdicts import policy_class

    spec, out, _ = lm_study
    kept = out / BASE_RECORD
    for name in ("budgetmix_policy.json", "metrics.csv"):
        assert (kept / name).read_bytes() == (Path(spec.model) / name).read_bytes(), name
    assert not list(kept.glob("*.safetensors"))
    parameters = json.loads((kept / "budgetmix_policy.json").read_text())["parameters"]
    named = policy_class("trl", spec.model, out)
    assert named == f"language model (small decoder, {parameters:,} parameters)"
    assert spec.model not in named
    assert policy_class("trl", spec.model, out.parent) == f"language model ({spec.model})"


def test_a_finished_cell_runs_again_without_training(lm_study, monkeypatch):
    """A study killed after its arms were trained (in its eval stage) runs again: each finished
    arm is checked against the settings it was trained with (mix's env-step limit and step cap
    and the imitation arm's, set from the arms before them) and none is trained again."""
    import budget_envs.integrations.lm.sft as sft

    spec, out, policies = lm_study
    _no_training(monkeypatch)
    monkeypatch.setattr(sft, "train_sft", lambda *a, **k: pytest.fail("imitation trained again"))
    assert train_stage_trl(spec, out) == policies


def test_a_trl_study_from_an_sft_folder_plays_its_arms_with_probes(lm_study, tmp_path):
    """The eval stage of that cell: every arm plays as the lm agent and takes the probes."""
    from budget_envs.eval.runner import load_records
    from budget_envs.study.stages import eval_plans

    spec, out, _ = lm_study
    (fam,) = spec.families
    plan = eval_plans(spec, out, fam, VIS, SEED)["episodes"]
    assert plan.probe_states == fam.probe_states
    from dataclasses import replace

    from budget_envs.eval.runner import run_plan

    small = replace(plan, tasks=1, samples=1)
    run_plan(small, tmp_path / "run", workers=1)
    recs = load_records(tmp_path / "run")
    probes = [r for r in recs if r.get("record") == "probe"]
    assert {r["agent"] for r in probes} >= {f"{arm}@s{SEED}" for arm in spec.arms}
    assert not [r for r in recs if r.get("error")]
    # --device reaches the lm agent that plays a policy folder
    from budget_envs.integrations.policy_agent import PolicyAgent

    base = policy_root(out, fam, VIS, SEED) / "base"
    assert PolicyAgent(path=base, device="cpu").player.device == "cpu"


def test_the_step_diagnosis_counts_every_oracle_state(lm_study):
    """examples/lm_step_diagnosis.py on an SFT folder: one count per state of the oracle's path,
    each share's numerator within its denominator."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from lm_step_diagnosis import diagnose

    spec, _, _ = lm_study
    result = diagnose(spec.model, world=1, episodes=2)
    steps = result["steps"]
    assert result["episodes"] == 2 and steps["0"]["states"] == 2
    for counts in steps.values():
        for key in ("tool_right", "exact", "scored_right", "scored_submit"):
            assert 0 <= counts[key] <= counts["states"]
        assert 0 <= counts["ids_copied"] <= counts["ids_written"]
    assert sum(c["states"] for c in steps.values()) >= 2 * 3  # level 1: at least 3 calls a task
