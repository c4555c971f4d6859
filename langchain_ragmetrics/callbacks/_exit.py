"""Flush live handlers when the interpreter exits, each within its own bounded timeout.

One process-wide hook, installed on first use, flushes every handler still registered.
Handlers are held by weak reference (the hook never keeps one alive) and leave the
registry when closed.

The hook is installed with ``threading._register_atexit`` when available: it runs once the
main thread is done but *before* thread-pool executors stop taking work, which judge calls
need (asyncio resolves host names on an executor). ``atexit.register`` is the fallback.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Protocol

__all__ = ["ExitFlushable", "flush_all", "register", "registered", "unregister"]


class ExitFlushable(Protocol):
    """What the exit hook needs from a handler."""

    def _flush_at_exit(self) -> None:
        """Flush with the handler's own exit timeout; must not raise."""


_lock = threading.Lock()
_live: weakref.WeakSet[ExitFlushable] = weakref.WeakSet()
_installed = False


def _install() -> None:
    """Install the process-wide hook once (lock held)."""
    global _installed  # noqa: PLW0603 - one hook per process, by design
    if _installed:
        return
    register_early = getattr(threading, "_register_atexit", None)
    try:
        if register_early is None:
            raise RuntimeError
        register_early(flush_all)
    except RuntimeError:
        atexit.register(flush_all)
    _installed = True


def register(obj: ExitFlushable) -> None:
    """Flush ``obj`` at interpreter exit (until it is unregistered or collected)."""
    with _lock:
        _install()
        _live.add(obj)


def unregister(obj: ExitFlushable) -> None:
    """Stop flushing ``obj`` at exit."""
    with _lock:
        _live.discard(obj)


def registered(obj: ExitFlushable) -> bool:
    """Whether ``obj`` will be flushed at exit."""
    with _lock:
        return obj in _live


def flush_all() -> None:
    """Flush every registered object (what the exit hook runs)."""
    with _lock:
        targets = list(_live)
    for target in targets:
        target._flush_at_exit()
