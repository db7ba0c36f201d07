"""Test session setup: register the toy env, pick the Hypothesis profile, and turn skips into
failures under CI."""

from __future__ import annotations

import os

# No test reaches the Hugging Face Hub: models come from the package index, prepared once.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
from contract_helpers import register_toy
from hypothesis import settings

import budget_envs  # noqa: F401  (registers the product ids)

register_toy()

_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Hypothesis: the same examples on every CI run (a failure there reproduces), and no deadline
# (a shared 2-core runner makes step times noisy). Locally the default profile explores afresh.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if _CI else "dev"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    # Under CI a skip hides a missing install step or tool: count it as a failure.
    if _CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (a skip hides a gap): {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    # A module-level skip (pytest.importorskip at import) is a collection report, not a test's:
    # under CI it fails the same way.
    if _CI and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"module skipped under CI=true (a skip hides a gap): {report.longrepr}"
