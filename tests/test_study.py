"""``budgetmix study``: the quick pipeline through the CLI, and the report stage on known records.

The quick run trains (RLlib: a 50-episode warm start and one PPO iteration per arm), evaluates,
compares and reports; the test checks that every stage wrote its outputs and that
``--report-only`` rebuilds the same tables from the gzipped records. It checks the pipeline, not
what the tiny policies learned. The report test writes records by hand, with known outcomes, and
runs them through the real report code.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from budget_envs import study
from budget_envs.study.contrasts import CONTRASTS
from budget_envs.study.run import same_study

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, cwd, timeout=900):
    env = dict(os.environ, OMP_NUM_THREADS="1", RAY_DEDUP_LOGS="0")
    return subprocess.run(
        [sys.executable, "-m", "budget_envs.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _generated(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    assert study.BEGIN in text and study.END in text
    return text.split(study.BEGIN, 1)[1].split(study.END, 1)[0]


def test_quick_study_runs_every_stage_and_report_only_reproduces_the_tables(tmp_path):
    pytest.importorskip("ray.rllib", reason='the study trains with RLlib: "budget-envs[rllib]"')
    pytest.importorskip("matplotlib", reason='the report draws figures: "budget-envs[plots]"')
    out, docs = tmp_path / "run", tmp_path / "docs" / "study.md"
    proc = _cli("study", "--quick", "--out", str(out), "--docs", str(docs), "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "pre-registered contrast(s) run" in proc.stdout

    spec = study.quick_spec()
    (fam,) = spec.families
    # train: one warm start (the base), and every RL arm resumed from it for its iterations
    root = out / "policies" / fam.name / "hidden" / "s0"
    warm = json.loads((root / "warm" / "policy.json").read_text())
    assert warm["warm_start"]["episodes"] == fam.warm_start_episodes
    assert warm["settings"]["warm_start_explore"] == 0.0  # oracle episodes only
    # the study's own network width, warm-start rate and env runners (the quick study's Ray has
    # 2 CPUs, where `budgetmix train` would start 2 runners), whatever `train` defaults to
    assert warm["settings"]["hidden"] == spec.hidden
    assert warm["settings"]["warm_start_lr"] == spec.warm_start_lr
    assert warm["settings"]["num_env_runners"] == spec.env_runners == 0
    assert warm["settings"]["num_envs_per_env_runner"] == spec.envs_per_runner
    base = json.loads((root / "base" / "policy.json").read_text())
    assert base["warm_start"] == warm["warm_start"] and not (root / "base" / "metrics.csv").exists()
    for arm in spec.rl_arms:
        meta = json.loads((root / arm / "policy.json").read_text())
        assert meta["budget"] == study.arm_budget(arm, fam.tight, fam.generous)
        assert meta["settings"]["gamma"] == 1.0
        assert meta["warm_start"] == warm["warm_start"]  # resumed from the same checkpoint
        assert meta["settings"]["num_env_runners"] == spec.env_runners
        rows = (root / arm / "metrics.csv").read_text().splitlines()
        assert len(rows) == 1 + fam.iterations
    # the imitation control: base's checkpoint fitted to as many env steps of new oracle
    # episodes as an RL arm's PPO (within 1%, the last episode may overshoot), no PPO
    imitation = json.loads((root / "imitation" / "policy.json").read_text())
    assert imitation["warm_start"] == warm["warm_start"] and "imitation" in imitation
    assert not (root / "imitation" / "metrics.csv").exists()
    # train.json per policy, in the folder and committed beside it without weights
    records_of = {}
    for arm in spec.arms:
        where = out / "policies" / f"{fam.name}__hidden__s0" / arm
        assert {p.name for p in where.iterdir()} >= {"train.json"}
        assert not list(where.glob("checkpoint*"))
        records_of[arm] = json.loads((where / "train.json").read_text())
        assert records_of[arm] == json.loads((root / arm / "train.json").read_text())
    start = records_of["base"]["result_sha256"]
    assert records_of["base"]["start_sha256"] is None and records_of["base"]["kind"] == "imitation"
    for arm in spec.arms:
        if arm != "base":
            assert records_of[arm]["start_sha256"] == start  # every arm from the same checkpoint
            assert records_of[arm]["result_sha256"] != start  # and trained away from it
    for arm in spec.rl_arms:
        # RLlib samples a little past each batch: at least the nominal steps
        assert records_of[arm]["env_steps"] >= fam.steps() and records_of[arm]["kind"] == "ppo"
        assert records_of[arm]["gradient_updates"] == fam.iterations * fam.num_epochs
        assert (out / "policies" / f"{fam.name}__hidden__s0" / arm / "metrics.csv").is_file()
    rl_steps = sum(records_of[a]["env_steps"] for a in spec.rl_arms) / len(spec.rl_arms)
    steps = records_of["imitation"]["env_steps"]
    # as many as the RL arms took, past it by less than one episode (at most T steps)
    assert rl_steps - 1 <= steps <= rl_steps + fam.generous
    assert records_of["imitation"]["gradient_updates"] > 0
    # the learning curve's checkpoint: fixed_generous after its first iteration
    (point,) = fam.curve_iterations
    curve = root / "curve" / study.curve_agent(study.RL, fam.steps(point))
    assert len((curve / "metrics.csv").read_text().splitlines()) == 1 + point
    # eval: gzipped records of every agent: clean episodes, faulted episodes (arms), probes
    (path,) = sorted((out / "records").glob("*.jsonl.gz"))
    with gzip.open(path, "rt") as fh:
        records = [json.loads(line) for line in fh]
    curve_agent = study.curve_agent(study.RL, fam.steps(point)) + "@s0"
    arms = {f"{a}@s0" for a in spec.arms}
    assert {r["agent"] for r in records} == arms | {"random", curve_agent}
    for agent in arms | {"random", curve_agent}:
        mine = [r for r in records if r["agent"] == agent]
        clean = [r for r in mine if r["record"] == "episode" and r["fault_turn"] is None]
        faulted = [r for r in mine if r["record"] == "episode" and r["fault_turn"] is not None]
        probes = [r for r in mine if r["record"] == "probe"]
        assert len(clean) == fam.eval_tasks * fam.eval_samples
        expected = fam.eval_tasks * fam.fault_samples * len(fam.fault_turns)
        assert len(faulted) == (expected if agent in arms else 0)
        # oracle-prefix probes and as many off the oracle's path (after a slip)
        assert (
            len([p for p in probes if p.get("fault") is None]) == fam.eval_tasks * fam.probe_states
        )
        assert (
            len([p for p in probes if p.get("fault") == "slip"])
            == fam.eval_tasks * fam.probe_states
        )
        assert {r["budget"] for r in clean} == {max(fam.eval_budgets)}
    assert not any(r.get("error") for r in records)
    # a fault episode and its no-fault twin share the episode seed (paired)
    episodes = [r for r in records if r["record"] == "episode"]
    seeds = {(r["agent"], r["task_id"], r["sample"], r["fault_turn"]): r["seed"] for r in episodes}
    for (agent, task, sample, turn), seed in seeds.items():
        if turn is not None:
            assert seeds[agent, task, sample, None] == seed
    # the eval tasks come from the unseen world
    config = json.loads(
        (out / "eval" / fam.name / "hidden" / "s0" / "episodes" / "config.json").read_text()
    )
    assert config["env_kwargs"] == fam.eval_kwargs
    # compare: each arm against the base, each other RL arm against fixed_generous
    for name in ("mix_vs_base", "fixed_generous_vs_base", "mix_vs_fixed_generous"):
        folder = out / "compare" / f"{fam.name}__hidden__{name}"
        assert (folder / "difference.csv").read_text().count("\n") > 1
        assert (folder / "compare.md").is_file()
    # report: tables, figures, the page section with the pre-registered contrasts
    tables = _snapshot(out / "tables")
    assert {"contrasts.csv", "headline.csv", "stop_reasons.csv", "pass_k_vs_t.csv"} <= set(tables)
    assert {"learning_curve.csv", "pass1_vs_t.csv", "study_results.md"} <= set(tables)
    assert "learning_status.csv" not in tables
    contrasts = (out / "tables" / "contrasts.csv").read_text().splitlines()
    assert [row.split(",")[1] for row in contrasts[1:]] == [c.name for c in CONTRASTS]
    # every arm has a turns-to-success row at the grid's largest T (hidden: one run there)
    tts = (out / "tables" / "turns_to_success.csv").read_text().splitlines()[1:]
    top = max(fam.eval_budgets)
    assert {row.split(",")[2] for row in tts if row.split(",")[3] == str(top)} == {
        *spec.arms,
        study.RANDOM,
    }
    figs = sorted((docs.parent / "img" / "study").glob("*.png"))
    assert [f.name for f in figs] == [
        "diff_tooluse_hidden.png",
        "learning_curve_tooluse.png",
        "pass1_tooluse_hidden.png",
        "step_recovery_tooluse_hidden.png",
    ]
    section = _generated(docs)
    assert "### Pre-registered contrasts" in section and "learned" not in section
    for c in CONTRASTS:
        assert f"| {c.name} |" in section
    for f in figs:
        assert f"(img/study/{f.name})" in section

    # --report-only: no training, no episodes; the same tables byte for byte
    for f in figs:
        f.unlink()
    again = _cli("study", "--report-only", "--out", str(out), "--docs", str(docs), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-4000:]
    assert _snapshot(out / "tables") == tables
    assert _generated(docs) == section
    assert all(f.is_file() for f in figs)

    # --check: the cell is as designed once a pre-registration and its deviations are there
    _check_a_study_folder(out, spec, tmp_path)


def _check_a_study_folder(out: Path, spec, tmp_path: Path) -> None:
    """``budgetmix study --check`` on the quick study's folder: as designed; then a changed
    pre-registration, a policy without train.json and an eval split that is the training split
    each fail it, and naming the cell in DEVIATIONS.md turns a finding into a listed deviation."""
    from budget_envs.study.check import check_study, sha256_file

    pre, dev = out / "PREREGISTRATION.md", out / "DEVIATIONS.md"
    missing = _cli("study", "--check", "--out", str(out), cwd=tmp_path)
    assert missing.returncode == 1 and "missing PREREGISTRATION.md, DEVIATIONS.md" in missing.stdout
    pre.write_text("# the quick design\n", encoding="utf-8")
    dev.write_text(f"Pre-registration sha256 `{sha256_file(pre)}`.\n", encoding="utf-8")
    ok = _cli("study", "--check", "--out", str(out), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr[-2000:]
    cell = "tooluse__hidden__s0"
    assert (
        f"{cell}: sizes, paired, 3 unseen tasks, shared start and env steps (as designed)"
        in ok.stdout
    )
    assert "study check: ok; 1 cell(s) as designed, 0 listed deviation(s)" in ok.stdout

    pre.write_text("# the quick design, edited after the fact\n", encoding="utf-8")
    changed = check_study(spec, out, unseen=False)
    assert not changed.ok and "does not name the sha256" in changed.problems[0]
    dev.write_text(f"sha256 `{sha256_file(pre)}`\n", encoding="utf-8")
    gone = out / "policies" / f"{cell}" / "mix" / "train.json"
    gone.unlink()
    assert check_study(spec, out, unseen=False).problems == [f"{cell}: no train.json of mix"]
    same_split = replace(
        spec, families=[replace(f, eval_kwargs=f.train_kwargs) for f in spec.families]
    )
    seen = check_study(same_split, out).problems
    assert any("evaluation tasks that are training tasks" in p for p in seen), seen
    dev.write_text(
        f"sha256 `{sha256_file(pre)}`; `{cell}` has no train.json of mix\n", encoding="utf-8"
    )
    listed = check_study(spec, out, unseen=False)
    assert listed.ok and listed.deviations == [f"{cell}: no train.json of mix"]


# ---------------------------------------------------------------------- report stage alone
def _family(**extra) -> study.Family:
    """A small ToolUse family of the report-stage tests (``extra``: further fields)."""
    return study.Family(
        name="tooluse",
        env_id="BudgetMix/ToolUse-v0",
        train_kwargs={"level": 1, "world_seed": 0},
        eval_kwargs={"level": 1, "world_seed": 1},
        optimal=3,
        tight=3,
        generous=6,
        eval_budgets=[2, 3, 6, 8],
        max_actions=256,
        warm_start_episodes=1,
        eval_tasks=4,
        eval_samples=2,
        fault_samples=2,
        **extra,
    )


def _spec() -> study.StudySpec:
    fam = _family(fault_turns=[1], probe_states=1)
    return study.StudySpec(
        families=[fam], arms=["base", "fixed_generous"], visibilities=["hidden"], seeds=[0]
    )


def _episode(agent, task, sample, first_success, fault_turn=None):
    won = first_success is not None
    return {
        "record": "episode",
        "env_id": "BudgetMix/ToolUse-v0",
        "task_id": f"t{task}",
        "task_index": task,
        "sample": sample,
        "seed": 100 * task + sample,
        "budget": 8,
        "visibility": "hidden",
        "agent": agent,
        "fault_turn": fault_turn,
        "fault_kinds": None if fault_turn is None else ["slip"],
        "turns": first_success or 8,
        "won": won,
        "first_success_turn": first_success,
        "faults": [],
        "oracle_agreement": None,
        "wall_time": 0.01 * (task + sample),
        "key": f"{agent}|{task}|{sample}|{fault_turn}",
    }


def _records():
    """fixed_generous wins every task at turn 5; base at turn 3 on half the tasks; random never
    wins. Every agent gets one probe per task: correct for the arms only."""
    out = []
    for agent in ("fixed_generous@s0", "base@s0", "random"):
        for task in range(4):
            for sample in range(2):
                if agent.startswith("fixed_generous"):
                    fs = 5
                elif agent.startswith("base"):
                    fs = 3 if task % 2 == 0 else None
                else:
                    fs = None
                out.append(_episode(agent, task, sample, fs))
                out.append(_episode(agent, task, sample, None, fault_turn=1))
            out.append(
                {
                    "record": "probe",
                    "env_id": "BudgetMix/ToolUse-v0",
                    "task_id": f"t{task}",
                    "task_index": task,
                    "seed": task,
                    "agent": agent,
                    "prefix_turns": 0,
                    "action": "x",
                    "correct": agent != "random",
                    "progress": agent != "random",
                    "cost_before": 3,
                    "wall_time": 0.5,
                    "key": f"probe|{agent}|{task}",
                }
            )
    return out


def test_report_stage_on_known_records(tmp_path):
    pytest.importorskip("matplotlib", reason='the report draws figures: "budget-envs[plots]"')
    spec, out = _spec(), tmp_path / "run"
    raw = tmp_path / "records.jsonl"
    raw.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    study._compress(raw, out / "records" / "tooluse__hidden__s0.jsonl.gz")
    docs = tmp_path / "study.md"
    docs.write_text(f"# Study\n\nprose before\n\n{study.BEGIN}\nold\n{study.END}\n\nprose after\n")

    report = study.write_study_report(spec, out, docs)

    page = docs.read_text()
    assert page.startswith("# Study\n\nprose before\n") and page.endswith("\nprose after\n")
    assert "\nold\n" not in page and "learned" not in page
    # C1: RL - base is +0.5 at the generous T=6 and -0.5 at the tight T=3, on every task pair:
    # +1.0 with a degenerate interval, supported; C3 needs the mix arm, which did not run
    rows = {r.name: r for r in report.contrasts}
    assert rows["C1"].verdict == "supported" and rows["C1"].estimate == pytest.approx(1.0)
    assert rows["C1"].low == pytest.approx(1.0) and rows["C1"].high == pytest.approx(1.0)
    assert rows["C3a"].verdict == rows["C3b"].verdict == "not run"
    # the page's row gives the seeds the contrast rests on (one cell here); a row not run, none
    cells = {
        ln.split("|")[1].strip(): ln.split("|")[2:-1]
        for ln in page.splitlines()
        if ln.startswith("| C")
    }
    assert [c.strip() for c in cells["C1"][4:]] == ["1", "supported"]
    assert cells["C3a"][4].strip() == "-"
    contrasts = (out / "tables" / "contrasts.csv").read_text()
    assert "tooluse,C1,supported,1.000000,1.000000,1.000000" in contrasts
    # the headline: fixed_generous - base at the generous T (6) and the grid's largest T (8)
    headline = (out / "tables" / "headline.csv").read_text()
    assert "tooluse,headline,fixed_generous,base,pass1,generous,6,0.500000" in headline
    assert "tooluse,headline,fixed_generous,base,pass1,top,8,0.500000" in headline
    # Pass@1 against T: fixed_generous wins from T=5, so 0 at T=3 and 1 at T=6
    assert "| fixed_generous | 0.000 [0.000, 0.000] | 0.000 [0.000, 0.000] | 1.000" in page
    # the difference against fixed generous: +0.5 at T=3 (base wins there), -0.5 at T=6
    diff = (out / "tables" / "difference_vs_generous.csv").read_text().splitlines()
    assert "tooluse,hidden,base,3,0.500000" in "\n".join(diff)
    assert "tooluse,hidden,base,6,-0.500000" in "\n".join(diff)
    # single step against recovery: probes 1.0 for the arms, 0.0 for random; faults never win
    rec = (out / "tables" / "single_step_recovery.csv").read_text()
    assert "tooluse,hidden,fixed_generous,1.000000,4,,1.000000,0.000000,t=1: 0.000" in rec
    assert "tooluse,hidden,random,0.000000,4,,0.000000,0.000000,t=1: 0.000" in rec
    assert len(report.figures) == 3 and all(f.is_file() for f in report.figures)

    first = {p.name: p.read_bytes() for p in report.tables}
    again = study.write_study_report(spec, out, docs, figures=False)
    assert {p.name: p.read_bytes() for p in again.tables if p.name != "study_results.md"} == {
        k: v for k, v in first.items() if k != "study_results.md"
    }
    assert docs.read_text().count(study.BEGIN) == 1


def test_spec_checks_and_round_trips(tmp_path):
    spec = study.full_spec()
    assert len(spec.families) >= 2
    assert spec.arms == ["base", "fixed_generous", "fixed_tight", "mix", "process", "imitation"]
    assert spec.rl_arms == spec.arms[1:-1] and study.BASE == "base" and study.RL == "fixed_generous"
    assert spec.visibilities == ["hidden", "remaining"] and len(spec.seeds) >= 8
    assert spec.seeds_for("remaining") == spec.visible_seeds and len(spec.visible_seeds) >= 5
    # the pre-registered sizes: 8 fault samples in the claimed families; ToolUse kept at the
    # first design's seeds; curves on 3 new seeds of both claimed families
    fams = {f.name: f for f in spec.families}
    assert fams["alfworld"].fault_samples == fams["webshop"].fault_samples == 8
    assert spec.seeds_for("hidden", fams["tooluse"]) == [0, 1, 2, 3, 4]
    assert spec.seeds_for("remaining", fams["tooluse"]) == [0, 1]
    for name in ("alfworld", "webshop"):
        assert len([s for f, s in spec.curves if f == name]) >= 3
    for fam in spec.families:
        # the design's sizes: 50 unseen tasks x 8 samples, >= 50k PPO steps per RL arm, at
        # least 10x the warm start's gradient updates (its states are about optimal x episodes)
        assert fam.eval_tasks >= 50 and fam.eval_samples >= 8 and fam.steps() >= 50_000
        updates = fam.iterations * fam.batch_size // fam.minibatch_size * fam.num_epochs
        warm = -(-(fam.warm_start_episodes * fam.optimal) // 64) * fam.warm_start_epochs
        assert updates >= 10 * warm, fam.name
        grid = sorted(fam.eval_budgets)
        assert grid[0] <= fam.optimal and fam.tight in grid and fam.generous in grid
    assert study.StudySpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    # a study.json written before the width, the warm-start rate and the env runners were
    # fields reads as the values its policies were trained with
    pinned = ("hidden", "warm_start_lr", "env_runners", "envs_per_runner")
    older = {k: v for k, v in spec.to_json().items() if k not in pinned}
    assert study.StudySpec.from_json(older) == spec
    assert (spec.hidden, spec.warm_start_lr, spec.env_runners, spec.envs_per_runner) == (
        128,
        1e-3,
        0,
        16,
    )
    assert study.arm_budget("mix_log", 5, 12) == "log:5..12"
    assert study.arm_budget("mix", 5, 12) == "5..12" and study.arm_budget("process", 5, 12) == 12
    fields = dict(
        name="x",
        env_id="BudgetMix/ToolUse-v0",
        train_kwargs={},
        eval_kwargs={},
        optimal=4,
        tight=5,
        generous=12,
        max_actions=8,
        warm_start_episodes=1,
    )
    with pytest.raises(ValueError, match="must reach tight"):
        study.Family(eval_budgets=[6, 14], **fields)
    with pytest.raises(ValueError, match="must hold tight and generous"):
        study.Family(eval_budgets=[4, 6, 14], **fields)
    with pytest.raises(ValueError, match="curve_iterations"):
        study.Family(eval_budgets=[5, 12, 14], curve_iterations=[50], **fields)
    with pytest.raises(ValueError, match="arms must be distinct names"):
        study.StudySpec(families=spec.families, arms=["fixed_huge"])
    with pytest.raises(ValueError, match="curve must be"):
        study.StudySpec(families=spec.families, curve=["alfworld", 9])
    with pytest.raises(FileNotFoundError, match="no study records"):
        study.load_study_records(tmp_path)


def test_a_study_folder_accepts_its_spec_with_a_family_added():
    spec = study.full_spec()
    fewer = replace(spec, families=spec.families[:1], curve=None)
    assert same_study(fewer, replace(spec, curve=None))
    assert not same_study(replace(fewer, n_boot=10), replace(spec, curve=None))
    assert not same_study(spec, fewer)


def test_the_study_page_has_one_generated_section():
    page = (ROOT / "docs" / "study.md").read_text(encoding="utf-8")
    assert page.count(study.BEGIN) == 1 and page.count(study.END) == 1
    assert page.index(study.BEGIN) < page.index(study.END)


def test_family_filter_refuses_an_unknown_family(tmp_path):
    with pytest.raises(ValueError, match="families must be among"):
        study.run_study(study.quick_spec(), tmp_path / "run", tmp_path / "s.md", families=["nope"])
    assert not (tmp_path / "run" / "policies").exists()


@pytest.mark.parametrize(
    "filters, message",
    [({"visibilities": ["shown"]}, "visibilities must be among"), ({"seeds": [7]}, "seeds must")],
)
def test_visibility_and_seed_filters_refuse_what_the_spec_lacks(tmp_path, filters, message):
    with pytest.raises(ValueError, match=message):
        study.run_study(study.quick_spec(), tmp_path / "run", tmp_path / "s.md", **filters)


@pytest.mark.parametrize(
    "filters", [{"families": ["alfworld"]}, {"seeds": [1]}, {"families": ["tooluse"], "seeds": [5]}]
)
def test_a_cell_of_the_full_study_can_be_picked_whatever_its_curves(tmp_path, filters):
    # the full spec's learning curves name other families and seeds than the cell picked: the
    # stage spec keeps the curves it has (none here) instead of refusing the filter. The
    # report-only run then stops at the empty folder, past the filters.
    with pytest.raises(FileNotFoundError, match="no study records"):
        study.run_study(study.full_spec(), tmp_path / "run", tmp_path / "s.md", report_only=True,
                        **filters)  # fmt: skip


def test_demo_spec_and_references_round_trip():
    spec = study.demo_spec()
    (fam,) = spec.families
    assert spec.arms == ["base", "fixed_generous", "mix"] and spec.visibilities == ["hidden"]
    assert fam.train_kwargs["world_seed"] != fam.eval_kwargs["world_seed"]  # unseen tasks
    assert set(spec.references) == {"oracle", "oracle-eps0.3"}
    assert study.StudySpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    small = study.demo_spec(warm_start_episodes=7, eval_tasks=2)
    assert small.families[0].warm_start_episodes == 7 and small.families[0].eval_tasks == 2
    with pytest.raises(ValueError, match="bad size override"):
        study.demo_spec(warm_start_episode=7)
    with pytest.raises(ValueError, match="reference agent names"):
        study.StudySpec(families=spec.families, references={"random": "random"})
    # a study.json written before `references` existed still reads as the same spec
    old = study.quick_spec().to_json()
    del old["references"]
    assert study.StudySpec.from_json(old) == study.quick_spec()


def _pair_records():
    """base wins the even tasks at turn 3 and loses the odd ones; fixed_generous wins every task
    at turn 5; mix wins tasks 0 and 1 at turn 2; base and fixed_generous play the same actions on
    task 1 only."""
    out = []
    for agent in ("base@s0", "fixed_generous@s0", "mix@s0", "random", "oracle"):
        for task in range(4):
            for sample in range(2):
                arm = agent.split("@")[0]
                fs = {
                    "base": 3 if task % 2 == 0 else None,
                    "fixed_generous": 5,
                    "mix": 2 if task < 2 else None,
                    "oracle": 2,
                }.get(arm)
                r = _episode(agent, task, sample, fs)
                same = task == 1 and arm in ("base", "fixed_generous")
                r["actions"] = ["look"] if same else [agent] * r["turns"]
                out.append(r)
    return out


def test_pair_summary_reads_the_comparison(tmp_path):
    fam = _family()
    spec = study.StudySpec(
        families=[fam],
        arms=["base", "fixed_generous", "mix"],
        visibilities=["hidden"],
        seeds=[0],
        n_boot=200,
        references={"oracle": "oracle"},
    )
    out = tmp_path / "run"
    raw = tmp_path / "records.jsonl"
    raw.write_text("".join(json.dumps(r) + "\n" for r in _pair_records()))
    study._compress(raw, out / "records" / "tooluse__hidden__s0.jsonl.gz")
    with pytest.raises(FileNotFoundError, match="no comparison"):
        study.pair_summary(spec, out)
    study.compare_stage(spec, out, figures=False)

    pair = study.pair_summary(spec, out)
    assert (pair.base, pair.arms) == ("base", ["fixed_generous", "mix"])
    assert pair.agents == ["base", "fixed_generous", "mix", "random", "oracle"]
    assert pair.ks == [1, 2] and pair.ts == [2, 3, 6, 8] and pair.units == 4
    assert pair.pass_at["base"][1] == [0.0, 0.5, 0.5, 0.5]
    assert pair.pass_at["fixed_generous"][1] == [0.0, 0.0, 1.0, 1.0]
    assert pair.pass_at["mix"][1] == [0.5, 0.5, 0.5, 0.5]
    assert pair.pass_at["oracle"][2] == [1.0, 1.0, 1.0, 1.0]
    # arm - base from compare's difference.csv, per T
    assert [d for d, _, _ in pair.diff["fixed_generous"][1]] == [0.0, -0.5, 0.5, 0.5]
    assert [d for d, _, _ in pair.diff["mix"][1]] == [0.5, 0.0, 0.0, 0.0]
    low, high = pair.diff["fixed_generous"][1][2][1:]
    assert low <= 0.5 <= high and low < high
    assert pair.same_play == {"fixed_generous": (2, 8), "mix": (0, 8)}  # task 1, both samples
    assert pair.figures == [] and pair.training == {}
    assert pair.compare_dirs["mix"] == out / "compare" / "tooluse__hidden__mix_vs_base"
    with pytest.raises(ValueError, match="need 'nope' and another arm"):
        study.pair_summary(spec, out, base="nope")


_DEMO = """
import sys
sys.path.insert(0, {tests!r})
from contract_helpers import register_toy, TOY_ID
register_toy()
from budget_envs import cli
sys.exit(cli.main(["demo", "--env", TOY_ID, "--out", {out!r}, "--tasks", "2", "--samples", "1",
                   "--probe-states", "1", "--fault-turns", "1", "--workers", "1", "--quiet",
                   "--train-sizes", {sizes!r}]))
"""


def _demo(out: Path, sizes: dict) -> subprocess.CompletedProcess:
    code = _DEMO.format(tests=str(ROOT / "tests"), out=str(out), sizes=json.dumps(sizes))
    env = dict(os.environ, OMP_NUM_THREADS="1", RAY_DEDUP_LOGS="0")
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env
    )


def _table(text: str, title: str) -> list[list[str]]:
    """The rows of the printed table under the line starting with ``title``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_demo_trains_the_arms_and_prints_their_differences_from_the_base(tmp_path):
    pytest.importorskip("ray.rllib", reason='the trained arms use RLlib: "budget-envs[rllib]"')
    pytest.importorskip("matplotlib", reason='the demo draws figures: "budget-envs[plots]"')
    sizes = {
        "warm_start_episodes": 20,
        "warm_start_epochs": 1,
        "iterations": 2,
        "batch_size": 32,
        "minibatch_size": 32,
        "num_epochs": 1,
        "curve_iterations": [1],
        "eval_tasks": 3,
        "eval_samples": 2,
        "probe_states": 1,
        "fault_turns": [1],
    }
    out = tmp_path / "demo"
    proc = _demo(out, sizes)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    spec = study.demo_spec(**sizes)
    (fam,) = spec.families
    assert (
        "## Trained arms on BudgetMix/ToolUse-v0: base against fixed_generous (T 12), mix (T 3..12)"
        in text
    )
    assert "One oracle episode on" in text  # the reference part ran first
    agents = ["base", "fixed_generous", "mix", "random", "oracle", "oracle-eps0.3"]
    written = {}
    for arm in ("fixed_generous", "mix"):
        folder = out / "trained" / "compare" / f"tooluse__hidden__{arm}_vs_base"
        with open(folder / "difference.csv", newline="") as fh:
            written[arm] = {(int(r["K"]), int(r["T"])): r for r in csv.DictReader(fh)}
    for k in (1, fam.eval_samples):
        rows = _table(text, f"Pass@({k},T) on {fam.eval_tasks} unseen tasks")
        assert rows[0] == ["T", *agents, "fixed_generous - base", "mix - base"]
        body = rows[2:]
        assert [int(r[0]) for r in body] == sorted(fam.eval_budgets)
        for r in body:
            t, cells = int(r[0]), dict(zip(agents, map(float, r[1:7])))
            assert all(0.0 <= v <= 1.0 for v in cells.values())
            for arm, printed in zip(("fixed_generous", "mix"), r[7:9]):
                # the printed difference is compare's, and it is arm - base of the columns
                d, interval = printed.split(" ", 1)
                assert float(d) == pytest.approx(float(written[arm][k, t]["diff"]), abs=5e-4)
                assert float(d) == pytest.approx(cells[arm] - cells["base"], abs=2e-3)
                lo, hi = (float(x) for x in interval.strip("[]").split(","))
                assert lo <= float(d) <= hi
        assert float(body[-1][5]) == 1.0  # the oracle wins every level-1 task within T=14
    pairs = fam.eval_tasks * fam.eval_samples
    assert "fixed_generous " in text.split("played the same actions as base: ")[1]
    line = text.split("played the same actions as base: ")[1].splitlines()[0]
    assert line.endswith(".") and line.count(f" of {pairs}") == 2

    # the policies the arms trained (the base is the warm start), records, comparisons, figures
    root = out / "trained" / "policies" / "tooluse" / "hidden" / "s0"
    for arm in spec.arms:
        meta = json.loads((root / arm / "policy.json").read_text())
        assert meta["budget"] == study.arm_budget(arm, fam.tight, fam.generous)
        assert meta["warm_start"]["episodes"] == fam.warm_start_episodes
    for arm in spec.rl_arms:
        assert len((root / arm / "metrics.csv").read_text().splitlines()) == 1 + fam.iterations
    (records,) = (out / "trained" / "records").glob("*.jsonl.gz")
    with gzip.open(records, "rt") as fh:
        seen = {json.loads(line)["agent"] for line in fh}
    assert seen == {"base@s0", "fixed_generous@s0", "mix@s0", "random", "oracle", "oracle-eps0.3"}
    heatmap = (
        out / "trained" / "compare" / "tooluse__hidden__mix_vs_base" / "ToolUse_v0_difference.png"
    )
    pass1 = out / "trained" / "img" / "study" / "pass1_tooluse_hidden.png"
    assert heatmap.is_file() and pass1.is_file()
    assert str(heatmap) in text and str(pass1) in text

    # a second demo reuses the policies and episodes: nothing is trained again
    stamps = {p: p.stat().st_mtime_ns for p in root.rglob("metrics.csv")}
    again = _demo(out, sizes)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "reused the finished policies and episodes" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in root.rglob("metrics.csv")} == stamps
    for k in (1, fam.eval_samples):
        title = f"Pass@({k},T) on {fam.eval_tasks} unseen tasks"
        assert _table(again.stdout, title) == _table(text, title)


def test_the_demo_and_the_study_import_no_trainer():
    code = (
        "import sys, budget_envs.cli, budget_envs.study\n"
        "budget_envs.study.demo_spec()\n"
        "heavy = [m for m in ('ray', 'torch', 'matplotlib') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_train_stage_skips_what_committed_records_cover(tmp_path):
    # a clone of a study folder has records/ but no policies/: nothing is trained again
    spec = study.quick_spec()
    (fam,) = spec.families
    target = tmp_path / "records" / f"{fam.name}__hidden__s0.jsonl.gz"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"")
    assert study.train_stage(spec, tmp_path) == []
    assert not (tmp_path / "policies").exists()
