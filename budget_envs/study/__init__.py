"""The BudgetMix study: train the budget arms, evaluate them on unseen tasks, compare, report.

:func:`run_study` is what ``budgetmix study`` (and ``examples/budgetmix_study.py``) runs. A
:class:`StudySpec` says what to train and evaluate; the stages write into one study folder::

    policies/<family>/hidden/s<seed>/warm/           the warm start the hidden arms share
    policies/<family>/remaining/s<seed>/warm_<arm>/  a visible arm's own warm start
    policies/<family>/<visibility>/s<seed>/<arm>/    each arm's policy (warm start + PPO)
    eval/<family>/<visibility>/s<seed>/             the eval run while it runs (resumable)
    records/<family>__<visibility>__s<seed>.jsonl.gz the finished eval records (committed)
    compare/<family>__<visibility>__<arm>/          ``budgetmix compare`` outputs per arm pair
    tables/*.md, tables/*.csv                       the report's tables (same bytes on a re-run)

The report (:func:`write_study_report`) reads the compressed records only, so ``--report-only``
regenerates every table and figure without training. Policies and eval run folders are
checkpoints, not results: only ``records/`` and ``tables/`` are meant to be committed.

Every stage skips what is finished: a policy folder with its ``metrics.csv`` complete, an eval
whose records are compressed. A killed study is resumed by running it again.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ARMS",
    "Family",
    "StudySpec",
    "arm_budget",
    "demo_spec",
    "full_spec",
    "learning_status",
    "load_study_records",
    "pair_summary",
    "quick_spec",
    "run_study",
    "write_study_report",
]

logger = logging.getLogger(__name__)

#: The arms, in report order: name -> how its training budget derives from (tight, generous).
ARMS: dict[str, str] = {
    "fixed_generous": "fixed T = generous",
    "fixed_tight": "fixed T = tight",
    "mix_uniform": "BudgetMix uniform over tight..generous",
    "mix_log": "BudgetMix log-uniform over tight..generous",
}
VISIBILITIES = ("hidden", "remaining")
RANDOM = "random"
#: Where the generated part of the study page starts and ends.
BEGIN = "<!-- study-results:begin (written by `budgetmix study`; do not edit) -->"
END = "<!-- study-results:end -->"


def arm_budget(arm: str, tight: int, generous: int) -> int | str:
    """The training budget spec of ``arm`` (a fixed int or a spec string)."""
    if arm == "fixed_generous":
        return generous
    if arm == "fixed_tight":
        return tight
    if arm == "mix_uniform":
        return f"{tight}..{generous}"
    if arm == "mix_log":
        return f"log:{tight}..{generous}"
    raise ValueError(f"unknown arm {arm!r}; expected one of {list(ARMS)}")


def _arm_pmf(arm: str, tight: int, generous: int) -> dict[int, float]:
    """P(T) of the arm's training budget (the weights of its learning-status budget)."""
    from budget_envs.wrappers.budget_spec import parse_budget

    spec = parse_budget(arm_budget(arm, tight, generous))
    return {int(t): float(p) for t, p in spec.pmf(0).items()}


@dataclass(frozen=True)
class Family:
    """One family of the study: where it trains, where it is evaluated, and its budgets.

    ``train_kwargs`` and ``eval_kwargs`` are env constructor kwargs; the eval tasks are not
    among the training tasks (another split or world). ``tight`` is about 1.2x and ``generous``
    about 3x the optimal length of the family's tasks (which lie in a narrow band).
    ``eval_budgets`` is the T grid of budget-visible evaluations; budget-hidden ones run once at
    its largest T and give every smaller T.
    """

    name: str
    env_id: str
    train_kwargs: dict[str, Any]
    eval_kwargs: dict[str, Any]
    tight: int
    generous: int
    eval_budgets: list[int]
    max_actions: int
    warm_start_episodes: int
    warm_start_epochs: int = 10
    iterations: int = 20
    batch_size: int = 512
    eval_tasks: int = 20
    eval_samples: int = 4
    fault_turns: list[int] = field(default_factory=lambda: [1, 2, 3])
    probe_states: int = 4

    def __post_init__(self) -> None:
        if not 1 <= self.tight < self.generous:
            raise ValueError(
                f"{self.name}: need 1 <= tight < generous, got {self.tight}, {self.generous}"
            )
        grid = sorted(self.eval_budgets)
        if not grid or grid[0] >= self.tight or grid[-1] <= self.generous:
            raise ValueError(
                f"{self.name}: eval_budgets must reach below tight ({self.tight}) and above "
                f"generous ({self.generous}), got {self.eval_budgets!r}"
            )


@dataclass(frozen=True)
class StudySpec:
    """What the study trains and evaluates (see :func:`full_spec` and :func:`quick_spec`)."""

    families: list[Family]
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    visibilities: list[str] = field(default_factory=lambda: list(VISIBILITIES))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    gamma: float = 1.0
    lr: float = 1e-4
    entropy_coeff: float = 0.001
    n_boot: int = 1000
    #: Reference agents (name -> agent spec, e.g. ``{"oracle": "oracle"}``) evaluated beside the
    #: arms and random in the same runs (same tasks, same episode seeds); not trained, not scored
    #: for learning, shown in the Pass@1 and single-step tables and figures.
    references: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.families:
            raise ValueError("a study needs at least one family")
        bad = [a for a in self.arms if a not in ARMS]
        if bad or not self.arms:
            raise ValueError(f"arms must be among {list(ARMS)}, got {self.arms!r}")
        bad = [v for v in self.visibilities if v not in VISIBILITIES]
        if bad or not self.visibilities:
            raise ValueError(
                f"visibilities must be among {VISIBILITIES}, got {self.visibilities!r}"
            )
        if not self.seeds:
            raise ValueError("a study needs at least one seed")
        taken = {*ARMS, RANDOM}
        bad = [n for n in self.references if n in taken or "@s" in n or not n]
        if bad:
            raise ValueError(
                f"reference agent names must be new, non-empty and free of '@s', got {bad!r}"
            )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StudySpec:
        """The spec :meth:`to_json` wrote (``study.json`` of a study folder)."""
        fields = dict(data)
        fields["families"] = [Family(**f) for f in data["families"]]
        return cls(**fields)


def full_spec() -> StudySpec:
    """The full study: three families, four arms, hidden and visible, three seeds."""
    return StudySpec(
        families=[
            Family(
                name="tooluse",
                env_id="BudgetMix/ToolUse-v0",
                train_kwargs={"level": 1, "world_seed": 0},
                eval_kwargs={"level": 1, "world_seed": 1},
                tight=5,
                generous=12,
                eval_budgets=[4, 5, 6, 8, 10, 12, 16],
                max_actions=256,
                warm_start_episodes=500,
                iterations=2,
                batch_size=256,
            ),
            Family(
                name="alfworld",
                env_id="BudgetMix/ALFWorld-v0",
                train_kwargs={"level": 1, "tasks_per_level": 100, "max_receptacles": 12},
                eval_kwargs={
                    "level": 1,
                    "tasks_per_level": 20,
                    "split": "valid_seen",
                    "max_receptacles": 12,
                },
                tight=6,
                generous=15,
                eval_budgets=[5, 6, 8, 11, 15, 20],
                max_actions=128,
                warm_start_episodes=200,
                eval_tasks=12,
                eval_samples=3,
                iterations=2,
                batch_size=256,
            ),
            Family(
                name="webshop",
                env_id="BudgetMix/WebShop-v0",
                train_kwargs={"level": 2, "tasks_per_level": 200},
                eval_kwargs={"level": 2, "tasks_per_level": 200, "split": "test"},
                tight=6,
                generous=15,
                eval_budgets=[4, 6, 8, 11, 15, 20],
                max_actions=256,
                warm_start_episodes=200,
                iterations=2,
                batch_size=256,
            ),
        ]
    )


def quick_spec() -> StudySpec:
    """The pipeline check: ToolUse level 1, two arms, budget hidden, one seed, tiny training."""
    return StudySpec(
        families=[
            Family(
                name="tooluse",
                env_id="BudgetMix/ToolUse-v0",
                train_kwargs={"level": 1, "world_seed": 0},
                eval_kwargs={"level": 1, "world_seed": 1},
                tight=5,
                generous=12,
                eval_budgets=[4, 5, 8, 12, 14],
                max_actions=256,
                warm_start_episodes=50,
                warm_start_epochs=2,
                iterations=1,
                batch_size=64,
                eval_tasks=3,
                eval_samples=2,
                fault_turns=[1, 2],
                probe_states=2,
            )
        ],
        arms=["fixed_generous", "mix_uniform"],
        visibilities=["hidden"],
        seeds=[0],
        n_boot=200,
    )


def demo_spec(**sizes: Any) -> StudySpec:
    """The demo's trained pair: ``fixed_generous`` against ``mix_uniform`` on ToolUse level 1.

    Budget hidden, one seed, trained in world 0 and evaluated on 20 tasks x 4 samples of world 1
    (unseen), beside the random, oracle and oracle-eps0.3 agents on the same tasks and episode
    seeds. A shared warm start (300 oracle episodes, 10 epochs) makes the pair beat random on
    unseen tasks; then 2 PPO iterations of 256 steps per arm.

    Two settings differ from the study's ToolUse family, both because a brief PPO would
    otherwise leave the arms identical (measured): ``tight`` is 3, the shortest optimal length
    of the level-1 tasks, not 5 (the warm-started policy ends its episodes in about 3 turns, so
    with BudgetMix over 5..12 no training episode met its budget and both arms saw the same
    episodes), and the PPO learning rate is 1e-3, not 1e-4 (at 1e-4, after 4 iterations, the
    arms played alike in 75 of 80 paired eval episodes, with the same Pass@(K,T) at every K and
    T). ``sizes`` overrides :class:`Family` fields (smaller runs in tests), e.g.
    ``demo_spec(warm_start_episodes=40, iterations=1)``.
    """
    from dataclasses import replace

    fam = Family(
        name="tooluse",
        env_id="BudgetMix/ToolUse-v0",
        train_kwargs={"level": 1, "world_seed": 0},
        eval_kwargs={"level": 1, "world_seed": 1},
        tight=3,
        generous=12,
        eval_budgets=[2, 3, 4, 5, 6, 8, 10, 12, 14],
        max_actions=256,
        warm_start_episodes=300,
        warm_start_epochs=10,
        iterations=2,
        batch_size=256,
        eval_tasks=20,
        eval_samples=4,
        fault_turns=[2],
        probe_states=2,
    )
    try:
        fam = replace(fam, **sizes)
    except TypeError as exc:
        raise ValueError(f"demo_spec: bad size override {sizes!r}: {exc}") from None
    return StudySpec(
        families=[fam],
        arms=["fixed_generous", "mix_uniform"],
        visibilities=["hidden"],
        seeds=[0],
        lr=1e-3,
        n_boot=1000,
        references={"oracle": "oracle", "oracle-eps0.3": "oracle:epsilon=0.3"},
    )


# ---------------------------------------------------------------------- layout
def _policy_root(out: Path, fam: Family, vis: str, seed: int) -> Path:
    return out / "policies" / fam.name / vis / f"s{seed}"


def _warm_root(out: Path, fam: Family, vis: str, seed: int, arm: str) -> Path:
    """The warm start an arm's PPO resumes: shared by the hidden arms, one per visible arm."""
    root = _policy_root(out, fam, vis, seed)
    return root / "warm" if vis == "hidden" else root / f"warm_{arm}"


def _records_path(out: Path, fam: Family, vis: str, seed: int) -> Path:
    return out / "records" / f"{fam.name}__{vis}__s{seed}.jsonl.gz"


def _agent_name(arm: str, seed: int) -> str:
    return f"{arm}@s{seed}"


def _trained(policy_dir: Path, iterations: int) -> bool:
    from budget_envs.integrations.rllib_train import POLICY_FILE, read_metrics

    if not (policy_dir / POLICY_FILE).exists():
        return False
    return iterations == 0 or len(read_metrics(policy_dir)) >= iterations


Progress = Callable[[str, int, int], None]


# ---------------------------------------------------------------------- stages
def train_stage(
    spec: StudySpec, out: Path, *, progress: Progress | None = None, num_cpus: int = 2
) -> list[Path]:
    """Train every (family, visibility, seed, arm) policy that is not finished yet.

    Every training episode of an arm, the warm start's included, is played under the arm's
    budget, with one saving: a budget-hidden policy's inputs do not depend on the budget and the
    oracle's labels do not either, so the hidden arms of one (family, seed) share one warm start
    (run at the generous T) and differ in the budgets of their PPO episodes. A budget-visible
    policy sees turns left and T in its inputs, so each visible arm has its own warm start, run
    under the arm's budget: a fixed-T arm has seen only its T when PPO starts.
    """
    from budget_envs.integrations.rllib_train import train

    jobs = [
        (fam, vis, seed, arm)
        for fam in spec.families
        for vis in spec.visibilities
        for seed in spec.seeds
        for arm in spec.arms
        # finished evals (committed records) need no policies: a clone of the study folder,
        # which has no policies/, does not train them again
        if not _records_path(out, fam, vis, seed).exists()
    ]
    done = 0
    policies = []
    import ray

    started = not ray.is_initialized()
    if started and any(
        not _trained(_policy_root(out, f, v, s) / a, f.iterations) for f, v, s, a in jobs
    ):
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        ray.init(
            num_cpus=num_cpus,
            include_dashboard=False,
            object_store_memory=256 * 1024**2,
            log_to_driver=False,
        )
    try:
        for fam, vis, seed, arm in jobs:
            root = _policy_root(out, fam, vis, seed)
            target = root / arm
            policies.append(target)
            if progress is not None:
                progress("train", done, len(jobs))
            if _trained(target, fam.iterations):
                done += 1
                continue
            common = dict(
                visibility=vis,
                env_kwargs=fam.train_kwargs,
                seed=seed,
                gamma=spec.gamma,
                max_actions=fam.max_actions,
                train_batch_size=fam.batch_size,
                minibatch_size=min(128, fam.batch_size),
                num_cpus=num_cpus,
            )
            budget = arm_budget(arm, fam.tight, fam.generous)
            warm = _warm_root(out, fam, vis, seed, arm)
            if not _trained(warm, 0):
                if warm.exists():
                    shutil.rmtree(warm)  # a warm start killed half-way: redo it
                train(
                    fam.env_id,
                    budget=fam.generous if vis == "hidden" else budget,
                    out_dir=warm,
                    iterations=0,
                    warm_start_episodes=fam.warm_start_episodes,
                    warm_start_epochs=fam.warm_start_epochs,
                    **common,
                )
            if not (target / "checkpoint").exists():
                if target.exists():
                    shutil.rmtree(target)
                shutil.copytree(warm, target)
            train(
                fam.env_id,
                budget=budget,
                out_dir=target,
                iterations=fam.iterations,
                lr=spec.lr,
                entropy_coeff=spec.entropy_coeff,
                checkpoint_every=max(1, fam.iterations // 4),
                resume=True,
                **common,
            )
            done += 1
        if progress is not None:
            progress("train", done, len(jobs))
    finally:
        if started and ray.is_initialized():
            ray.shutdown()
    return policies


def eval_stage(
    spec: StudySpec, out: Path, *, progress: Progress | None = None, workers: int = 2
) -> list[Path]:
    """Evaluate each (family, visibility, seed)'s arms, the random agent and the spec's
    reference agents on unseen tasks.

    One run per (family, visibility, seed), with that seed as the run seed, so an arm and the
    random agent play the same tasks with the same episode seeds (paired). Budget-hidden runs
    play once at the grid's largest T; budget-visible runs (``visibility="remaining"``) play
    every T of the grid. Both add single-step probes from oracle-prefix states and one fault at
    each of the family's fault turns. Finished runs are gzipped into ``records/``.
    """
    from budget_envs.eval.runner import EvalPlan, run_plan
    from budget_envs.eval.runner.records import RECORDS_FILE

    written = []
    for fam in spec.families:
        for vis in spec.visibilities:
            for seed in spec.seeds:
                target = _records_path(out, fam, vis, seed)
                written.append(target)
                if target.exists():
                    continue
                agents: dict[str, Any] = {
                    _agent_name(arm, seed): f"policy:{_policy_root(out, fam, vis, seed) / arm}"
                    for arm in spec.arms
                }
                agents[RANDOM] = RANDOM
                agents.update(spec.references)
                grid = sorted(fam.eval_budgets)
                plan = EvalPlan(
                    env_ids=[fam.env_id],
                    agents=agents,
                    tasks=fam.eval_tasks,
                    samples=fam.eval_samples,
                    budgets=[grid[-1]] if vis == "hidden" else grid,
                    visibility=vis,
                    fault_turns=list(fam.fault_turns),
                    # Probes replay an oracle prefix with the budget hidden: a budget-visible policy
                    # cannot play them (its single-step accuracy is its on-policy agreement).
                    probe_states=fam.probe_states if vis == "hidden" else 0,
                    seed=seed,
                    env_kwargs=dict(fam.eval_kwargs),
                )
                run_dir = out / "eval" / fam.name / vis / f"s{seed}"
                count: dict[str, Any] = {"done": 0, "total": 0}
                count["stage"] = f"eval {fam.name} {vis} s{seed}"

                def on_start(total: int, skipped: int, count: dict = count) -> None:
                    count["total"], count["done"] = total, skipped
                    if progress is not None:
                        progress(count["stage"], skipped, total)

                def on_record(_record: Any, count: dict = count) -> None:
                    count["done"] += 1
                    if progress is not None:
                        progress(count["stage"], count["done"], count["total"])

                result = run_plan(
                    plan,
                    run_dir,
                    workers=workers,
                    # After training in this process torch's thread pool exists: a forked worker
                    # can deadlock on its locks, so the workers start fresh.
                    start_method="spawn" if workers > 1 else None,
                    resume=True,
                    on_start=on_start,
                    on_record=on_record,
                )
                if result.errors:
                    raise RuntimeError(
                        f"{run_dir}: {result.errors} episode(s) failed; see the error fields of "
                        f"{run_dir / RECORDS_FILE} and run the study again to retry them"
                    )
                _compress(run_dir / RECORDS_FILE, target)
    return written


def _compress(src: Path, dst: Path) -> None:
    """Gzip the records with a fixed header (no file name, no time), one line per record key
    (a retried episode's earlier error line is dropped)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    latest: dict[str, str] = {}
    for line in src.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if not record.get("error"):
                latest[record["key"]] = line
    tmp = dst.with_suffix(".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as z:
        z.write(("\n".join(latest.values()) + "\n").encode("utf-8"))
    tmp.replace(dst)


def load_study_records(out: str | os.PathLike) -> list[dict[str, Any]]:
    """Every record under ``out/records/``, each with ``study_seed`` and ``study_visibility``.

    The seed is appended to ``task_id`` (``"<task>|s<seed>"``) and dropped from the agent name,
    so an arm's surface pools its seeds and a paired comparison pairs the same task under the
    same training seed: bootstrap intervals then resample (task, seed) units.
    """
    folder = Path(out) / "records"
    paths = sorted(folder.glob("*.jsonl.gz"))
    if not paths:
        raise FileNotFoundError(f"no study records (*.jsonl.gz) in {folder}")
    records = []
    for path in paths:
        family, vis, seed_part = path.name[: -len(".jsonl.gz")].split("__")
        seed = int(seed_part[1:])
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                r = json.loads(line)
                r["study_family"], r["study_visibility"], r["study_seed"] = family, vis, seed
                r["task_id"] = f"{r['task_id']}|s{seed}"
                r["agent"] = r["agent"].split("@s")[0]
                records.append(r)
    return records


def compare_stage(
    spec: StudySpec,
    out: Path,
    records: Sequence[dict[str, Any]] | None = None,
    *,
    figures: bool = True,
) -> list[Any]:
    """``compare`` each arm against ``fixed_generous`` (and against random) per family and
    visibility, into ``compare/``: difference surfaces with paired bootstrap intervals (and
    their heatmaps unless ``figures`` is False)."""
    from budget_envs.eval.report import compare_runs

    records = load_study_records(out) if records is None else records
    results = []
    for fam in spec.families:
        for vis in spec.visibilities:
            mine = [
                r for r in records if r["study_family"] == fam.name and r["study_visibility"] == vis
            ]
            if not mine:
                continue
            for arm in spec.arms:
                for base in ("fixed_generous", RANDOM):
                    if arm == base or (base != RANDOM and base not in spec.arms):
                        continue
                    folder = out / "compare" / f"{fam.name}__{vis}__{arm}_vs_{base}"
                    results += compare_runs(
                        mine,
                        mine,
                        folder,
                        agent_a=base,
                        agent_b=arm,
                        n_boot=spec.n_boot,
                        seed=0,
                        figures=figures,
                    )
    return results


# ---------------------------------------------------------------------- pair summary
@dataclass
class PairSummary:
    """Two arms of one (family, visibility) side by side, with the agents of the same runs:
    what ``budgetmix demo`` prints about its trained pair (:func:`pair_summary`)."""

    family: Family
    visibility: str
    arm_a: str
    arm_b: str
    #: The agents with records, in report order: the arms, random, the reference agents.
    agents: list[str]
    #: The K shown (1 and the number of samples) and the T shown (the family's grid).
    ks: list[int]
    ts: list[int]
    #: agent -> K -> Pass@(K,T) at each T of ``ts``.
    pass_at: dict[str, dict[int, list[float]]]
    #: K -> (B - A, low, high) at each T of ``ts``: ``compare``'s paired 95% interval.
    diff: dict[int, list[tuple[float, float, float]]]
    #: Task x seed units of the comparison.
    units: int
    #: Paired no-fault episodes (same task, sample and seed) in which the two arms played the
    #: same actions, and all such pairs.
    same_play: tuple[int, int]
    #: arm -> its last PPO iteration's metrics row (win rate, turns, budget_limit, ...).
    training: dict[str, dict[str, float]]
    #: The ``compare`` folder of B against A (difference.csv, compare.md, the heatmap).
    compare_dir: Path
    #: The heatmap ``compare`` drew there (empty without figures).
    figures: list[Path]


def pair_summary(
    spec: StudySpec,
    out: str | os.PathLike,
    *,
    arm_a: str = "fixed_generous",
    arm_b: str | None = None,
    records: Sequence[dict[str, Any]] | None = None,
) -> PairSummary:
    """``arm_b`` (default: the spec's other arm) against ``arm_a`` in the first family and
    visibility of a study folder that :func:`run_study` finished: Pass@(K,T) of every agent of
    the runs, and the difference as :func:`compare_stage` wrote it (its ``difference.csv``)."""
    out = Path(out)
    others = [a for a in spec.arms if a != arm_a]
    arm_b = others[0] if arm_b is None and others else arm_b
    if arm_a not in spec.arms or arm_b not in spec.arms or arm_a == arm_b:
        raise ValueError(f"need two arms of {spec.arms!r}, got {arm_a!r} and {arm_b!r}")
    fam, vis = spec.families[0], spec.visibilities[0]
    records = load_study_records(out) if records is None else records
    mine = [r for r in records if r["study_family"] == fam.name and r["study_visibility"] == vis]
    surfaces = _surfaces(mine, spec.n_boot)
    ts = sorted(fam.eval_budgets)
    ks = sorted({1, fam.eval_samples})
    pass_at: dict[str, dict[int, list[float]]] = {}
    for agent in [*spec.arms, RANDOM, *spec.references]:
        surf = surfaces.get((fam.name, vis, agent))
        if surf is None:
            continue
        pass_at[agent] = {
            k: [
                float(surf.mean[surf.ks.index(k), surf.ts.index(t)])
                if k in surf.ks and t in surf.ts
                else float("nan")
                for t in ts
            ]
            for k in ks
        }
    compare_dir = out / "compare" / f"{fam.name}__{vis}__{arm_b}_vs_{arm_a}"
    csv_path = compare_dir / "difference.csv"
    if not csv_path.exists():
        raise FileNotFoundError(f"no comparison {csv_path}: run the study's compare stage first")
    cells: dict[tuple[int, int], tuple[float, float, float]] = {}
    with csv_path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            cells[int(row["K"]), int(row["T"])] = (
                float(row["diff"]),
                float(row["low"]),
                float(row["high"]),
            )
    nan = (float("nan"),) * 3
    diff = {k: [cells.get((k, t), nan) for t in ts] for k in ks}
    plays: dict[str, dict[tuple, Any]] = {arm_a: {}, arm_b: {}}
    for r in mine:
        clean = r.get("record") == "episode" and r.get("fault_turn") is None
        if r["agent"] in plays and clean and r.get("actions") is not None:
            plays[r["agent"]][r["task_id"], r["sample"], r["budget"]] = r["actions"]
    pairs = sorted(set(plays[arm_a]) & set(plays[arm_b]))
    same = sum(1 for key in pairs if plays[arm_a][key] == plays[arm_b][key])
    from budget_envs.integrations.rllib_train import read_metrics

    training = {}
    for arm in (arm_a, arm_b):
        rows = read_metrics(_policy_root(out, fam, vis, spec.seeds[0]) / arm)
        if rows:
            training[arm] = rows[-1]
    units = len(surfaces[(fam.name, vis, arm_a)].task_ids) if pass_at.get(arm_a) else 0
    return PairSummary(
        family=fam,
        visibility=vis,
        arm_a=arm_a,
        arm_b=arm_b,
        agents=list(pass_at),
        ks=ks,
        ts=ts,
        pass_at=pass_at,
        diff=diff,
        units=units,
        same_play=(same, len(pairs)),
        training=training,
        compare_dir=compare_dir,
        figures=sorted(compare_dir.glob("*.png")),
    )


# ---------------------------------------------------------------------- report
@dataclass
class LearningRow:
    """An arm against the random agent on its own training budget (pmf-weighted Pass@1)."""

    family: str
    visibility: str
    arm: str
    budgets: str
    arm_pass: float
    random_pass: float
    diff: float
    low: float
    high: float
    units: int

    @property
    def learned(self) -> bool:
        return self.low > 0


def _surfaces(records: Sequence[dict[str, Any]], n_boot: int) -> dict[tuple, Any]:
    from budget_envs.eval.report import group_surfaces

    out = {}
    for vis in sorted({r["study_visibility"] for r in records}):
        for fam in sorted({r["study_family"] for r in records}):
            mine = [r for r in records if r["study_family"] == fam and r["study_visibility"] == vis]
            for s in group_surfaces(mine, n_boot=n_boot, seed=0):
                out[(fam, vis, s.agent)] = s
    return out


def _bootstrap(values: np.ndarray, n_boot: int, seed: int = 0) -> tuple[float, float, float]:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    means = values[idx].mean(axis=1)
    return float(values.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def learning_status(
    spec: StudySpec, records: Sequence[dict[str, Any]], surfaces: Mapping[tuple, Any] | None = None
) -> list[LearningRow]:
    """Each arm's Pass@1 minus random's on the arm's own training budgets, paired per (task,
    seed), with a bootstrap interval. A fixed arm is scored at its T; a BudgetMix arm at the
    evaluated T of its range, weighted by its training distribution. "Learned" means the
    interval lies above 0."""
    surfaces = _surfaces(records, spec.n_boot) if surfaces is None else surfaces
    rows = []
    for fam in spec.families:
        for vis in spec.visibilities:
            base = surfaces.get((fam.name, vis, RANDOM))
            for arm in spec.arms:
                s = surfaces.get((fam.name, vis, arm))
                if s is None or base is None:
                    continue
                pmf = _arm_pmf(arm, fam.tight, fam.generous)
                ts = [t for t in sorted(pmf) if t in s.ts and t in base.ts]
                if vis != "hidden":  # visible runs have only the grid's T
                    ts = [t for t in ts if t in fam.eval_budgets]
                if not ts:
                    continue
                w = np.array([pmf[t] for t in ts])
                w = w / w.sum()
                tasks = sorted(set(s.task_ids) & set(base.task_ids))
                ka, kb = s.per_task, base.per_task
                a = np.array(
                    [[ka[s.task_ids.index(u), 0, s.ts.index(t)] for t in ts] for u in tasks]
                )
                b = np.array(
                    [[kb[base.task_ids.index(u), 0, base.ts.index(t)] for t in ts] for u in tasks]
                )
                diff, low, high = _bootstrap((a - b) @ w, spec.n_boot)
                rows.append(
                    LearningRow(
                        family=fam.name,
                        visibility=vis,
                        arm=arm,
                        budgets=str(ts[0]) if len(ts) == 1 else f"{ts[0]}..{ts[-1]} ({len(ts)} T)",
                        arm_pass=float((a @ w).mean()),
                        random_pass=float((b @ w).mean()),
                        diff=diff,
                        low=low,
                        high=high,
                        units=len(tasks),
                    )
                )
    return rows


def _won_turns(
    records: Sequence[dict[str, Any]], family: str, vis: str, agent: str, t: int, top: int
) -> list[int] | None:
    """First-success turns of ``agent``'s fault-free episodes won within ``t`` (None: no episode).

    A budget-hidden run plays once at the grid's largest T, so a smaller T keeps the episodes
    whose first success came by turn t; a budget-visible run has an episode per T."""
    mine = [
        r
        for r in records
        if r.get("record", "episode") == "episode"
        and r["study_family"] == family
        and r["study_visibility"] == vis
        and r["agent"] == agent
        and r.get("fault_turn") is None
        and r["budget"] == (top if vis == "hidden" else t)
    ]
    if not mine:
        return None
    turns = [r.get("first_success_turn") for r in mine]
    return sorted(int(x) for x in turns if x is not None and x <= t)


def _ci(mean: float, low: float, high: float, sign: bool = False) -> str:
    f = "{:+.3f}" if sign else "{:.3f}"
    return f"{f.format(mean)} [{f.format(low)}, {f.format(high)}]"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path


@dataclass
class StudyReport:
    """What :func:`write_study_report` wrote."""

    markdown: str
    tables: list[Path]
    figures: list[Path]
    learning: list[LearningRow]


def write_study_report(
    spec: StudySpec,
    out: str | os.PathLike,
    docs: str | os.PathLike,
    *,
    records: Sequence[dict[str, Any]] | None = None,
    figures: bool = True,
) -> StudyReport:
    """Tables (``out/tables/``) and figures (``<docs folder>/img/study/``) from the records, and
    the generated section of ``docs`` between its study markers (the file is created when
    missing; the text around the markers is kept). Tables hold no times and no paths, so the
    same records give the same bytes."""
    from budget_envs.eval.metrics import recovery_table, single_step_accuracy

    out = Path(out)
    records = load_study_records(out) if records is None else list(records)
    tables_dir = out / "tables"
    tables_dir.mkdir(parents=True, exist_ok=True)
    surfaces = _surfaces(records, spec.n_boot)
    tables: list[Path] = []
    md: list[str] = []
    agents = [*spec.arms, RANDOM, *spec.references]

    # ---- Pass@1 vs T
    md += ["### Pass@1 against T", ""]
    csv_rows: list[list[Any]] = []
    for fam in spec.families:
        for vis in spec.visibilities:
            grid = sorted(fam.eval_budgets)
            rows = []
            for agent in agents:
                s = surfaces.get((fam.name, vis, agent))
                if s is None:
                    continue
                cells = []
                for t in grid:
                    if t not in s.ts:
                        cells.append("-")
                        continue
                    j = s.ts.index(t)
                    cells.append(_ci(s.mean[0, j], s.low[0, j], s.high[0, j]))
                    csv_rows.append(
                        [fam.name, vis, agent, t, f"{s.mean[0, j]:.6f}", f"{s.low[0, j]:.6f}"]
                        + [f"{s.high[0, j]:.6f}", len(s.task_ids)]
                    )
                rows.append([agent, *cells])
            if rows:
                units = (
                    len(surfaces[(fam.name, vis, RANDOM)].task_ids)
                    if (
                        fam.name,
                        vis,
                        RANDOM,
                    )
                    in surfaces
                    else 0
                )
                md += [
                    f"**{fam.name}, budget {vis}** (tight T={fam.tight}, generous "
                    f"T={fam.generous}; {units} task x seed units, 95% bootstrap intervals):",
                    "",
                    *_md_table(["arm", *[f"T={t}" for t in grid]], rows),
                    "",
                ]
    tables.append(
        _write_csv(
            tables_dir / "pass1_vs_t.csv",
            ["family", "visibility", "arm", "T", "pass1", "low", "high", "units"],
            csv_rows,
        )
    )

    # ---- turns to success: is an arm faster where it wins?
    md += [
        "### Turns to success against T",
        "",
        "Mean turns of the episodes won within T (no fault), and how many were won: an arm "
        "trained at a tight T that wins in fewer turns has learned speed, not only success.",
        "",
    ]
    tts_rows: list[list[Any]] = []
    for fam in spec.families:
        for vis in spec.visibilities:
            grid = sorted(fam.eval_budgets)
            rows = []
            for agent in agents:
                cells = []
                for t in grid:
                    won = _won_turns(records, fam.name, vis, agent, t, grid[-1])
                    if won is None:
                        cells.append("-")
                        continue
                    mean = float(np.mean(won)) if won else None
                    cells.append("-" if mean is None else f"{mean:.2f} ({len(won)})")
                    tts_rows.append(
                        [fam.name, vis, agent, t, "" if mean is None else f"{mean:.6f}", len(won)]
                    )
                if any(c != "-" for c in cells):
                    rows.append([agent, *cells])
            if rows:
                md += [
                    f"**{fam.name}, budget {vis}:**",
                    "",
                    *_md_table(["arm", *[f"T={t}" for t in grid]], rows),
                    "",
                ]
    tables.append(
        _write_csv(
            tables_dir / "turns_to_success.csv",
            ["family", "visibility", "arm", "T", "mean_turns", "won"],
            tts_rows,
        )
    )

    # ---- learning status
    learning = learning_status(spec, records, surfaces)
    rows = [
        [
            r.family,
            r.visibility,
            r.arm,
            r.budgets,
            f"{r.arm_pass:.3f}",
            f"{r.random_pass:.3f}",
            _ci(r.diff, r.low, r.high, sign=True),
            "learned" if r.learned else "**not learned**",
        ]
        for r in learning
    ]
    md += [
        "### Learning status: each arm against random on its own training budget",
        "",
        *_md_table(
            ["family", "budget", "arm", "T", "arm Pass@1", "random", "arm - random", "status"],
            rows,
        ),
        "",
    ]
    tables.append(
        _write_csv(
            tables_dir / "learning_status.csv",
            ["family", "visibility", "arm", "budgets", "arm_pass1", "random_pass1"]
            + ["diff", "low", "high", "units", "learned"],
            [
                [r.family, r.visibility, r.arm, r.budgets, f"{r.arm_pass:.6f}"]
                + [f"{r.random_pass:.6f}", f"{r.diff:.6f}", f"{r.low:.6f}", f"{r.high:.6f}"]
                + [r.units, r.learned]
                for r in learning
            ],
        )
    )

    # ---- differences against fixed generous
    from budget_envs.eval.report import compare_runs

    diffs: list[list[Any]] = []
    heat: dict[tuple[str, str], dict[str, list[tuple[int, float, float, float]]]] = {}
    if "fixed_generous" in spec.arms:
        md += ["### Difference against the fixed-generous arm (Pass@1, B - A)", ""]
        for fam in spec.families:
            for vis in spec.visibilities:
                mine = [
                    r
                    for r in records
                    if r["study_family"] == fam.name and r["study_visibility"] == vis
                ]
                grid = sorted(fam.eval_budgets)
                rows = []
                for arm in spec.arms:
                    if arm == "fixed_generous" or not mine:
                        continue
                    comps = compare_runs(
                        mine,
                        mine,
                        None,
                        agent_a="fixed_generous",
                        agent_b=arm,
                        n_boot=spec.n_boot,
                        seed=0,
                        figures=False,
                    )
                    if not comps:
                        continue
                    c = comps[0]
                    cells = []
                    for t in grid:
                        if t not in c.ts:
                            cells.append("-")
                            continue
                        j = c.ts.index(t)
                        d, lo, hi = float(c.diff[0, j]), float(c.low[0, j]), float(c.high[0, j])
                        cells.append(_ci(d, lo, hi, sign=True))
                        diffs.append(
                            [fam.name, vis, arm, t, f"{d:.6f}", f"{lo:.6f}", f"{hi:.6f}", c.tasks]
                        )
                        heat.setdefault((fam.name, vis), {}).setdefault(arm, []).append(
                            (t, d, lo, hi)
                        )
                    rows.append([f"{arm} - fixed_generous", *cells])
                if rows:
                    md += [
                        f"**{fam.name}, budget {vis}:**",
                        "",
                        *_md_table(["B - A", *[f"T={t}" for t in grid]], rows),
                        "",
                    ]
    tables.append(
        _write_csv(
            tables_dir / "difference_vs_generous.csv",
            ["family", "visibility", "arm", "T", "diff", "low", "high", "units"],
            diffs,
        )
    )

    # ---- single step vs recovery
    rec_rows: list[list[Any]] = []
    md_rows = []
    scatter: dict[tuple[str, str], list[tuple[str, float | None, float | None]]] = {}
    for fam in spec.families:
        for vis in spec.visibilities:
            for agent in agents:
                mine = [
                    r
                    for r in records
                    if r["study_family"] == fam.name
                    and r["study_visibility"] == vis
                    and r["agent"] == agent
                ]
                if not mine:
                    continue
                acc = single_step_accuracy(mine)
                top = max(fam.eval_budgets)  # faults run at the grid's largest T only
                rec = [row for row in recovery_table(mine, [top]) if row.budget == top]
                succ = float(np.mean([r.success for r in rec])) if rec else None
                base = rec[0].baseline_success if rec else None
                by_turn = "; ".join(f"t={r.fault_turn}: {r.success:.3f}" for r in rec) or "-"
                md_rows.append(
                    [
                        fam.name,
                        vis,
                        agent,
                        "-" if acc["prefix"] is None else f"{acc['prefix']:.3f}",
                        str(acc["prefix_states"]),
                        "-" if acc["on_policy"] is None else f"{acc['on_policy']:.3f}",
                        "-" if base is None else f"{base:.3f}",
                        "-" if succ is None else f"{succ:.3f}",
                        by_turn,
                    ]
                )
                rec_rows.append(
                    [fam.name, vis, agent, acc["prefix"], acc["prefix_states"], acc["on_policy"]]
                    + [base, succ]
                    + [by_turn]
                )
                scatter.setdefault((fam.name, vis), []).append((agent, acc["prefix"], succ))
    md += [
        "### Single-step accuracy against recovery",
        "",
        "Single step: share of oracle-prefix states where the agent picked an oracle action "
        "(budget-hidden runs only: the probes hide the budget), and the share of the agent's own "
        "turns that were oracle actions (on policy). "
        "Recovery: success within the grid's largest T (above generous) after one fault (slip "
        "or drop) at turn t, against no fault at the same T.",
        "",
        *_md_table(
            ["family", "budget", "agent", "single step", "states", "on policy", "no fault"]
            + ["after a fault"]
            + ["by fault turn"],
            md_rows,
        ),
        "",
    ]
    tables.append(
        _write_csv(
            tables_dir / "single_step_recovery.csv",
            ["family", "visibility", "agent", "single_step", "states", "on_policy", "no_fault"]
            + ["after_fault", "by_turn"],
            [[_num(v) for v in row] for row in rec_rows],
        )
    )

    # ---- figures
    figs: list[Path] = []
    img = Path(docs).parent / "img" / "study"
    if figures:
        figs = _figures(spec, surfaces, heat, scatter, img)
    if figs:
        md += ["### Figures", ""]
        for f in figs:
            md += [f"![{f.stem}]({os.path.relpath(f, Path(docs).parent)})", ""]
    text = "\n".join(md).rstrip() + "\n"
    (tables_dir / "study_results.md").write_text(text, encoding="utf-8")
    tables.append(tables_dir / "study_results.md")
    _splice(Path(docs), text)
    return StudyReport(markdown=text, tables=tables, figures=figs, learning=learning)


def _num(v: Any) -> Any:
    return f"{v:.6f}" if isinstance(v, float) else ("" if v is None else v)


def _splice(path: Path, text: str) -> None:
    """Put ``text`` between the study markers of ``path`` (created with a title if missing)."""
    if path.exists():
        page = path.read_text(encoding="utf-8")
        if BEGIN not in page or END not in page:
            raise ValueError(f"{path} has no study markers ({BEGIN!r} ... {END!r})")
        head, rest = page.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        head, tail = "# BudgetMix study\n\n", "\n"
    path.write_text(f"{head}{BEGIN}\n\n{text}\n{END}{tail}", encoding="utf-8")


def _figures(
    spec: StudySpec,
    surfaces: Mapping[tuple, Any],
    heat: Mapping[tuple[str, str], Mapping[str, list[tuple[int, float, float, float]]]],
    scatter: Mapping[tuple[str, str], list[tuple[str, float | None, float | None]]],
    img: Path,
) -> list[Path]:
    from budget_envs._util import import_optional

    Figure = import_optional("matplotlib.figure", extra="plots", what="figures").Figure
    img.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    for fam in spec.families:
        for vis in spec.visibilities:
            keys = [(fam.name, vis, a) for a in [*spec.arms, RANDOM, *spec.references]]
            present = [k for k in keys if k in surfaces]
            if not present:
                continue
            fig = Figure(figsize=(6.5, 4))
            ax = fig.subplots()
            for k in present:
                s = surfaces[k]
                ax.plot(s.ts, s.mean[0], marker="." if vis != "hidden" else None, label=k[2])
                ax.fill_between(s.ts, s.low[0], s.high[0], alpha=0.15)
            for t, name in ((fam.tight, "tight"), (fam.generous, "generous")):
                ax.axvline(t, color="grey", ls=":", lw=1)
                ax.text(t, 1.01, name, fontsize=7, ha="center")
            ax.set(xlabel="turn budget T", ylabel="Pass@1", ylim=(-0.02, 1.05))
            ax.set_title(f"{fam.name}, budget {vis}: Pass@1 against T", fontsize=9)
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
            fig.tight_layout()
            path = img / f"pass1_{fam.name}_{vis}.png"
            fig.savefig(path, dpi=110)
            out.append(path)

            cells = heat.get((fam.name, vis), {})
            if cells:
                arms = list(cells)
                ts = sorted({t for v in cells.values() for t, *_ in v})
                m = np.full((len(arms), len(ts)), np.nan)
                for i, arm in enumerate(arms):
                    for t, d, _lo, _hi in cells[arm]:
                        m[i, ts.index(t)] = d
                fig = Figure(figsize=(1.2 + 0.8 * len(ts), 1.2 + 0.6 * len(arms)))
                ax = fig.subplots()
                im = ax.imshow(m, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
                ax.set_xticks(range(len(ts)), [str(t) for t in ts])
                ax.set_yticks(range(len(arms)), arms, fontsize=7)
                for i in range(len(arms)):
                    for j in range(len(ts)):
                        if m[i, j] == m[i, j]:
                            ax.text(j, i, f"{m[i, j]:+.2f}", ha="center", va="center", fontsize=7)
                ax.set_xlabel("turn budget T")
                ax.set_title(f"{fam.name}, {vis}: Pass@1 minus fixed generous", fontsize=9)
                fig.colorbar(im, ax=ax)
                fig.tight_layout()
                path = img / f"diff_{fam.name}_{vis}.png"
                fig.savefig(path, dpi=110)
                out.append(path)

            pts = [p for p in scatter.get((fam.name, vis), []) if None not in p[1:]]
            if pts:
                fig = Figure(figsize=(5, 4))
                ax = fig.subplots()
                for agent, x, y in pts:
                    ax.scatter([x], [y], label=agent)
                ax.set(
                    xlabel="single-step accuracy (oracle-prefix states)",
                    ylabel="success after one fault (largest T)",
                    xlim=(-0.02, 1.02),
                    ylim=(-0.02, 1.02),
                )
                ax.set_title(f"{fam.name}, {vis}: single step against recovery", fontsize=9)
                ax.legend(fontsize=7)
                ax.grid(alpha=0.3)
                fig.tight_layout()
                path = img / f"step_recovery_{fam.name}_{vis}.png"
                fig.savefig(path, dpi=110)
                out.append(path)
    return out


# ---------------------------------------------------------------------- driver
def run_study(
    spec: StudySpec,
    out: str | os.PathLike,
    docs: str | os.PathLike,
    *,
    report_only: bool = False,
    progress: Progress | None = None,
    workers: int = 2,
    figures: bool = True,
    families: Sequence[str] | None = None,
    visibilities: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> StudyReport:
    """Train, evaluate, compare and report (or, with ``report_only``, report from the records).

    ``progress(stage, done, total)`` reports the long stages (the CLI draws bars with it).
    ``families``, ``visibilities`` and ``seeds`` limit training and evaluation to those, so
    several processes (or machines sharing the folder) can run parts of a study side by side;
    the report covers every record that is there.
    """
    stage_spec = spec
    for name, wanted, known in (
        ("families", families, [f.name for f in spec.families]),
        ("visibilities", visibilities, list(spec.visibilities)),
        ("seeds", seeds, list(spec.seeds)),
    ):
        if wanted is not None and (not wanted or any(w not in known for w in wanted)):
            raise ValueError(f"{name} must be among {known}, got {list(wanted)!r}")
    if families is not None:
        stage_spec = replace(stage_spec, families=[f for f in spec.families if f.name in families])
    if visibilities is not None:
        stage_spec = replace(
            stage_spec, visibilities=[v for v in spec.visibilities if v in visibilities]
        )
    if seeds is not None:
        stage_spec = replace(stage_spec, seeds=[s for s in spec.seeds if s in seeds])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "study.json"
    text = json.dumps(spec.to_json(), indent=2) + "\n"
    # Compared as specs, not text: a folder written before a field was added still matches.
    if saved.exists() and StudySpec.from_json(json.loads(saved.read_text("utf-8"))) != spec:
        raise ValueError(
            f"{out} holds another study ({saved}); use another --out or the same options"
        )
    saved.write_text(text, encoding="utf-8")
    if not report_only:
        train_stage(stage_spec, out, progress=progress, num_cpus=workers)
        eval_stage(stage_spec, out, progress=progress, workers=workers)
    records = load_study_records(out)
    compare_stage(spec, out, records, figures=figures)
    return write_study_report(spec, out, docs, records=records, figures=figures)
