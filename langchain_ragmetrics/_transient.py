"""The package's short-lived threads (job, call, feed threads), remembered by reference.

:func:`transient_thread` makes them and remembers them (weakly), so ``evaluate()`` can tell
them from the application's own threads when it decides whether forking is safe, and wait
for them to end. A pure helper at the bottom of the package, so the metrics can use it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["is_transient", "transient_thread"]

_TRANSIENT: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
"""Threads made by :func:`transient_thread` (an ended thread drops out when collected)."""


def transient_thread(
    target: Callable[..., object], *, name: str, args: tuple[Any, ...] = ()
) -> threading.Thread:
    """A daemon thread (not started) that ends by itself once its run is over.

    Only threads that end without being told (or, idle call threads, when told through
    ``retire_idle_call_threads``) may be made here: the fork decision waits for them.
    """
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    _TRANSIENT.add(thread)
    return thread


def is_transient(thread: threading.Thread) -> bool:
    """Whether ``thread`` was made by :func:`transient_thread` (not a user's same-named one)."""
    return thread in _TRANSIENT
