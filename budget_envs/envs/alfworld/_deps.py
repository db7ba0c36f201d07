"""Lazy, side-effect-free imports of alfworld and textworld.

Importing any ``alfworld`` submodule runs ``alfworld.info``, which creates ``~/.cache/alfworld`` and
writes ``os.environ["ALFWORLD_DATA"]``. Every import here points that variable at an existing
directory for the duration of the import and restores the caller's environment afterwards, so the
suite never changes the user's environment (and never mistakes alfworld's default for real data).
"""

from __future__ import annotations

import importlib
import os
import tempfile
from types import ModuleType

from budget_envs._util import missing_dependency

_WHAT = "BudgetMix/ALFWorld-v0 (alfworld and textworld)"


def alfworld_module(name: str) -> ModuleType:
    """Import ``name`` (an ``alfworld.*`` text-only submodule) without touching the environment."""
    saved = os.environ.get("ALFWORLD_DATA")
    os.environ["ALFWORLD_DATA"] = tempfile.gettempdir()
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise missing_dependency(_WHAT, "alfworld", f"import of {name} failed: {exc}") from exc
    finally:
        if saved is None:
            os.environ.pop("ALFWORLD_DATA", None)
        else:
            os.environ["ALFWORLD_DATA"] = saved


def constants() -> ModuleType:
    return alfworld_module("alfworld.gen.constants")


def goal_library() -> ModuleType:
    return alfworld_module("alfworld.gen.goal_library")


def data_path(name: str) -> str:
    """Path of a file shipped in ``alfworld/data`` (``alfred.pddl``, ``alfred.twl2``)."""
    info = alfworld_module("alfworld.info")
    return os.path.join(info.BUILTIN_DATA_PATH, name)


def textworld_pddl() -> tuple[ModuleType, ModuleType]:
    """``(textworld.envs.pddl.pddl, textworld.envs.pddl.logic)``."""
    try:
        pddl = importlib.import_module("textworld.envs.pddl.pddl")
        if getattr(pddl, "fast_downward_missing", False):
            raise ImportError("fast_downward is missing (pip install 'textworld[pddl]')")
        logic = importlib.import_module("textworld.envs.pddl.logic")
    except ImportError as exc:
        raise missing_dependency(_WHAT, "alfworld", exc) from exc
    return pddl, logic
