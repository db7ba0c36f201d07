"""The stages that fill a study folder: train the arms, evaluate them, compare them.

Every stage skips what is finished: a policy folder with its ``metrics.csv`` complete, an eval
whose records are compressed. A killed study is resumed by running it again.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from budget_envs.study.folder import (
    agent_name,
    compare_dir,
    compress_records,
    load_study_records,
    policy_root,
    records_path,
    select,
    warm_root,
)
from budget_envs.study.spec import RANDOM, StudySpec, arm_budget
from budget_envs.study.stats import compare_arms

#: ``progress(stage, done, total)``: how the long stages report (the CLI draws bars with it).
Progress = Callable[[str, int, int], None]


def _trained(policy_dir: Path, iterations: int) -> bool:
    """Whether ``policy_dir`` holds a policy with its ``iterations`` PPO iterations done."""
    from budget_envs.integrations.rllib_train import POLICY_FILE, read_metrics

    if not (policy_dir / POLICY_FILE).exists():
        return False
    return iterations == 0 or len(read_metrics(policy_dir)) >= iterations


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
    from budget_envs.integrations.rllib_train import start_local_ray, train

    jobs = [
        (fam, vis, seed, arm)
        for fam in spec.families
        for vis in spec.visibilities
        for seed in spec.seeds
        for arm in spec.arms
        # finished evals (committed records) need no policies: a clone of the study folder,
        # which has no policies/, does not train them again
        if not records_path(out, fam, vis, seed).exists()
    ]
    done = 0
    policies = []
    import ray

    started = not ray.is_initialized()
    if started and any(
        not _trained(policy_root(out, f, v, s) / a, f.iterations) for f, v, s, a in jobs
    ):
        start_local_ray(num_cpus)
    try:
        for fam, vis, seed, arm in jobs:
            root = policy_root(out, fam, vis, seed)
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
            warm = warm_root(out, fam, vis, seed, arm)
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
                    warm_start_explore=0.3,  # the study's design (train's default is now 0)
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
                target = records_path(out, fam, vis, seed)
                written.append(target)
                if target.exists():
                    continue
                agents: dict[str, Any] = {
                    agent_name(arm, seed): f"policy:{policy_root(out, fam, vis, seed) / arm}"
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
                compress_records(run_dir / RECORDS_FILE, target)
    return written


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
    records = load_study_records(out) if records is None else records
    results = []
    for fam in spec.families:
        for vis in spec.visibilities:
            mine = select(records, fam.name, vis)
            if not mine:
                continue
            for arm in spec.arms:
                for base in ("fixed_generous", RANDOM):
                    if arm == base or (base != RANDOM and base not in spec.arms):
                        continue
                    folder = compare_dir(out, fam, vis, arm, base)
                    results += compare_arms(mine, base, arm, spec.n_boot, folder, figures=figures)
    return results
