"""Files we own: a user's output written whole or not at all, and one-run-at-a-time locks."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

__all__ = ["exclusive_lock", "write_text_atomically"]


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold ``path`` as a lock for the block: a second holder fails at once, never waits.

    ``fcntl.flock`` on the file, released (and the file removed) when the block ends; a
    crash releases it too (the kernel drops the lock), and the next holder takes the stale
    file over. Where there is no ``fcntl`` (Windows) nothing is locked.

    Raises:
        BlockingIOError: The lock is held (by another process, or another holder here).
        OSError: The lock file cannot be created or locked.
    """
    try:
        import fcntl
    except ImportError:  # no fcntl (Windows): no lock, as documented by the callers
        yield
        return
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # BlockingIOError: held
            os.close(fd)
            raise
        try:  # the holder before us may have removed the file: lock the one in place
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still held: a run waiting on this inode tries again
        os.close(fd)


def write_text_atomically(
    target: Path, write: Callable[[TextIO], None], *, newline: str | None = None
) -> Path:
    """Write ``target`` through a temporary file renamed over it; missing parents created.

    A crash or Ctrl-C while writing leaves the previous file as it was, never a truncated
    one. Text a UTF-8 writer cannot take (a lone surrogate from a model or a document) is
    written as a backslash escape, which is also its JSON escape.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with temp.open("w", encoding="utf-8", errors="backslashreplace", newline=newline) as out:
            write(out)
        temp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    return target
