"""The CI rule for skips, as a pytest plugin: under ``CI=true`` (or 1, yes) a skipped test or a
skipped module counts as a failure, since a skip there hides a missing install step or tool.
An expected failure (xfail) stays what it is. ``CI`` is read when each report is made, so a
test can switch it (tests/test_ci_skips.py)."""

from __future__ import annotations

import os

import pytest


def under_ci() -> bool:
    """Whether ``CI`` says this run is CI's."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if under_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (a skip hides a gap): {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    # A module-level skip (pytest.importorskip at import) is a collection report, not a test's.
    if under_ci() and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"module skipped under CI=true (a skip hides a gap): {report.longrepr}"
