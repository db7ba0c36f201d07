"""Helpers shared by the families, the integrations and the eval harness (one copy of each).

* :func:`missing_dependency`, :func:`import_optional`, :func:`require`: an optional dependency
  that is not installed raises :class:`gymnasium.error.DependencyNotInstalled` naming the pip
  extra that brings it;
* :func:`cache_root`: where a family keeps generated files;
* :func:`tool_calls_action`, :func:`tool_call_action`: the action text of native tool calls;
* :func:`check_int`, :func:`check_levels`, :func:`check_seeds`: the argument checks every family
  constructor starts with (typed errors that quote the value).

Nothing here imports more than the standard library, numpy and gymnasium.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium.error import DependencyNotInstalled

__all__ = [
    "names_entity",
    "CACHE_ENV_VAR",
    "cache_root",
    "check_int",
    "check_levels",
    "SPLITS",
    "UNSEEN_SPLIT",
    "check_seeds",
    "check_split",
    "split_seed",
    "import_optional",
    "missing_dependency",
    "require",
    "tool_call_action",
    "tool_calls_action",
]


# ---------------------------------------------------------------------- optional dependencies
def missing_dependency(what: str, extra: str, cause: BaseException | str) -> DependencyNotInstalled:
    """The error for ``what`` needing the pip extra ``extra`` (``cause``: the failed import).

    The hint installs from a clone or a git URL: budget-envs is on no package index.

    >>> print(missing_dependency("figures", "plots", "No module named 'matplotlib'"))
    figures: missing the "plots" extra; in a clone of budget-envs: pip install -e ".[plots]", or
    pip install "budget-envs[plots] @ git+file:///path/to/budget-envs" (No module named 'matplotlib')
    """
    return DependencyNotInstalled(
        f'{what}: missing the "{extra}" extra; in a clone of budget-envs: pip install -e ".[{extra}]",'
        f' or pip install "budget-envs[{extra}] @ git+file:///path/to/budget-envs" ({cause})'
    )


def import_optional(module: str, *, extra: str, what: str) -> ModuleType:
    """Import ``module``, or raise :func:`missing_dependency` naming ``extra``.

    >>> import_optional("json", extra="none", what="this doctest").__name__
    'json'
    >>> import_optional("no_such_module_xyz", extra="plots", what="figures")
    Traceback (most recent call last):
        ...
    gymnasium.error.DependencyNotInstalled: figures: missing the "plots" extra; in a clone of budget-envs: pip install -e ".[plots]", or pip install "budget-envs[plots] @ git+file:///path/to/budget-envs" (No module named 'no_such_module_xyz')
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_dependency(what, extra, exc) from exc


def require(*modules: str, extra: str, what: str) -> None:
    """Import every module of ``modules`` (checks an extra is complete before heavy work)."""
    for module in modules:
        import_optional(module, extra=extra, what=what)


# ---------------------------------------------------------------------- cache directory
#: Environment variable naming the suite's cache root (a family uses ``<root>/<family>``).
CACHE_ENV_VAR = "BUDGET_ENVS_CACHE"


def cache_root(family: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where ``family`` keeps generated files: ``cache_dir`` if given, else
    ``$BUDGET_ENVS_CACHE/<family>``, else ``$XDG_CACHE_HOME`` (or ``~/.cache``)
    ``/budget-envs/<family>``. Not created.

    >>> cache_root("textworld", "/elsewhere").as_posix()
    '/elsewhere'
    >>> cache_root("alfworld").name
    'alfworld'
    """
    if not isinstance(family, str) or not family or "/" in family:
        raise ValueError(f"family must be a plain folder name, got {family!r}")
    if cache_dir is not None:
        if not isinstance(cache_dir, (str, os.PathLike)):
            raise TypeError(f"cache_dir must be a path or None, got {cache_dir!r}")
        return Path(cache_dir).expanduser()
    root = os.environ.get(CACHE_ENV_VAR)
    if root:
        return Path(root).expanduser() / family
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "budget-envs" / family


# ---------------------------------------------------------------------- tool calls
#: ``json.dumps`` of one str (ASCII-escaped, as ``json.dumps``' default), without the dispatch.
_encode_str = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
#: (tool name, argument names) -> a call's text with ``%s`` for each encoded string value: a
#: tool-use state offers dozens of calls, most of them new on a fresh task, and filling a
#: template costs a third of encoding the call whole. At most ``_MAX_TEMPLATES`` (argument names
#: come from agents' actions too).
_TEMPLATES: dict[tuple, str] = {}
_MAX_TEMPLATES = 512


def tool_calls_action(calls: Iterable[tuple[str, Any]]) -> str:
    """The action text of native tool calls: ``{"tool_calls": [{"name", "arguments"}, ...]}``.

    ``calls`` holds ``(name, arguments)`` pairs. Arguments given as a mapping drop the ``None``
    values (an omitted optional argument); anything else (a raw string the model sent, even
    broken JSON) is passed through for the env to answer with feedback. The text is compact
    JSON, so the same call always has the same text (the oracle's actions compare equal).

    >>> tool_calls_action([("find_customer", {"email": "a@b.c", "name": None})])
    '{"tool_calls":[{"name":"find_customer","arguments":{"email":"a@b.c"}}]}'
    """
    out = []
    for name, arguments in calls:
        if isinstance(arguments, Mapping):
            arguments = {k: v for k, v in arguments.items() if v is not None}
        out.append({"name": name, "arguments": arguments})
    return json.dumps({"tool_calls": out}, separators=(",", ":"))


def tool_call_action(name: str, arguments: Any) -> str:
    """The action text of one native tool call (see :func:`tool_calls_action`).

    The same text as ``tool_calls_action([(name, arguments)])``; string arguments are encoded
    directly (a tool-use state offers hundreds of calls, and ``json.dumps`` of each was most of
    a step).

    >>> tool_call_action("submit", {"answer": "done"})
    '{"tool_calls":[{"name":"submit","arguments":{"answer":"done"}}]}'
    """
    if type(arguments) is dict:
        key = (name, *arguments)
        template = _TEMPLATES.get(key)
        if template is not None:
            try:  # every value a string: written into the template kept for these names
                return template % tuple(map(_encode_str, arguments.values()))
            except TypeError:  # None (left out) or another type: encoded below
                pass
    if (
        isinstance(name, str)
        and type(arguments) is dict
        and all(type(k) is str and (v is None or type(v) is str) for k, v in arguments.items())
    ):
        enc = _encode_str
        if len(_TEMPLATES) < _MAX_TEMPLATES and None not in arguments.values():
            body = ",".join(enc(k).replace("%", "%%") + ":%s" for k in arguments)
            head = '{"tool_calls":[{"name":' + enc(name).replace("%", "%%")
            _TEMPLATES[(name, *arguments)] = head + ',"arguments":{' + body + "}}]}"
        body = ",".join(f"{enc(k)}:{enc(v)}" for k, v in arguments.items() if v is not None)
        return f'{{"tool_calls":[{{"name":{enc(name)},"arguments":{{{body}}}}}]}}'
    return tool_calls_action([(name, arguments)])


# ---------------------------------------------------------------------- constructor checks
def names_entity(command: str, name: str) -> bool:
    """Whether ``command`` names ``name`` as whole words ("mug 1" is not named by "mug 10", nor
    "key" by "keyring")."""
    at = command.find(name)
    while at >= 0:
        end = at + len(name)
        if (at == 0 or not command[at - 1].isalnum()) and (
            end == len(command) or not command[end].isalnum()
        ):
            return True
        at = command.find(name, at + 1)
    return False


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int in ``[lo, hi]``; TypeError or ValueError quoting it otherwise.

    >>> check_int("tasks_per_level", np.int64(5), lo=1)
    5
    >>> check_int("tasks_per_level", 0, lo=1)
    Traceback (most recent call last):
        ...
    ValueError: tasks_per_level must be an int >= 1, got 0
    """
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        if hi is None:
            bounds = f">= {lo}"
        elif lo is None:
            bounds = f"<= {hi}"
        else:
            bounds = f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be an int {bounds}, got {value!r}")
    return int(value)


def check_levels(level: Any, valid: Sequence[int], *, name: str = "level") -> tuple[int, ...]:
    """The levels ``level`` selects: None for every level of ``valid``, one level, or a list.

    Order is kept and duplicates are refused (they would list the same task twice).

    >>> check_levels(None, (1, 2, 3))
    (1, 2, 3)
    >>> check_levels([3, 1], (1, 2, 3))
    (3, 1)
    >>> check_levels(7, (1, 2, 3))
    Traceback (most recent call last):
        ...
    ValueError: level must be one of [1, 2, 3], a list of them or None, got 7
    """
    valid = tuple(int(v) for v in valid)
    contiguous = len(valid) > 8 and valid == tuple(range(valid[0], valid[-1] + 1))
    shown = f"{valid[0]}..{valid[-1]}" if contiguous else str(list(valid))
    expected = f"{name} must be one of {shown}, a list of them or None, got {level!r}"
    if level is None:
        return valid
    if _is_int(level):
        levels: list[Any] = [level]
    elif isinstance(level, (list, tuple)) and level:
        levels = list(level)
    else:
        raise ValueError(expected)
    if any(not _is_int(lv) or int(lv) not in valid for lv in levels):
        raise ValueError(expected)
    out = tuple(int(lv) for lv in levels)
    if len(set(out)) != len(out):
        raise ValueError(f"{name} lists a level twice, got {level!r}")
    return out


def check_seeds(name: str, value: Any) -> tuple[int, ...]:
    """A non-empty list of distinct ints >= 0 (explicit seeds, instead of a task count).

    >>> check_seeds("seeds", [0, 4])
    (0, 4)
    """
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(_is_int(s) and s >= 0 for s in value)
    ):
        raise ValueError(f"{name} must be a non-empty list of ints >= 0, got {value!r}")
    out = tuple(int(s) for s in value)
    if len(set(out)) != len(out):
        raise ValueError(f"{name} lists a seed twice, got {value!r}")
    return out


#: The held-out splits every family accepts (``train`` is the default task list).
SPLITS = ("train", "valid", "test")
#: The split of tasks whose product types (WebShop) or request templates (ToolUse) never occur
#: in train; only the families that can build one accept it (``check_split(..., extra=...)``).
UNSEEN_SPLIT = "test_unseen"


def check_split(split: Any, extra: Sequence[str] = ()) -> str:
    """``split`` if it names one of :data:`SPLITS` (or ``extra``), else
    :class:`~budget_envs.errors.UnknownSplit` quoting it and naming the splits there are.

    >>> check_split("test")
    'test'
    >>> check_split("test_unseen")
    Traceback (most recent call last):
        ...
    budget_envs.errors.UnknownSplit: split must be one of ('train', 'valid', 'test'), got 'test_unseen' (this family has no test_unseen split: it is offered by WebShop and ToolUse)
    """
    from budget_envs.errors import UnknownSplit

    allowed = SPLITS + tuple(extra)
    if not isinstance(split, str) or split not in allowed:
        hint = ""
        if split == UNSEEN_SPLIT:
            hint = " (this family has no test_unseen split: it is offered by WebShop and ToolUse)"
        raise UnknownSplit(f"split must be one of {allowed}, got {split!r}{hint}")
    return split


def split_seed(base: int, split: str) -> int:
    """The generator seed of ``split`` for a family whose train seed is ``base``.

    ``train`` keeps ``base`` (today's task list); the other splits get a seed derived from
    ``(base, split)`` by SHA-256, so every machine derives the same one and it differs from
    ``base``.
    """
    if split == "train":
        return int(base)
    digest = hashlib.sha256(f"budgetmix-split:{split}:{int(base)}".encode()).digest()
    seed = int.from_bytes(digest[:4], "big")
    return seed if seed != int(base) else seed ^ 1
