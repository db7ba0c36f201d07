"""Fast Downward library copies that cost a megabyte, not 34.

The planner library keeps one global state, so every live engine needs its own copy of
``libdownward.so`` (``dlopen`` returns the same handle for the same file), and
``fast_downward.load_lib()`` makes one by copying the shipped file to a temporary folder. The
shipped file is 33.8 MB, almost all of it debug information that loading never reads: the copy
was most of a new env's start (about 0.2 s of a 0.28 s build and reset on a loaded machine).

:func:`load_planner_lib` copies a trimmed image instead, made once per process: the file up to
the end of its last loaded segment (about 1.1 MB), with its section table dropped, which is what
the dynamic loader reads (program headers, the segments, the dynamic symbol table). The same
``fast_downward.load_lib()`` then loads it (its type declarations and all), pointed at the
trimmed file. Anything unexpected (not a 64-bit little-endian ELF shared object, a failed
load) falls back to the shipped file, with a debug log line.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import struct
import tempfile
import threading
from typing import Any

__all__ = ["load_planner_lib", "trim_shared_object"]

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()
#: pid -> the trimmed image of this process (None: trimming failed, use the shipped file).
_TRIMMED: dict[int, str | None] = {}

_ELF64_HEADER = struct.Struct("<4sBBBBB7sHHIQQQIHHHHHH")
_PROGRAM_HEADER = struct.Struct("<IIQQQQQQ")
_ET_DYN = 3


def trim_shared_object(source: str, target: str) -> int:
    """Write ``source`` (a 64-bit little-endian ELF shared object) to ``target`` up to the end
    of its last segment, with no section table; returns the bytes written.

    Raises ValueError for anything else (the caller then uses ``source`` as it is)."""
    with open(source, "rb") as f:
        head = f.read(_ELF64_HEADER.size)
        if len(head) < _ELF64_HEADER.size:
            raise ValueError("too short for an ELF header")
        fields = list(_ELF64_HEADER.unpack(head))
        magic, klass, data, _, _, _, _, e_type = fields[:8]
        if magic != b"\x7fELF" or klass != 2 or data != 1 or e_type != _ET_DYN:
            raise ValueError("not a 64-bit little-endian ELF shared object")
        e_phoff, e_phentsize, e_phnum = fields[11], fields[15], fields[16]
        if e_phentsize != _PROGRAM_HEADER.size or not 0 < e_phnum < 256:
            raise ValueError("unexpected program header table")
        f.seek(e_phoff)
        table = f.read(e_phentsize * e_phnum)
        if len(table) < e_phentsize * e_phnum:
            raise ValueError("program header table cut short")
        end = e_phoff + len(table)
        for k in range(e_phnum):
            _, _, p_offset, _, _, p_filesz, _, _ = _PROGRAM_HEADER.unpack_from(
                table, k * e_phentsize
            )
            end = max(end, p_offset + p_filesz)
        size = os.fstat(f.fileno()).st_size
        if end > size:
            raise ValueError("a segment ends past the end of the file")
        f.seek(0)
        image = bytearray(f.read(end))
    # no section table: e_shoff = 0, e_shnum = 0, e_shstrndx = 0 (the loader never reads it)
    fields[12], fields[18], fields[19] = 0, 0, 0
    image[: _ELF64_HEADER.size] = _ELF64_HEADER.pack(*fields)
    with open(target, "wb") as out:
        out.write(image)
    return len(image)


def _trimmed_image() -> str | None:
    pid = os.getpid()
    with _LOCK:
        if pid in _TRIMMED:
            return _TRIMMED[pid]
        from fast_downward import interface  # noqa: PLC0415 - the alfworld extra

        folder = tempfile.mkdtemp(prefix="budget-envs-downward-")
        target = os.path.join(folder, "libdownward.so")
        try:
            trim_shared_object(interface.DOWNWARD_LIB_PATH, target)
            target = _held_open(target, folder)
        except (OSError, ValueError) as exc:
            logger.debug("using the shipped planner library as it is: %s", exc)
            shutil.rmtree(folder, ignore_errors=True)
            target = None
        _TRIMMED[pid] = target
        return target


def _held_open(path: str, folder: str) -> str:
    """Where copies are made from: on Linux the image is kept open and its file removed at
    once (``/proc/self/fd/N`` reads it), so no file of it outlives the process, whatever way
    the process ends; elsewhere the file, removed at exit."""
    if os.path.isdir("/proc/self/fd"):
        fd = os.open(path, os.O_RDONLY)
        shutil.rmtree(folder, ignore_errors=True)
        return f"/proc/self/fd/{fd}"
    atexit.register(_remove, folder, os.getpid())
    return path


def _remove(folder: str, pid: int) -> None:
    if os.getpid() == pid:  # not a forked child's exit: the folder is its parent's
        shutil.rmtree(folder, ignore_errors=True)


def load_planner_lib() -> Any:
    """A fresh copy of the Fast Downward library (as ``fast_downward.load_lib()``), copied from
    the process's trimmed image."""
    from fast_downward import interface  # noqa: PLC0415 - the alfworld extra

    trimmed = _trimmed_image()
    if trimmed is not None:
        with _LOCK:  # load_lib reads the module's path: pointed at the image for this call
            shipped = interface.DOWNWARD_LIB_PATH
            interface.DOWNWARD_LIB_PATH = trimmed
            try:
                return interface.load_lib()
            except (OSError, RuntimeError) as exc:
                logger.debug("the trimmed planner library did not load: %s", exc)
                _TRIMMED[os.getpid()] = None
            finally:
                interface.DOWNWARD_LIB_PATH = shipped
    return interface.load_lib()
