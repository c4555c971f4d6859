"""Flush live handlers when the interpreter exits, within a bounded time.

One process-wide hook, installed on first use, closes every registered object. A handler's
background side registers itself when its threads start and leaves when it is closed or
has finished its work. The registry holds it *strongly*: queued work is flushed at exit even
if the user dropped every reference to the handler (the handler itself is never held, so it
can still be collected; its background then finishes the queue and leaves).

The hook is installed with ``threading._register_atexit`` when available: it runs once the
main thread is done but *before* thread-pool executors stop taking work, which judge calls
need (asyncio resolves host names on an executor). ``atexit.register`` is the fallback.
Several objects are closed at once, each on a thread of its own within its ``exit_timeout``:
the hook takes as long as the slowest close (its graces included), not their sum.
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


_SLACK_SECONDS = 30.0
"""How long past its ``exit_timeout`` the hook waits for one close (whose graces take a few
seconds) before it gives up on it: a net for a close that does not keep its bound."""
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
    """Close every registered object (what the exit hook runs), all at once.

    Each close has its own graces beyond its ``exit_timeout`` (to stop a worker, close the
    sinks, kill a child): one after another, those would add up. An object whose thread
    cannot start is closed here afterwards, within what is left of the largest budget.
    """
    with _lock:
        targets = list(_live.values())
    budgets = [(t, t.exit_timeout) for t in targets]
    closing = [(t, own) for t, own in budgets if own is not None]
    deadline = time.monotonic() + max((own for _, own in closing), default=0.0)
    threads: list[tuple[threading.Thread, float]] = []
    inline: list[tuple[ExitFlushable, float]] = []
    for target, own in closing:
        thread = threading.Thread(
            target=target._flush_at_exit, args=(own,), name="ragmetrics-exit", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # no new thread at this point of the exit
            inline.append((target, own))
        else:
            threads.append((thread, time.monotonic() + own + _SLACK_SECONDS))
    for target, own in inline:
        # Out of time, a zero-second close still cancels and reports what was left.
        target._flush_at_exit(min(own, max(0.0, deadline - time.monotonic())))
    for thread, give_up in threads:
        thread.join(max(0.0, give_up - time.monotonic()))  # each close keeps its own bound
