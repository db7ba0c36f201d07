"""What every module of the TRL integration shares: the check that the extra is installed, the
derivation of seeds (the same in every process) and the checks of the draw options."""

from __future__ import annotations

import numpy as np

from budget_envs._util import require


def _require() -> None:
    require("torch", "trl", extra="trl", what="the TRL integration")


def _seed(*parts: int) -> int:
    """One 32-bit seed from integer parts (the same in every process)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def _check_draw_options(budget_per: str, seed: int) -> None:
    """Refuse a ``budget_per`` or ``seed`` that the task and budget draws cannot use (the
    rollout's and the tool env's options of the same names)."""
    if budget_per not in ("episode", "group"):
        raise ValueError(f"budget_per must be 'episode' or 'group', got {budget_per!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
