"""PPO training of an action-scoring policy with RLlib, into a policy folder any eval can load.

:func:`train` is what ``budgetmix train ID --trainer rllib`` runs. The output folder holds::

    policy.json     what the policy is: env id, env kwargs, budget spec, visibility, the input
                    sizes (FeatureSpec), the trainer and its settings
    module.safetensors  the module's weights (what the policy agent loads: no pickle is read;
                    see :mod:`budget_envs.integrations.rllib.weights`)
    checkpoint/     RLlib's algorithm checkpoint (``--resume`` continues from it: pickle, so
                    resume only a folder you trained)
    metrics.csv     one row per iteration (see :data:`METRICS`)
    curve.png       win rate and return per iteration (with matplotlib)

``budgetmix eval --agent p=policy:DIR`` loads the module from ``module.safetensors`` and
``policy.json`` without Ray.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from budget_envs.errors import TooManyActions
from budget_envs.integrations.common import DEFAULT_BUDGET
from budget_envs.integrations.rllib.config import RLlibTrainConfig
from budget_envs.integrations.rllib.warmstart import IMITATION_FIRST_EPISODE
from budget_envs.integrations.rllib.weights import module_path, save_module

__all__ = [
    "LEGACY_SPEED",
    "MAX_GROWN_SLOTS",
    "METRICS",
    "POLICY_FILE",
    "RLlibTrainConfig",
    "auto_env_runners",
    "module_path",
    "read_metrics",
    "start_local_ray",
    "train",
]

logger = logging.getLogger(__name__)

POLICY_FILE = "policy.json"
#: Columns of ``metrics.csv``.
METRICS: tuple[str, ...] = (
    "iteration",
    "timesteps",
    "episodes",
    "return_mean",
    "win_rate",
    "turns",
    "budget_limit",
    "budget_used",
    "invalid_action_rate",
    "wall_s",
)
#: The speed settings of :func:`train` before packed scoring and vector envs (its other
#: defaults as they were too): ``benchmarks/bench_train.py`` runs it beside today's defaults.
LEGACY_SPEED: dict[str, Any] = {
    "packed": False,
    "num_envs_per_env_runner": 1,
    "num_env_runners": 0,
    "torch_threads": None,
    "max_actions": 2048,
    "grow_slots": False,
    "train_batch_size": 512,
    "minibatch_size": 128,
    "hidden": 128,
}
_INT_COLUMNS = frozenset({"iteration", "timesteps", "episodes"})
_RESULT_KEYS = {
    "return_mean": "episode_return_mean",
    "win_rate": "win_rate",
    "turns": "turns",
    "budget_limit": "budget_limit",
    "budget_used": "budget_used",
    "invalid_action_rate": "invalid_action_rate",
}


def read_metrics(out_dir: str | os.PathLike) -> list[dict[str, float]]:
    """The rows of ``metrics.csv`` (empty when there is none)."""
    path = Path(out_dir) / "metrics.csv"
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def start_local_ray(num_cpus: int) -> None:
    """Start the local Ray that training runs on: ``num_cpus`` CPUs, no dashboard, a 256 MiB
    object store, the workers' logs kept out of the driver's output (and not deduplicated,
    unless ``RAY_DEDUP_LOGS`` says otherwise) and its workers at the driver's priority (unless
    ``RAY_worker_niceness`` says otherwise). The caller checks ``ray.is_initialized()`` first and
    shuts down what it started.

    Ray starts its workers at niceness 15 by default, so on a busy machine every other process
    runs first: the env runners, which do the sampling the driver waits on, got about 6% of a
    core each beside four busy processes. At niceness 0 they get their fair share."""
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        object_store_memory=256 * 1024**2,
        log_to_driver=False,
    )


def _plot(rows: list[dict[str, float]], path: Path, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed; no learning curve (pip install matplotlib)")
        return False
    its = [r["iteration"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(its, [r["win_rate"] for r in rows], label="win rate", color="tab:blue")
    ax.plot(
        its,
        [r["return_mean"] for r in rows],
        label="return (reward incl. any progress signal)",
        color="tab:orange",
        ls="--",
    )
    ax.plot(
        its, [r["invalid_action_rate"] for r in rows], label="invalid-action rate", color="tab:red"
    )
    ax.set_xlabel("iteration")
    finite = [r["return_mean"] for r in rows if r["return_mean"] == r["return_mean"]]
    ax.set_ylim(min([-0.02, *finite]), max([1.02, *finite]))
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def train(
    env_id: str,
    config: RLlibTrainConfig | None = None,
    *,
    progress: Callable[[int, int, dict[str, float]], None] | None = None,
    warm_start_progress: Callable[[str, int, int], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Train PPO on ``env_id`` for ``config.iterations`` iterations (in total, counting resumed
    ones), into the policy folder ``config.out_dir``.

    ``config`` holds every setting (:class:`~budget_envs.integrations.rllib.config.
    RLlibTrainConfig`, with their defaults and help); keyword ``options`` are its fields, given
    instead of a config (``train(env_id, out_dir=..., iterations=...)`` builds it) or on top of
    one (they replace its values). ``report_to``: also log every ``metrics.csv`` row to
    TensorBoard and/or W&B (:mod:`~budget_envs.integrations.tracking`).

    With ``warm_start_episodes > 0`` (50 by default) the policy is first fitted to the env's
    oracle on that many training episodes (:mod:`budget_envs.integrations.rllib.warmstart`:
    ``warm_start_explore`` random turns, none by default, ``warm_start_epochs`` epochs at
    ``warm_start_lr``), checkpointed as iteration 0, then PPO runs from it; ``iterations=0`` keeps
    the warm-started policy alone. The warm start is written to ``warm_start.csv`` and
    ``policy.json`` and is not redone on ``--resume``. ``warm_start_progress(stage, done,
    total)`` reports it (stages ``"collect"``, ``"fit"``).

    Speed (see docs/training.md): the module scores only the offered actions (``packed``), each
    env runner steps ``num_envs_per_env_runner`` envs with batched inference, every process runs
    ``torch_threads`` torch threads, and ``num_env_runners=None`` sizes the runners to the CPUs
    (:func:`auto_env_runners`). ``packed=False, num_envs_per_env_runner=1, num_env_runners=0,
    torch_threads=None, max_actions=2048, train_batch_size=512, minibatch_size=128`` is the
    configuration before these defaults (:data:`LEGACY_SPEED`), kept for the benchmarks.

    The slot count grows on its own: when a state offers more actions than ``max_actions``
    (``grow_slots``, the default), the algorithm is rebuilt with the next power of two above
    twice the slots and the offered count, from the state it had (the network's weights do not
    depend on the slot count), the iteration starts again, and ``policy.json`` says so
    (``slots_grown``). A resume keeps the grown count.

    ``progress(iteration, iterations, row)`` is called after every iteration. Starts a local Ray
    with ``num_cpus`` CPUs unless one is running (a running one is reused and left running), and
    shuts down what it started. A resume reads the input sizes from ``policy.json`` instead of
    building a probe env. Returns ``{"out_dir", "iterations", "rows", "wall_s", "curve"}``.

    Raises:
        TypeError: ``config`` is not an :class:`RLlibTrainConfig`, or an option is not one of
            its fields.
        ValueError: a setting is out of range (before anything is written).
        FileExistsError: ``out_dir`` holds a policy and ``resume`` is False.
        FileNotFoundError: ``resume`` without a checkpoint in ``out_dir``.
        TooManyActions: a state offered more actions than ``max_actions`` with ``grow_slots``
            False, or more than :data:`MAX_GROWN_SLOTS`.
    """
    if config is None:
        cfg = RLlibTrainConfig(**options)
    elif not isinstance(config, RLlibTrainConfig):
        raise TypeError(f"config must be an RLlibTrainConfig or None, got {config!r}")
    else:
        cfg = replace(config, **options) if options else config
    from budget_envs.integrations.rllib import env as rl

    rl._require()
    out = Path(cfg.out_dir)
    ckpt = out / "checkpoint"
    meta_path = out / POLICY_FILE
    if cfg.resume:
        if not (ckpt / "rllib_checkpoint.json").exists():
            raise FileNotFoundError(f"--resume: no checkpoint in {out} (expected {ckpt})")
    elif meta_path.exists():
        raise FileExistsError(f"{out} already holds a policy; pass --resume or another --out")
    out.mkdir(parents=True, exist_ok=True)
    env_kwargs = dict(cfg.env_kwargs or {})
    env_config = cfg.env_config(env_id, (out / RUNNER_ERROR_FILE).resolve())
    old_meta = json.loads(meta_path.read_text()) if cfg.resume and meta_path.exists() else {}
    if "features" in old_meta:
        features = old_meta["features"]
    else:
        probe = rl.env_creator(dict(env_config))
        features = probe.features.to_dict()
        probe.close()
    meta = {
        "trainer": "rllib",
        "algorithm": "PPO",
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "budget": None if cfg.budget is DEFAULT_BUDGET else _jsonable(cfg.budget),
        "visibility": cfg.visibility,
        "features": features,
        "settings": cfg.settings(),
    }
    rows = read_metrics(out) if cfg.resume else []
    from budget_envs.integrations.tracking import MetricsSink

    sink = MetricsSink(out, cfg.report_to, config={"trainer": "rllib", **meta})
    import ray

    started = not ray.is_initialized()
    if started:
        start_local_ray(cfg.num_cpus)
    runners = auto_env_runners() if cfg.num_env_runners is None else cfg.num_env_runners
    meta["settings"]["num_env_runners"] = runners
    threads_before = _set_torch_threads(cfg.torch_threads)
    start = time.perf_counter()
    env_config["max_actions"] = features["max_actions"] = max(
        int(features["max_actions"]), cfg.max_actions
    )

    def build(slots: int) -> Any:
        env_config["max_actions"] = slots
        return rl.ppo_config(
            env_config,
            hidden=cfg.hidden,
            train_batch_size=cfg.train_batch_size,
            minibatch_size=cfg.minibatch,
            num_epochs=cfg.num_epochs,
            lr=cfg.lr,
            gamma=cfg.gamma,
            entropy_coeff=cfg.entropy_coeff,
            num_env_runners=runners,
            num_envs_per_env_runner=cfg.num_envs_per_env_runner,
            packed=cfg.packed,
            torch_threads=cfg.torch_threads,
            seed=cfg.seed,
        ).build_algo()

    iterations = cfg.iterations
    try:
        algo = build(features["max_actions"])
        try:
            if cfg.resume:
                algo.restore_from_path(str(ckpt.resolve()))
                for key in ("warm_start", "imitation"):
                    if key in old_meta:
                        meta[key] = old_meta[key]
                if cfg.imitation_steps and "imitation" not in old_meta:
                    meta["imitation"] = _warm_start(
                        algo,
                        env_config,
                        out,
                        features,
                        episodes=cfg.imitation_steps,  # a cap: every episode has a step
                        epochs=cfg.imitation_epochs,
                        explore=cfg.warm_start_explore,
                        lr=cfg.warm_start_lr,
                        seed=cfg.seed,
                        progress=warm_start_progress,
                        max_steps=cfg.imitation_steps,
                        first_episode=IMITATION_FIRST_EPISODE,
                        csv_name="imitation.csv",
                    )
                    algo.save_to_path(str(ckpt.resolve()))
            elif cfg.warm_start_episodes:
                meta["warm_start"] = _warm_start(
                    algo,
                    env_config,
                    out,
                    features,
                    episodes=cfg.warm_start_episodes,
                    epochs=cfg.warm_start_epochs,
                    explore=cfg.warm_start_explore,
                    lr=cfg.warm_start_lr,
                    seed=cfg.seed,
                    progress=warm_start_progress,
                )
                algo.save_to_path(str(ckpt.resolve()))
            save_module(algo, out, meta, meta_path)  # writes policy.json too
            # A run killed between checkpoints wrote rows past the one it restored from: those
            # iterations are trained again, so their rows go (the checkpoint knows its iteration).
            done = int(algo.iteration or 0) if cfg.resume else 0
            rows = rows[:done]
            offset = rows[-1]["wall_s"] if rows else 0.0
            it = done + 1
            while it <= iterations:
                try:
                    result = _train_once(algo, it, features["max_actions"], out / RUNNER_ERROR_FILE)
                except TooManyActions as exc:
                    slots = _grown_slots(features["max_actions"], exc)
                    if slots is None or not cfg.grow_slots:
                        raise
                    algo = _rebuild(algo, build, slots, out)
                    logger.warning(
                        "iteration %d: a state offered more actions than the policy's %d slots; "
                        "it now has %d (the network does not depend on them) and the iteration "
                        "starts again",
                        it,
                        features["max_actions"],
                        slots,
                    )
                    meta["features"]["max_actions"] = features["max_actions"] = slots
                    meta.setdefault("slots_grown", []).append({"iteration": it, "to": slots})
                    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
                    continue
                stats = result.get("env_runners", {})
                row: dict[str, float] = {
                    "iteration": it,
                    "timesteps": float(result.get("num_env_steps_sampled_lifetime", 0) or 0),
                    "episodes": float(stats.get("num_episodes", 0) or 0),
                }
                for col, key in _RESULT_KEYS.items():
                    value = stats.get(key)
                    row[col] = float("nan") if value is None else float(value)
                row["wall_s"] = round(offset + time.perf_counter() - start, 1)
                rows.append(row)
                _write_rows(out / "metrics.csv", rows)
                sink.log(row, it)
                if it % cfg.checkpoint_every == 0 or it == iterations:
                    algo.save_to_path(str(ckpt.resolve()))
                    save_module(algo, out, meta, meta_path)
                if progress is not None:
                    progress(it, iterations, row)
                it += 1
        finally:
            algo.stop()
    finally:
        sink.close()
        _set_torch_threads(threads_before)
        if started:
            ray.shutdown()
    curve = out / "curve.png"
    title = f"{env_id} {json.dumps(env_kwargs)} T={meta['budget']} {cfg.visibility}"
    plotted = _plot(rows, curve, title) if rows else False
    return {
        "out_dir": str(out),
        "iterations": len(rows),
        "rows": rows,
        "wall_s": rows[-1]["wall_s"] if rows else 0.0,
        "curve": str(curve) if plotted else None,
    }


#: The most action slots :func:`train` grows to on its own.
MAX_GROWN_SLOTS = 16384


def _grown_slots(slots: int, exc: Exception) -> int | None:
    """The slot count after a state offered more actions than ``slots``: the next power of two
    above both twice ``slots`` and the offered count (None past :data:`MAX_GROWN_SLOTS`)."""
    import re

    found = re.search(r"(\d+) actions are offered", str(exc))
    needed = int(found.group(1)) if found else 2 * slots
    grown = 1 << max(2 * slots - 1, needed).bit_length()
    return grown if grown <= MAX_GROWN_SLOTS else None


def _rebuild(algo: Any, build: Callable[[int], Any], slots: int, out: Path) -> Any:
    """The algorithm rebuilt with ``slots`` action slots, in the state ``algo`` holds (weights,
    optimizer, counters): the network's weights do not depend on the slot count."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=out, prefix=".grow-") as tmp:
        algo.save_to_path(str(Path(tmp).resolve()))
        algo.stop()
        algo = build(slots)
        algo.restore_from_path(str(Path(tmp).resolve()))
    return algo


#: The file (in the output folder) where env runners write the error that ends them.
RUNNER_ERROR_FILE = ".runner-error.jsonl"


def _train_once(
    algo: Any, iteration: int, max_actions: int, error_file: Path | None = None
) -> dict[str, Any]:
    """One ``algo.train()``; a state with too many actions, wherever it was sampled, comes out as
    one :class:`TooManyActions` that says what to do.

    A remote env runner whose env raises is ended by RLlib, and the driver only learns that the
    actor died: the env wrote its error to ``error_file`` first, and it is raised from here
    (an env error of another kind as a ``RuntimeError`` that quotes it)."""
    if error_file is not None:
        error_file.unlink(missing_ok=True)
    try:
        return algo.train()
    except Exception as exc:  # an env runner's error may arrive wrapped by Ray, or not at all
        recorded = _runner_errors(error_file)
        overflow = next((r for r in recorded if r.get("type") == "TooManyActions"), None)
        seen: set[int] = set()
        cause: BaseException | None = exc
        while cause is not None and id(cause) not in seen and not isinstance(cause, TooManyActions):
            seen.add(id(cause))
            cause = getattr(cause, "cause", None) or cause.__cause__ or cause.__context__
        if cause is None and overflow is None and "TooManyActions" not in str(exc):
            if recorded:
                last = recorded[-1]
                raise RuntimeError(
                    f"iteration {iteration}: an env runner's env raised "
                    f"{last.get('type')}: {last.get('message')}"
                ) from exc
            raise
        text = overflow["message"] if overflow is not None else str(cause or exc)
        first = text.strip().splitlines()[-1]
        raise TooManyActions(
            f"iteration {iteration}: {first}. max_actions={max_actions} is too few for this env: "
            "train again with a larger --max-actions (the slots cost memory, not network time)"
        ) from None


def _runner_errors(error_file: Path | None) -> list[dict[str, Any]]:
    """The errors env runners wrote to ``error_file`` (none when it is missing or unreadable)."""
    if error_file is None:
        return []
    try:
        lines = error_file.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    errors = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut short by the runner's death
        if isinstance(row, dict):
            errors.append(row)
    return errors


def auto_env_runners() -> int:
    """Remote env runners for the CPUs of the running Ray: one per CPU, none on a single CPU.

    PPO samples, then learns: while the runners sample the driver waits, and while the driver
    learns the runners wait, so a runner per CPU spreads the sampling (three quarters of an
    iteration) over every core. On one CPU a remote runner buys nothing but messages."""
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 1))
    return 0 if cpus < 2 else cpus


def _set_torch_threads(threads: int | None) -> int | None:
    """Set torch's threads in this process (None: leave them); return the previous count."""
    if threads is None:
        return None
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    return before


def _warm_start(
    algo: Any,
    env_config: Mapping[str, Any],
    out: Path,
    features: Mapping[str, Any],
    *,
    episodes: int,
    epochs: int,
    explore: float,
    lr: float,
    seed: int,
    progress: Callable[[str, int, int], None] | None,
    max_steps: int | None = None,
    first_episode: int = 0,
    csv_name: str = "warm_start.csv",
) -> dict[str, Any]:
    """Fit the learner's module to oracle labels and push it to the env runners (``max_steps``,
    ``first_episode``: :func:`~budget_envs.integrations.rllib.warmstart.collect_demonstrations`;
    the fit's rows go to ``csv_name``)."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    from budget_envs.integrations.rllib import warmstart as ws

    start = time.perf_counter()
    demos = ws.collect_demonstrations(
        env_config,
        episodes=episodes,
        explore=explore,
        seed=seed,
        progress=None if progress is None else (lambda d, t: progress("collect", d, t)),
        max_steps=max_steps,
        first_episode=first_episode,
    )
    import gymnasium as gym

    from budget_envs.integrations.rllib.features import FeatureSpec

    spec = FeatureSpec.from_dict(features)
    spaces = {DEFAULT_MODULE_ID: (spec.observation_space(), gym.spaces.Discrete(spec.max_actions))}
    module = algo.config.get_rl_module_spec(spaces=spaces).build()
    module.set_state(algo.learner_group.get_weights()[DEFAULT_MODULE_ID])
    fit = ws.pretrain(
        module,
        demos,
        epochs=epochs,
        lr=lr,
        seed=seed,
        progress=None if progress is None else (lambda e, t, _row: progress("fit", e, t)),
    )
    algo.learner_group.set_weights({DEFAULT_MODULE_ID: module.get_state()})
    algo.env_runner_group.sync_weights(
        from_worker_or_learner_group=algo.learner_group, inference_only=True
    )
    with (out / csv_name).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["epoch", "loss", "accuracy"])
        writer.writeheader()
        for row in fit:
            writer.writerow(
                {"epoch": int(row["epoch"]), **{k: row[k] for k in ("loss", "accuracy")}}
            )
    return {
        **demos.summary(),
        "epochs": epochs,
        "lr": lr,
        "gradient_updates": epochs * -(-len(demos) // ws.BATCH_SIZE),
        "final_loss": fit[-1]["loss"],
        "final_accuracy": fit[-1]["accuracy"],
        "wall_s": round(time.perf_counter() - start, 1),
    }


def _write_rows(path: Path, rows: list[dict[str, float]]) -> None:
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(METRICS))
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: int(row[k]) if k in _INT_COLUMNS else row.get(k, "") for k in METRICS}
            )
    tmp.replace(path)


def _jsonable(value: Any) -> Any:
    from budget_envs.wrappers.budget_spec import budget_to_json

    return budget_to_json(value)
