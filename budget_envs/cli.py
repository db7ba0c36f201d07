"""The ``budgetmix`` command line: list, play, eval, report, compare, demo, prepare, serve-web.

This module is the only place in the package that prints or draws progress bars.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

__all__ = ["main"]


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return values


def _json_dict(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def _agents(values: Sequence[str]) -> dict[str, str]:
    """``NAME=SPEC`` or just ``SPEC`` (then the agent's own name is used)."""
    from budget_envs.eval.agents import make_agent

    out: dict[str, str] = {}
    for value in values:
        name, eq, spec = value.partition("=")
        if eq and ":" not in name and "," not in name:
            key, spec = name, spec
        else:
            spec = value
            key = make_agent(spec).name
        if key in out:
            raise SystemExit(
                f"budgetmix: agent name {key!r} given twice; use NAME=SPEC to tell them apart"
            )
        out[key] = spec
    return out


class _Progress:
    """tqdm progress hooks for :func:`budget_envs.eval.runner.run_plan`."""

    def __init__(self, desc: str, enabled: bool = True) -> None:
        self.desc = desc
        self.enabled = enabled
        self.bar: Any = None
        self.errors = 0

    def start(self, total: int, skipped: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, initial=skipped, desc=self.desc, unit="ep", file=sys.stderr, leave=False
        )

    def record(self, rec: Any) -> None:
        if rec.error:
            self.errors += 1
        if self.bar is not None:
            self.bar.update(1)
            if self.errors:
                self.bar.set_postfix(errors=self.errors)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------------- list
def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    from budget_envs.registry import entry_for, registered_ids

    ids = registered_ids()
    if not ids:
        print("No BudgetMix env is registered yet.", file=out)
        return 0
    width = max(len(i) for i in ids)
    for env_id in ids:
        entry = entry_for(env_id)
        extra = f"  [needs budget-envs[{entry.requires}]]" if entry.requires else ""
        print(
            f"{env_id:<{width}}  T={entry.default_budget!s:<8} {entry.description}{extra}", file=out
        )
    return 0


# ---------------------------------------------------------------------- eval
def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    from budget_envs.eval.runner import EvalPlan, run_plan

    plan = EvalPlan(
        env_ids=list(args.env_ids),
        agents=_agents(args.agent or ["random"]),
        tasks=args.tasks,
        samples=args.samples,
        budgets=args.budgets,
        visibility=args.visibility,
        fault_turns=args.fault_turns or [],
        fault_kinds=tuple(args.fault_kinds.split(",")),
        probe_states=args.probe_states,
        track_oracle=not args.no_oracle,
        seed=args.seed,
        env_kwargs=args.env_kwargs or {},
    )
    progress = _Progress("eval", enabled=not args.quiet)
    try:
        result = run_plan(
            plan,
            args.out,
            workers=args.workers,
            ray=args.ray,
            resume=args.resume,
            on_start=progress.start,
            on_record=progress.record,
        )
    except FileExistsError as exc:
        print(f"budgetmix eval: {exc}", file=sys.stderr)
        return 2
    finally:
        progress.close()
    print(
        f"{result.ran} records written to {result.run_dir} ({result.skipped} already done, "
        f"{result.errors} errors). Next: budgetmix report {result.run_dir}",
        file=out,
    )
    return 1 if result.errors else 0


# ---------------------------------------------------------------------- report / compare
def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    from budget_envs.eval.report import write_report
    from budget_envs.eval.runner import load_records

    records = load_records(args.run)
    if not records:
        print(f"budgetmix report: no records in {args.run}", file=sys.stderr)
        return 2
    out_dir = Path(args.out) if args.out else Path(args.run) / "report"
    import gymnasium as gym

    try:
        result = write_report(
            records, out_dir, n_boot=args.boot, seed=args.seed, figures=not args.no_figures
        )
    except gym.error.DependencyNotInstalled as exc:
        print(f"budgetmix report: {exc}; or pass --no-figures for the tables only", file=sys.stderr)
        return 2
    print(result.text, file=out)
    print(
        f"\nWrote {result.markdown}, {len(result.tables)} CSV tables and {len(result.figures)} figures to {out_dir}",
        file=out,
    )
    return 0


def cmd_compare(args: argparse.Namespace, out: TextIO) -> int:
    import gymnasium as gym

    from budget_envs.eval.report import compare_runs
    from budget_envs.eval.runner import load_records

    a, b = load_records(args.run_a), load_records(args.run_b)
    for run, recs in ((args.run_a, a), (args.run_b, b)):
        if not recs:
            print(f"budgetmix compare: no records in {run}", file=sys.stderr)
            return 2
    out_dir = Path(args.out) if args.out else Path(args.run_b) / "compare"
    try:
        results = compare_runs(
            a,
            b,
            out_dir,
            agent_a=args.agent_a,
            agent_b=args.agent_b,
            n_boot=args.boot,
            seed=args.seed,
            figures=not args.no_figures,
        )
    except (ValueError, gym.error.DependencyNotInstalled) as exc:
        print(f"budgetmix compare: {exc}", file=sys.stderr)
        return 2
    for c in results:
        print(c.text, file=out)
    print(f"Wrote {out_dir / 'compare.md'} and {out_dir / 'difference.csv'}", file=out)
    return 0


# ---------------------------------------------------------------------- play
def cmd_play(args: argparse.Namespace, out: TextIO, inp: TextIO) -> int:
    import gymnasium as gym

    kwargs: dict[str, Any] = dict(args.env_kwargs or {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(
            args.env_id,
            budget=args.budget if args.budget else _default_budget(args.env_id),
            visibility="hidden",
            **kwargs,
        )
    options: dict[str, Any] = {}
    if args.task is not None:
        options["task_id"] = int(args.task) if args.task.isdigit() else args.task
    obs, info = env.reset(seed=args.seed, options=options or None)
    print(f"{args.env_id}  task {info['task_id']}", file=out)
    print(f"Goal: {info['goal']}", file=out)
    print("Type an action and press Enter. :actions lists valid actions, :quit ends.", file=out)
    while True:
        b = info["budget"]
        print(f"\n{obs}\n[turn {b['used']}/{b['limit']}, {b['remaining']} left]", file=out)
        print("> ", end="", file=out, flush=True)
        line = inp.readline()
        if not line:
            print("\n(end of input)", file=out)
            return 0
        action = line.rstrip("\n")
        if action.strip() == ":quit":
            return 0
        if action.strip() == ":actions":
            acts = info.get("admissible_actions") or []
            print("Valid now: " + ", ".join(acts), file=out)
            continue
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            s = info.get("episode_summary", {})
            verdict = (
                "You won"
                if s.get("won")
                else ("Out of turns" if truncated and not terminated else "Episode over")
            )
            print(
                f"\n{obs}\n\n{verdict}: {s.get('used')} of {s.get('limit')} turns used, "
                f"first success at turn {s.get('first_success_turn')}.",
                file=out,
            )
            return 0


def _default_budget(env_id: str) -> Any:
    from budget_envs.registry import entry_for

    return entry_for(env_id).default_budget


# ---------------------------------------------------------------------- dispatchers
def _dispatch(
    module: str, func_names: Sequence[str], argv: Sequence[str], what: str, hint: str
) -> int:
    if (
        importlib.util.find_spec(module.rsplit(".", 1)[0]) is None
        or importlib.util.find_spec(module) is None
    ):
        print(
            f"budgetmix: {what} is not available in this install ({module} is missing). {hint}",
            file=sys.stderr,
        )
        return 2
    mod = importlib.import_module(module)
    for name in func_names:
        fn = getattr(mod, name, None)
        if callable(fn):
            return int(fn(list(argv)) or 0)
    print(f"budgetmix: {module} has none of {list(func_names)}", file=sys.stderr)
    return 2


def cmd_prepare(args: argparse.Namespace, out: TextIO) -> int:
    family = args.family.lower()
    if family not in ("textworld", "alfworld"):
        print(
            f"budgetmix prepare: unknown family {args.family!r}; expected textworld or alfworld",
            file=sys.stderr,
        )
        return 2
    return _dispatch(
        f"budget_envs.envs.{family}.cli",
        ("prepare_main",),
        args.rest,
        f"prepare {family}",
        f'Install the family with pip install "budget-envs[{family}]".',
    )


def cmd_serve_web(args: argparse.Namespace, out: TextIO) -> int:
    return _dispatch(
        "budget_envs.envs.webshop.cli",
        ("serve_main",),
        args.rest,
        "serve-web",
        "The web shop family is not installed.",
    )


def cmd_export_webshop(args: argparse.Namespace, out: TextIO) -> int:
    return _dispatch(
        "budget_envs.envs.webshop.cli",
        ("export_main",),
        args.rest,
        "export-webshop",
        "The web shop family is not installed.",
    )


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    """``budgetmix serve ID``: the env over OpenEnv's HTTP/WebSocket protocol (openenv extra)."""
    if importlib.util.find_spec("openenv") is None:
        print(
            'budgetmix serve: needs the openenv extra: pip install "budget-envs[openenv]"',
            file=sys.stderr,
        )
        return 2
    from budget_envs.service.server import serve

    kwargs: dict[str, Any] = {
        "visibility": args.visibility,
        "env_kwargs": args.env_kwargs,
        "max_sessions": args.max_sessions,
        "idle_timeout": args.idle_timeout if args.idle_timeout > 0 else None,
        "max_message_bytes": args.max_message_bytes,
    }
    if args.budget is not None:
        budget = args.budget.strip()
        kwargs["budget"] = None if budget == "none" else int(budget) if budget.isdigit() else budget
    if args.faults:
        text = args.faults.strip()
        kwargs["faults"] = json.loads(text) if text[:1] in "{[" else text.split(",")
    print(
        f"serving {args.env_id} on http://{args.host}:{args.port} (WebSocket /ws, "
        f"{args.max_sessions} sessions); Ctrl-C stops",
        file=out,
        flush=True,
    )
    serve(args.env_id, host=args.host, port=args.port, **kwargs)
    return 0


# ---------------------------------------------------------------------- demo
def _family_of(env_id: str) -> str:
    return env_id.split("/")[-1].split("-")[0]


def _demo_ids() -> tuple[list[str], str]:
    from budget_envs.registry import ENV_TABLE, registered_ids

    if ENV_TABLE:
        ids, seen = [], set()
        for entry in ENV_TABLE:
            fam = _family_of(entry.id)
            if fam not in seen:
                seen.add(fam)
                ids.append(entry.id)
        return ids, "product families"
    return registered_ids(), "registered ids (no product family is registered yet)"


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from budget_envs.eval.report import compare_runs, write_report
    from budget_envs.eval.runner import EvalPlan, default_t_max, load_records, run_plan, transcript

    start = time.perf_counter()
    out_dir = Path(args.out)
    env_ids, source = _demo_ids()
    if args.env:
        env_ids, source = list(args.env), "ids given with --env"
    if not env_ids:
        print("budgetmix demo: no env is registered, so there is nothing to evaluate.", file=out)
        return 1
    print(f"Demo on {len(env_ids)} {source}: {', '.join(env_ids)}", file=out)
    usable, skipped = [], []
    for env_id in env_ids:
        try:
            transcript(env_id, seed=args.seed, max_turns=1)
        except Exception as exc:  # the demo reports any env that cannot run, and carries on
            skipped.append((env_id, f"{type(exc).__name__}: {exc}"))
        else:
            usable.append(env_id)
    for env_id, why in skipped:
        print(f"SKIPPED {env_id}: {why}", file=out)
    if not usable:
        return 1
    agents = {
        "random": "random",
        "oracle": "oracle",
        f"oracle-eps{args.epsilon:g}": f"oracle:epsilon={args.epsilon}",
    }
    runs = out_dir / "runs"
    rc = 0
    all_records: list[dict[str, Any]] = []
    for env_id in usable:
        t_max = (
            min(default_t_max(env_id), args.max_turns) if args.max_turns else default_t_max(env_id)
        )
        tasks = _spread_tasks(env_id, args.tasks)
        hidden = EvalPlan(
            env_ids=[env_id],
            agents=agents,
            tasks=tasks,
            samples=args.samples,
            budgets=[t_max],
            visibility="hidden",
            fault_turns=args.fault_turns,
            probe_states=args.probe_states,
            seed=args.seed,
        )
        visible = EvalPlan(
            env_ids=[env_id],
            agents={f"oracle-eps{args.epsilon:g}": agents[f"oracle-eps{args.epsilon:g}"]},
            tasks=tasks,
            samples=args.samples,
            budgets=sorted({max(1, t_max // 4), max(1, t_max // 2), t_max}),
            visibility="remaining",
            seed=args.seed,
        )
        slug = env_id.replace("/", "_")
        for name, plan in (("hidden", hidden), ("visible", visible)):
            progress = _Progress(f"{env_id} {name}", enabled=not args.quiet)
            try:
                result = run_plan(
                    plan,
                    runs / f"{slug}_{name}",
                    workers=args.workers,
                    resume=True,
                    on_start=progress.start,
                    on_record=progress.record,
                )
            except Exception as exc:
                print(f"FAILED {env_id} ({name} run): {type(exc).__name__}: {exc}", file=out)
                rc = 1
                continue
            finally:
                progress.close()
            if result.errors:
                rc = 1
                print(
                    f"{env_id} ({name} run): {result.errors} episodes ended in errors (see the report)",
                    file=out,
                )
            if result.skipped:
                print(
                    f"{env_id} ({name} run): reused {result.skipped} episodes from an earlier demo in "
                    f"{result.run_dir}; delete it to start fresh",
                    file=out,
                )
            all_records += load_records(result.run_dir)
    if not all_records:
        return 1
    report = write_report(
        all_records, out_dir, title="BudgetMix demo: reference agents", figures=not args.no_figures
    )
    try:
        comps = compare_runs(
            all_records,
            all_records,
            out_dir / "compare",
            agent_a="random",
            agent_b=f"oracle-eps{args.epsilon:g}",
            figures=not args.no_figures,
        )
    except ValueError:
        comps = []
    # ---- the short summary
    print("", file=out)
    lines = report.text.splitlines()
    a = lines.index("## Pass@(K,T)")
    b = next((i for i in range(a + 1, len(lines)) if lines[i].startswith("### ")), len(lines))
    print("\n".join(lines[a:b]).rstrip(), file=out)
    for section in ("## Single-step accuracy", "## Recovery"):
        if section in lines:
            a = lines.index(section)
            b = next(
                (i for i in range(a + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
            )
            table = [line for line in lines[a:b] if line.startswith("|")]
            if section == "## Recovery":
                table = table[:2] + _middle_budget_rows(table[2:])
                section += " (at the middle budget; every budget is in the report)"
            print(f"\n{section}\n" + "\n".join(table), file=out)
    for c in comps:
        print("\n" + c.text, file=out)
    for env_id in usable:
        print(f"\n## One oracle episode on {env_id} (budget shown to the agent)", file=out)
        t_max = (
            min(default_t_max(env_id), args.max_turns) if args.max_turns else default_t_max(env_id)
        )
        for turn in transcript(env_id, seed=args.seed, budget=t_max, max_turns=t_max):
            if turn["turn"] == 0:
                print(f"[reset] goal: {turn['goal']}", file=out)
                print(_indent(turn["observation"]), file=out)
            else:
                b_ = turn["budget"]
                fault = f"  FAULT {turn['fault']['kind']}" if turn.get("fault") else ""
                print(
                    f"[turn {b_['used']}/{b_['limit']}, {b_['remaining']} left] > {turn['action']}{fault}",
                    file=out,
                )
                print(_indent(turn["observation"]), file=out)
            if turn.get("episode_summary"):
                print(f"episode summary: {turn['episode_summary']}", file=out)
    print(
        f"\nReport: {report.markdown} ({len(report.figures)} figures, {len(report.tables)} tables); "
        f"records under {runs}; {time.perf_counter() - start:.0f} s.",
        file=out,
    )
    return rc


def _middle_budget_rows(rows: list[str]) -> list[str]:
    """Recovery table rows at each env's middle budget (column 4 is T)."""
    budgets: dict[str, set[int]] = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        budgets.setdefault(cells[0], set()).add(int(cells[3]))
    keep = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        ts = sorted(budgets[cells[0]])
        if int(cells[3]) == ts[len(ts) // 2]:
            keep.append(row)
    return keep


def _spread_tasks(env_id: str, count: int) -> list[int]:
    """``count`` task indices spread evenly over the env's task list (easy to hard levels)."""
    import gymnasium as gym

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(env_id, budget=None)
    try:
        total = len(env.unwrapped.task_ids)
    finally:
        env.close()
    if count >= total:
        return list(range(total))
    return sorted({int(round(i)) for i in np.linspace(0, total - 1, count)})


def _indent(text: str, width: int = 600) -> str:
    text = text if len(text) <= width else text[:width] + " [...]"
    return "\n".join("    " + line for line in text.splitlines())


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="budgetmix", description="BudgetMix: text-agent envs under a turn budget."
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="list the registered env ids")

    e = sub.add_parser("eval", help="evaluate agents: tasks x samples x budgets x faults")
    e.add_argument("env_ids", nargs="+", metavar="ENV_ID")
    e.add_argument(
        "--agent",
        action="append",
        metavar="[NAME=]SPEC",
        help="random | oracle | oracle:epsilon=0.3 | chat:base_url=URL,model=NAME[,temperature=0.7,"
        "api_key_env=VAR,max_tokens=256,history=20,retries=3,timeout=60] (repeatable)",
    )
    e.add_argument("--tasks", type=int, default=5, help="first N tasks of each env (default 5)")
    e.add_argument(
        "--samples", type=int, default=4, help="episodes per task: n of Pass@(K,T) (default 4)"
    )
    e.add_argument(
        "--budgets", type=_ints, default=None, help="e.g. 5,10,20 (default: the env's T_max)"
    )
    e.add_argument(
        "--visibility",
        default="hidden",
        help="hidden (default; one run gives every T), remaining, final_warning",
    )
    e.add_argument(
        "--fault-turns",
        type=_ints,
        default=None,
        help="also run with one fault at each of these turns",
    )
    e.add_argument("--fault-kinds", default="slip,drop", help="fault kinds (default slip,drop)")
    e.add_argument(
        "--probe-states",
        type=int,
        default=0,
        help="single-step probes from the first N oracle-prefix states",
    )
    e.add_argument(
        "--no-oracle", action="store_true", help="do not record per-turn oracle agreement"
    )
    e.add_argument("--seed", type=int, default=0)
    e.add_argument(
        "--env-kwargs", type=_json_dict, default=None, help="JSON constructor kwargs of the env"
    )
    e.add_argument("--out", required=True, metavar="RUN", help="run directory")
    e.add_argument("--workers", type=int, default=1, help="local worker processes")
    e.add_argument(
        "--ray", default=None, metavar="auto|local|ADDRESS", help="run episodes as Ray tasks"
    )
    e.add_argument("--resume", action="store_true", help="continue RUN, skipping finished episodes")
    e.add_argument("--quiet", action="store_true", help="no progress bar")

    r = sub.add_parser("report", help="tables and figures of a run")
    r.add_argument("run", metavar="RUN")
    r.add_argument("--out", default=None, help="default RUN/report")
    r.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--no-figures", action="store_true")

    c = sub.add_parser("compare", help="difference surface RUN_B - RUN_A")
    c.add_argument("run_a", metavar="RUN_A")
    c.add_argument("run_b", metavar="RUN_B")
    c.add_argument("--agent-a", default=None, help="agent of RUN_A (when it holds several)")
    c.add_argument("--agent-b", default=None, help="agent of RUN_B (when it holds several)")
    c.add_argument("--out", default=None, help="default RUN_B/compare")
    c.add_argument("--boot", type=int, default=1000)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--no-figures", action="store_true")

    pl = sub.add_parser("play", help="play an env in the terminal, budget shown")
    pl.add_argument("env_id", metavar="ENV_ID")
    pl.add_argument("--budget", type=int, default=None, help="turn budget (default: the env's)")
    pl.add_argument("--task", default=None, help="task id or index")
    pl.add_argument("--seed", type=int, default=None)
    pl.add_argument("--env-kwargs", type=_json_dict, default=None)

    pr = sub.add_parser("prepare", help="generate and cache game files (textworld, alfworld)")
    pr.add_argument("family")
    pr.add_argument("rest", nargs=argparse.REMAINDER)

    sw = sub.add_parser("serve-web", help="serve the web shop over HTTP")
    sw.add_argument("rest", nargs=argparse.REMAINDER)
    ew = sub.add_parser("export-webshop", help="export the web shop's data")
    ew.add_argument("rest", nargs=argparse.REMAINDER)

    sv = sub.add_parser("serve", help="serve an env over OpenEnv's protocol (openenv extra)")
    sv.add_argument("env_id", metavar="ENV_ID")
    sv.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--budget", default=None, help="budget spec (default: the env's; none: bare)")
    sv.add_argument("--visibility", default="hidden", help="hidden, remaining, final_warning")
    sv.add_argument("--faults", default=None, help="kinds a,b or JSON of ErrorInjection args")
    sv.add_argument("--env-kwargs", type=_json_dict, default=None)
    sv.add_argument("--max-sessions", type=int, default=64, help="concurrent sessions (64)")
    sv.add_argument("--idle-timeout", type=float, default=300.0, help="seconds; 0: never")
    sv.add_argument("--max-message-bytes", type=int, default=1 << 20)

    d = sub.add_parser("demo", help="the main job: reference agents on every registered family")
    d.add_argument("--out", default="demo_out", help="output directory (default demo_out)")
    d.add_argument("--tasks", type=int, default=5, help="tasks per env, spread over its task list")
    d.add_argument("--samples", type=int, default=4)
    d.add_argument("--epsilon", type=float, default=0.3)
    d.add_argument("--probe-states", type=int, default=4)
    d.add_argument(
        "--fault-turns", type=_ints, default=[1, 2, 4], help="fault probe turns (default 1,2,4)"
    )
    d.add_argument("--max-turns", type=int, default=None, help="cap each family's T_max")
    d.add_argument("--workers", type=int, default=2)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--env", action="append", default=None, help="only these ids (repeatable)")
    d.add_argument("--no-figures", action="store_true")
    d.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def main(
    argv: Sequence[str] | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    """Entry point of the ``budgetmix`` script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # The dispatchers hand everything after their name to the family's own parser (--help too).
    if (
        argv
        and argv[0] in ("serve-web", "export-webshop")
        or (argv[:1] == ["prepare"] and len(argv) > 1 and not argv[1].startswith("-"))
    ):
        head = 2 if argv[0] == "prepare" else 1
        args = argparse.Namespace(
            command=argv[0], family=argv[1] if head == 2 else None, rest=argv[head:], verbose=False
        )
    else:
        args = build_parser().parse_args(argv)
    out = stdout or sys.stdout
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    import budget_envs  # noqa: F401  (registers the ids)

    handlers = {
        "list": cmd_list,
        "eval": cmd_eval,
        "report": cmd_report,
        "compare": cmd_compare,
        "prepare": cmd_prepare,
        "serve-web": cmd_serve_web,
        "export-webshop": cmd_export_webshop,
        "demo": cmd_demo,
        "serve": cmd_serve,
    }
    if args.command == "play":
        return cmd_play(args, out, stdin or sys.stdin)
    return handlers[args.command](args, out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
