"""Training logs in the tools people already read: TensorBoard and Weights & Biases.

Every trainer of ``budgetmix train`` writes ``metrics.csv`` one row at a time; with
``report_to`` it also logs each row, as it is written, to TensorBoard (event files under
``OUT/runs/``) and/or W&B (a run under ``OUT/wandb/``). The scalars carry the same names for
every trainer where the quantity is the same (:data:`SCALAR_NAMES`): ``env_reward``,
``win_rate``, ``stop_budget_share``, ``invalid_share``, ``budget`` and ``tokens_per_episode``;
every other numeric column keeps its own name. The step is the row's own (GRPO step, PPO
iteration, SFT step).

W&B runs offline unless ``WANDB_MODE`` says otherwise or ``WANDB_API_KEY`` is set (then
online): an offline run is synced later with ``wandb sync OUT/wandb/offline-run-*``. W&B is
told to print nothing and not to capture the console.

``tensorboard`` and ``wandb`` are the ``tracking`` extra, imported only when asked for.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from budget_envs._util import import_optional

__all__ = ["REPORT_TO", "SCALAR_NAMES", "MetricsSink", "check_report_to", "scalars"]

#: What ``--report-to`` takes; several may be given joined by commas.
REPORT_TO = ("none", "tensorboard", "wandb")

#: metrics.csv column -> the shared scalar name (TRL, RLlib and SFT columns).
SCALAR_NAMES = {
    "reward": "env_reward",  # TRL: mean env reward of a rollout batch
    "return_mean": "env_reward",  # RLlib: mean episode return
    "win_rate": "win_rate",
    "stop_budget": "stop_budget_share",
    "invalid_action_rate": "invalid_share",  # RLlib; TRL writes invalid_share itself
    "budget_mean": "budget",
    "budget_limit": "budget",
    "tokens_mean": "tokens_per_episode",
}

#: Columns that are bookkeeping, not scalars.
_SKIP = {"step", "iteration", "wall_s"}


def check_report_to(value: str | Sequence[str] | None) -> list[str]:
    """The tools named by ``value`` (``"tensorboard,wandb"``, a list, ``"none"`` or None);
    a ValueError for anything else."""
    if value is None:
        return []
    names = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for name in (str(n).strip().lower() for n in names):
        if name not in REPORT_TO:
            raise ValueError(f"report_to must be some of {list(REPORT_TO)}, got {value!r}")
        if name != "none" and name not in out:
            out.append(name)
    return out


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The finite numeric values of a metrics row, under their shared names."""
    out: dict[str, float] = {}
    for key, value in row.items():
        if key in _SKIP or isinstance(value, bool) or value is None or value == "":
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            out[SCALAR_NAMES.get(key, key)] = number
    return out


@contextlib.contextmanager
def _quiet_wandb() -> Iterator[None]:
    """W&B without its own terminal lines (banners, sync hints, the Weave suggestion it prints
    when it sees an LLM library imported) while inside; a variable the user set is kept."""
    wanted = {"WANDB_SILENT": "true", "WANDB_DISABLE_WEAVE": "true"}
    added = [k for k in wanted if k not in os.environ]
    for key in added:
        os.environ[key] = wanted[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


class MetricsSink:
    """Logs metrics rows to the tools named by ``report_to`` (none: does nothing).

    Args:
        out_dir: the trainer's output folder (event files and W&B runs go inside it).
        report_to: see :func:`check_report_to`.
        config: the run's settings (W&B's config; TensorBoard's ``config`` text).
        name: the run's name (default: the folder's name).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        report_to: str | Sequence[str] | None,
        config: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        self.tools = check_report_to(report_to)
        self.out = Path(out_dir)
        self._tb: Any = None
        self._wandb: Any = None
        # A folder written whole through "<name>.tmp" (the study's policies) keeps its name.
        name = name or self.out.resolve().name.removesuffix(".tmp")
        if "tensorboard" in self.tools:
            import_optional("tensorboard", extra="tracking", what="--report-to tensorboard")
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.out / "runs" / name))
            if config:
                import json

                self._tb.add_text("config", json.dumps(dict(config), default=str, indent=1))
        if "wandb" in self.tools:
            wandb = import_optional("wandb", extra="tracking", what="--report-to wandb")
            mode = os.environ.get("WANDB_MODE") or (
                "online" if os.environ.get("WANDB_API_KEY") else "offline"
            )
            self.out.mkdir(parents=True, exist_ok=True)
            with _quiet_wandb():
                self._wandb = wandb.init(
                    project=os.environ.get("WANDB_PROJECT", "budget-envs"),
                    name=name,
                    dir=str(self.out),
                    mode=mode,
                    config=dict(config or {}),
                    reinit="create_new",
                    # Library code prints nothing and leaves the terminal alone: no banner, no
                    # capture of the process's console (the CLI owns its output).
                    settings=wandb.Settings(silent=True, console="off"),
                )

    def log(self, row: Mapping[str, Any], step: int) -> None:
        """Log one metrics row at ``step``."""
        values = scalars(row)
        if self._tb is not None:
            for key, value in values.items():
                self._tb.add_scalar(f"train/{key}", value, int(step))
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log({f"train/{k}": v for k, v in values.items()}, step=int(step))

    def close(self) -> None:
        """Flush and close every tool (a second call does nothing)."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            import wandb

            with _quiet_wandb():
                self._wandb.finish()
                self._wandb = None
                if wandb.run is None:
                    # No other run of this process is live: stop W&B's service process and
                    # threads (and its WANDB_SERVICE variable) instead of leaving them to the
                    # process's end.
                    wandb.teardown()

    def __enter__(self) -> MetricsSink:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
