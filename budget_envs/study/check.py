"""``budgetmix study --check``: verify the design from what a study folder commits.

The folder holds the records (``records/``), the spec (``study.json``), one ``train.json`` per
policy (``policies/<family>__<visibility>__s<seed>/<arm>/``), ``PREREGISTRATION.md`` and
``DEVIATIONS.md``. :func:`check_study` verifies, cell by cell (one family, visibility and
training seed):

* the pre-registration: ``DEVIATIONS.md`` names the sha256 of ``PREREGISTRATION.md`` as it is;
* sizes: every agent's no-fault episodes, every arm's fault episodes and every agent's probes
  are as many as the spec asks;
* pairing: every agent played the same (task, sample, budget) episodes with the same seeds;
* unseen tasks: no evaluation task is a training task (by the family's ``task_identity``, its
  content, not its id);
* shared start and steps: every arm's ``train.json`` starts from the base's checkpoint (sha256),
  and the RL arms and the imitation control spent the same env steps within 1%.

A cell that ``DEVIATIONS.md`` names (in backticks, ``family__visibility__sN``) departs from the
design on purpose: what it misses is reported as a listed deviation, not a failure. A cell of
the spec without records is pending (reported, not a failure: cells are run over sessions).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from budget_envs.integrations.trainers import study_probes
from budget_envs.study.folder import base_record, load_study_records, records_path
from budget_envs.study.provenance import TRAIN_FILE, record_dir
from budget_envs.study.spec import BASE, IMITATION, RANDOM, Family, StudySpec
from budget_envs.study.trl_stage import GRPO_EPISODES

PREREGISTRATION = "PREREGISTRATION.md"
DEVIATIONS = "DEVIATIONS.md"
#: The most the env steps of two arms of a cell may differ, as a share of the larger (or one
#: episode at the generous T, when that is more).
STEPS_TOLERANCE = 0.01
_CELL = re.compile(r"`([a-z0-9_]+__(?:hidden|remaining)__s\d+)`")


@dataclass
class CheckReport:
    """What :func:`check_study` found: ``problems`` fail the check; ``deviations`` are
    departures ``DEVIATIONS.md`` lists; ``pending`` are cells without records; ``passed`` says
    what held (per cell: the checks without a finding; "(as designed)" when all held)."""

    problems: list[str] = field(default_factory=list)
    deviations: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def cell_name(fam: Family, vis: str, seed: int) -> str:
    return f"{fam.name}__{vis}__s{seed}"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listed_cells(out: Path) -> set[str]:
    """The cells ``DEVIATIONS.md`` names in backticks."""
    path = out / DEVIATIONS
    return set(_CELL.findall(path.read_text(encoding="utf-8"))) if path.exists() else set()


def _preregistration(out: Path, rep: CheckReport) -> None:
    pre, dev = out / PREREGISTRATION, out / DEVIATIONS
    if not pre.exists() or not dev.exists():
        missing = [p.name for p in (pre, dev) if not p.exists()]
        rep.problems.append(f"missing {', '.join(missing)} in {out}")
        return
    digest = sha256_file(pre)
    if digest not in dev.read_text(encoding="utf-8"):
        rep.problems.append(
            f"{DEVIATIONS} does not name the sha256 of {PREREGISTRATION} as it is ({digest}): "
            "the pre-registration changed after its deviations were written"
        )
    else:
        rep.passed.append(f"{DEVIATIONS} names {PREREGISTRATION}'s sha256 {digest[:12]}...")


def _takes_probes(spec: StudySpec, out: Path) -> bool:
    """Whether the study's policies took single-step probes: as its eval stage decided from
    ``spec.model``, or, where that folder is not on this machine (a fresh clone), from the SFT
    record the study kept of its base (``out/base-sft/``)."""
    if study_probes(spec.trainer, spec.model):
        return True
    return spec.trainer == "trl" and base_record(out) is not None


def _expected(spec: StudySpec, fam: Family, vis: str, agent: str, probed: bool) -> dict[str, int]:
    """How many records of each kind ``agent`` has in a cell of ``fam`` and ``vis``."""
    if vis != "hidden":
        return {"episodes": fam.eval_tasks * fam.visible_samples * len(fam.eval_budgets)}
    faults = fam.eval_tasks * fam.fault_samples * len(fam.fault_turns)
    probes = fam.probe_states if probed else 0
    return {
        "episodes": fam.eval_tasks * fam.eval_samples,
        "faults": faults if agent in spec.arms else 0,
        "probes": fam.eval_tasks * probes,
        "off-path probes": fam.eval_tasks * probes,
    }


def _counts(records: Sequence[Mapping[str, Any]]) -> Counter:
    kinds: Counter = Counter()
    for r in records:
        if r.get("record") == "probe":
            kinds["probes" if r.get("fault") is None else "off-path probes"] += 1
        elif r.get("record", "episode") == "episode":
            kinds["faults" if r.get("fault_turn") is not None else "episodes"] += 1
    return kinds


def _sizes_and_pairing(
    spec: StudySpec,
    fam: Family,
    vis: str,
    cell: list[dict],
    probed: bool,
    say: Any,
    say_pairing: Any,
) -> None:
    agents = [*spec.arms, RANDOM]
    by_agent = {a: [r for r in cell if r["agent"] == a] for a in agents}
    lacking = [a for a, rs in by_agent.items() if not rs]
    if lacking:
        say(f"no records of {', '.join(lacking)}")
    keys = {}
    for agent, rs in by_agent.items():
        if not rs:
            continue
        got, want = _counts(rs), _expected(spec, fam, vis, agent, probed)
        wrong = {k: (got.get(k, 0), n) for k, n in want.items() if got.get(k, 0) != n}
        if wrong:
            text = ", ".join(f"{k} {g} (spec {n})" for k, (g, n) in wrong.items())
            say(f"{agent}: {text}")
        keys[agent] = {
            (r["task_id"], r.get("sample"), r["budget"], r["seed"])
            for r in rs
            if r.get("record", "episode") == "episode" and r.get("fault_turn") is None
        }
    ref = next(iter(keys.values()), set())
    unpaired = [a for a, k in keys.items() if k != ref]
    if unpaired:
        say_pairing(
            f"not paired: {', '.join(unpaired)} played other episodes than {next(iter(keys))}"
        )


def _unseen(fam: Family, cell: list[dict], cache: dict, say: Any) -> int:
    """How many distinct evaluation tasks of the cell were checked against training."""
    import gymnasium as gym

    import budget_envs  # noqa: F401  (registers the ids)

    if fam.name not in cache:
        train = gym.make(fam.env_id, **fam.train_kwargs).unwrapped
        evals = gym.make(fam.env_id, **fam.eval_kwargs).unwrapped
        try:
            seen = {train.task_identity(t) for t in train.task_ids}
            cache[fam.name] = (seen, {t: evals.task_identity(t) for t in evals.task_ids})
        finally:
            train.close()
            evals.close()
    seen, identity = cache[fam.name]
    tasks = {r["task_id"].rsplit("|s", 1)[0] for r in cell}
    unknown = sorted(t for t in tasks if t not in identity)
    if unknown:
        say(f"evaluation tasks not in the evaluation split: {unknown[:3]}")
    shared = sorted(t for t in tasks if t in identity and identity[t] in seen)
    if shared:
        say(f"evaluation tasks that are training tasks: {shared[:3]} ({len(shared)} in all)")
    return len(tasks)


def _training(spec: StudySpec, out: Path, fam: Family, vis: str, seed: int, say: Any) -> None:
    trained = [a for a in spec.arms]
    found: dict[str, dict] = {}
    for arm in trained:
        path = record_dir(out, fam, vis, seed, arm) / TRAIN_FILE
        if path.exists():
            found[arm] = json.loads(path.read_text(encoding="utf-8"))
    lacking = [a for a in trained if a not in found]
    if lacking:
        say(f"no {TRAIN_FILE} of {', '.join(lacking)}")
    base = found.get(BASE)
    if base is not None:
        for arm, rec in found.items():
            if arm != BASE and rec.get("start_sha256") != base.get("result_sha256"):
                say(f"{arm} did not start from the base's checkpoint (sha256 differs)")
    steps = {
        a: int(r["env_steps"]) for a, r in found.items() if a != BASE and r["env_steps"] is not None
    }
    if steps:
        low, high = min(steps.values()), max(steps.values())
        # 1%, or one episode at the generous T when that is more (runs of a few batches); a
        # GRPO arm stops after a whole step of episodes, so one step's worth for TRL
        episode = fam.generous * (GRPO_EPISODES if spec.trainer == "trl" else 1)
        if high - low > max(STEPS_TOLERANCE * high, episode):
            say(f"env steps differ by more than {STEPS_TOLERANCE:.0%}: {steps}")
        # the spec's PPO steps per RL arm (a GRPO arm's env steps follow from its episodes)
        rl = [a for a in steps if a != IMITATION and spec.trainer == "rllib"]
        short = [a for a in rl if steps[a] < fam.steps()]
        if short:
            say(f"fewer env steps than the spec's {fam.steps()}: {short}")


def check_study(spec: StudySpec, out: str | Path, *, unseen: bool = True) -> CheckReport:
    """Check the study folder ``out`` against ``spec`` (see the module's docstring)."""
    out = Path(out)
    rep = CheckReport()
    _preregistration(out, rep)
    listed = listed_cells(out)
    records = load_study_records(out) if (out / "records").is_dir() else []
    probed = _takes_probes(spec, out)
    cache: dict = {}
    for fam in spec.families:
        for vis in spec.visibilities:
            for seed in spec.seeds_for(vis, fam):
                name = cell_name(fam, vis, seed)
                if not records_path(out, fam, vis, seed).exists():
                    rep.pending.append(f"{name}: no records yet")
                    continue
                cell = [
                    r
                    for r in records
                    if (r["study_family"], r["study_visibility"], r["study_seed"])
                    == (fam.name, vis, seed)
                ]
                found: dict[str, list[str]] = {
                    k: [] for k in ("sizes", "pairing", "unseen", "training")
                }
                _sizes_and_pairing(
                    spec, fam, vis, cell, probed, found["sizes"].append, found["pairing"].append
                )
                tasks = _unseen(fam, cell, cache, found["unseen"].append) if unseen else 0
                _training(spec, out, fam, vis, seed, found["training"].append)
                where = rep.deviations if name in listed else rep.problems
                where += [f"{name}: {text}" for texts in found.values() for text in texts]
                held = {
                    "sizes": "sizes",
                    "pairing": "paired",
                    "unseen": f"{tasks} unseen tasks",
                    "training": "shared start and env steps",
                }
                good = [held[k] for k, texts in found.items() if not texts]
                if unseen is False:
                    good = [g for g in good if "unseen" not in g]
                if good:
                    whole = " (as designed)" if len(good) == len(held) else ""
                    rep.passed.append(f"{name}: {', '.join(good)}{whole}")
    stray = sorted(listed - {cell_name(f, v, s) for f in spec.families for v in spec.visibilities
                             for s in spec.seeds_for(v, f)})  # fmt: skip
    if stray:
        rep.problems.append(f"{DEVIATIONS} names cells the spec does not have: {stray}")
    return rep
