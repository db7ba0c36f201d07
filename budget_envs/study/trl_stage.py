"""The study's train stage with TRL (``budgetmix study --trainer trl``): the same arms, jobs and
folders as the RLlib stage (:func:`~budget_envs.study.stages.train_stage`), each policy an LLM
policy folder that the eval stage plays as ``policy:<folder>``.

Per (family, visibility, seed) the warm start (``warm/``) is
:func:`budget_envs.integrations.trl.train` with no GRPO step at the generous T; ``base`` is that
folder as it is, and every RL arm runs ``Family.iterations`` GRPO steps from it under its
budget. :func:`trl_quick_spec` is the CPU-sized pipeline check of ``--quick --trainer trl``.

Nothing heavy is imported until a function runs.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from budget_envs.study.folder import keep_base_record, policy_root, records_path, warm_root
from budget_envs.study.provenance import write_train_record
from budget_envs.study.spec import (
    BASE,
    IMITATION,
    Family,
    StudySpec,
    arm_budget,
    full_spec,
    quick_spec,
)

if TYPE_CHECKING:
    from budget_envs.study.stages import Progress

__all__ = [
    "LM_GRPO_STEPS",
    "LM_TEMPERATURE",
    "TRAIN_FILE",
    "lm_cpu_spec",
    "train_stage_trl",
    "trl_quick_spec",
    "trl_train_options",
]

logger = logging.getLogger(__name__)

#: The file in each TRL policy folder of a study that says how it was trained (arm, budget,
#: model, GRPO steps, seed) and what the training logged (reward per step, stop reasons).
TRAIN_FILE = "study_train.json"
#: Examples per step of the tiny model's warm start
#: (:func:`budget_envs.integrations.tiny_model.warm_start`).
WARM_START_BATCH = 8
#: GRPO learning rates: the tiny model's (``train``'s default) and a Hub model's (GRPOConfig's
#: own default; ``StudySpec.lr`` is PPO's and is not used).
TINY_LR = 1e-3
HUB_LR = 1e-6
#: GRPO's learning rate from a ``--trainer sft`` folder of the small decoder built from scratch
#: (``model=scratch``; a Hub model's SFT folder trains at :data:`HUB_LR`).
SCRATCH_LR = 1e-4
#: Token limits of a rollout: one reply (a ToolUse tool call is up to about 60 tokens), and the
#: whole episode per turn of the family's generous T (so the budget, not the token limit, ends
#: an episode that keeps going).
MAX_TURN_TOKENS = 96
TOKENS_PER_TURN = 320
#: GRPO steps between the trainer checkpoints an arm resumes from after a kill (a session's
#: end): a killed arm loses at most this many steps.
RESUME_EVERY = 5
#: The RL arm whose env steps (it runs ``Family.iterations`` GRPO steps) every other RL arm of
#: its cell then trains to (``max_env_steps``), running at most :data:`STEP_CAP` times as many
#: GRPO steps: a GRPO step is a number of episodes, and an arm at a tight T takes fewer turns
#: per episode.
REFERENCE_ARM = "fixed_generous"
STEP_CAP = 4
#: Episodes per GRPO step (4 per prompt): within one step of env steps is as equal as GRPO
#: arms get (``budgetmix study --check`` allows that much at the generous T).
GRPO_EPISODES = 8
#: How a study from a ``--trainer sft`` folder acts, in GRPO and when played (every arm,
#: imitation included): by scoring the offered actions, so a small model's every turn is valid.
LM_ACTIONS = "score-mean"
#: The imitation arm's demonstrations: reset seeds apart from the base's (``seed`` +
#: :data:`IMITATION_SEED`), at most :data:`IMITATION_EPISODES_CAP` episodes (``max_env_steps``
#: ends them first).
IMITATION_SEED = 7_919
#: The sampling temperature of a study from a ``--trainer sft`` folder, over the scores of the
#: offered actions (mean log-probability per token), in GRPO and when played, every arm alike:
#: those scores lie close together, so at 0.7 a small decoder's pick is near uniform.
LM_TEMPERATURE = 0.25
IMITATION_EPISODES_CAP = 100_000
#: The file in a ``<folder>.tmp`` that holds the options its run started with: an unfinished
#: run is resumed only with the same options.
_STARTED = "study_started.json"


def trl_train_options(spec: StudySpec, fam: Family, vis: str, seed: int) -> dict[str, Any]:
    """The :func:`~budget_envs.integrations.trl.train` options every policy of (family,
    visibility, seed) shares.

    From the :class:`Family`: the training env, the tiny model's warm start
    (``warm_start_episodes`` oracle episodes, ``warm_start_epochs`` passes over them in steps of
    :data:`WARM_START_BATCH`) and the token limit of an episode (:data:`TOKENS_PER_TURN` per
    turn of ``generous``). The PPO sizes (``batch_size``, ``minibatch_size``, ``num_epochs``) do
    not apply: a GRPO step is ``train``'s default of 8 episodes (4 per prompt). A Hub model
    gets GRPOConfig's learning rate and ``enable_thinking=False`` in its chat template
    (ignored by templates without it), so a reply is one action. A ``--trainer sft`` folder's
    study acts by :data:`LM_ACTIONS` at :data:`LM_TEMPERATURE`.
    """
    from budget_envs.integrations.trl.training import _sft_settings

    tiny = spec.model == "tiny"
    steps = math.ceil(fam.warm_start_epochs * fam.warm_start_episodes / WARM_START_BATCH)
    sft: dict[str, Any] = {}
    made = _sft_settings(spec.model)
    lr = TINY_LR if tiny else HUB_LR
    if made is not None:
        sft = {"actions": LM_ACTIONS, "temperature": LM_TEMPERATURE}
        lr = SCRATCH_LR if made.get("model") == "scratch" else lr
    return dict(
        **sft,
        visibility=vis,
        env_kwargs=dict(fam.train_kwargs),
        seed=seed,
        warm_start_episodes=fam.warm_start_episodes,
        warm_start_steps=steps if tiny else 0,
        learning_rate=lr,
        max_turn_tokens=MAX_TURN_TOKENS,
        max_completion_length=TOKENS_PER_TURN * fam.generous,
        batch_size=GRPO_EPISODES,
        chat_template_kwargs=None if tiny else {"enable_thinking": False},
    )


def _done(folder: Path) -> bool:
    """Whether ``folder`` holds a finished TRL policy of the study (written whole, renamed)."""
    return (folder / TRAIN_FILE).is_file()


def _check_same(folder: Path, summary: dict[str, Any]) -> None:
    """Refuse a finished ``folder`` that was trained otherwise than ``summary`` says (another
    model, budget or number of GRPO steps): the spec changed under a study folder."""
    saved = json.loads((folder / TRAIN_FILE).read_text(encoding="utf-8"))
    changed = [f"{k} {saved.get(k)!r}, now {v!r}" for k, v in summary.items() if saved.get(k) != v]
    if changed:
        raise ValueError(
            f"{folder} was trained with other settings ({'; '.join(changed)}): delete it or "
            "give the study another --out"
        )


def _clear(target: Path) -> None:
    """Remove an unfinished ``target``; refuse to delete another trainer's policy."""
    if (target / "policy.json").is_file():
        raise ValueError(
            f"{target} holds an RLlib policy: a study folder is trained by one trainer; "
            "give --trainer trl another --out"
        )
    if target.exists():
        shutil.rmtree(target)


def _train_into(target: Path, summary: dict[str, Any], **options: Any) -> None:
    """Run ``train`` into ``target`` whole or not at all: it writes into ``<target>.tmp``,
    which is renamed once it holds the policy and :data:`TRAIN_FILE`."""
    from budget_envs.integrations.trl import train

    _clear(target)
    tmp = target.with_name(target.name + ".tmp")
    started = json.dumps({**summary, **options}, sort_keys=True, default=str)
    resume = _resumable(tmp, started)
    if tmp.exists() and not resume:
        shutil.rmtree(tmp)  # killed before its first checkpoint, or started otherwise
    if options.get("iterations"):
        options = {"checkpoint_every": RESUME_EVERY, **options}
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / _STARTED).write_text(started + "\n", encoding="utf-8")
    metrics = train(out_dir=tmp, resume=resume, **options)
    # train() keeps its starting model in warm_start/, GRPO's checkpoints in trainer/ and
    # checkpoints/: here the starting model is the warm/ folder, and a finished arm needs none.
    for extra in ("warm_start", "trainer", "checkpoints", _STARTED):
        path = tmp / extra
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    record = {
        **summary,
        "wall_time": metrics["wall_time"],
        "warm_start_loss": metrics["warm_start_loss"],
        "reward": metrics["reward"],
        # the share of prompts whose episodes all earned the same reward, per GRPO step: such a
        # group has no advantage, so a step with 1.0 here leaves the weights as they were
        "frac_reward_zero_std": [
            h["frac_reward_zero_std"] for h in metrics["log_history"] if "frac_reward_zero_std" in h
        ],
        "stop_reasons": metrics["stop_reasons"],
    }
    (tmp / TRAIN_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    tmp.replace(target)


def _steps_of(root: Path, arm: str, arms: list[str]) -> int | None:
    """The env steps ``arm`` trains to: those :data:`REFERENCE_ARM` took (read from its
    finished folder's metrics), or None for the reference itself, a spec without it, or a
    reference that took none."""
    import csv

    from budget_envs.integrations.trl.training import METRICS_FILE, env_steps

    if arm == REFERENCE_ARM or REFERENCE_ARM not in arms:
        return None
    path = root / REFERENCE_ARM / METRICS_FILE
    if not _done(root / REFERENCE_ARM) or not path.is_file():
        raise ValueError(f"{root / REFERENCE_ARM} must be trained before {arm} (its env steps)")
    with open(path, newline="", encoding="utf-8") as fh:
        steps = env_steps(list(csv.DictReader(fh)))
    return steps or None


def _resumable(tmp: Path, started: str) -> bool:
    """Whether ``tmp`` is a GRPO run killed after a trainer checkpoint, started with the same
    options (``started``): then it resumes there instead of starting over."""
    from budget_envs.integrations.trl.training import TRAINER_DIR

    try:
        same = (tmp / _STARTED).read_text(encoding="utf-8").strip() == started
    except OSError:
        return False
    return same and any((tmp / TRAINER_DIR).glob("checkpoint-*"))


def _link_copy(src: Path, dst: Path) -> None:
    """Copy a policy folder whole (through a temporary name), its files hard-linked where the
    file system allows (a Hub model's weights are not stored twice)."""

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    _clear(dst)
    tmp = dst.with_name(dst.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(src, tmp, copy_function=link)
    summary = json.loads((tmp / TRAIN_FILE).read_text(encoding="utf-8"))
    (tmp / TRAIN_FILE).unlink()  # its own file, not a link to warm/'s
    (tmp / TRAIN_FILE).write_text(
        json.dumps({**summary, "arm": BASE}, indent=2) + "\n", encoding="utf-8"
    )
    tmp.replace(dst)


def _refuse(spec: StudySpec) -> None:
    """What the TRL train stage cannot do: learning-curve copies, and the imitation arm unless
    the base is a ``--trainer sft`` folder (more SFT continues its demonstrations)."""
    from budget_envs.integrations.trl.training import _sft_settings

    if spec.curve is not None:
        raise ValueError(
            f"the TRL train stage writes no learning-curve checkpoints: give the spec "
            f"curve=None (got curve={spec.curve!r})"
        )
    if IMITATION in spec.arms and _sft_settings(spec.model) is None:
        raise ValueError(
            f"the TRL train stage has no {IMITATION!r} arm (more SFT from base) unless --model "
            f"is a folder `budgetmix train --trainer sft` wrote: give the spec arms without it "
            f"(got {spec.arms!r}, model {spec.model!r})"
        )


def _imitation_steps(root: Path, arms: list[str]) -> int:
    """The mean env steps the cell's RL arms took (finished, read from their metrics): what the
    imitation arm spends on more oracle demonstrations."""
    import csv

    from budget_envs.integrations.trl.training import METRICS_FILE, env_steps

    steps = []
    for arm in [a for a in arms if a not in (BASE, IMITATION)]:
        path = root / arm / METRICS_FILE
        if not _done(root / arm) or not path.is_file():
            raise ValueError(f"{root / arm} must be trained before {IMITATION} (its env steps)")
        with open(path, newline="", encoding="utf-8") as fh:
            steps.append(env_steps(list(csv.DictReader(fh))))
    mean = round(sum(steps) / len(steps)) if steps else 0
    if mean < 1:
        raise ValueError(f"the RL arms of {root} took no env step: {IMITATION} has none to match")
    return mean


def _imitate_into(
    target: Path, summary: dict[str, Any], model: str, warm: Path, **run: Any
) -> None:
    """More SFT from ``warm`` on new oracle demonstrations until they reach ``summary``'s
    ``max_env_steps``, with the SFT settings the base (``model``, a ``--trainer sft`` folder)
    was made with (its learning rate, epochs, rendering), written whole as ``target``."""
    from budget_envs.integrations.lm.sft import SFTSettings, train_sft
    from budget_envs.integrations.trl.training import _sft_settings

    base = SFTSettings.from_mapping(_sft_settings(model) or {})
    keep = ("explore", "observation_loss", "epochs", "batch_size", "max_length")
    settings = {k: getattr(base, k) for k in (*keep, "show_actions", "max_actions", "threads")}
    settings.update(
        model=str(warm),
        lora=False,
        learning_rate=base.lr,
        episodes=IMITATION_EPISODES_CAP,
        max_env_steps=int(summary["max_env_steps"]),
    )
    _clear(target)
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    result = train_sft(out_dir=tmp, settings=settings, **run)
    policy_file = tmp / "budgetmix_policy.json"  # played as the RL arms act
    meta = json.loads(policy_file.read_text(encoding="utf-8"))
    played = {"actions": LM_ACTIONS, "temperature": LM_TEMPERATURE}
    policy_file.write_text(json.dumps({**meta, **played}, indent=2) + "\n")
    record = {**summary, "wall_time": result["wall_s"], "env_steps": result["env_steps"]}
    (tmp / TRAIN_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    tmp.replace(target)


def _summaries(spec: StudySpec, fam: Family, vis: str, seed: int) -> dict[str, dict[str, Any]]:
    """What each folder's :data:`TRAIN_FILE` of (family, visibility, seed) says about how it
    was trained (the RL arms' env-step limits are added as they are set)."""
    about = {"model": spec.model, "family": fam.name, "visibility": vis, "seed": seed}
    return {
        arm: {
            "arm": arm,
            "budget": fam.generous if arm == "warm" else arm_budget(arm, fam.tight, fam.generous),
            "iterations": 0 if arm in ("warm", BASE) else fam.iterations,
            **about,
        }
        for arm in ["warm", *spec.arms]
    }


def _arm_summary(
    root: Path, arm: str, arms: list[str], fam: Family, summary: dict[str, Any]
) -> dict[str, Any]:
    """``summary`` as ``arm`` is trained once the arms before it are: an RL arm other than
    :data:`REFERENCE_ARM` gets the reference's env steps (and :data:`STEP_CAP` times its GRPO
    steps at most), the imitation arm the RL arms' mean env steps."""
    if arm == BASE:
        return summary
    if arm == IMITATION:
        return {**summary, "iterations": 0, "max_env_steps": _imitation_steps(root, arms)}
    steps = _steps_of(root, arm, arms)
    if steps is None:
        return summary
    return {**summary, "max_env_steps": steps, "iterations": fam.iterations * STEP_CAP}


def _grpo_arm(
    target: Path,
    root: Path,
    arm: str,
    arms: list[str],
    fam: Family,
    summaries: dict[str, dict[str, Any]],
    warm: Path,
    options: dict[str, Any],
) -> None:
    """GRPO of RL ``arm`` from ``warm`` under its budget: :data:`REFERENCE_ARM` for
    ``Family.iterations`` steps, every other arm to the reference's env steps."""
    budget = summaries[arm]["budget"]
    summaries[arm] = _arm_summary(root, arm, arms, fam, summaries[arm])
    steps = summaries[arm].get("max_env_steps")
    logger.info("GRPO %s %s at T=%s into %s", arm, fam.name, budget, target)
    _train_into(
        target,
        summaries[arm],
        env_id=fam.env_id,
        budget=budget,
        iterations=summaries[arm]["iterations"],
        max_env_steps=steps,
        lr_scheduler_type="constant",
        model=str(warm),
        process_reward=fam.process_reward if arm == "process" else None,
        process_max_cost=fam.process_max_cost or fam.generous,
        **options,
    )


def train_stage_trl(
    spec: StudySpec,
    out: Path,
    *,
    progress: Progress | None = None,
    report_to: str | None = None,
) -> list[Path]:
    """Train every (family, visibility, seed, arm) TRL policy that is not finished yet.

    The jobs and folders are the RLlib stage's: (family, visibility, seed) whose records exist
    are skipped, and each policy folder is written whole (through ``<folder>.tmp``), so a killed
    study redoes the folder it was writing and nothing else. Every folder holds a Hugging Face
    model, ``budgetmix_policy.json`` (how the eval agent plays it) and :data:`TRAIN_FILE`.

    * ``warm/``: with ``spec.model == "tiny"`` the offline tiny model, warm-started on the
      family's oracle episodes at the generous T (:func:`trl_train_options`); with a Hub model
      name or path, that model as it is (no warm start, so ``base`` measures the model itself).
    * ``base``: ``warm/`` as it is (files hard-linked); when ``spec.model`` is a ``--trainer
      sft`` folder, its record goes to ``out/base-sft/``
      (:func:`~budget_envs.study.folder.keep_base_record`).
    * every RL arm: ``Family.iterations`` GRPO steps from ``warm/`` under the arm's budget
      (:func:`~budget_envs.study.spec.arm_budget`), ``process`` with the ProcessReward signal
      at ``Family.process_reward`` and ``max_cost`` ``Family.process_max_cost`` (default the
      generous T), as in the RLlib stage. All arms of a seed share that seed (task and budget draws,
      sampling), so a rerun gives the same policies on the same hardware.

    A killed GRPO arm resumes from its last trainer checkpoint (every :data:`RESUME_EVERY`
    steps) when the study runs again with the same options, and ends as an unkilled run would.
    Not done with TRL: the learning curve (no ``curve/`` checkpoints; a spec with ``curve`` set
    is refused, since the eval stage would look for them).
    """
    _refuse(spec)
    jobs = [
        (fam, vis, seed)
        for fam in spec.families
        for vis in spec.visibilities
        for seed in spec.seeds_for(vis, fam)
        if not records_path(out, fam, vis, seed).exists()
    ]
    total = len(jobs) * len(spec.arms)
    done = 0
    policies = []
    if jobs:
        keep_base_record(spec.model, out)
    for fam, vis, seed in jobs:
        root = policy_root(out, fam, vis, seed)
        warm = warm_root(out, fam, vis, seed)
        options = trl_train_options(spec, fam, vis, seed)
        options["report_to"] = report_to  # training logs only: not part of the design
        summaries = _summaries(spec, fam, vis, seed)
        if not all(_done(root / arm) for arm in spec.arms) and not _done(warm):
            logger.info("warm start of %s %s s%d (%s)", fam.name, vis, seed, spec.model)
            _train_into(
                warm,
                summaries["warm"],
                env_id=fam.env_id,
                budget=fam.generous,
                iterations=0,
                model=spec.model,
                **options,
            )
        # the base, then the reference arm (the others train to its env steps), then the rest
        order = lambda a: (a == IMITATION, a != BASE, a != REFERENCE_ARM)  # noqa: E731
        for arm in sorted(spec.arms, key=order):
            target = root / arm
            policies.append(target)
            if progress is not None:
                progress("train", done, total)
            if _done(target):  # trained in an earlier run: with the same settings?
                summaries[arm] = _arm_summary(root, arm, spec.arms, fam, summaries[arm])
                _check_same(target, summaries[arm])
            elif arm == BASE:
                _check_same(warm, summaries["warm"])
                _link_copy(warm, target)
            elif arm == IMITATION:
                _check_same(warm, summaries["warm"])
                summaries[arm] = _arm_summary(root, arm, spec.arms, fam, summaries[arm])
                logger.info("imitation %s %s s%d", fam.name, vis, seed)
                _imitate_into(
                    target,
                    summaries[arm],
                    spec.model,
                    warm,
                    env_id=fam.env_id,
                    budget=fam.generous,
                    visibility=vis,
                    env_kwargs=dict(fam.train_kwargs),
                    seed=IMITATION_SEED + seed,
                )
            else:
                _check_same(warm, summaries["warm"])
                _grpo_arm(target, root, arm, spec.arms, fam, summaries, warm, options)
            start = None if arm == BASE else warm
            lr = float(options["learning_rate"])
            write_train_record(out, fam, vis, seed, arm, target, start, trl_lr=lr)
            done += 1
    if progress is not None:
        progress("train", done, total)
    return policies


def trl_quick_spec() -> StudySpec:
    """The TRL pipeline check (``budgetmix study --quick --trainer trl``), a few minutes on 2
    CPU cores: :func:`~budget_envs.study.spec.quick_spec`'s ToolUse level 1 family with the
    offline tiny model, arms ``base``, ``fixed_generous`` and ``mix``, budget hidden, one seed.

    Sizes: T tight 3 and generous 6 (eval grid 2..7), a warm start of 8 oracle episodes (4
    steps), 1 GRPO step of 8 episodes per RL arm, 2 unseen tasks x 2 samples (1 with a fault at
    turn 1, 1 probe state). Every stage runs; nothing is measured: the tiny model wins no
    ToolUse task at this size, so every GRPO group has the same reward (0) and the RL arms keep
    the base's weights.
    """
    (fam,) = quick_spec().families
    fam = replace(
        fam,
        optimal=3,
        tight=3,
        generous=6,
        eval_budgets=[2, 3, 4, 6, 7],
        warm_start_episodes=8,
        warm_start_epochs=4,
        iterations=1,
        curve_iterations=[],
        eval_tasks=2,
        eval_samples=2,
        fault_samples=1,
        fault_turns=[1],
        probe_states=1,
    )
    return StudySpec(
        families=[fam],
        arms=["base", "fixed_generous", "mix"],
        visibilities=["hidden"],
        seeds=[0],
        n_boot=200,
        trainer="trl",
        model="tiny",
    )


#: GRPO steps of the reference arm (:data:`REFERENCE_ARM`) per cell of :func:`lm_cpu_spec`.
LM_GRPO_STEPS = 16


def lm_cpu_spec() -> StudySpec:
    """The language-model study on 2 CPU cores (``budgetmix study --trainer trl --model DIR``
    with ``DIR`` a folder ``--trainer sft`` wrote on the family's train tasks): the
    pre-registered ALFWorld small scenes family of :func:`~budget_envs.study.spec.full_spec`
    (where the budget binds; its budgets and unseen tasks) and its six arms, sized for a policy
    that scores its actions token by token on a CPU.

    Budget hidden, training seeds 0-2. Per cell: :data:`LM_GRPO_STEPS` GRPO steps of
    :data:`GRPO_EPISODES` episodes for the reference arm, the other RL arms to its env steps,
    the imitation arm as many env steps of more SFT; 50 unseen tasks x 4 samples at the grid's
    largest T with 2 single-step probe states on and off the oracle's path per task, 1 fault
    sample per task with one fault at turn 2 (an episode at T=20 takes about 7 s of a core).
    No learning curve and no budget-visible cells (the GPU spec, ``--device cuda``, runs the
    full design). One ``--model`` is one family's
    base, so ToolUse level 1 is not in it (the small decoder wins none of its unseen tasks:
    docs/reference-results.md).
    """
    full = {f.name: f for f in full_spec().families}
    sizes = dict(
        iterations=LM_GRPO_STEPS,
        curve_iterations=[],
        eval_tasks=50,
        eval_samples=4,
        fault_samples=1,
        fault_turns=[2],
        probe_states=2,
        seeds=None,
    )
    return StudySpec(
        families=[replace(full["alfworld"], **sizes)],
        arms=["base", "fixed_generous", "fixed_tight", "mix", "process", "imitation"],
        visibilities=["hidden"],
        seeds=[0, 1, 2],
        trainer="trl",
        model="scratch",
    )
