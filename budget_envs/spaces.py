"""The ``Text`` spaces every id shares: one bound for every family, and shared memory that works.

A vector env needs one observation and one action space for all its sub-envs, so every family
uses :func:`text_space` with :data:`MAX_TEXT_LENGTH`. Gymnasium's ``AsyncVectorEnv`` shares
observations through memory by default; :class:`AgentText` makes that path return the real
observations (see its docstring).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["MAX_TEXT_LENGTH", "PRINTABLE", "AgentText", "text_space"]

#: Characters allowed in observations and actions: printable ASCII plus tab, newline and CR.
PRINTABLE: str = string.printable

#: ``max_length`` of the ``Text`` observation and action spaces of every id (characters): one
#: space shared by every family, so a vector env can mix families. Large enough for every
#: family's longest action (a ToolUse call with long arguments) and observation (a web page);
#: the bound costs nothing per step (AsyncVectorEnv sends the strings, not buffers of this size).
MAX_TEXT_LENGTH = 16384


class AgentText(spaces.Text):
    """Gymnasium's ``Text`` over :data:`PRINTABLE`, with working shared memory.

    ``AsyncVectorEnv`` (``make_vec(..., vectorization_mode="async")``) shares observations
    through memory by default, and Gymnasium reads a ``Text`` buffer once, at construction, into a
    tuple of strings that never changes: every observation would be the empty buffer's
    ``"000..."``. This subclass (equal to the plain ``Text`` it extends) reads the buffer live:
    its batch is a sequence whose items decode the current contents, and a copy of it (what the
    vector env returns by default) is a plain tuple of strings.
    """


def text_space(max_length: int) -> AgentText:
    """A ``Text`` space over :data:`PRINTABLE` that also admits the empty string."""
    return AgentText(max_length=max_length, min_length=0, charset=PRINTABLE)


class _SharedTexts(Sequence):
    """The strings in an ``AsyncVectorEnv`` shared buffer of :class:`AgentText`, read live."""

    def __init__(self, space: AgentText, shared: Any, n: int) -> None:
        self._space, self._shared, self._n = space, shared, n
        chars = np.full(256, 0, dtype=np.uint8)
        for i, c in enumerate(space.character_list):
            chars[i] = ord(c)
        self._chars = chars

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._n)))
        if not -self._n <= index < self._n:
            raise IndexError(index)
        size = self._space.max_length
        data = np.frombuffer(self._shared.get_obj(), dtype=np.int32)
        row = data[(index % self._n) * size : (index % self._n + 1) * size]
        row = row[row < len(self._space.character_set)]
        return self._chars[row].tobytes().decode("ascii")

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: Any) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (tuple, list, Sequence)) else False

    def __repr__(self) -> str:
        return repr(tuple(self))


def _register_shared_memory() -> None:
    from gymnasium.vector.utils import shared_memory

    @shared_memory.read_from_shared_memory.register(AgentText)
    def _read(space: AgentText, memory: Any, n: int = 1) -> _SharedTexts:
        return _SharedTexts(space, memory, n)

    @shared_memory.write_to_shared_memory.register(AgentText)
    def _write(space: AgentText, index: int, value: str, memory: Any) -> None:
        size = space.max_length
        codes = np.full(size, len(space.character_set), dtype=np.int32)
        value = value[:size]
        if value.isascii():  # every observation of the suite: one table lookup
            table = space.__dict__.get("_ascii_codes")
            if table is None:  # built once per space, not on every step
                table = np.full(128, len(space.character_set), dtype=np.int32)
                for i, c in enumerate(space.character_list):
                    if ord(c) < 128:
                        table[ord(c)] = i
                space._ascii_codes = table
            codes[: len(value)] = table[np.frombuffer(value.encode("ascii"), dtype=np.uint8)]
        else:
            for i, c in enumerate(value):
                codes[i] = space.character_index(c)
        destination = np.frombuffer(memory.get_obj(), dtype=np.int32)
        destination[index * size : (index + 1) * size] = codes


_register_shared_memory()
