"""``budgetmix train``: a trainer of the trainer table (RLlib PPO, TRL GRPO, SFT) into a policy
folder that ``budgetmix eval --agent NAME=policy:DIR`` plays; the flags of one trainer are a
usage error with another. The table (:mod:`budget_envs.integrations.trainers`) gives each
trainer's default iterations, its pip extra and its train function; this module maps the
command's flags onto each trainer's settings."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from budget_envs.commands.args import json_dict
from budget_envs.commands.common import StageBars, check_env_ids, missing_modules, pip_extra
from budget_envs.errors import TooManyActions, UsageError
from budget_envs.integrations import trainers
from budget_envs.integrations.trainers import TrainerEntry, trainer_entry

__all__ = [
    "REPORT_TO_HELP",
    "SFT_KWARGS_HELP",
    "add_train_parser",
    "cmd_train",
    "iterations_help",
]

REPORT_TO_HELP = (
    "also log every metrics.csv row to tensorboard (OUT/runs/), wandb (OUT/wandb/, offline "
    "unless WANDB_MODE or WANDB_API_KEY says otherwise), both (tensorboard,wandb) or none "
    "(default); the tracking extra"
)

#: ``--sft-kwargs``' help (the fields of :class:`budget_envs.integrations.lm.sft.SFTSettings`).
SFT_KWARGS_HELP = (
    '(sft only) SFTSettings fields, e.g. {"model": "scratch", "episodes": 200, "epochs": 3}; '
    'a pretrained model trains a LoRA adapter: {"model": "smollm2-135m", "episodes": 40}'
)

#: The options only the RLlib trainer takes (None in the parser: given or not); their defaults
#: are those of :class:`budget_envs.integrations.rllib.config.RLlibTrainConfig`.
_RLLIB_ONLY = (
    "gamma",
    "max_actions",
    "process_max_cost",
    "hidden",
    "entropy_coeff",
    "num_epochs",
    "num_cpus",
    "num_env_runners",
    "num_envs_per_env_runner",
    "warm_start_epochs",
    "warm_start_explore",
)
#: Options both trainers take: the RLlib config's field and TRL's keyword (each trainer's own
#: default).
_SHARED = {
    "batch_size": ("train_batch_size", "batch_size"),
    "lr": ("lr", "learning_rate"),
    "warm_start_episodes": ("warm_start_episodes", "warm_start_episodes"),
    "warm_start_lr": ("warm_start_lr", "warm_start_lr"),
    "process_reward": ("process_reward", "process_reward"),
    "checkpoint_every": ("checkpoint_every", "checkpoint_every"),
}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def iterations_help(entries: Iterable[TrainerEntry]) -> str:
    """``--iterations``' help: each trainer's unit and default, from the table's rows.

    >>> from budget_envs.integrations.trainers import TRAINER_TABLE
    >>> iterations_help(TRAINER_TABLE[:2])
    'in total: PPO iterations (rllib, default 50), GRPO steps (trl, default 20)'
    """
    parts = []
    for e in entries:
        default = "its own" if e.default_iterations is None else e.default_iterations
        parts.append(f"{e.unit} ({e.name}, default {default})")
    return "in total: " + ", ".join(parts)


def add_train_parser(sub: Any) -> None:
    """The ``train`` subcommand's arguments."""
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
    t.add_argument("--env-kwargs", type=json_dict, default=None, help="JSON constructor kwargs")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--iterations",
        type=int,
        default=None,
        help=iterations_help(trainers.TRAINER_TABLE),
    )
    t.add_argument("--out", required=True, metavar="DIR", help="policy folder to write")
    _add_shared_options(t)
    _add_rllib_options(t.add_argument_group("RLlib only (a usage error with --trainer trl)"))
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--report-to", default="none", metavar="TOOLS", help=REPORT_TO_HELP)


def _add_shared_options(t: argparse.ArgumentParser) -> None:
    """``train``'s options more than one trainer reads, and each trainer's own JSON settings."""
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
        type=json_dict,
        default=None,
        metavar="JSON",
        help="(trl only) more keyword arguments of budget_envs.integrations.trl.train, e.g. "
        '{"model": "Qwen/Qwen3-0.6B", "num_generations": 4, "prompts": 64, '
        '"warm_start_steps": 60, "max_completion_length": 512, "max_turn_tokens": 24}',
    )
    t.add_argument("--sft-kwargs", type=json_dict, metavar="JSON", help=SFT_KWARGS_HELP)
    t.add_argument(
        "--resume",
        action="store_true",
        help="continue a stopped run in DIR (rllib: its checkpoint; trl: the last trainer "
        "checkpoint that --checkpoint-every left)",
    )


def _add_rllib_options(rl: Any) -> None:
    """``train``'s 'RLlib only' argument group."""
    rl.add_argument("--gamma", type=float, default=None, help="discount (default 0.99)")
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


def _check_extra(entry: TrainerEntry) -> None:
    """A usage error naming the pip extra when a module of the trainer's extra is missing."""
    if missing_modules(*entry.modules):
        raise UsageError(
            f"--trainer {entry.name} needs the {entry.requires} extra: {pip_extra(entry.requires)}"
        )


def cmd_train(args: argparse.Namespace, out: TextIO) -> int:
    """``budgetmix train``: the trainer's row of the table, into a policy folder ``--agent
    p=policy:DIR`` plays."""
    check_env_ids([args.env_id])
    from budget_envs.integrations.common import DEFAULT_BUDGET

    budget: Any = DEFAULT_BUDGET if args.budget is None else args.budget
    if budget is not DEFAULT_BUDGET:
        from budget_envs.wrappers.budget_spec import parse_budget

        try:
            parse_budget(budget)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"bad --budget {args.budget!r}: {exc}") from None
    from budget_envs.integrations.tracking import check_report_to

    try:
        check_report_to(args.report_to)
    except ValueError as exc:
        raise UsageError(f"--report-to: {exc}") from None
    entry = trainer_entry(args.trainer)
    common = dict(
        report_to=args.report_to,
        budget=budget,
        visibility=args.visibility,
        env_kwargs=args.env_kwargs or {},
        seed=args.seed,
        out_dir=args.out,
        iterations=entry.default_iterations if args.iterations is None else args.iterations,
    )
    return _RUNS.get(entry.name, _train_other)(args, entry, common, out)


def _eval_hint(args: argparse.Namespace, folder: Any) -> str:
    import shlex

    kwargs = f" --env-kwargs {shlex.quote(json.dumps(args.env_kwargs))}" if args.env_kwargs else ""
    return (
        f"budgetmix eval {args.env_id} --agent p=policy:{folder} --visibility {args.visibility}"
        f"{kwargs} --tasks 10 --samples 4 --out RUN"
    )


class _SFTBars:
    """The SFT trainer's ``on_row`` and ``progress`` hooks: a bar of demonstrations, then of steps."""

    def __init__(self, episodes: int, enabled: bool) -> None:
        self.episodes = episodes
        self.enabled = enabled
        self.data: Any = None
        self.steps: Any = None

    def on_row(self, _row: dict[str, Any]) -> None:
        """One demonstration episode written."""
        if not self.enabled:
            return
        if self.data is None:
            from tqdm import tqdm

            self.data = tqdm(total=self.episodes, desc="demonstrations", unit="ep", file=sys.stderr)
        self.data.update(1)

    def progress(self, row: dict[str, Any]) -> None:
        """One metrics row of the SFT steps (the demonstrations' bar ends at the first)."""
        if not self.enabled:
            return
        if self.steps is None:
            from tqdm import tqdm

            if self.data is not None:
                self.data.close()
            self.steps = tqdm(desc="SFT", unit="step", file=sys.stderr)
        self.steps.update(int(row["step"]) - self.steps.n)
        self.steps.set_postfix(loss=f"{float(row['loss']):.3f}")

    def close(self) -> None:
        """Close the bars that were opened."""
        for bar in (self.data, self.steps):
            if bar is not None:
                bar.close()


def _sft_settings(args: argparse.Namespace, settings_class: Any) -> Any:
    """The SFT settings of ``--sft-kwargs`` and the shared flags that map onto its fields."""
    values = dict(args.sft_kwargs or {})
    for flag, key in (("batch_size", "batch_size"), ("lr", "learning_rate")):
        if getattr(args, flag) is not None:
            values[key] = getattr(args, flag)
    if args.warm_start_episodes is not None:
        values["episodes"] = args.warm_start_episodes
    if args.iterations is not None:
        values["max_steps"] = args.iterations
    try:
        return settings_class.from_mapping(values)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--sft-kwargs: {exc}") from None


def _train_sft(
    args: argparse.Namespace, entry: TrainerEntry, common: dict[str, Any], out: TextIO
) -> int:
    """``--trainer sft``: TRL's SFTTrainer on oracle demonstrations, rendered as the lm agent
    plays (:func:`budget_envs.integrations.lm.sft.train_sft`)."""
    given = [k for k in _RLLIB_ONLY if getattr(args, k, None) is not None]
    given += ["resume"] if args.resume else []
    given += ["trl_kwargs"] if args.trl_kwargs is not None else []
    given += [k for k in ("process_reward", "warm_start_lr") if getattr(args, k) is not None]
    if given:
        flags = ", ".join(_flag(k) for k in given)
        raise UsageError(f"{flags}: not an option of --trainer sft (its settings: --sft-kwargs)")
    _check_extra(entry)
    settings_class, train_sft = entry.config_class(), entry.train_function()
    settings = _sft_settings(args, settings_class)
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()  # one bar per stage: demonstrations, then SFT steps
    bars = _SFTBars(settings.episodes, enabled=not args.quiet)
    kwargs = {k: v for k, v in common.items() if k not in ("iterations", "out_dir")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            result = train_sft(
                args.env_id,
                out_dir=args.out,
                settings=settings,
                progress=bars.progress,
                on_row=bars.on_row,
                **kwargs,
            )
    except (FileExistsError, FileNotFoundError, ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        bars.close()
    import shlex

    env_kwargs = (
        f" --env-kwargs {shlex.quote(json.dumps(args.env_kwargs))}" if args.env_kwargs else ""
    )
    print(
        f"{result['steps']} SFT steps on {result['rows']} demonstrations ({result['trained_tokens']}"
        f" of {result['tokens']} tokens trained) in {result['wall_s']:.0f} s; mean loss "
        f"{result['train_loss']:.3f}. Model in {result['out_dir']} ({result['parameters']:,} "
        "parameters; metrics.csv).\n"
        f"Next: budgetmix eval {args.env_id} --agent 'sft=lm:model={result['out_dir']}' "
        f"--visibility {args.visibility}{env_kwargs} --tasks 10 --samples 4 --out RUN",
        file=out,
    )
    return 0


def _train_rllib(
    args: argparse.Namespace, entry: TrainerEntry, common: dict[str, Any], out: TextIO
) -> int:
    if args.sft_kwargs is not None:
        raise UsageError("--sft-kwargs is for --trainer sft")
    if args.trl_kwargs is not None:
        raise UsageError("--trl-kwargs is for --trainer trl; --trainer rllib takes its own flags")
    _check_extra(entry)
    opts = {k: getattr(args, k) for k in _RLLIB_ONLY if getattr(args, k, None) is not None}
    opts.update(
        {
            name: getattr(args, dest)
            for dest, (name, _) in _SHARED.items()
            if getattr(args, dest) is not None
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

    warm_bars = StageBars(
        enabled=not args.quiet, label="warm start: {}", units={"collect": "ep"}, unit="epoch"
    )
    train, config_class = entry.train_function(), entry.config_class()
    try:
        config = config_class(**common, resume=args.resume, **opts)
        result = train(args.env_id, config, progress=progress, warm_start_progress=warm_bars)
    except (FileExistsError, FileNotFoundError, ValueError, TypeError, TooManyActions) as exc:
        raise UsageError(str(exc)) from None
    finally:
        warm_bars.close()
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


def _train_trl(
    args: argparse.Namespace, entry: TrainerEntry, common: dict[str, Any], out: TextIO
) -> int:
    import inspect

    if args.sft_kwargs is not None:
        raise UsageError("--sft-kwargs is for --trainer sft")
    given = [k for k in _RLLIB_ONLY if getattr(args, k, None) is not None]
    if given:
        flags = ", ".join(_flag(k) for k in given)
        raise UsageError(
            f"{flags}: RLlib option(s) that --trainer trl does not take (its settings go in "
            "--trl-kwargs JSON; see budgetmix train --help)"
        )
    _check_extra(entry)
    try:
        fn = entry.train_function()
    except AttributeError:
        fn = None
    if not callable(fn):
        raise UsageError(f"--trainer trl: this install has no {entry.train} yet")
    policy_file = entry.policy_file
    options = {
        name: getattr(args, dest)
        for dest, (_, name) in _SHARED.items()
        if getattr(args, dest) is not None
    }
    extra = dict(args.trl_kwargs or {})
    accepted = set(inspect.signature(fn).parameters) - set(common) - {"env_id", "progress"}
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
    if (Path(args.out) / policy_file).exists():
        raise UsageError(
            f"{args.out} already holds a policy ({policy_file}); choose another --out "
            "(--resume continues a run that was stopped, not a finished one)"
        )
    if args.resume:
        options["resume"] = True
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar: the GRPO steps (not each model save)
    bar = _GRPOBar(common["iterations"], enabled=not args.quiet)
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
        f"Policy in {folder} (a Hugging Face model folder with {policy_file}; metrics.csv"
        f"{f'; the warm start in {warm}' if warm else ''}).\n"
        f"Next: {_eval_hint(args, folder)}",
        file=out,
    )
    return 0


def _train_other(
    args: argparse.Namespace, entry: TrainerEntry, common: dict[str, Any], out: TextIO
) -> int:
    """A trainer of the table that the command maps no flags of its own onto: its train
    function with the options every trainer takes."""
    given = [k for k in (*_RLLIB_ONLY, *_SHARED) if getattr(args, k, None) is not None]
    given += ["resume"] if args.resume else []
    given += [k for k in ("trl_kwargs", "sft_kwargs") if getattr(args, k, None) is not None]
    if given:
        flags = ", ".join(_flag(k) for k in given)
        raise UsageError(f"{flags}: not an option of --trainer {entry.name}")
    _check_extra(entry)
    options = {k: v for k, v in common.items() if v is not None or k != "iterations"}
    try:
        entry.train_function()(args.env_id, **options)
    except (FileExistsError, FileNotFoundError, ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    print(f"Policy in {args.out}.\nNext: {_eval_hint(args, args.out)}", file=out)
    return 0


#: How the command maps its flags onto each trainer of the table (any other row:
#: :func:`_train_other`).
_RUNS = {"rllib": _train_rllib, "trl": _train_trl, "sft": _train_sft}
