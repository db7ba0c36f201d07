"""Output folders of runs, reports and comparisons: made or refused in one line, files written whole.

A folder that cannot be used (read-only, not a directory, a full disk) raises
:class:`~budget_envs.errors.OutDirError` naming the folder and the cause, never a traceback deep
in a writer. :func:`write_atomic` writes a file through a temporary file in the same folder,
``fsync`` and ``os.replace``, so a crash or a full disk leaves the old file or the new one,
never a torn or empty one.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from budget_envs.errors import OutDirError

__all__ = ["FOLDER_ERRNOS", "ensure_dir", "folder_errors", "out_dir_error", "write_atomic"]

#: The ``errno`` values that mean "this folder cannot take files": read-only, no permission,
#: not a directory, a full disk or quota, a file-size limit, a lost mount.
FOLDER_ERRNOS = frozenset(
    {
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.ENOTDIR,
        errno.EEXIST,
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EFBIG,
        errno.EIO,
    }
)


def out_dir_error(what: str, path: str | os.PathLike[str], exc: OSError) -> OutDirError:
    """An :class:`OutDirError` saying that ``what`` (e.g. ``"write the run folder"``) failed on
    ``path``, with the system's reason and ``errno`` name, in one line."""
    reason = exc.strerror or str(exc)
    name = errno.errorcode.get(exc.errno, "") if exc.errno else ""
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        reason = "a file is in the way (the folder or one of its parents is not a directory)"
    hint = {
        errno.EROFS: "; make it writable or choose another folder",
        errno.EACCES: "; make it writable or choose another folder",
        errno.EPERM: "; make it writable or choose another folder",
        errno.ENOSPC: "; free some space or choose another folder",
        errno.EDQUOT: "; free some space or choose another folder",
    }.get(exc.errno or 0, "; choose another folder")
    err = OutDirError(f"cannot {what} {path}: {reason}{f' ({name})' if name else ''}{hint}")
    err.errno = exc.errno
    err.path = os.fspath(path)
    return err


def ensure_dir(path: str | os.PathLike[str], what: str = "create the folder") -> Path:
    """Make ``path`` (and its parents) a directory, or raise :class:`OutDirError`."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise out_dir_error(what, path, OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise out_dir_error(what, path, exc) from None
    return path


@contextmanager
def folder_errors(what: str, path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an ``OSError`` of :data:`FOLDER_ERRNOS` raised inside the block (writing files into
    the folder ``path``) into one :class:`OutDirError` line; other errors pass unchanged."""
    try:
        yield
    except OutDirError:
        raise
    except OSError as exc:
        if exc.errno not in FOLDER_ERRNOS:
            raise
        raise out_dir_error(what, path, exc) from None


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file in the same folder,
    ``fsync``, then ``os.replace`` (and an ``fsync`` of the folder, where it can be opened).
    Raises :class:`OutDirError` when the folder cannot take the file; the temporary file is
    removed and an earlier ``path`` is left as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                if not n:  # pragma: no cover - a raw write of 0 bytes: no room left
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # pragma: no cover - a folder that refuses even that
            pass
        raise out_dir_error("write", path, exc) from None
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # pragma: no cover - a platform where folders cannot be opened
        return
    try:
        os.fsync(dir_fd)
    except OSError:  # pragma: no cover - a file system without directory fsync
        pass
    finally:
        os.close(dir_fd)
