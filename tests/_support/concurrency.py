"""Waiting on concurrent work in tests: a judge script that measures how many requests a
client keeps in flight (without clocks), and a poll for conditions with no event to await."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tests._support.openai_server import JudgeRequest

__all__ = ["Peak", "wait_until"]


class Peak:
    """Holds each request until ``width`` are in flight (or no more can come), then answers.

    ``peak`` is the most requests the server ever had at once: when a client sends more
    requests than its limit, it equals that limit exactly, with no timing assumption.

    Args:
        width: The limit expected of the client.
        total: How many requests the test will send.
        answer: The reply to each request.
    """

    def __init__(self, width: int, total: int, answer: Callable[[JudgeRequest], Any]) -> None:
        self.width, self.total, self.answer = width, total, answer
        self.cond = threading.Condition()
        self.in_flight = self.answered = self.peak = 0

    def __call__(self, req: JudgeRequest) -> Any:
        with self.cond:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.cond.notify_all()
            self.cond.wait_for(
                lambda: self.in_flight >= min(self.width, self.total - self.answered), 10
            )
            self.in_flight -= 1
            self.answered += 1
            self.cond.notify_all()
        return self.answer(req)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll for a condition the test cannot await directly (never a timing assertion).

    Raises:
        AssertionError: ``timeout`` seconds passed first (a ceiling, not a measure).
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for: {what}")
        time.sleep(0.005)
