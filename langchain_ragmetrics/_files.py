"""Writing a user's output file whole or not at all."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

__all__ = ["write_text_atomically"]


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
