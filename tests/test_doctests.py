"""The docstring examples of every module of the package run and pass.

Every module under ``budget_envs`` (including ``budget_envs.wrappers`` and
``budget_envs.registry``, which live in their own top-level folders) is imported; an import error
fails the test instead of hiding the module's examples. Examples marked ``+SKIP`` are not counted.
"""

from __future__ import annotations

import doctest
import functools
import importlib
import io
import pathlib
import pkgutil
import warnings

import pytest

import budget_envs

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: At least this many examples must really run (the docs promise runnable examples).
MIN_EXAMPLES = 15


def _mapped_packages() -> list[str]:
    """Sub-packages that pyproject maps from their own folders (``[tool.setuptools.package-dir]``)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the two folders the layout fixes
        return ["budget_envs.wrappers", "budget_envs.registry"]
    with open(ROOT / "pyproject.toml", "rb") as fh:
        config = tomllib.load(fh)
    mapped = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return sorted(name for name in mapped if name.startswith("budget_envs."))


def _module_names() -> list[str]:
    names = {"budget_envs"}
    roots = [budget_envs, *(importlib.import_module(name) for name in _mapped_packages())]
    for package in roots:
        names.add(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            names.add(info.name)
    return sorted(names)


MODULES = _module_names()


@functools.cache
def _run(name: str) -> tuple[int, int, str]:
    """(examples run, failures, report) of the module's doctests; each module runs once."""
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out = io.StringIO()
    for test in finder.find(module, name):
        if test.filename and not pathlib.Path(test.filename).resolve().is_relative_to(ROOT):
            continue  # an object re-exported from another distribution
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runner.run(test, out=out.write, clear_globs=True)
    return runner.tries, runner.failures, out.getvalue()


def test_every_module_is_found():
    assert "budget_envs.core" in MODULES
    assert "budget_envs.wrappers.budget" in MODULES and "budget_envs.registry.table" in MODULES
    assert any(name.startswith("budget_envs.envs.") for name in MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests_pass(name):
    attempted, failed, report = _run(name)
    assert failed == 0, f"{failed} of {attempted} examples failed in {name}:\n{report}"


def test_enough_examples_are_executed():
    counts = {name: _run(name)[0] for name in MODULES}
    total = sum(counts.values())
    assert total >= MIN_EXAMPLES, f"only {total} examples ran: {counts}"
    # Examples sit in more than one corner of the package, not all in one module.
    assert sum(1 for n in counts.values() if n) >= 5, counts


def test_info_keys_page_lists_exactly_the_documented_keys():
    """docs/info-keys.md is the user's copy of budget_envs/info.py: same keys, no more, no less."""
    import re

    from budget_envs.info import ALL_KEYS

    rows = [
        line
        for line in (ROOT / "docs" / "info-keys.md").read_text().splitlines()
        if line.startswith("| `")
    ]
    assert rows, "docs/info-keys.md has no key table"
    listed = [key for row in rows for key in re.findall(r"`([a-z_]+)`", row.split("|")[1])]
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == set(ALL_KEYS)
