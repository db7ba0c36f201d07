"""The ``budgetmix`` command line: list, play, eval, report, compare, demo, train, study, prepare,
serve, serve-web, export-webshop, export-sft.

This module only parses the arguments and dispatches: each command's work is ``cmd_<name>`` in
its module of :mod:`budget_envs.commands` (the demo's computations are :mod:`budget_envs.demo`).
Those modules are the only ones in the package that print or draw progress bars.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TextIO

from budget_envs.commands.args import grid as _grid
from budget_envs.commands.args import ints as _ints
from budget_envs.commands.args import json_dict as _json_dict
from budget_envs.commands.demo import cmd_demo
from budget_envs.commands.eval import TRUST_POLICY_HELP, cmd_eval
from budget_envs.commands.export_sft import EXPORT_FORMAT_HELP, cmd_export_sft
from budget_envs.commands.listing import cmd_list
from budget_envs.commands.play import cmd_play
from budget_envs.commands.prepare import cmd_prepare
from budget_envs.commands.prepare import hook_parser as _hook_parser  # noqa: F401  (tests)
from budget_envs.commands.report import add_report_options, cmd_compare, cmd_report
from budget_envs.commands.serve import cmd_export_webshop, cmd_serve, cmd_serve_web
from budget_envs.commands.serve import dispatch as _dispatch  # noqa: F401  (tests)
from budget_envs.commands.study import cmd_study
from budget_envs.commands.train import REPORT_TO_HELP, SFT_KWARGS_HELP, cmd_train, iterations_help
from budget_envs.commands.view import add_view_parser, cmd_view
from budget_envs.errors import UsageError
from budget_envs.hostcheck import add_host_policy_args
from budget_envs.integrations import trainers

__all__ = ["main"]

#: The work of each subcommand, by its name (``play`` also reads stdin).
HANDLERS = {
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
    "export-sft": cmd_export_sft,
    "view": cmd_view,
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("budget-envs")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


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
    e.add_argument(
        "--tasks",
        type=int,
        default=5,
        help="N tasks of each env, spread over its levels (default 5; intervals need 10+)",
    )
    e.add_argument("--samples", type=int, default=4, help="episodes per task: n of Pass@(K,T)")
    e.add_argument(
        "--budgets",
        type=_grid,
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
        type=_ints,
        default=None,
        help="also run with one fault at each of these turns",
    )
    e.add_argument("--fault-kinds", default="slip,drop", help="fault kinds (default slip,drop)")
    e.add_argument("--trust-policy", action="store_true", help=TRUST_POLICY_HELP)
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
    e.add_argument(
        "--save-transcripts",
        action="store_true",
        help="also write RUN/transcripts.jsonl: every episode as an OpenAI-style chat row",
    )

    x = sub.add_parser("export-sft", help="oracle demonstrations as chat rows, DIR/SPLIT.jsonl")
    x.add_argument("env_id", metavar="ENV_ID")
    x.add_argument("--tasks", type=int, required=True, help="N tasks, spread over the levels")
    x.add_argument("--out", required=True, metavar="DIR", help="folder of SPLIT.jsonl")
    x.add_argument("--split", default="train", choices=("train", "valid", "test", "test_unseen"))
    x.add_argument(
        "--agent",
        default="oracle",
        help="oracle (default), oracle-eps (epsilon 0.3 random turns), oracle-eps0.1, or any "
        "eval agent spec",
    )
    x.add_argument("--budget", type=int, default=None, help="turn budget (default: the env's)")
    x.add_argument("--visibility", default="hidden", help="hidden, remaining, final_warning")
    x.add_argument("--env-kwargs", type=_json_dict, default=None, help="JSON constructor kwargs")
    x.add_argument("--seed", type=int, default=0)
    x.add_argument("--quiet", action="store_true", help="no progress bar")
    x.add_argument("--format", default="chat", choices=("chat", "lm"), help=EXPORT_FORMAT_HELP)

    r = sub.add_parser("report", help="tables and figures of a run")
    r.add_argument("run", metavar="RUN")
    r.add_argument("--out", default=None, help="default RUN/report")
    add_report_options(r)

    add_view_parser(sub)
    c = sub.add_parser("compare", help="difference surface RUN_B - RUN_A")
    c.add_argument("run_a", metavar="RUN_A")
    c.add_argument("run_b", metavar="RUN_B")
    c.add_argument("--agent-a", default=None, help="agent of RUN_A (when it holds several)")
    c.add_argument("--agent-b", default=None, help="agent of RUN_B (when it holds several)")
    c.add_argument("--out", default=None, help="default RUN_B/compare")
    add_report_options(c)

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
        "prepare",
        help="generate and cache a family's files (budgetmix prepare FAMILY --help), or "
        "prepare a language model (budgetmix prepare model NAME)",
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
    add_host_policy_args(sv)
    sv.add_argument("--full-info", action="store_true", help="every info value in every answer")
    t = sub.add_parser(
        "train",
        help="train a policy (RLlib PPO, TRL GRPO, or SFT of a language model) into a folder",
        description="Train a policy into a policy folder that `budgetmix eval --agent "
        "NAME=policy:DIR` plays. The options under 'RLlib only' are a usage error with "
        "--trainer trl; TRL's own settings go in --trl-kwargs (a usage error with --trainer "
        "rllib).",
    )
    t.add_argument("env_id", metavar="ENV_ID")
    t.add_argument(
        "--trainer",
        choices=trainers.trainer_names(),
        default=trainers.trainer_names()[0],
        help="; ".join(f"{e.name}: {e.description}" for e in trainers.TRAINER_TABLE),
    )
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
        default=None,
        help=iterations_help(trainers.TRAINER_TABLE),
    )
    t.add_argument("--out", required=True, metavar="DIR", help="policy folder to write")
    t.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="env steps per PPO iteration (rllib, default 1024); episodes per GRPO step "
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
        help="first fit the policy to the oracle on N training episodes (rllib default 50; "
        "trl default 32, on the tiny model only)",
    )
    t.add_argument(
        "--warm-start-lr",
        type=float,
        default=None,
        help="warm-start learning rate (3e-3 by default)",
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
    t.add_argument("--sft-kwargs", type=_json_dict, metavar="JSON", help=SFT_KWARGS_HELP)
    rl = t.add_argument_group("RLlib only (a usage error with --trainer trl)")
    rl.add_argument("--gamma", type=float, default=None, help="discount (default 0.99)")
    rl.add_argument("--resume", action="store_true", help="continue the checkpoint in DIR")
    rl.add_argument("--max-actions", type=int, default=None, help="action slots (default 256)")
    rl.add_argument(
        "--process-max-cost",
        type=int,
        default=None,
        help="the progress signal's max_cost: a loss costs SCALE * (MAX_COST - cost) (default 100)",
    )
    rl.add_argument("--hidden", type=int, default=None, help="network width (default 64)")
    rl.add_argument(
        "--entropy-coeff", type=float, default=None, help="PPO entropy bonus (default 0.01)"
    )
    rl.add_argument("--num-epochs", type=int, default=None, help="PPO epochs per batch (2)")
    rl.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help="PPO iterations (rllib, default 5) or GRPO steps (trl, default 0: none) between "
        "checkpoints",
    )
    rl.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray (2)")
    rl.add_argument(
        "--num-env-runners",
        type=int,
        default=None,
        help="remote env runners (default: one per CPU of the local Ray, none on one CPU)",
    )
    rl.add_argument(
        "--num-envs-per-env-runner", type=int, default=None, help="vector envs per runner (16)"
    )
    rl.add_argument("--warm-start-epochs", type=int, default=None, help="warm-start epochs (20)")
    rl.add_argument(
        "--warm-start-explore",
        type=float,
        default=None,
        help="share of random turns while collecting warm-start states (default 0)",
    )
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--report-to", default="none", metavar="TOOLS", help=REPORT_TO_HELP)

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
        "--trainer",
        choices=trainers.study_trainers(),
        default=trainers.study_trainers()[0],
        help="; ".join(f"{e.name}: {e.description}" for e in trainers.TRAINER_TABLE if e.study),
    )
    st.add_argument(
        "--model",
        default="tiny",
        metavar="NAME",
        help="(trl only) tiny (default: the offline tiny model, warm-started on oracle episodes) "
        "or a Hugging Face model name or path (used as it is for base; GRPO from it)",
    )
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
    st.add_argument("--report-to", default="none", metavar="TOOLS", help=REPORT_TO_HELP)

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

    try:
        if args.command == "play":
            return cmd_play(args, out, stdin or sys.stdin)
        return HANDLERS[args.command](args, out)
    except UsageError as exc:
        print(f"budgetmix {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
