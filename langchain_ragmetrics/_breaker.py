"""A small circuit breaker: after N consecutive failures, pause for a cool-down.

Written here rather than taken from a library: it is a dozen lines, has no I/O, and the
one retry loop that uses it (:mod:`langchain_ragmetrics._guarded`) interrupts its own waits
on close (a library breaker would add a dependency for less than this).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from langchain_ragmetrics._options import number_at_least_zero, whole_number

__all__ = ["CircuitBreaker"]


class CircuitBreaker:
    """Closed until ``threshold`` failures in a row; then open for ``cooldown`` seconds.

    After the cool-down one attempt is let through (half-open, :meth:`allow`): a success
    closes the circuit, a failure opens it for another cool-down; the other callers are
    refused meanwhile (until the trial's outcome, or one more cool-down without one).
    Failures of requests already under way when it opened neither extend the cool-down nor
    count as opening it again (one warning per opening, not one per lane).

    Args:
        threshold: Consecutive failures that open the circuit.
        cooldown: Seconds the circuit stays open.
        clock: Monotonic clock (tests may pass their own).
    """

    def __init__(
        self, *, threshold: int, cooldown: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.threshold = whole_number("failure_threshold", threshold)
        self.cooldown = number_at_least_zero("cooldown", cooldown)
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._open_until: float | None = None
        self._trial = False  # the one attempt of a half-open circuit is under way

    @property
    def is_open(self) -> bool:
        """Whether calls are refused right now."""
        with self._lock:
            return self._open_until is not None and self._clock() < self._open_until

    @property
    def tripped(self) -> bool:
        """Whether the last failures opened the circuit and no success came since.

        Unlike :attr:`is_open` it does not lapse with the cool-down: with ``cooldown=0`` the
        circuit is never open, yet a request that failed ``threshold`` times in a row tripped
        it, as :meth:`failure` said.
        """
        with self._lock:
            return self._open_until is not None

    @property
    def retry_in(self) -> float:
        """Seconds until the next attempt is allowed (0 when closed or half-open)."""
        with self._lock:
            if self._open_until is None:
                return 0.0
            return max(0.0, self._open_until - self._clock())

    def allow(self) -> bool:
        """Whether a new request may go now: closed, or the one trial after a cool-down.

        The trial holds the circuit for another cool-down: the others are refused until its
        outcome (or, if it never reports one, until that cool-down ends).
        """
        with self._lock:
            if self._open_until is None:
                return True
            now = self._clock()
            if now < self._open_until:
                return False
            self._open_until = now + self.cooldown
            self._trial = True
            return True

    def success(self) -> bool:
        """Record a success; True when it closed an open circuit."""
        with self._lock:
            was_open = self._open_until is not None
            self._failures = 0
            self._open_until = None
            self._trial = False
            return was_open

    def failure(self) -> bool:
        """Record a failure; True when it opened the circuit (or a trial failed)."""
        with self._lock:
            self._failures += 1
            if self._failures < self.threshold:
                return False
            now = self._clock()
            opening = self._open_until is None or self._trial or now >= self._open_until
            if opening:
                self._open_until = now + self.cooldown
            self._trial = False
            return opening
