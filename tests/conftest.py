"""Test session setup: register the toy env, pick the Hypothesis profile, and turn skips into
failures under CI."""

from __future__ import annotations

import os

import pytest

# No test reaches the Hugging Face Hub: models come from the package index, prepared once.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from contract_helpers import register_toy
from hypothesis import settings

import budget_envs  # noqa: F401  (registers the product ids)

register_toy()

# Under CI=true a skip fails (tests/ci_skips.py; tests/test_ci_skips.py checks the rule).
pytest_plugins = ["ci_skips"]

_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Hypothesis: the same examples on every CI run (a failure there reproduces), and no deadline
# (a shared 2-core runner makes step times noisy). Locally the default profile explores afresh.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if _CI else "dev"))


@pytest.fixture(scope="module")
def ray_running():
    """A local Ray of 2 CPUs for one test module (``train`` reuses a running one), shut down
    after the module."""
    import ray

    from budget_envs.integrations.rllib.training import start_local_ray

    start_local_ray(2)
    try:
        yield ray
    finally:
        ray.shutdown()
