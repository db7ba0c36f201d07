"""The distribution ships every package: found by setup.py, none listed by hand."""

from __future__ import annotations

import runpy
from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"budget_envs.wrappers": "wrappers", "budget_envs.registry": "registry"}


def _package_dirs() -> set[str]:
    """Every folder with an ``__init__.py``, named as it is installed."""
    names = set()
    for init in (ROOT / "budget_envs").rglob("__init__.py"):
        names.add(".".join(init.parent.relative_to(ROOT).parts))
    for name, folder in MAPPED.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            names.add(".".join((name, *rel)))
    return names


def test_setup_finds_every_package_under_its_installed_name(monkeypatch):
    seen: dict = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: seen.update(kwargs))
    runpy.run_path(str(ROOT / "setup.py"))
    packages = seen["packages"]
    expected = _package_dirs()
    assert {"budget_envs", "budget_envs.envs.webshop", *MAPPED} <= expected
    assert sorted(packages) == sorted(expected)
    # the mapped folders never install under their bare names
    assert "wrappers" not in packages and "registry" not in packages


def test_pyproject_maps_the_two_folders_and_lists_no_package():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"budget_envs.wrappers" = "wrappers"' in text
    assert '"budget_envs.registry" = "registry"' in text
    assert "packages = [" not in text
