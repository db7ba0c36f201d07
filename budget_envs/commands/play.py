"""``budgetmix play``: play an env in the terminal, the budget shown under every observation."""

from __future__ import annotations

import argparse
import warnings
from typing import Any, TextIO

from budget_envs.commands.args import json_dict
from budget_envs.commands.common import check_env_ids, parse_faults
from budget_envs.errors import UsageError

__all__ = ["add_play_parser", "cmd_play"]


def add_play_parser(sub: Any) -> None:
    """The ``play`` subcommand's arguments."""
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
    pl.add_argument("--env-kwargs", type=json_dict, default=None)


def cmd_play(args: argparse.Namespace, out: TextIO, inp: TextIO) -> int:
    import gymnasium as gym

    check_env_ids([args.env_id])
    kwargs: dict[str, Any] = dict(args.env_kwargs or {})
    if args.faults:
        kwargs["faults"] = parse_faults(args.faults)
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
            _print_end(obs, info, terminated, truncated, out)
            return 0


def _print_end(
    obs: str, info: dict[str, Any], terminated: bool, truncated: bool, out: TextIO
) -> None:
    """The last observation, the verdict and the faults injected."""
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


def _default_budget(env_id: str) -> Any:
    from budget_envs.registry import entry_for

    return entry_for(env_id).default_budget
