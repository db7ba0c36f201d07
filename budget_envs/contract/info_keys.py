"""The checks of one ``info``: its keys, their declared types, its state hash, its candidates.

Rules of the section ``rules-info-and-candidate-actions`` of docs/extending.md (and the hash
format of ``digest.stable``); the types are read from the rows of :mod:`budget_envs.info`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from budget_envs.info import ALL_KEYS, CORE_KEYS, INFO_VALUE_TYPES

from .checker import _Checker, _need

_TYPE_NAMES = {t.__name__: t for t in (str, bool, int, float, dict, list, tuple)}


def _declared_type(description: str) -> tuple[type, type | None]:
    """``(type, item type)`` from the head of an info-key description (``"list[str]: ..."``)."""
    found = re.match(r"(\w+)(?:\[(\w+)\])?", description)
    outer = _TYPE_NAMES.get(found.group(1), object) if found else object
    inner = _TYPE_NAMES.get(found.group(2) or "") if found else None
    return outer, inner


def _type_ok(value: Any, wanted: type) -> bool:
    if isinstance(value, (bool, np.bool_)):  # a bool is no number here
        return wanted in (bool, object)
    numbers = {int: (int, np.integer), float: (int, float, np.integer, np.floating)}
    return isinstance(value, numbers.get(wanted, wanted))


def _bad_value(value: Any, path: str) -> str | None:
    """Where ``value`` holds something outside ``INFO_VALUE_TYPES`` (None included)."""
    if not isinstance(value, (*INFO_VALUE_TYPES, np.integer, np.bool_)):
        return f"{path} is {value!r:.60} ({type(value).__name__})"
    for key, item in value.items() if isinstance(value, dict) else ():
        found = _bad_value(item, f"{path}[{key!r}]")
        if found:
            return found
    return None


def _check_info(ck: _Checker, info: Mapping[str, Any], where: str, done: bool) -> None:
    """The info rules and the candidate-list rule on one ``info``."""
    with ck.rule("info.core_keys"):
        missing = sorted(set(CORE_KEYS) - set(info))
        _need(not missing, f"info {where} lacks {missing}")
    with ck.rule("info.documented"):
        extra = sorted(set(info) - set(ALL_KEYS))
        _need(not extra, f"info {where} holds {extra}, not documented in budget_envs/info.py")
    with ck.rule("info.types"):
        for key, value in info.items():
            wanted, item = _declared_type(ALL_KEYS.get(key, "object"))
            _need(_type_ok(value, wanted), f"info[{key!r}] {where} is {value!r:.60}, not {wanted}")
            if item is not None:
                odd = [v for v in value if not isinstance(v, item)]
                _need(not odd, f"info[{key!r}] {where} holds {odd[:3]!r:.80}, not {item}")
            bad = _bad_value(value, f"info[{key!r}]")
            _need(bad is None, f"{bad} {where}: info values are {INFO_VALUE_TYPES}, never None")
    with ck.rule("digest.stable"):
        digest = info.get("state_hash")
        hexed = isinstance(digest, str) and re.fullmatch("[0-9a-f]{32}", digest)
        _need(hexed, f"info['state_hash'] {where} is {digest!r}, not 32 hex digits")
    with ck.rule("candidates.list"):
        offered = info.get("candidate_actions")
        _need(isinstance(offered, list), f"info['candidate_actions'] {where} is not a list")
        _need(all(isinstance(a, str) for a in offered), f"a candidate {where} is not a str")
        if done:
            _need(offered == [], f"candidates remain once the episode is over ({where})")
        else:
            _need(offered, f"a live episode offers no candidate action ({where})")
