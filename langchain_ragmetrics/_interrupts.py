"""Ctrl-C that stops a run at a safe point, so a finished result is never lost to it.

Python raises ``KeyboardInterrupt`` between any two bytecodes of the main thread. A run's
caller thread takes a finished result off a queue and then records it: Ctrl-C landing between
the two lost that result (the run said "0 of 3 jobs finished" where the judge had answered
one). While a run waits on the main thread, :class:`DeferredInterrupt` turns the first Ctrl-C
into a request to stop, and the run raises ``KeyboardInterrupt`` itself once the results in
hand are recorded. A second Ctrl-C raises at once, as usual.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["DeferredInterrupt"]


class DeferredInterrupt:
    """While the block runs on the main thread, the first Ctrl-C calls ``on_interrupt``.

    Only Python's default SIGINT handler is replaced (and restored at the first Ctrl-C or
    at the end of the block): a handler of the application's own, or a run off the main
    thread (where no signal arrives), is left as it is. :meth:`check` raises the deferred
    ``KeyboardInterrupt`` where the caller can lose nothing; leaving the block raises it if
    nothing else is raised.

    Args:
        on_interrupt: Called from the signal handler, to wake the waiting thread. It runs
            on that thread, between any two of its bytecodes, so it must be safe to call
            there: a ``queue.SimpleQueue.put`` is; a ``threading.Event.set`` is not (it
            takes a lock the interrupted thread may hold).
    """

    def __init__(self, on_interrupt: Callable[[], None] | None = None) -> None:
        self._on_interrupt = on_interrupt
        self.pending = False
        """A Ctrl-C came and was not raised yet."""

    def __enter__(self) -> DeferredInterrupt:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._restore()
        if exc_info[0] is None:  # the block's own error is not replaced by the Ctrl-C
            self.check()

    def check(self) -> None:
        """Raise the deferred ``KeyboardInterrupt``, if a Ctrl-C came (once).

        Raises:
            KeyboardInterrupt: A Ctrl-C came since the block began.
        """
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        self.pending = True
        self._restore()  # a second Ctrl-C is not deferred
        if self._on_interrupt is not None:
            self._on_interrupt()

    def _restore(self) -> None:
        """Put Python's handler back, if ours is the one in place (only ever the default's)."""
        if signal.getsignal(signal.SIGINT) == self._handle:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _reset_in_child() -> None:
    """A process forked during a run starts with Python's own Ctrl-C, not the run's."""
    handler = signal.getsignal(signal.SIGINT)
    if isinstance(getattr(handler, "__self__", None), DeferredInterrupt):
        signal.signal(signal.SIGINT, signal.default_int_handler)


if hasattr(os, "register_at_fork"):  # POSIX only
    os.register_at_fork(after_in_child=_reset_in_child)
