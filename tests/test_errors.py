"""One exception hierarchy: every class in budget_envs.errors, rooted at gymnasium.error.Error."""

from __future__ import annotations

import ast
import pathlib

import gymnasium as gym
import pytest

from budget_envs import core, errors

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = sorted(
    p
    for folder in ("budget_envs", "wrappers", "registry")
    for p in (ROOT / folder).rglob("*.py")
    if p.name != "errors.py"
)
ERROR_CLASSES = [getattr(errors, name) for name in errors.__all__]


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def test_sources_found():
    assert len(SOURCES) > 20 and ERROR_CLASSES


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(ROOT)) for p in SOURCES])
def test_no_exception_class_is_defined_outside_errors_py(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(_base_name(base).endswith(("Error", "Exception")) for base in node.bases)
    ]
    assert not defined, f"{path.name} defines exception classes {defined}; move them to errors.py"


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=[c.__name__ for c in ERROR_CLASSES])
def test_every_error_is_rooted_at_gymnasiums_error(cls):
    assert issubclass(cls, errors.BudgetEnvsError)
    assert issubclass(cls, gym.error.Error)
    assert not hasattr(gym.error, cls.__name__), f"{cls.__name__} shadows gymnasium.error"


def test_builtin_bases_callers_rely_on_are_kept():
    assert issubclass(errors.GameFileError, ValueError)
    assert issubclass(errors.DerivationError, ValueError)
    assert issubclass(errors.UnknownFaultKind, ValueError)
    assert issubclass(errors.GenerationTimeout, TimeoutError)
    assert issubclass(errors.GenerationTimeout, errors.GenerationError)
    for cls in (errors.WebShopServerError, errors.AgentError, errors.ExpertError):
        assert issubclass(cls, RuntimeError)


def test_no_shadowing_alias_left_in_core():
    assert not hasattr(core, "InvalidAction")
    assert core.ActionRejected is errors.ActionRejected  # what families raise, imported once


def test_family_modules_reexport_the_one_class():
    from budget_envs.envs.textworld.generate import GenerationError
    from budget_envs.envs.tooluse.tools import ToolError
    from budget_envs.envs.webshop.env import WebShopServerError

    assert GenerationError is errors.GenerationError
    assert ToolError is errors.ToolError
    assert WebShopServerError is errors.WebShopServerError


def test_one_unreachable():
    from budget_envs.envs.textworld import oracle as tw_oracle
    from budget_envs.envs.tooluse import oracle as tu_oracle
    from budget_envs.envs.webshop import oracle as ws_oracle

    assert core.UNREACHABLE == 10**6
    for module in (tw_oracle, tu_oracle, ws_oracle):
        assert module.UNREACHABLE is core.UNREACHABLE
    hits = [
        str(p.relative_to(ROOT))
        for p in SOURCES
        if "UNREACHABLE = " in p.read_text(encoding="utf-8") and p.name != "core.py"
    ]
    assert hits == []
