"""The CI skip rule (tests/ci_skips.py) run on a small test suite of its own: a skip, a
module-level skip and a skipif fail under CI=true and stay skips without it; xfail is kept."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SUITE = {
    "test_plain": """
import pytest

def test_skips():
    pytest.skip("no tool")

@pytest.mark.skipif(True, reason="no package")
def test_skipif():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_xfail():
    assert False

def test_passes():
    pass
""",
    "test_module_skip": """
import pytest
pytest.skip("no_such_module_for_the_ci_rule is missing", allow_module_level=True)

def test_never_runs():
    pass
""",
}


def _run(pytester, monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makeconftest('pytest_plugins = ["ci_skips"]')
    pytester.makepyfile(**SUITE)
    # Past the collection error, so the plain file's outcomes are counted too.
    return pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-rA", "--continue-on-collection-errors"
    )


@pytest.mark.parametrize("ci", ["true", "1", "yes"])
def test_under_ci_every_skip_fails(pytester, monkeypatch, ci):
    result = _run(pytester, monkeypatch, ci)
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) == 0
    assert outcomes["passed"] == 1 and outcomes["xfailed"] == 1
    # pytest.skip() in the test fails it; a skipif (at setup) and the module that skipped at
    # import are errors: each of the three skips makes the run fail.
    assert outcomes["failed"] == 1 and outcomes["errors"] == 2
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*skipped under CI=true (a skip hides a gap)*"])
    result.stdout.fnmatch_lines(["*module skipped under CI=true*"])


@pytest.mark.parametrize("ci", [None, "false", ""])
def test_outside_ci_skips_stay_skips(pytester, monkeypatch, ci):
    result = _run(pytester, monkeypatch, ci)
    result.assert_outcomes(passed=1, skipped=3, xfailed=1)
    assert result.ret == 0
