"""Writing a file's bytes whole, and making many files durable at once (`LocalWorkspace`'s helpers)."""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["syncfs", "write_all", "write_closed"]


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data`: a short write (a full disk, a size limit) is continued, or raises."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if not written:
            raise OSError(errno.ENOSPC, "the write made no progress")
        view = view[written:]


def write_closed(fd: int, data: bytes, *, durably: bool) -> None:
    """All of `data` into the new file `fd` (on disk if `durably`); `fd` is closed."""
    try:
        write_all(fd, data)
        if durably:
            os.fsync(fd)
    finally:
        os.close(fd)


def _load_syncfs() -> Callable[[Path], None] | None:
    """Linux's syncfs(2): everything written to the filesystem a folder is on, on disk in one call."""
    try:
        call = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    call.argtypes, call.restype = [ctypes.c_int], ctypes.c_int

    def sync(folder: Path) -> None:
        fd = os.open(folder, os.O_RDONLY)
        try:
            if call(fd) != 0:  # a writeback error (EIO, ENOSPC); ctypes releases the GIL for the call
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code))
        finally:
            os.close(fd)

    return sync


syncfs = _load_syncfs()
"""`syncfs(folder)`, or None where the OS has no syncfs (files are then fsynced one by one)."""
