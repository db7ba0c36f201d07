"""The stages that fill a study folder: train the arms, evaluate them, compare them.

Every stage skips what is finished: a policy folder with its ``metrics.csv`` complete, an eval
whose records are compressed. A killed study is resumed by running it again.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from budget_envs.integrations.trainers import study_probes
from budget_envs.study.folder import (
    agent_name,
    compare_dir,
    compress_records,
    curve_root,
    load_study_records,
    policy_root,
    records_path,
    select,
    warm_root,
)
from budget_envs.study.provenance import write_train_record
from budget_envs.study.spec import (
    BASE,
    IMITATION,
    RANDOM,
    RL,
    Family,
    StudySpec,
    arm_budget,
    curve_agent,
)
from budget_envs.study.stats import compare_arms

#: ``progress(stage, done, total)``: how the long stages report (the CLI draws bars with it).
Progress = Callable[[str, int, int], None]


def _trained(policy_dir: Path, iterations: int) -> bool:
    """Whether ``policy_dir`` holds a policy with its ``iterations`` PPO iterations done."""
    from budget_envs.integrations.rllib.training import POLICY_FILE, read_metrics

    if not (policy_dir / POLICY_FILE).exists():
        return False
    return iterations == 0 or len(read_metrics(policy_dir)) >= iterations


def _common(
    spec: StudySpec, fam: Family, vis: str, seed: int, num_cpus: int, report_to: str | None = None
) -> dict[str, Any]:
    """The ``train`` options every policy of (family, visibility, seed) shares (``report_to``:
    training logs only, not part of the design)."""
    return dict(
        report_to=report_to,
        visibility=vis,
        env_kwargs=fam.train_kwargs,
        seed=seed,
        gamma=spec.gamma,
        max_actions=fam.max_actions,
        train_batch_size=fam.batch_size,
        minibatch_size=fam.minibatch_size,
        num_epochs=fam.num_epochs,
        hidden=spec.hidden,
        num_cpus=num_cpus,
        num_env_runners=spec.env_runners,
        num_envs_per_env_runner=spec.envs_per_runner,
    )


def _copy(src: Path, dst: Path) -> None:
    """Copy a policy folder whole, or not at all (through a temporary name)."""
    tmp = dst.with_name(dst.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(src, tmp)
    tmp.replace(dst)


def _train_jobs(spec: StudySpec, out: Path) -> list[tuple[Family, str, int]]:
    # finished evals (committed records) need no policies: a clone of the study folder, which
    # has no policies/, does not train them again
    return [
        (fam, vis, seed)
        for fam in spec.families
        for vis in spec.visibilities
        for seed in spec.seeds_for(vis, fam)
        if not records_path(out, fam, vis, seed).exists()
    ]


def _imitated(policy_dir: Path) -> bool:
    """Whether ``policy_dir`` holds the imitation arm's finished fit."""
    from budget_envs.integrations.rllib.training import POLICY_FILE

    meta = policy_dir / POLICY_FILE
    return meta.exists() and "imitation" in json.loads(meta.read_text(encoding="utf-8"))


def _arm_done(spec: StudySpec, out: Path, fam: Family, vis: str, seed: int, arm: str) -> bool:
    root = policy_root(out, fam, vis, seed)
    if arm == BASE:
        return _trained(root / arm, 0)
    if arm == IMITATION:
        return _imitated(root / arm)
    points = spec.curve_points(fam, seed) if arm == RL and vis == "hidden" else []
    return _trained(root / arm, fam.iterations) and all(
        _trained(curve_root(out, fam, vis, seed) / curve_agent(arm, fam.steps(i)), i)
        for i in points
    )


def train_stage(
    spec: StudySpec,
    out: Path,
    *,
    progress: Progress | None = None,
    num_cpus: int = 2,
    report_to: str | None = None,
) -> list[Path]:
    """Train every (family, visibility, seed, arm) policy that is not finished yet with the
    spec's trainer, by its stage in :data:`TRAIN_STAGES` (``report_to``: also log each policy's
    metrics rows to TensorBoard and/or W&B); return the policy folders."""
    stage = TRAIN_STAGES.get(spec.trainer)
    if stage is None:
        raise ValueError(
            f"the study has no train stage for trainer {spec.trainer!r} "
            f"(it has one for {sorted(TRAIN_STAGES)})"
        )
    return stage(spec, out, progress=progress, num_cpus=num_cpus, report_to=report_to)


def _train_stage_rllib(
    spec: StudySpec,
    out: Path,
    *,
    progress: Progress | None,
    num_cpus: int,
    report_to: str | None,
) -> list[Path]:
    """The RLlib train stage.

    Every arm of one (family, visibility, seed) starts from the same checkpoint, the base: a
    warm start on oracle episodes only (no random turns), played at the generous T. ``base`` is
    that checkpoint, evaluated as it is; every RL arm resumes it for the family's PPO iterations
    under the arm's budget (``process`` with the ProcessReward signal added). On the curve's
    (family, seed), the ``fixed_generous`` policy is copied at each of ``curve_iterations``
    (budget hidden), so the learning curve is evaluated on the same unseen tasks.
    """
    from budget_envs.integrations.rllib.training import start_local_ray, train

    jobs = _train_jobs(spec, out)
    total = len(jobs) * len(spec.arms)
    done = 0
    policies = []
    import ray

    started = not ray.is_initialized()
    todo = [
        (f, v, s, a) for f, v, s in jobs for a in spec.arms if not _arm_done(spec, out, f, v, s, a)
    ]
    if started and todo:
        start_local_ray(num_cpus)
    try:
        for fam, vis, seed in jobs:
            root = policy_root(out, fam, vis, seed)
            common = _common(spec, fam, vis, seed, num_cpus, report_to)
            warm = warm_root(out, fam, vis, seed)
            if any(t[:3] == (fam, vis, seed) for t in todo) and not _trained(warm, 0):
                _warm_start(train, spec, fam, warm, common)
            # the imitation control last: it spends the env steps the RL arms took
            for arm in sorted(spec.arms, key=lambda a: a == IMITATION):
                target = root / arm
                policies.append(target)
                if progress is not None:
                    progress("train", done, total)
                if not _arm_done(spec, out, fam, vis, seed, arm):
                    _train_arm(train, spec, out, (fam, vis, seed), arm, warm, common)
                write_train_record(out, fam, vis, seed, arm, target, None if arm == BASE else warm)
                done += 1
        if progress is not None:
            progress("train", done, total)
    finally:
        if started and ray.is_initialized():
            ray.shutdown()
    return policies


def _warm_start(
    train: Callable[..., Any], spec: StudySpec, fam: Family, warm: Path, common: dict[str, Any]
) -> None:
    """Write the base checkpoint ``warm``: a warm start on oracle episodes at the generous T."""
    if warm.exists():
        shutil.rmtree(warm)  # a warm start killed half-way: redo it
    train(
        fam.env_id,
        budget=fam.generous,
        out_dir=warm,
        iterations=0,
        warm_start_episodes=fam.warm_start_episodes,
        warm_start_epochs=fam.warm_start_epochs,
        warm_start_explore=0.0,
        warm_start_lr=spec.warm_start_lr,
        **common,
    )


def _rl_env_steps(spec: StudySpec, out: Path, job: tuple[Family, str, int]) -> int:
    """The env steps the finished RL arms of ``job`` sampled (their mean; RLlib samples a
    little past each batch), or the family's nominal PPO steps when none has finished."""
    from budget_envs.integrations.rllib.training import read_metrics

    fam, vis, seed = job
    root = policy_root(out, fam, vis, seed)
    steps = []
    for arm in spec.arms:
        if arm not in (BASE, IMITATION) and _trained(root / arm, fam.iterations):
            rows = read_metrics(root / arm)
            steps.append(int(rows[-1]["timesteps"]))
    return round(sum(steps) / len(steps)) if steps else fam.steps()


def _train_arm(
    train: Callable[..., Any],
    spec: StudySpec,
    out: Path,
    job: tuple[Family, str, int],
    arm: str,
    warm: Path,
    common: dict[str, Any],
) -> None:
    """Train an unfinished arm of ``job`` from the base ``warm``, copied at each curve point."""
    fam, vis, seed = job
    target = policy_root(out, fam, vis, seed) / arm
    if not (target / "checkpoint").exists():
        if target.exists():
            shutil.rmtree(target)
        _copy(warm, target)
    if arm == BASE:
        return
    if arm == IMITATION:
        # as many env steps of new oracle episodes as the RL arms' PPO took, fitted from base
        # with the warm start's recipe (its rate, PPO's epochs over the data), no RL
        train(
            fam.env_id,
            budget=fam.generous,
            out_dir=target,
            iterations=0,
            resume=True,
            imitation_steps=_rl_env_steps(spec, out, job),
            imitation_epochs=fam.num_epochs,
            warm_start_episodes=fam.warm_start_episodes,
            warm_start_explore=0.0,
            warm_start_lr=spec.warm_start_lr,
            **common,
        )
        return
    points = spec.curve_points(fam, seed) if arm == RL and vis == "hidden" else []
    for stop in [*points, fam.iterations]:
        copy = curve_root(out, fam, vis, seed) / curve_agent(arm, fam.steps(stop))
        if stop in points and _trained(copy, stop):
            continue
        if stop in points and _trained(target, stop + 1):
            raise RuntimeError(
                f"{target} trained past iteration {stop} without its learning-curve "
                f"copy {copy}: delete {target} and run the study again"
            )
        train(
            fam.env_id,
            budget=arm_budget(arm, fam.tight, fam.generous),
            out_dir=target,
            iterations=stop,
            lr=spec.lr if fam.lr is None else fam.lr,
            entropy_coeff=spec.entropy_coeff,
            process_reward=fam.process_reward if arm == "process" else None,
            process_max_cost=fam.process_max_cost or fam.generous,
            checkpoint_every=5,
            resume=True,
            **common,
        )
        if stop in points:
            copy.parent.mkdir(parents=True, exist_ok=True)
            _copy(target, copy)


def _train_stage_trl(
    spec: StudySpec,
    out: Path,
    *,
    progress: Progress | None,
    num_cpus: int,
    report_to: str | None,
) -> list[Path]:
    """The TRL train stage (:func:`~budget_envs.study.trl_stage.train_stage_trl`)."""
    from budget_envs.study.trl_stage import train_stage_trl

    return train_stage_trl(spec, out, progress=progress, report_to=report_to)


#: The train stage of each trainer the study takes (the trainer table's ``study`` rows:
#: :func:`~budget_envs.integrations.trainers.study_trainers`).
TRAIN_STAGES: dict[str, Callable[..., list[Path]]] = {
    "rllib": _train_stage_rllib,
    "trl": _train_stage_trl,
}


def eval_plans(spec: StudySpec, out: Path, fam: Family, vis: str, seed: int) -> dict[str, Any]:
    """The eval runs of (family, visibility, seed), by name: all paired (the seed is the run
    seed, so every agent plays the same tasks with the same episode seeds).

    Budget hidden: ``episodes`` (every arm, the curve's checkpoints, random and the references;
    ``eval_samples`` samples at the grid's largest T, which gives every smaller T, with
    single-step probes on and off the oracle's path) and ``faults`` (the arms, ``fault_samples`` samples with one fault at
    each fault turn; its no-fault twins are the same episodes as ``episodes``' first samples).
    Budget visible: ``episodes`` at every T of the grid, ``visible_samples`` samples.
    """
    from budget_envs.eval.runner import EvalPlan

    root = policy_root(out, fam, vis, seed)
    on = "" if spec.device is None else f",device={spec.device}"
    arms = {agent_name(arm, seed): f"policy:{root / arm}{on}" for arm in spec.arms}
    curve = {
        agent_name(curve_agent(RL, fam.steps(i)), seed): "policy:"
        + str(curve_root(out, fam, vis, seed) / curve_agent(RL, fam.steps(i)))
        for i in (spec.curve_points(fam, seed) if vis == "hidden" else [])
    }
    everyone = {**arms, **curve, RANDOM: RANDOM, **spec.references}
    grid = sorted(fam.eval_budgets)
    common = dict(
        env_ids=[fam.env_id],
        tasks=fam.eval_tasks,
        visibility=vis,
        seed=seed,
        env_kwargs=dict(fam.eval_kwargs),
    )
    if vis != "hidden":
        return {
            "episodes": EvalPlan(
                agents=everyone, samples=fam.visible_samples, budgets=grid, **common
            )
        }
    plans = {
        "episodes": EvalPlan(
            agents=everyone,
            samples=fam.eval_samples,
            budgets=[grid[-1]],
            # a policy agent that cannot replay an oracle prefix (TRL's own) gets no probes:
            # C2 does not run; one that plays as the lm agent (from an SFT folder) does
            probe_states=fam.probe_states if study_probes(spec.trainer, spec.model) else 0,
            offpath_probe_states=fam.probe_states if study_probes(spec.trainer, spec.model) else 0,
            **common,
        )
    }
    if fam.fault_turns:
        plans["faults"] = EvalPlan(
            agents=arms,
            samples=fam.fault_samples,
            budgets=[grid[-1]],
            fault_turns=list(fam.fault_turns),
            **common,
        )
    return plans


def eval_stage(
    spec: StudySpec, out: Path, *, progress: Progress | None = None, workers: int = 2
) -> list[Path]:
    """Evaluate each (family, visibility, seed)'s arms, the random agent and the spec's
    reference agents on unseen tasks (:func:`eval_plans`); finished runs are merged and gzipped
    into ``records/``."""
    from budget_envs.eval.runner import run_plan
    from budget_envs.eval.runner.records import RECORDS_FILE

    written = []
    for fam in spec.families:
        for vis in spec.visibilities:
            for seed in spec.seeds_for(vis, fam):
                target = records_path(out, fam, vis, seed)
                written.append(target)
                if target.exists():
                    continue
                runs = []
                for name, plan in eval_plans(spec, out, fam, vis, seed).items():
                    run_dir = out / "eval" / fam.name / vis / f"s{seed}" / name
                    count: dict[str, Any] = {"done": 0, "total": 0}
                    count["stage"] = f"eval {fam.name} {vis} s{seed} {name}"

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
                        # After training in this process torch's thread pool exists: a forked
                        # worker can deadlock on its locks, so the workers start fresh.
                        start_method="spawn" if workers > 1 else None,
                        resume=True,
                        on_start=on_start,
                        on_record=on_record,
                    )
                    if result.errors:
                        raise RuntimeError(
                            f"{run_dir}: {result.errors} episode(s) failed; see the error fields "
                            f"of {run_dir / RECORDS_FILE} and run the study again to retry them"
                        )
                    runs.append(run_dir / RECORDS_FILE)
                compress_records(runs, target)
    return written


def compare_stage(
    spec: StudySpec,
    out: Path,
    records: Sequence[dict[str, Any]] | None = None,
    *,
    figures: bool = True,
) -> list[Any]:
    """``compare`` each arm against ``base`` (and each other RL arm against ``fixed_generous``)
    per family and visibility, into ``compare/``: difference surfaces with paired bootstrap
    intervals over (task, seed) units (and their heatmaps unless ``figures`` is False); a pair
    without records of one side (a cell not run yet) is left out."""
    records = load_study_records(out) if records is None else records
    results = []
    for fam in spec.families:
        for vis in spec.visibilities:
            mine = select(records, fam.name, vis)
            if not mine:
                continue
            played = {r["agent"] for r in mine}
            for arm in spec.arms:
                for base in (BASE, RL):
                    if arm == base or base not in spec.arms or (base, arm) == (RL, BASE):
                        continue
                    if not {arm, base} <= played:  # an arm without records yet
                        continue
                    folder = compare_dir(out, fam, vis, arm, base)
                    results += compare_arms(mine, base, arm, spec.n_boot, folder, figures=figures)
    return results
