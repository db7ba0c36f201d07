"""Starting TextWorld on a game file: the lazy import, the wrapper stack, the oracle's graph.

``textworld`` is imported only here and only when a game is first opened (it takes seconds);
:func:`check_installed` finds it without importing it. :func:`graph_for` decides once per game
and process whether the exact oracle fits, reading the size measured at generation when there
is one (``<game>.oracle.json``, see :mod:`._worker`).
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

from budget_envs._util import import_optional, missing_dependency
from budget_envs.envs.textworld.oracle import StateGraph

__all__ = ["INTERPRETER_SEED", "check_installed", "graph_for", "import_textworld", "layer", "start"]

#: The interpreter's random seed: fixed so that a task plays the same in every process.
INTERPRETER_SEED = 1234

_WHAT = "TextWorld envs"
_GRAPHS: OrderedDict[str, StateGraph | None] = OrderedDict()
_GRAPH_CACHE_SIZE = 16


def import_textworld() -> Any:
    """The ``textworld`` module, or the install hint naming the ``textworld`` extra."""
    return import_optional("textworld", extra="textworld", what=_WHAT)


def check_installed() -> None:
    """Raise the install hint now if ``textworld`` is missing, without importing it (it takes
    seconds); otherwise the first reset would fail inside game generation."""
    try:
        found = importlib.util.find_spec("textworld") is not None
    except (ImportError, ValueError):  # a broken install, or a module without a spec
        found = False
    if not found:
        raise missing_dependency(_WHAT, "textworld", "No module named 'textworld'")


def start(textworld: Any, path: str) -> Any:
    """``textworld.start`` on ``path`` with the infos the env reads, seeded with
    :data:`INTERPRETER_SEED`."""
    infos = textworld.EnvInfos(
        admissible_commands=True,
        policy_commands=True,
        objective=True,
        max_score=True,
        score=True,
        won=True,
        lost=True,
    )
    with warnings.catch_warnings():
        # Jericho calls every non-Infocom story "not fully supported"; TextWorld reads the
        # score and the end of the game itself.
        warnings.simplefilter("ignore")
        tw = textworld.start(path, infos)
    tw.seed(INTERPRETER_SEED)
    return tw


def layer(tw: Any, name: str) -> Any:
    """The wrapper called ``name`` in the stack that ``textworld.start`` returned."""
    env = tw
    while env is not None and type(env).__name__ != name:
        env = getattr(env, "_wrapped_env", None)
    if env is None:  # pragma: no cover - textworld's wrapper stack changed
        raise RuntimeError(f"textworld wrapper {name} not found; unsupported textworld version")
    return env


def _read_verdict(path: str) -> dict | None:
    try:
        with open(Path(path).with_suffix(".oracle.json")) as fh:
            verdict = json.load(fh)
    except (OSError, ValueError):
        return None
    return verdict if isinstance(verdict, dict) else None


def graph_for(path: str, game: Any, max_states: int) -> StateGraph | None:
    """The game's state graph if the exact oracle fits ``max_states``, else None.

    Generated games carry the graph size measured at generation (``.oracle.json``), so
    loading them explores nothing; other games are explored here once per process.
    """
    key = f"{path}|{max_states}"
    if key in _GRAPHS:
        _GRAPHS.move_to_end(key)
        return _GRAPHS[key]
    graph: StateGraph | None = StateGraph(game, max_states)
    verdict = _read_verdict(path)
    fits = None
    if verdict is not None and verdict.get("complete"):
        fits = int(verdict["states"]) <= max_states
    elif verdict is not None and int(verdict.get("max_states", 0)) >= max_states:
        fits = False
    if fits is None:
        fits = graph.explore_start()
    if not fits:
        graph = None
    _GRAPHS[key] = graph
    while len(_GRAPHS) > _GRAPH_CACHE_SIZE:
        _GRAPHS.popitem(last=False)
    return graph
