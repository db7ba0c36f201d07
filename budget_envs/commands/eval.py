"""``budgetmix eval``: agents from ``--agent`` and ``--agent-config``, one plan, its records and a
short Pass@1 table (the full report is ``budgetmix report``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from budget_envs.commands.args import grid, ints, json_dict
from budget_envs.commands.common import (
    check_env_ids,
    options_named,
    print_few_tasks_warning,
    run_with_bar,
)
from budget_envs.errors import UsageError

if TYPE_CHECKING:
    from budget_envs.eval.runner import EvalPlan, RunResult

__all__ = ["TRUST_POLICY_HELP", "add_eval_parser", "cmd_eval", "parse_agents"]

TRUST_POLICY_HELP = (
    "let policy:DIR agents load a folder that needs unpickling (an RLlib checkpoint without "
    "module.safetensors): unpickling runs any code the file names, so only for folders you "
    "trained yourself (docs/training.md)"
)


def add_eval_parser(sub: Any) -> None:
    """The ``eval`` subcommand's arguments."""
    e = sub.add_parser("eval", help="evaluate agents: tasks x samples x budgets x faults")
    e.add_argument("env_ids", nargs="+", metavar="ENV_ID")
    _add_agent_options(e)
    _add_grid_options(e)
    e.add_argument("--trust-policy", action="store_true", help=TRUST_POLICY_HELP)
    _add_probe_options(e)
    _add_run_options(e)


def _add_agent_options(e: argparse.ArgumentParser) -> None:
    """``eval``'s agents: ``--agent``, ``--agent-config``, ``--concurrency``."""
    e.add_argument(
        "--agent",
        action="append",
        metavar="[NAME=]SPEC",
        help="random | oracle | oracle:epsilon=0.3 | chat:base_url=URL,model=NAME[,temperature=0.7,"
        'max_tokens=256,stop=["\\n"],extra_body={...},api_key_env=VAR,concurrency=64,...] | '
        "policy:DIR[,greedy=true] | lm:model=smollm2-135m[,temperature=0.7,max_tokens=64]; "
        "values are JSON when they parse (repeatable; see docs/llm-agents.md, docs/training.md)",
    )
    e.add_argument(
        "--agent-config",
        action="append",
        metavar="FILE",
        help="agents from a YAML or JSON file: one mapping with kind: chat, ... or "
        "agents: {NAME: ...} (repeatable)",
    )
    e.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="requests in flight per process for chat agents (default: their spec's, 64)",
    )


def _add_grid_options(e: argparse.ArgumentParser) -> None:
    """``eval``'s grid: tasks, samples, budgets, visibility and faults."""
    e.add_argument(
        "--tasks",
        type=int,
        default=5,
        help="N tasks of each env, spread over its levels (default 5; intervals need 10+)",
    )
    e.add_argument("--samples", type=int, default=4, help="episodes per task: n of Pass@(K,T)")
    e.add_argument(
        "--budgets",
        type=grid,
        default=None,
        help="the budgets played: 5,10,20, a range 4..12 or 4..12:4 (default: T_max)",
    )
    e.add_argument(
        "--visibility",
        default="hidden",
        help="hidden (default; one run gives every T), remaining, final_warning",
    )
    e.add_argument(
        "--fault-turns",
        type=ints,
        default=None,
        help="also run with one fault at each of these turns",
    )
    e.add_argument("--fault-kinds", default="slip,drop", help="fault kinds (default slip,drop)")


def _add_probe_options(e: argparse.ArgumentParser) -> None:
    """``eval``'s probes: single-step probes, prefix probes, oracle agreement."""
    e.add_argument(
        "--probe-states",
        type=int,
        default=0,
        help="single-step probes from the first N oracle-prefix states",
    )
    e.add_argument(
        "--offpath-probe-states",
        type=int,
        default=0,
        metavar="N",
        help="single-step probes off the oracle's path: after each of the first N oracle "
        "prefixes, the oracle's next action replaced by a slip",
    )
    e.add_argument(
        "--prefix-turns",
        type=ints,
        default=None,
        metavar="T1,T2",
        help="prefix probes: replay the first t turns of failed episodes, then each agent plays "
        "the remaining T - t turns (e.g. 2,4; off by default)",
    )
    e.add_argument(
        "--prefix-from",
        default=None,
        metavar="own|NAME|[NAME=]SPEC",
        help="whose failed episodes are replayed: own (default: each agent its own), an --agent's "
        "name, or a reference agent's spec such as random or eps=oracle:epsilon=0.3 (added to "
        "the run); the same source for every agent is what compare pairs",
    )
    e.add_argument(
        "--prefix-episodes",
        type=int,
        default=20,
        metavar="N",
        help="failed episodes replayed per env and source, spread over the tasks (default 20)",
    )
    e.add_argument(
        "--no-oracle", action="store_true", help="do not record per-turn oracle agreement"
    )


def _add_run_options(e: argparse.ArgumentParser) -> None:
    """``eval``'s run: seed, env kwargs, the run folder, workers, resume and output."""
    e.add_argument("--seed", type=int, default=0)
    e.add_argument(
        "--env-kwargs", type=json_dict, default=None, help="JSON constructor kwargs of the env"
    )
    e.add_argument("--out", required=True, metavar="RUN", help="run directory")
    e.add_argument("--workers", type=int, default=1, help="local worker processes")
    e.add_argument(
        "--ray", default=None, metavar="auto|local|ADDRESS", help="play episodes on Ray env actors"
    )
    e.add_argument("--resume", action="store_true", help="continue RUN, skipping finished episodes")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    e.add_argument(
        "--save-transcripts",
        action="store_true",
        help="also write RUN/transcripts.jsonl: every episode as an OpenAI-style chat row",
    )


def _load_agent_config(path: str) -> list[tuple[str | None, str]]:
    """``(name or None, spec)`` pairs of an ``--agent-config`` file (YAML or JSON).

    The file holds one agent (a mapping with ``kind``; an optional ``name``) or several
    (``agents: {NAME: SPEC or mapping}``).
    """
    from budget_envs.eval.agents import spec_from_mapping

    try:
        text = open(path, encoding="utf-8").read()
    except OSError as exc:
        raise UsageError(f"cannot read --agent-config {path!r}: {exc.strerror}") from None
    try:
        if path.endswith(".json"):
            data = json.loads(text)
        else:
            try:
                import yaml
            except ImportError:
                raise UsageError(
                    f"--agent-config {path!r}: reading YAML needs PyYAML (pip install pyyaml), "
                    "or give a .json file"
                ) from None
            data = yaml.safe_load(text)
    except UsageError:
        raise
    except Exception as exc:  # json/yaml parse errors: one line naming the file
        raise UsageError(f"--agent-config {path!r} does not parse: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--agent-config {path!r} must hold a mapping, got {type(data).__name__}")
    items = data["agents"].items() if isinstance(data.get("agents"), dict) else [(None, data)]
    out: list[tuple[str | None, str]] = []
    for name, spec in items:
        if isinstance(spec, dict):
            spec = dict(spec)
            name = spec.pop("name", None) if name is None else name
            try:
                spec = spec_from_mapping(spec)
            except ValueError as exc:
                raise UsageError(f"--agent-config {path!r}: {exc}") from None
        if not isinstance(spec, str):
            raise UsageError(f"--agent-config {path!r}: agent {name!r} must be a spec or mapping")
        out.append((name, spec))
    return out


def _with_concurrency(spec: str, concurrency: int | None) -> str:
    """A chat spec with ``concurrency`` set (other kinds unchanged)."""
    from budget_envs.eval.agents import parse_spec, spec_from_mapping

    kind, kwargs = parse_spec(spec)
    if concurrency is None or kind != "chat":
        return spec
    return spec_from_mapping({"kind": kind, **kwargs, "concurrency": concurrency})


def _with_trust(spec: str, trust: bool) -> str:
    """``spec`` with ``trust=true`` when it is a policy agent and ``--trust-policy`` was given."""
    if not trust:
        return spec
    from budget_envs.eval.agents import parse_spec, spec_from_mapping

    kind, kwargs = parse_spec(spec)
    return spec_from_mapping({"kind": kind, **kwargs, "trust": True}) if kind == "policy" else spec


def parse_agents(
    values: Sequence[str],
    configs: Sequence[str] = (),
    concurrency: int | None = None,
    trust: bool = False,
) -> dict[str, str]:
    """``NAME=SPEC`` or just ``SPEC`` (then the agent's own name is used), then the agents of
    every ``--agent-config`` file; ``trust`` adds ``trust=true`` to policy agents."""
    from budget_envs.eval.agents import make_agent

    pairs: list[tuple[str | None, str, str]] = []
    for value in values:
        name, eq, spec = value.partition("=")
        if eq and ":" not in name and "," not in name:
            pairs.append((name, spec, value))
        else:
            pairs.append((None, value, value))
    for path in configs:
        pairs += [(name, spec, f"{spec} (from {path})") for name, spec in _load_agent_config(path)]
    out: dict[str, str] = {}
    for key, spec, shown in pairs:
        try:
            spec = _with_trust(_with_concurrency(spec, concurrency), trust)
            agent = make_agent(spec)  # checks the spec now, not in the first episode
        except (TypeError, ValueError) as exc:
            hint = ""
            if spec.startswith("chat") and "base_url" not in spec:
                hint = "; a chat agent needs base_url, e.g. chat:base_url=http://127.0.0.1:8000/v1,model=NAME"
            raise UsageError(f"bad --agent {shown!r}: {exc}{hint}") from None
        if key is None:
            key = agent.name
        if key in out:
            raise UsageError(f"agent name {key!r} given twice; use NAME=SPEC to tell them apart")
        out[key] = spec
    return out


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    """``budgetmix eval``: the agents, the plan, its run, then the records' short table."""
    check_env_ids(args.env_ids)
    agents = parse_agents(
        args.agent or ([] if args.agent_config else ["random"]),
        args.agent_config or (),
        args.concurrency,
        getattr(args, "trust_policy", False),
    )
    prefix_from = _prefix_source(args, agents)
    if args.quiet:  # also the model-loading bars of policy agents (here and in workers)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    plan = _plan_of(args, agents, prefix_from)
    result = _run(plan, args)
    if result is None:
        return 1
    _print_summary(plan, result, out)
    return 1 if result.errors else 0


def _plan_of(args: argparse.Namespace, agents: dict[str, str], prefix_from: str | None) -> EvalPlan:
    """The :class:`~budget_envs.eval.runner.EvalPlan` of the options (a bad one: UsageError)."""
    from budget_envs.eval.runner import EvalPlan

    try:
        return EvalPlan(
            env_ids=list(args.env_ids),
            agents=agents,
            tasks=args.tasks,
            samples=args.samples,
            budgets=args.budgets,
            visibility=args.visibility,
            fault_turns=args.fault_turns or [],
            fault_kinds=tuple(args.fault_kinds.split(",")),
            probe_states=args.probe_states,
            offpath_probe_states=args.offpath_probe_states,
            track_oracle=not args.no_oracle,
            seed=args.seed,
            env_kwargs=args.env_kwargs or {},
            prefix_turns=args.prefix_turns or [],
            prefix_from=prefix_from,
            prefix_episodes=args.prefix_episodes,
            transcripts=bool(getattr(args, "save_transcripts", False)),
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _run(plan: EvalPlan, args: argparse.Namespace) -> RunResult | None:
    """The plan's run under the progress bar: what the user can fix is a UsageError; None (the
    line printed) when the records could not be written."""
    import gymnasium as gym

    from budget_envs.errors import (
        OutDirError,
        PlanMismatch,
        PreflightError,
        RecordsWriteError,
        RunInUse,
    )
    from budget_envs.eval.runner.ray_backend import RayUnavailable

    try:
        return run_with_bar(
            plan,
            args.out,
            "eval",
            quiet=args.quiet,
            **options_named(args, "workers", "ray", "resume"),
        )
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    # another writer holds the folder, --resume with another plan, a folder it cannot write
    except (RunInUse, PlanMismatch, OutDirError) as exc:
        raise UsageError(str(exc)) from None
    except RayUnavailable as exc:
        raise UsageError(str(exc)) from None
    except PreflightError as exc:  # a dead server, a bad key, a model it does not serve
        raise UsageError(str(exc)) from None
    except gym.error.DependencyNotInstalled as exc:
        raise UsageError(str(exc)) from None
    except RecordsWriteError as exc:  # a full disk: one line, not a traceback
        print(f"budgetmix eval: {exc}", file=sys.stderr)
        return None


def _print_summary(plan: EvalPlan, result: RunResult, out: TextIO) -> None:
    """What the run wrote, the short Pass@1 table and where the full report comes from."""
    from budget_envs.eval.runner import TRANSCRIPTS_FILE, load_records

    prefix = f", {result.prefix_total} of them prefix probes" if plan.prefix_turns else ""
    print(
        f"{result.ran} records written to {result.run_dir} ({result.skipped} already done, "
        f"{result.errors} errors{prefix}).",
        file=out,
    )
    if plan.transcripts:
        print(f"Transcripts: {Path(result.run_dir) / TRANSCRIPTS_FILE}", file=out)
    if plan.prefix_turns and not result.prefix_total:
        print(
            "warning: no prefix probe ran: the source agent has no failed episode longer than "
            f"t={min(plan.prefix_turns)}",
            file=sys.stderr,
        )
    records = load_records(result.run_dir)
    table = _result_table(records)
    if table:
        print("\n" + "\n".join(table), file=out)
    print(
        f"\nThe full report (the Pass@(K,T) surface, single-step accuracy, recovery, figures): "
        f"budgetmix report {result.run_dir}  (writes {Path(result.run_dir) / 'report'}/report.md)",
        file=out,
    )
    print_few_tasks_warning(records)


def _result_table(records: Sequence[dict[str, Any]]) -> list[str]:
    """Lines of a short table: per env and agent, the episodes, Pass@1 at T_max with its 95%
    bootstrap interval over tasks (:func:`budget_envs.eval.report.group_surfaces`), and the
    mean turns; over the episodes without an injected fault. Empty without episodes."""
    from budget_envs.errors import DerivationError
    from budget_envs.eval.report import group_surfaces

    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("record", "episode") == "episode" and r.get("fault_turn") is None:
            key = (r["env_id"], r["agent"], r.get("visibility", "hidden"))
            groups.setdefault(key, []).append(r)
    if not groups:
        return []
    try:
        surfaces = {(s.env_id, s.agent, s.visibility): s for s in group_surfaces(records)}
    except (DerivationError, ValueError) as exc:
        print(f"warning: no Pass@1 table: {exc}", file=sys.stderr)
        return []
    header = ["env", "agent", "episodes", "errors", "T_max", "Pass@1 [95% CI]", "mean turns"]
    rows = [header]
    for (env_id, agent, vis), recs in sorted(groups.items()):
        ok = [r for r in recs if not r.get("error")]
        surface = surfaces.get((env_id, agent, vis))
        if surface is None:
            t_max, cell = str(max(int(r["budget"]) for r in recs)), "-"
        else:
            t_max = str(surface.ts[-1])
            mean, low, high = surface.mean[0, -1], surface.low[0, -1], surface.high[0, -1]
            cell = f"{mean:.3f} [{low:.3f}, {high:.3f}]"
        turns = f"{np.mean([int(r['turns']) for r in ok]):.1f}" if ok else "-"
        label = agent if vis == "hidden" else f"{agent} ({vis})"
        rows.append([env_id, label, str(len(recs)), str(len(recs) - len(ok)), t_max, cell, turns])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "Pass@1 at T_max (episodes without an injected fault; 95% bootstrap interval over tasks):"
    ]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return lines


def _prefix_source(args: argparse.Namespace, agents: dict[str, str]) -> str | None:
    """The ``prefix_from`` of the plan for ``--prefix-from``: None for ``own``, an agent's name;
    a ``[NAME=]SPEC`` that names no agent of the run adds that reference agent to ``agents``."""
    value = args.prefix_from
    if value is None or value == "own":
        return None
    if not args.prefix_turns:
        raise UsageError("--prefix-from needs --prefix-turns (the prefix lengths t to replay)")
    if value in agents:
        return value
    (name, spec), *_ = parse_agents(
        [value], concurrency=args.concurrency, trust=getattr(args, "trust_policy", False)
    ).items()
    if name in agents and agents[name] != spec:
        raise UsageError(
            f"--prefix-from {value!r}: the name {name!r} is an --agent with another spec "
            f"({agents[name]!r}); give the reference agent another name with NAME=SPEC"
        )
    agents[name] = spec
    return name
