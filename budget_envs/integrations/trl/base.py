"""What every module of the TRL integration shares: the check that the extra is installed and
the derivation of seeds (the same in every process)."""

from __future__ import annotations

import numpy as np

from budget_envs._util import require


def _require() -> None:
    require("torch", "trl", extra="trl", what="the TRL integration")


def _seed(*parts: int) -> int:
    """One 32-bit seed from integer parts (the same in every process)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])
