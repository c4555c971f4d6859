"""A monotonic clock a test moves by hand, for code that reads ``time.monotonic()``."""

from __future__ import annotations


class HandClock:
    """Stands in for the ``time`` module of the code under test: only ``monotonic``."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now
