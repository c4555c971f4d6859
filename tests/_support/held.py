"""Judge requests held one by one: prove a concurrency limit with events, not with sleeps.

Every request the script sees is held until the test releases it. Concurrency at the judge is
``arrived - released`` at each arrival; ``peak`` is its maximum. A client that exceeds its limit
is caught at the very arrival that exceeds it, whenever it comes, because the test releases
one request only after the previous release has been followed by the expected new arrival:
there is no "wait a little and check nothing more came".
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tests._support.openai_server import JudgeRequest, Reply, reply_hold

__all__ = ["HeldRequests"]


class HeldRequests:
    """A judge script that holds each request on its own event and tracks the peak in flight."""

    def __init__(self, answer: Callable[[JudgeRequest], Any]) -> None:
        self._answer = answer
        self._cond = threading.Condition()
        self._events: list[threading.Event] = []
        self.released = 0
        """Requests released so far (in arrival order)."""
        self.peak = 0
        """The most requests in flight at once, counted at each arrival."""
        self._open = False

    def __call__(self, req: JudgeRequest) -> Reply:
        with self._cond:
            event = threading.Event()
            if self._open:
                event.set()
                self.released += 1
            self._events.append(event)
            self.peak = max(self.peak, len(self._events) - self.released)
            self._cond.notify_all()
        return reply_hold(event, self._answer(req))

    @property
    def arrived(self) -> int:
        """Requests seen so far."""
        with self._cond:
            return len(self._events)

    def wait_for(self, count: int, timeout: float = 30.0) -> None:
        """Block until ``count`` requests have arrived (fails the test after ``timeout``)."""
        with self._cond:
            reached = self._cond.wait_for(lambda: len(self._events) >= count, timeout)
        assert reached, f"{len(self._events)} of {count} judge requests arrived"

    def release_next(self) -> None:
        """Let the oldest held request answer."""
        with self._cond:
            event = self._events[self.released]
            self.released += 1
        event.set()

    def release_all(self) -> None:
        """Let every request answer, now and from now on (use in ``finally``)."""
        with self._cond:
            events = list(self._events)
            self.released = len(self._events)
            self._open = True
        for event in events:
            event.set()

    def drain(self, total: int, limit: int) -> None:
        """Release requests one at a time until ``total`` have been answered.

        After each release the next request (if any is left) must arrive before the following
        release, so the count in flight is checked at every arrival against ``limit``.
        """
        self.wait_for(min(limit, total))
        for answered in range(total):
            self.release_next()
            self.wait_for(min(total, limit + answered + 1))
        assert self.peak <= limit, f"{self.peak} judge requests in flight, limit {limit}"
