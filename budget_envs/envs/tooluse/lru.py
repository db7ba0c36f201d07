"""A bounded least-recently-used cache for ToolUse's derived lookups.

The caches it backs hold pure functions of their keys (recomputed on a miss), so a bound costs
only recomputation: the world's task-generator lookups (:data:`MEMO_SIZE` entries, shared by the
envs of a process) and each env's candidate-call blocks (:data:`BLOCK_CACHE_SIZE` entries).
Unbounded, the blocks grew by about 30 entries per fresh task (RSS 60 -> 100 MB over 5,693
episodes); bounded, a process plays any number of tasks in the same memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

__all__ = ["BLOCK_CACHE_SIZE", "LRUCache", "MEMO_SIZE"]

#: Entries of ``World.memo`` (per-customer request candidates and the like; a fresh task adds a
#: few, a miss costs tens of microseconds).
MEMO_SIZE = 1024
#: Entries of an env's candidate-call blocks (the calls one shown id adds; an episode adds up
#: to ~100, a miss costs one block of JSON texts).
BLOCK_CACHE_SIZE = 4096


class LRUCache:
    """A mapping of at most ``maxsize`` entries; a new entry beyond it drops the least recently
    used one. ``get`` and assignment are the operations; safe to share between threads.

    Example:
        >>> cache = LRUCache(2)
        >>> cache["a"], cache["b"] = 1, 2
        >>> cache.get("a")
        1
        >>> cache["c"] = 3  # drops "b", the least recently used
        >>> sorted(cache.keys()), len(cache), cache.evictions
        (['a', 'c'], 2, 1)
    """

    __slots__ = ("_data", "_lock", "evictions", "maxsize")

    def __init__(self, maxsize: int) -> None:
        if not isinstance(maxsize, int) or isinstance(maxsize, bool) or maxsize < 1:
            raise ValueError(f"maxsize must be a positive int, got {maxsize!r}")
        self.maxsize = maxsize
        #: Entries dropped so far to keep the bound.
        self.evictions = 0
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key`` (now the most recently used), or ``default``."""
        data = self._data
        try:
            value = data[key]
        except KeyError:
            return default
        try:  # each OrderedDict call is atomic; another thread may have dropped the key since
            data.move_to_end(key)
        except KeyError:
            pass
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        with self._lock:
            data = self._data
            data[key] = value
            data.move_to_end(key)
            while len(data) > self.maxsize:
                data.popitem(last=False)
                self.evictions += 1

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def keys(self) -> list:
        """The keys, least recently used first."""
        with self._lock:
            return list(self._data)

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._data.clear()
