"""Checks of ``HandlerStats`` shared by tests: the identities the docs state, and a lock that
says when a thread has to wait for it (to hold a window open without timing)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from langchain_ragmetrics import HandlerStats

__all__ = ["ContendedLock", "assert_identities", "stalled_log"]


def assert_identities(stats: HandlerStats) -> None:
    """``seen >= sampled = dropped + processed + queued + abandoned``, and for every sink
    ``scored + failed + skipped = delivered + skipped + errors + dropped + pending``."""
    assert stats.seen >= stats.sampled
    assert stats.sampled == stats.dropped + stats.processed + stats.queued + stats.abandoned
    produced = stats.scored + stats.failed + stats.skipped
    for key, s in stats.sinks.items():
        assert produced == s.delivered + s.skipped + s.errors + s.dropped + s.pending, key


class ContendedLock:
    """A re-entrant lock whose ``waited`` event is set when a thread finds it taken.

    Put in place of an object's lock, it tells a test that a thread blocks on it (the window
    is held shut) without a sleep; a thread that never blocks finishes instead.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.waited = threading.Event()

    def __enter__(self) -> bool:
        if not self._lock.acquire(blocking=False):
            self.waited.set()
            self._lock.acquire()
        return True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release()


@contextmanager
def stalled_log(phrase: str, release: threading.Event) -> Iterator[threading.Event]:
    """The package's log handlers stall on a record saying ``phrase`` until ``release``.

    As a full stderr pipe or a log shipper that is down would: the thread that logs it
    waits. Yields an event set when a thread has begun to wait there.
    """
    entered = threading.Event()

    class _Stalling(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if phrase in record.getMessage():
                entered.set()
                release.wait()

    logger = logging.getLogger("langchain_ragmetrics")
    handler = _Stalling(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield entered
    finally:
        release.set()
        logger.removeHandler(handler)
