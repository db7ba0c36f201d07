"""``budgetmix demo``, the main job: reference agents on every registered family, then a trained
pair. This module shows the runs; what they are is :mod:`budget_envs.demo`."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, TextIO

from budget_envs import demo
from budget_envs.commands.args import ints, json_dict
from budget_envs.commands.common import (
    StageBars,
    check_env_ids,
    in_ci,
    missing_modules,
    options_named,
    pip_extra,
    print_few_tasks_warning,
    run_with_bar,
)
from budget_envs.errors import UsageError

__all__ = ["add_demo_parser", "cmd_demo"]


def add_demo_parser(sub: Any) -> None:
    """The ``demo`` subcommand's arguments."""
    d = sub.add_parser(
        "demo",
        help="the main job: reference agents on every registered family, and a trained pair",
    )
    d.add_argument("--out", default="demo_out", help="output directory (default demo_out)")
    d.add_argument("--tasks", type=int, default=5, help="tasks per env, spread over its task list")
    d.add_argument("--samples", type=int, default=4)
    d.add_argument("--epsilon", type=float, default=0.3)
    d.add_argument("--probe-states", type=int, default=4)
    d.add_argument(
        "--fault-turns", type=ints, default=[1, 2, 4], help="fault probe turns (default 1,2,4)"
    )
    d.add_argument("--max-turns", type=int, default=None, help="cap each family's T_max")
    d.add_argument("--workers", type=int, default=2)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--env", action="append", default=None, help="only these ids (repeatable)")
    d.add_argument("--no-figures", action="store_true")
    d.add_argument("--quiet", action="store_true", help="no progress bars")
    d.add_argument(
        "--strict",
        action="store_true",
        help="exit non-zero when a family is skipped (always on under CI=true)",
    )
    d.add_argument(
        "--no-train",
        action="store_true",
        help="skip the trained pair (fixed-T and BudgetMix policies on ToolUse, RLlib)",
    )
    # Field overrides of the trained pair's Family (smaller runs in tests), as JSON.
    d.add_argument("--train-sizes", type=json_dict, default=None, help=argparse.SUPPRESS)


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    start = time.perf_counter()
    out_dir = Path(args.out)
    pair_spec = None
    if not args.no_train:
        from budget_envs import study

        try:
            pair_spec = study.demo_spec(**(args.train_sizes or {}))
        except ValueError as exc:
            raise UsageError(f"bad --train-sizes: {exc}") from None
    env_ids, source = demo.demo_env_ids()
    if args.env:
        check_env_ids(args.env)
        env_ids, source = list(args.env), "ids given with --env"
    if not env_ids:
        print("budgetmix demo: no env is registered, so there is nothing to evaluate.", file=out)
        return 1
    print(f"Demo on {len(env_ids)} {source}: {', '.join(env_ids)}", file=out)
    usable, skipped = demo.probe_envs(env_ids, seed=args.seed)
    for env_id, why in skipped:
        print(f"SKIPPED {env_id}: {why}", file=out)
    strict = args.strict or in_ci()
    if not usable:
        return 1
    runs = out_dir / "runs"
    rc, records = _run_references(usable, runs, args, out)
    if not records:
        return 1
    report, comps = demo.reference_reports(
        records, out_dir, epsilon=args.epsilon, figures=not args.no_figures
    )
    print("", file=out)
    print(demo.summary(report.text), file=out)
    print_few_tasks_warning(records)
    for c in comps:
        print("\n" + c.text, file=out)
    for env_id in usable:
        _print_episode(env_id, args, out)
    pair = "off"
    if pair_spec is not None:
        pair = _demo_pair(pair_spec, out_dir / "trained", args, out)
        rc = 1 if pair == "failed" else rc
    print(
        f"\nReport: {report.markdown} ({len(report.figures)} figures, {len(report.tables)} tables); "
        f"records under {runs}; {time.perf_counter() - start:.0f} s in all.",
        file=out,
    )
    if (skipped or pair == "skipped") and strict:
        what = []
        if skipped:
            what.append(
                f"{len(skipped)} of {len(env_ids)} families were skipped "
                f"({', '.join(e for e, _ in skipped)})"
            )
        if pair == "skipped":
            what.append("the trained pair was skipped")
        print(
            f"FAILED: {'; '.join(what)}; a skip fails the demo under CI=true or --strict",
            file=out,
        )
        return 1
    return rc


def _run_references(
    env_ids: list[str], runs: Path, args: argparse.Namespace, out: TextIO
) -> tuple[int, list[dict[str, Any]]]:
    """Each env's hidden and visible runs into ``runs`` (resumed when there): the exit code so
    far and every record."""
    from budget_envs.eval.runner import load_records

    rc = 0
    records: list[dict[str, Any]] = []
    for env_id in env_ids:
        plans = demo.demo_plans(
            env_id,
            **options_named(
                args,
                "epsilon",
                "tasks",
                "samples",
                "fault_turns",
                "probe_states",
                "seed",
                "max_turns",
            ),
        )
        slug = env_id.replace("/", "_")
        for name, plan in plans:
            try:
                result = run_with_bar(
                    plan,
                    runs / f"{slug}_{name}",
                    f"{env_id} {name}",
                    quiet=args.quiet,
                    workers=args.workers,
                    resume=True,
                )
            except Exception as exc:
                print(f"FAILED {env_id} ({name} run): {type(exc).__name__}: {exc}", file=out)
                rc = 1
                continue
            if result.errors:
                rc = 1
                print(
                    f"{env_id} ({name} run): {result.errors} episodes ended in errors "
                    "(see the report)",
                    file=out,
                )
            if result.skipped:
                print(
                    f"{env_id} ({name} run): reused {result.skipped} episodes from an earlier "
                    f"demo in {result.run_dir}; delete it to start fresh",
                    file=out,
                )
            records += load_records(result.run_dir)
    return rc, records


def _print_episode(env_id: str, args: argparse.Namespace, out: TextIO) -> None:
    """One oracle episode with the budget shown, turn by turn."""
    from budget_envs.eval.runner import transcript

    print(f"\n## One oracle episode on {env_id} (budget shown to the agent)", file=out)
    t = demo.t_max(env_id, args.max_turns)
    for turn in transcript(env_id, seed=args.seed, budget=t, max_turns=t):
        if turn["turn"] == 0:
            print(f"[reset] goal: {turn['goal']}", file=out)
        else:
            b = turn["budget"]
            fault = f"  FAULT {turn['fault']['kind']}" if turn.get("fault") else ""
            print(
                f"[turn {b['used']}/{b['limit']}, {b['remaining']} left] > {turn['action']}{fault}",
                file=out,
            )
        print(_indent(turn["observation"]), file=out)
        if turn.get("episode_summary"):
            print(f"episode summary: {turn['episode_summary']}", file=out)


def _indent(text: str, width: int = 600) -> str:
    text = text if len(text) <= width else text[:width] + " [...]"
    return "\n".join("    " + line for line in text.splitlines())


def _demo_pair(spec: Any, folder: Path, args: argparse.Namespace, out: TextIO) -> str:
    """The demo's trained pair (:func:`budget_envs.demo.run_pair`) and its summary.

    Returns ``"done"``, ``"skipped"`` (no RLlib) or ``"failed"``.
    """
    from budget_envs import study

    fam = spec.families[0]
    trained = ", ".join(
        f"{arm} (T {study.arm_budget(arm, fam.tight, fam.generous)})"
        for arm in spec.arms
        if arm != study.BASE
    )
    print(f"\n## Trained arms on {fam.env_id}: {study.BASE} against {trained}", file=out)
    missing = missing_modules("ray", "torch")
    if missing:
        print(
            f"SKIPPED the trained pair: training needs {' and '.join(missing)}: "
            f"{pip_extra('rllib')}, or run the demo with --no-train",
            file=out,
        )
        return "skipped"
    bars = StageBars(enabled=not args.quiet)
    try:
        run = demo.run_pair(
            spec, folder, progress=bars, workers=args.workers, figures=not args.no_figures
        )
    except Exception as exc:  # the demo reports a failed pair and carries on
        print(f"FAILED the trained pair: {type(exc).__name__}: {exc}", file=out)
        if isinstance(exc, ValueError) and "holds another study" in str(exc):
            print(f"(delete {folder} to train the pair again)", file=out)
        return "failed"
    finally:
        bars.close()
    _print_pair(spec, run, folder, args, out)
    return "done"


def _print_pair(spec: Any, run: Any, folder: Path, args: argparse.Namespace, out: TextIO) -> None:
    """What the trained pair is, its last PPO iteration, its Pass@(K,T) tables and its files."""
    from budget_envs import study

    fam = spec.families[0]
    pair = run.pair
    refs = ", ".join([study.RANDOM, *spec.references])
    vis = "hidden" if pair.visibility == "hidden" else f"visible ({pair.visibility})"
    print(
        f"Budget {vis}, trained on {json.dumps(fam.train_kwargs)}: {pair.base} is a warm start on "
        f"{fam.warm_start_episodes} oracle episodes ({fam.warm_start_epochs} epochs); each other "
        f"arm resumes it for {fam.iterations} PPO iteration(s) of {fam.batch_size} steps. "
        f"Evaluated on {fam.eval_tasks} unseen tasks of {json.dumps(fam.eval_kwargs)} x "
        f"{fam.eval_samples} samples, with {refs} on the same tasks and episode seeds.",
        file=out,
    )
    if pair.training:
        nan = float("nan")
        cells = [
            f"{arm} win rate {row.get('win_rate', nan):.3f}, {row.get('turns', nan):.1f} turns, "
            f"mean T {row.get('budget_limit', nan):.1f}"
            for arm, row in pair.training.items()
        ]
        print("Last PPO iteration (training tasks): " + "; ".join(cells) + ".", file=out)
    if run.reused:
        print(
            f"(reused the finished policies and episodes of an earlier demo in {folder}; delete it "
            "to train again)",
            file=out,
        )
    _print_pass_tables(pair, out)
    same = "; ".join(f"{arm} {a} of {n}" for arm, (a, n) in pair.same_play.items())
    print(
        f"\nPaired episodes (same task, sample and episode seed) in which an arm played the same "
        f"actions as {pair.base}: {same}.",
        file=out,
    )
    figures = [] if args.no_figures else [*pair.figures, *run.report.figures]
    if figures:
        print("Figures: " + ", ".join(str(f) for f in figures), file=out)
    print(
        f"Trained arms: {folder / 'study.md'} (tables in {folder / 'tables'}, the comparisons in "
        f"{folder / 'compare'}); {run.seconds:.0f} s.",
        file=out,
    )


def _print_pass_tables(pair: Any, out: TextIO) -> None:
    """Per K, Pass@(K,T) of every agent and each arm minus the base with its interval."""
    for k in pair.ks:
        print(
            f"\nPass@({k},T) on {pair.units} unseen tasks; each arm - {pair.base} with its 95% "
            "paired bootstrap interval (budgetmix compare):",
            file=out,
        )
        header = ["T", *pair.agents, *(f"{arm} - {pair.base}" for arm in pair.arms)]
        print("| " + " | ".join(header) + " |", file=out)
        print("|" + "---|" * len(header), file=out)
        for j, t in enumerate(pair.ts):
            row = [str(t), *(f"{pair.pass_at[a][k][j]:.3f}" for a in pair.agents)]
            for arm in pair.arms:
                d, lo, hi = pair.diff[arm][k][j]
                row.append(f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]")
            print("| " + " | ".join(row) + " |", file=out)
