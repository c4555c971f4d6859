"""Flush live handlers when the interpreter exits, within a bounded time.

One process-wide hook, installed on first use, closes every registered object. A handler's
background side registers itself when its threads start and leaves when it is closed or
has finished its work. The registry holds it *strongly*: queued work is flushed at exit even
if the user dropped every reference to the handler (the handler itself is never held, so it
can still be collected; its background then finishes the queue and leaves).

The hook is installed with ``threading._register_atexit`` when available: it runs once the
main thread is done but *before* thread-pool executors stop taking work, which judge calls
need (asyncio resolves host names on an executor). ``atexit.register`` is the fallback.
Several objects share one deadline: the largest of their ``exit_timeout`` values.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from typing import Protocol

__all__ = ["ExitFlushable", "flush_all", "register", "registered", "unregister"]


class ExitFlushable(Protocol):
    """What the exit hook needs: a time budget and a close that never raises."""

    @property
    def exit_timeout(self) -> float | None:
        """Seconds this object may take at exit."""

    def _flush_at_exit(self, timeout: float) -> None:
        """Flush and close within ``timeout`` seconds; must not raise."""


_lock = threading.Lock()
_live: dict[int, ExitFlushable] = {}
_installed = False


def _after_fork() -> None:
    """In a forked process: the registered objects are the parent's; none is ours to close."""
    global _lock  # noqa: PLW0603 - a fresh lock: the parent's may have been held at the fork
    _lock = threading.Lock()
    _live.clear()


if hasattr(os, "register_at_fork"):  # POSIX only
    os.register_at_fork(after_in_child=_after_fork)


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
    """Flush ``obj`` at interpreter exit until it is unregistered (held strongly)."""
    with _lock:
        _install()
        _live[id(obj)] = obj


def unregister(obj: ExitFlushable) -> None:
    """Stop flushing ``obj`` at exit and release it."""
    with _lock:
        if _live.get(id(obj)) is obj:
            del _live[id(obj)]


def registered(obj: ExitFlushable) -> bool:
    """Whether ``obj`` will be flushed at exit."""
    with _lock:
        return _live.get(id(obj)) is obj


def flush_all() -> None:
    """Close every registered object (what the exit hook runs), within one shared budget.

    Each object gets its own ``exit_timeout`` but never beyond the largest one counted
    from the start, so the hook as a whole is bounded.
    """
    with _lock:
        targets = list(_live.values())
    budgets = [t.exit_timeout for t in targets if t.exit_timeout is not None]
    deadline = time.monotonic() + max(budgets, default=0.0)
    for target in targets:
        own = target.exit_timeout
        if own is None:
            continue
        # Out of time, a zero-second close still cancels and reports what was left.
        target._flush_at_exit(min(own, max(0.0, deadline - time.monotonic())))
