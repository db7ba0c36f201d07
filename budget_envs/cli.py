"""The ``budgetmix`` command line: list, play, eval, report, compare, demo, train, prepare,
serve-web.

This module is the only place in the package that prints or draws progress bars.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from budget_envs.errors import UsageError

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


#: Below this many tasks, a bootstrap interval over tasks says little (a 3-task run of a perfect
#: agent prints [1.000, 1.000]).
MIN_TASKS_FOR_INTERVALS = 10


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("budget-envs")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


def _check_env_ids(env_ids: Sequence[str]) -> None:
    """Raise :class:`UsageError` naming the closest registered id for an unknown one."""
    from budget_envs.registry import registered_ids

    known = registered_ids()
    for env_id in env_ids:
        if env_id in known:
            continue
        by_lower = {k.lower(): k for k in known}
        by_name = {k.split("/")[-1].lower(): k for k in known}
        guess = by_lower.get(env_id.lower()) or by_name.get(env_id.split("/")[-1].lower())
        if guess is None:
            close = difflib.get_close_matches(env_id, known, n=1, cutoff=0.6)
            guess = close[0] if close else None
        hint = f"; did you mean {guess!r}?" if guess else ""
        raise UsageError(
            f"unknown env id {env_id!r}{hint} (`budgetmix list` shows every registered id)"
        )


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _few_tasks_warning(records: Sequence[Any]) -> str | None:
    """A warning line when fewer than 10 tasks back the intervals of some env, else None."""
    tasks: dict[str, set[str]] = {}
    for r in records:
        if r.get("record", "episode") == "episode":
            tasks.setdefault(r["env_id"], set()).add(r["task_id"])
    few = {env: len(ids) for env, ids in tasks.items() if len(ids) < MIN_TASKS_FOR_INTERVALS}
    if not few:
        return None
    which = ", ".join(f"{env}: {n}" for env, n in sorted(few.items()))
    return (
        f"warning: fewer than {MIN_TASKS_FOR_INTERVALS} tasks back the confidence intervals "
        f"({which}); the bootstrap over so few tasks is not reliable, use --tasks "
        f"{MIN_TASKS_FOR_INTERVALS} or more"
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


def _agents(
    values: Sequence[str],
    configs: Sequence[str] = (),
    concurrency: int | None = None,
) -> dict[str, str]:
    """``NAME=SPEC`` or just ``SPEC`` (then the agent's own name is used), then the agents of
    every ``--agent-config`` file."""
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
            spec = _with_concurrency(spec, concurrency)
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


class _Progress:
    """tqdm progress hooks for :func:`budget_envs.eval.runner.run_plan`."""

    def __init__(self, desc: str, enabled: bool = True) -> None:
        self.desc = desc
        self.enabled = enabled
        self.bar: Any = None
        self.errors = 0

    def start(self, total: int, skipped: int) -> None:
        """Open a bar for a phase of the run (a second call: the prefix probes)."""
        if not self.enabled:
            return
        from tqdm import tqdm

        desc, unit = self.desc, "ep"
        if self.bar is not None:
            self.bar.close()
            desc, unit = f"{self.desc} prefix probes", "probe"
        self.bar = tqdm(
            total=total, initial=skipped, desc=desc, unit=unit, file=sys.stderr, leave=False
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


class _StageBars:
    """tqdm bars for the study's ``progress(stage, done, total)`` hook: one bar per stage."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.bars: dict[str, Any] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        bar = self.bars.get(stage)
        if bar is None:
            from tqdm import tqdm

            bar = self.bars[stage] = tqdm(total=total, desc=stage, file=sys.stderr)
        bar.total = total
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


# ---------------------------------------------------------------------- list
def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    from budget_envs.registry import entry_for, registered_ids

    ids = registered_ids()
    if not ids:
        print("No BudgetMix env is registered yet.", file=out)
        return 0
    entries = [entry_for(env_id) for env_id in ids]
    width = max(len(e.id) for e in entries)
    fwidth = max(len(e.family) for e in entries if e.family != e.id) if entries else 0
    for entry in entries:
        family = "" if entry.family == entry.id else entry.family
        extra = f"  [needs budget-envs[{entry.requires}]]" if entry.requires else ""
        print(
            f"{entry.id:<{width}}  {family:<{fwidth}}  T={entry.default_budget!s:<8} "
            f"{entry.description}{extra}",
            file=out,
        )
    prepared = sorted({e.family for e in entries if e.prepare is not None}, key=str.lower)
    if prepared:
        print(
            "\nFamilies with files to prepare ahead (budgetmix prepare FAMILY): "
            + ", ".join(prepared),
            file=out,
        )
    return 0


# ---------------------------------------------------------------------- eval
def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    import gymnasium as gym

    from budget_envs.errors import PreflightError, RecordsWriteError
    from budget_envs.eval.runner import EvalPlan, load_records, run_plan
    from budget_envs.eval.runner.ray_backend import RayUnavailable

    _check_env_ids(args.env_ids)
    agents = _agents(
        args.agent or ([] if args.agent_config else ["random"]),
        args.agent_config or (),
        args.concurrency,
    )
    prefix_from = _prefix_source(args, agents)
    if args.quiet:  # also the model-loading bars of policy agents (here and in workers)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        plan = EvalPlan(
            env_ids=list(args.env_ids),
            agents=agents,
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
            prefix_turns=args.prefix_turns or [],
            prefix_from=prefix_from,
            prefix_episodes=args.prefix_episodes,
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
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
        raise UsageError(str(exc)) from None
    except RayUnavailable as exc:
        raise UsageError(str(exc)) from None
    except PreflightError as exc:  # a dead server, a bad key, a model it does not serve
        raise UsageError(str(exc)) from None
    except gym.error.DependencyNotInstalled as exc:
        raise UsageError(str(exc)) from None
    except RecordsWriteError as exc:  # a full disk: one line, not a traceback
        progress.close()
        print(f"budgetmix eval: {exc}", file=sys.stderr)
        return 1
    finally:
        progress.close()
    prefix = f", {result.prefix_total} of them prefix probes" if plan.prefix_turns else ""
    print(
        f"{result.ran} records written to {result.run_dir} ({result.skipped} already done, "
        f"{result.errors} errors{prefix}).",
        file=out,
    )
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
    warning = _few_tasks_warning(records)
    if warning:
        print(warning, file=sys.stderr)
    return 1 if result.errors else 0


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
    (name, spec), *_ = _agents([value], concurrency=args.concurrency).items()
    if name in agents and agents[name] != spec:
        raise UsageError(
            f"--prefix-from {value!r}: the name {name!r} is an --agent with another spec "
            f"({agents[name]!r}); give the reference agent another name with NAME=SPEC"
        )
    agents[name] = spec
    return name


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
    warning = _few_tasks_warning(records)
    if warning:
        print(warning, file=sys.stderr)
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
    extra = f", {out_dir / 'prefix_difference.csv'}" if any(c.prefix for c in results) else ""
    print(f"Wrote {out_dir / 'compare.md'}, {out_dir / 'difference.csv'}{extra}", file=out)
    return 0


# ---------------------------------------------------------------------- play
def cmd_play(args: argparse.Namespace, out: TextIO, inp: TextIO) -> int:
    import gymnasium as gym

    _check_env_ids([args.env_id])
    kwargs: dict[str, Any] = dict(args.env_kwargs or {})
    if args.faults:
        kwargs["faults"] = _faults(args.faults)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make(
                args.env_id,
                budget=args.budget if args.budget else _default_budget(args.env_id),
                visibility=args.visibility,
                **kwargs,
            )
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
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
            first = s.get("first_success_turn")
            success = f", first success at turn {first}" if first and first > 0 else ""
            print(
                f"\n{obs}\n\n{verdict}: {s.get('used')} of {s.get('limit')} turns used{success}.",
                file=out,
            )
            faults = info.get("faults") or ()
            if faults:
                shown = ", ".join(f"{f.get('kind')} at turn {f.get('turn')}" for f in faults)
                print(f"Faults injected: {shown}.", file=out)
            return 0


def _faults(text: str) -> Any:
    """The ``faults=`` of ``gymnasium.make`` from ``--faults``: kinds ``a,b`` or a JSON object
    of ErrorInjection arguments (``{"kinds": ["slip"], "rate": 0.2}``)."""
    text = text.strip()
    if text[:1] in "{[":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise UsageError(f"bad --faults {text!r}: not JSON ({exc})") from None
    return [kind.strip() for kind in text.split(",") if kind.strip()]


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


def _hook_doc_args(doc: str) -> dict[str, str]:
    """``name: text`` entries of the Google-style ``Args:`` section of a (dedented) docstring."""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    if "Args:" not in (line.strip() for line in lines):
        return out
    start = [line.strip() for line in lines].index("Args:") + 1
    indent = None
    current = None
    for line in lines[start:]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        if depth < indent or depth == 0:
            break
        name, colon, text = line.strip().partition(":")
        if depth == indent and colon and name.isidentifier():
            current = name
            out[name] = text.strip()
        elif current is not None:
            out[current] += " " + line.strip()
    return out


def _hook_parser(prog: str, hook: Any) -> argparse.ArgumentParser:
    """Command-line options from a prepare hook's keyword parameters (see registry/table.py)."""
    import inspect
    import typing

    doc = inspect.getdoc(hook) or ""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0] or None)
    try:
        hints = typing.get_type_hints(hook)
    except (NameError, TypeError):  # unresolvable annotations: use the defaults' types
        hints = {}
    helps = _hook_doc_args(doc)
    for param in inspect.signature(hook).parameters.values():
        if param.name == "progress" or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        flag = "--" + param.name.replace("_", "-")
        default = None if param.default is param.empty else param.default
        help_text = helps.get(param.name, "")
        hint = hints.get(param.name)
        options = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        kind = options[0]
        if isinstance(default, bool):
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=default, help=help_text
            )
            continue
        kwargs: dict[str, Any] = {"default": default, "dest": param.name}
        if typing.get_origin(kind) in (list, tuple, Sequence) or kind in (list, tuple):
            item = (typing.get_args(kind) or (str,))[0]
            kwargs.update(nargs="+", type=item if item in (int, float) else str)
        elif kind in (int, float) or type(default) in (int, float):
            kwargs["type"] = kind if kind in (int, float) else type(default)
        if param.default is param.empty:
            kwargs["required"] = True
        shown = "" if default is None else f" (default: {default})"
        parser.add_argument(flag, help=(help_text + shown).strip(), **kwargs)
    return parser


def cmd_prepare(args: argparse.Namespace, out: TextIO) -> int:
    """``budgetmix prepare FAMILY [options]``: run the family's prepare hook with a progress bar."""
    import gymnasium as gym

    from budget_envs._util import missing_dependency
    from budget_envs.registry import families, family_entries

    try:
        entries = family_entries(args.family)
    except (TypeError, gym.error.NameNotFound):
        known = [name for name, rows in families().items() if any(r.prepare for r in rows)]
        print(
            f"budgetmix prepare: unknown family {args.family!r}; families with files to "
            f"prepare: {', '.join(known) or 'none'}",
            file=sys.stderr,
        )
        return 2
    entry = next((e for e in entries if e.prepare is not None), None)
    if entry is None:
        print(
            f"{entries[0].family} has nothing to prepare: its tasks are built when played.",
            file=out,
        )
        return 0
    try:
        try:
            hook = entry.prepare_hook()
        except ImportError as exc:
            raise missing_dependency(f"prepare {entry.family}", entry.requires, exc) from exc
        parser = _hook_parser(f"budgetmix prepare {args.family}", hook)
        options = vars(parser.parse_args(list(args.rest)))
        from tqdm import tqdm

        bar = tqdm(total=None, desc=f"{entry.family} files", unit="file", file=sys.stderr)

        def progress(done: int, total: int, note: str) -> None:
            bar.total = total
            if note:
                bar.set_postfix_str(note, refresh=False)
            bar.update(done - bar.n)

        try:
            result = hook(progress=progress, **options)
        finally:
            bar.close()
    except (gym.error.DependencyNotInstalled, ValueError, TypeError) as exc:
        print(f"budgetmix prepare {args.family}: {exc}", file=sys.stderr)
        return 2
    for failure in result.failures:
        print(f"failed: {failure}", file=out)
    print(f"{result.ready} of {result.total} files ready in {result.location}", file=out)
    return 1 if result.failures or result.ready < result.total else 0


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
        "info_delta": not args.full_info,
    }
    if args.budget is not None:
        budget = args.budget.strip()
        kwargs["budget"] = None if budget == "none" else int(budget) if budget.isdigit() else budget
    if args.faults:
        kwargs["faults"] = _faults(args.faults)
    print(
        f"serving {args.env_id} on http://{args.host}:{args.port} (WebSocket /ws, "
        f"{args.max_sessions} sessions); Ctrl-C stops",
        file=out,
        flush=True,
    )
    serve(args.env_id, host=args.host, port=args.port, **kwargs)
    return 0


# ---------------------------------------------------------------------- demo
def _demo_ids() -> tuple[list[str], str]:
    from budget_envs.registry import ENV_TABLE, registered_ids

    if ENV_TABLE:
        ids, seen = [], set()
        for entry in ENV_TABLE:
            fam = entry.family
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
    pair_spec = None
    if not args.no_train:
        from budget_envs import study

        try:
            pair_spec = study.demo_spec(**(args.train_sizes or {}))
        except ValueError as exc:
            raise UsageError(f"bad --train-sizes: {exc}") from None
    env_ids, source = _demo_ids()
    if args.env:
        _check_env_ids(args.env)
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
    strict = args.strict or _ci()
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
    warning = _few_tasks_warning(all_records)
    if warning:
        print(warning, file=sys.stderr)
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


def _demo_pair(spec: Any, folder: Path, args: argparse.Namespace, out: TextIO) -> str:
    """The demo's trained pair: the study's train, eval, compare and report stages on
    ``spec`` (:func:`budget_envs.study.demo_spec`) into ``folder``, then its summary.

    Returns ``"done"``, ``"skipped"`` (no RLlib) or ``"failed"``.
    """
    from budget_envs import study

    start = time.perf_counter()
    fam = spec.families[0]
    arm_a, arm_b = spec.arms
    t_a, t_b = (study.arm_budget(a, fam.tight, fam.generous) for a in (arm_a, arm_b))
    print(
        f"\n## Trained pair on {fam.env_id}: {arm_b} (training T {t_b}) against {arm_a} "
        f"(training T {t_a})",
        file=out,
    )
    missing = [m for m in ("ray", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        print(
            f"SKIPPED the trained pair: training needs {' and '.join(missing)}: "
            'pip install "budget-envs[rllib]" (or run the demo with --no-train)',
            file=out,
        )
        return "skipped"
    reused = any((folder / "records").glob("*.jsonl.gz"))
    bars = _StageBars(enabled=not args.quiet)
    try:
        report = study.run_study(
            spec,
            folder,
            folder / "study.md",
            progress=bars,
            workers=args.workers,
            figures=not args.no_figures,
        )
        pair = study.pair_summary(spec, folder)
    except Exception as exc:  # the demo reports a failed pair and carries on
        print(f"FAILED the trained pair: {type(exc).__name__}: {exc}", file=out)
        if isinstance(exc, ValueError) and "holds another study" in str(exc):
            print(f"(delete {folder} to train the pair again)", file=out)
        return "failed"
    finally:
        bars.close()
    seconds = time.perf_counter() - start
    refs = ", ".join([study.RANDOM, *spec.references])
    vis = "hidden" if pair.visibility == "hidden" else f"visible ({pair.visibility})"
    print(
        f"Budget {vis}, trained on {json.dumps(fam.train_kwargs)}: a shared warm start on "
        f"{fam.warm_start_episodes} oracle episodes ({fam.warm_start_epochs} epochs), then "
        f"{fam.iterations} PPO iteration(s) of {fam.batch_size} steps per arm. Evaluated on "
        f"{fam.eval_tasks} unseen tasks of {json.dumps(fam.eval_kwargs)} x {fam.eval_samples} "
        f"samples, with {refs} on the same tasks and episode seeds.",
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
    if reused:
        print(
            f"(reused the finished policies and episodes of an earlier demo in {folder}; delete it "
            "to train again)",
            file=out,
        )
    for k in pair.ks:
        print(
            f"\nPass@({k},T) on {pair.units} unseen tasks; B - A = {arm_b} - {arm_a} with its 95% "
            "paired bootstrap interval (budgetmix compare):",
            file=out,
        )
        header = ["T", *pair.agents, "B - A"]
        print("| " + " | ".join(header) + " |", file=out)
        print("|" + "---|" * len(header), file=out)
        for j, t in enumerate(pair.ts):
            d, lo, hi = pair.diff[k][j]
            row = [str(t), *(f"{pair.pass_at[a][k][j]:.3f}" for a in pair.agents)]
            row.append(f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]")
            print("| " + " | ".join(row) + " |", file=out)
    same, total = pair.same_play
    print(
        f"\n{arm_a} and {arm_b} played the same actions in {same} of {total} paired episodes "
        f"(same task, sample and episode seed).",
        file=out,
    )
    figures = [] if args.no_figures else [*pair.figures, *report.figures]
    if figures:
        print("Figures: " + ", ".join(str(f) for f in figures), file=out)
    print(
        f"Trained pair: {folder / 'study.md'} (tables in {folder / 'tables'}, the comparison in "
        f"{pair.compare_dir}); {seconds:.0f} s.",
        file=out,
    )
    return "done"


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


# ---------------------------------------------------------------------- train
#: Defaults of the options only the RLlib trainer takes (None in the parser: given or not).
_RLLIB_ONLY = {
    "gamma": 0.99,
    "max_actions": 2048,
    "process_max_cost": 100,
    "hidden": 128,
    "entropy_coeff": 0.01,
    "num_epochs": 4,
    "checkpoint_every": 5,
    "num_cpus": 2,
    "warm_start_epochs": 20,
    "warm_start_explore": 0.3,
}
#: Options both trainers take: the RLlib default, and TRL's keyword argument (its own default).
_SHARED = {
    "batch_size": (512, "batch_size"),
    "lr": (3e-4, "learning_rate"),
    "warm_start_episodes": (0, "warm_start_episodes"),
    "warm_start_lr": (1e-3, "warm_start_lr"),
    "process_reward": (None, "process_reward"),
}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def cmd_train(args: argparse.Namespace, out: TextIO) -> int:
    """``budgetmix train``: RLlib PPO or TRL, into a policy folder ``--agent p=policy:DIR`` plays."""
    _check_env_ids([args.env_id])
    from budget_envs.integrations.common import DEFAULT_BUDGET

    budget: Any = DEFAULT_BUDGET if args.budget is None else args.budget
    if budget is not DEFAULT_BUDGET:
        from budget_envs.wrappers.budget_spec import parse_budget

        try:
            parse_budget(budget)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"bad --budget {args.budget!r}: {exc}") from None
    common = dict(
        budget=budget,
        visibility=args.visibility,
        env_kwargs=args.env_kwargs or {},
        seed=args.seed,
        out_dir=args.out,
        iterations=args.iterations,
    )
    if args.trainer == "trl":
        return _train_trl(args, common, out)
    return _train_rllib(args, common, out)


def _eval_hint(args: argparse.Namespace, folder: Any) -> str:
    import shlex

    kwargs = f" --env-kwargs {shlex.quote(json.dumps(args.env_kwargs))}" if args.env_kwargs else ""
    return (
        f"budgetmix eval {args.env_id} --agent p=policy:{folder} --visibility {args.visibility}"
        f"{kwargs} --tasks 10 --samples 4 --out RUN"
    )


def _train_rllib(args: argparse.Namespace, common: dict[str, Any], out: TextIO) -> int:
    if args.trl_kwargs is not None:
        raise UsageError("--trl-kwargs is for --trainer trl; --trainer rllib takes its own flags")
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("torch") is None:
        raise UsageError('--trainer rllib needs the rllib extra: pip install "budget-envs[rllib]"')
    opts = {k: v if getattr(args, k) is None else getattr(args, k) for k, v in _RLLIB_ONLY.items()}
    opts.update(
        {
            k: default if getattr(args, k) is None else getattr(args, k)
            for k, (default, _) in _SHARED.items()
        }
    )
    bar: Any = None

    def progress(it: int, total: int, row: dict[str, float]) -> None:
        nonlocal bar
        if args.quiet:
            return
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(total=total, initial=it - 1, desc="train", unit="it", file=sys.stderr)
        bar.update(1)
        bar.set_postfix(win=f"{row.get('win_rate', float('nan')):.2f}")

    stage_bars: dict[str, Any] = {}

    def warm_progress(stage: str, done: int, total: int) -> None:
        if args.quiet:
            return
        if stage not in stage_bars:
            from tqdm import tqdm

            unit = "ep" if stage == "collect" else "epoch"
            stage_bars[stage] = tqdm(
                total=total, desc=f"warm start: {stage}", unit=unit, file=sys.stderr
            )
        stage_bars[stage].update(done - stage_bars[stage].n)
        if done >= total:
            stage_bars[stage].close()

    from budget_envs.integrations.rllib_train import train

    try:
        result = train(
            args.env_id,
            **common,
            progress=progress,
            gamma=opts["gamma"],
            max_actions=opts["max_actions"],
            train_batch_size=opts["batch_size"],
            minibatch_size=min(128, opts["batch_size"]),
            lr=opts["lr"],
            checkpoint_every=opts["checkpoint_every"],
            process_reward=opts["process_reward"],
            process_max_cost=opts["process_max_cost"],
            hidden=opts["hidden"],
            entropy_coeff=opts["entropy_coeff"],
            num_epochs=opts["num_epochs"],
            resume=args.resume,
            num_cpus=opts["num_cpus"],
            warm_start_episodes=opts["warm_start_episodes"],
            warm_start_epochs=opts["warm_start_epochs"],
            warm_start_explore=opts["warm_start_explore"],
            warm_start_lr=opts["warm_start_lr"],
            warm_start_progress=warm_progress,
        )
    except (FileExistsError, FileNotFoundError, ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        if bar is not None:
            bar.close()
    rows = result.get("rows") or []
    last = rows[-1] if rows else {}
    print(
        f"{result.get('iterations', len(rows))} iterations in {result.get('wall_s', 0):.0f} s; "
        f"last win rate {last.get('win_rate', float('nan')):.3f}, return "
        f"{last.get('return_mean', float('nan')):.3f}. Policy in {result['out_dir']} "
        f"(metrics.csv{', curve.png' if result.get('curve') else ''}).\n"
        f"Next: {_eval_hint(args, result['out_dir'])}",
        file=out,
    )
    return 0


class _GRPOBar:
    """The ``progress(logs)`` hook of the TRL trainer: a tqdm bar over the GRPO steps."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled
        self.bar: Any = None

    def __call__(self, logs: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, desc="GRPO", unit="step", file=sys.stderr)
        step = int(logs.get("step") or 0)
        if step > self.bar.n:
            self.bar.update(step - self.bar.n)
        if "reward" in logs:
            self.bar.set_postfix(reward=f"{float(logs['reward']):.2f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _train_trl(args: argparse.Namespace, common: dict[str, Any], out: TextIO) -> int:
    import inspect

    given = [k for k in _RLLIB_ONLY if getattr(args, k) is not None]
    given += ["resume"] if args.resume else []
    if given:
        flags = ", ".join(_flag(k) for k in given)
        raise UsageError(
            f"{flags}: RLlib option(s) that --trainer trl does not take (its settings go in "
            "--trl-kwargs JSON; see budgetmix train --help)"
        )
    if importlib.util.find_spec("trl") is None:
        raise UsageError('--trainer trl needs the trl extra: pip install "budget-envs[trl]"')
    trl_mod = importlib.import_module("budget_envs.integrations.trl")
    fn = getattr(trl_mod, "train", None)
    if not callable(fn):
        raise UsageError(
            "--trainer trl: this install's budget_envs.integrations.trl has no train() yet"
        )
    from budget_envs.integrations.trl_train import POLICY_FILE
    from budget_envs.integrations.trl_train import train as trl_train

    options = {
        name: getattr(args, dest)
        for dest, (_, name) in _SHARED.items()
        if getattr(args, dest) is not None
    }
    extra = dict(args.trl_kwargs or {})
    accepted = set(inspect.signature(trl_train).parameters) - set(common) - {"env_id", "progress"}
    by_flag = {name: dest for dest, (_, name) in _SHARED.items()}
    for key in extra:
        if key in by_flag:
            raise UsageError(f"--trl-kwargs: give {key!r} as {_flag(by_flag[key])}")
        if key in common or key in ("env_id", "progress"):
            raise UsageError(f"--trl-kwargs: {key!r} is set by the command's own flags")
        if key not in accepted:
            raise UsageError(
                f"--trl-kwargs: unknown key {key!r}; expected some of {sorted(accepted)}"
            )
    options.update(extra)
    if (Path(args.out) / POLICY_FILE).exists():
        raise UsageError(
            f"{args.out} already holds a policy ({POLICY_FILE}); choose another --out "
            "(--trainer trl does not resume)"
        )
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar: the GRPO steps (not each model save)
    bar = _GRPOBar(args.iterations, enabled=not args.quiet)
    try:
        with warnings.catch_warnings():
            # transformers 5 deprecation notices about TRL's own calls: nothing to act on here
            warnings.simplefilter("ignore", FutureWarning)
            result = fn(args.env_id, **common, progress=bar, **options)
    except (FileExistsError, FileNotFoundError, ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        bar.close()
    history = result.get("log_history") or []
    steps = max((int(h.get("step", 0)) for h in history), default=0)
    rewards = result.get("reward") or []
    reward = f"{rewards[-1]:.3f}" if rewards else "-"
    stops = result.get("stop_reasons") or {}
    stop_text = ", ".join(f"{k} {v}" for k, v in sorted(stops.items(), key=lambda kv: -kv[1]))
    folder = result["model_dir"]
    warm = result.get("warm_start_dir")
    print(
        f"{steps} GRPO steps in {result.get('wall_time', 0):.0f} s; mean env reward of the last "
        f"step {reward}; episodes by stop reason: {stop_text or 'none'}.\n"
        f"Policy in {folder} (a Hugging Face model folder with {POLICY_FILE}"
        f"{f'; the warm start in {warm}' if warm else ''}).\n"
        f"Next: {_eval_hint(args, folder)}",
        file=out,
    )
    return 0


def cmd_study(args: argparse.Namespace, out: TextIO) -> int:
    """``budgetmix study``: train the budget arms, evaluate, compare, write the study page."""
    from budget_envs import study

    saved = Path(args.out) / "study.json"
    if args.report_only and saved.exists():
        spec = study.StudySpec.from_json(json.loads(saved.read_text(encoding="utf-8")))
    else:
        spec = study.quick_spec() if args.quick else study.full_spec()
    if not args.report_only:
        missing = [m for m in ("ray", "torch") if importlib.util.find_spec(m) is None]
        if missing:
            raise UsageError('the study trains with RLlib: pip install "budget-envs[rllib]"')
    bars = _StageBars(enabled=not args.quiet)
    try:
        report = study.run_study(
            spec,
            args.out,
            args.docs,
            report_only=args.report_only,
            progress=bars,
            workers=args.workers,
            figures=not args.no_figures,
            families=args.family,
            visibilities=args.visibility,
            seeds=args.seed,
        )
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        bars.close()
    flagged = [r for r in report.learning if not r.learned]
    print(
        f"study report in {args.docs} ({len(report.tables)} tables in {Path(args.out) / 'tables'}, "
        f"{len(report.figures)} figures); {len(report.learning)} arm(s) scored against random, "
        f"{len(flagged)} flagged not learned",
        file=out,
    )
    return 0


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="budgetmix", description="BudgetMix: text-agent envs under a turn budget."
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="list the registered env ids")

    e = sub.add_parser("eval", help="evaluate agents: tasks x samples x budgets x faults")
    e.add_argument("env_ids", nargs="+", metavar="ENV_ID")
    e.add_argument(
        "--agent",
        action="append",
        metavar="[NAME=]SPEC",
        help="random | oracle | oracle:epsilon=0.3 | chat:base_url=URL,model=NAME[,temperature=0.7,"
        'max_tokens=256,stop=["\\n"],extra_body={...},api_key_env=VAR,concurrency=64,...] | '
        "policy:DIR[,greedy=true,check_visibility=false]; values are JSON when they parse "
        "(repeatable; see docs/llm-agents.md and docs/training.md)",
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
    e.add_argument(
        "--tasks",
        type=int,
        default=5,
        help="N tasks of each env, spread over its levels (default 5; intervals need 10+)",
    )
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
        "--prefix-turns",
        type=_ints,
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
    e.add_argument("--seed", type=int, default=0)
    e.add_argument(
        "--env-kwargs", type=_json_dict, default=None, help="JSON constructor kwargs of the env"
    )
    e.add_argument("--out", required=True, metavar="RUN", help="run directory")
    e.add_argument("--workers", type=int, default=1, help="local worker processes")
    e.add_argument(
        "--ray", default=None, metavar="auto|local|ADDRESS", help="play episodes on Ray env actors"
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
    pl.add_argument(
        "--visibility",
        default="hidden",
        help="what the observation says about the budget: hidden (default), remaining, "
        "final_warning (the status line under it always shows the turns)",
    )
    pl.add_argument(
        "--faults",
        default=None,
        metavar="KINDS|JSON",
        help="inject faults: kinds such as slip,drop (a fault on 10%% of turns) or a JSON object "
        'of ErrorInjection arguments, e.g. {"kinds": ["slip"], "at_turn": 2}; the faults are '
        "listed when the episode ends",
    )
    pl.add_argument("--env-kwargs", type=_json_dict, default=None)

    pr = sub.add_parser(
        "prepare", help="generate and cache a family's files (budgetmix prepare FAMILY --help)"
    )
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
    sv.add_argument(
        "--full-info",
        action="store_true",
        help="send every info value in every step answer (for clients that do not apply "
        "info_delta answers)",
    )
    t = sub.add_parser(
        "train",
        help="train a policy (RLlib PPO or TRL GRPO) into a policy folder",
        description="Train a policy into a policy folder that `budgetmix eval --agent "
        "NAME=policy:DIR` plays. The options under 'RLlib only' are a usage error with "
        "--trainer trl; TRL's own settings go in --trl-kwargs (a usage error with --trainer "
        "rllib).",
    )
    t.add_argument("env_id", metavar="ENV_ID")
    t.add_argument("--trainer", choices=("rllib", "trl"), default="rllib")
    t.add_argument(
        "--budget",
        default=None,
        help="budget spec, e.g. 12, 6..12, 8,16,32, log:4..64 (default: the id's)",
    )
    t.add_argument(
        "--visibility", default="hidden", help="hidden (default), remaining, final_warning"
    )
    t.add_argument("--env-kwargs", type=_json_dict, default=None, help="JSON constructor kwargs")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--iterations",
        type=int,
        default=20,
        help="PPO iterations (rllib) or GRPO steps (trl) in total (default 20)",
    )
    t.add_argument("--out", required=True, metavar="DIR", help="policy folder to write")
    t.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="env steps per PPO iteration (rllib, default 512); episodes per GRPO step "
        "(trl, default 8; a multiple of num_generations)",
    )
    t.add_argument(
        "--lr", type=float, default=None, help="learning rate (rllib 3e-4, trl 1e-3 by default)"
    )
    t.add_argument(
        "--process-reward",
        type=float,
        default=None,
        metavar="SCALE",
        help="add the oracle's progress signal (ProcessReward) to the reward",
    )
    t.add_argument(
        "--warm-start-episodes",
        type=int,
        default=None,
        metavar="N",
        help="first fit the policy to the oracle on N training episodes (rllib default 0: "
        "none; trl default 32, on the tiny model only)",
    )
    t.add_argument(
        "--warm-start-lr",
        type=float,
        default=None,
        help="warm-start learning rate (rllib 1e-3, trl 3e-3 by default)",
    )
    t.add_argument(
        "--trl-kwargs",
        type=_json_dict,
        default=None,
        metavar="JSON",
        help="(trl only) more keyword arguments of budget_envs.integrations.trl.train, e.g. "
        '{"model": "Qwen/Qwen3-0.6B", "num_generations": 4, "prompts": 64, '
        '"warm_start_steps": 60, "max_completion_length": 512, "max_turn_tokens": 24}',
    )
    rl = t.add_argument_group("RLlib only (a usage error with --trainer trl)")
    rl.add_argument("--gamma", type=float, default=None, help="discount (default 0.99)")
    rl.add_argument("--resume", action="store_true", help="continue the checkpoint in DIR")
    rl.add_argument("--max-actions", type=int, default=None, help="action slots (default 2048)")
    rl.add_argument(
        "--process-max-cost",
        type=int,
        default=None,
        help="the progress signal's max_cost: a loss costs SCALE * (MAX_COST - cost) (default 100)",
    )
    rl.add_argument("--hidden", type=int, default=None, help="network width (default 128)")
    rl.add_argument(
        "--entropy-coeff", type=float, default=None, help="PPO entropy bonus (default 0.01)"
    )
    rl.add_argument("--num-epochs", type=int, default=None, help="PPO epochs per batch (4)")
    rl.add_argument(
        "--checkpoint-every", type=int, default=None, help="iterations between checkpoints (5)"
    )
    rl.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray (2)")
    rl.add_argument("--warm-start-epochs", type=int, default=None, help="warm-start epochs (20)")
    rl.add_argument(
        "--warm-start-explore",
        type=float,
        default=None,
        help="share of random turns while collecting warm-start states (default 0.3)",
    )
    t.add_argument("--quiet", action="store_true", help="no progress bar")

    st = sub.add_parser(
        "study", help="train the budget arms, evaluate them on unseen tasks, write the report"
    )
    st.add_argument("--quick", action="store_true", help="the few-minute pipeline check")
    st.add_argument(
        "--report-only",
        action="store_true",
        help="regenerate tables and figures from DIR/records (no training, no episodes)",
    )
    st.add_argument("--out", default="study", metavar="DIR", help="study folder (default study)")
    st.add_argument(
        "--docs", default="docs/study.md", metavar="PATH", help="page to write (docs/study.md)"
    )
    st.add_argument("--workers", type=int, default=2, help="processes / Ray CPUs (default 2)")
    st.add_argument(
        "--family",
        action="append",
        default=None,
        metavar="NAME",
        help="train and evaluate only this family (repeatable; the report covers all records)",
    )
    st.add_argument(
        "--visibility",
        action="append",
        default=None,
        choices=["hidden", "remaining"],
        help="train and evaluate only the arms with this budget visibility (repeatable)",
    )
    st.add_argument(
        "--seed",
        action="append",
        type=int,
        default=None,
        help="train and evaluate only this training seed (repeatable)",
    )
    st.add_argument("--no-figures", action="store_true")
    st.add_argument("--quiet", action="store_true", help="no progress bars")

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
        "--fault-turns", type=_ints, default=[1, 2, 4], help="fault probe turns (default 1,2,4)"
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
    d.add_argument("--train-sizes", type=_json_dict, default=None, help=argparse.SUPPRESS)
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
        "train": cmd_train,
        "study": cmd_study,
    }
    try:
        if args.command == "play":
            return cmd_play(args, out, stdin or sys.stdin)
        return handlers[args.command](args, out)
    except UsageError as exc:
        print(f"budgetmix {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
