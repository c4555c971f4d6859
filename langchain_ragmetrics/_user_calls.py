"""A user's sync function on the judge threads: bounded in time, and in the threads it holds.

The online worker runs the functions a user hands the handler (``question_from`` /
``answer_from``, a sync ``reference_provider``) on its judge threads, so that none blocks
the loop that schedules every judge call. The per-job timeout bounds the wait for each; past
it, the call is left to finish on its thread (a thread cannot be stopped). A function that
always hangs would then take every judge thread in turn, and no judge call could run: so at
most ``limit`` late calls may hold a thread at once, and past that a call fails at once
(without running) until one of them returns.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from functools import partial
from typing import Any, TypeVar

from langchain_ragmetrics._options import whole_number

__all__ = ["UserCalls", "held_limit", "late_message", "refused_message"]

T = TypeVar("T")


def held_limit(threads: int) -> int:
    """How many late calls may hold one of ``threads`` judge threads: a quarter, at least 1."""
    return max(1, threads // 4)


def late_message(what: str, timeout: float | None) -> str:
    """The error of a call that did not return within ``timeout`` seconds."""
    return f"{what} did not return within {timeout:g}s"


def refused_message(what: str, held: int) -> str:
    """The error of a call not made because ``held`` earlier ones have not returned."""
    return (
        f"{what} was not called: {held} earlier calls have not returned yet, "
        "and none is made until one does"
    )


class UserCalls:
    """Runs a user's sync functions on ``executor``, each within ``timeout`` seconds.

    Args:
        executor: The judge threads.
        timeout: Seconds to wait for a call; None waits for as long as it takes.
        limit: Late calls that may hold a thread at once (see :func:`held_limit`).
    """

    def __init__(self, executor: Executor, *, timeout: float | None, limit: int) -> None:
        self.executor = executor
        self.timeout = timeout
        self.limit = whole_number("limit", limit)
        self._lock = threading.Lock()
        self._held = 0

    @property
    def held(self) -> int:
        """Calls past their timeout that have not returned yet (each holds a thread)."""
        with self._lock:
            return self._held

    async def run(self, fn: Callable[..., T], /, *args: Any, what: str) -> T:
        """``fn(*args)`` on a judge thread, in the caller's context; what it raises, raises.

        Args:
            fn: The user's function (or ours around it).
            *args: Its arguments.
            what: The function's name in errors (``"question_from"``).

        Raises:
            TimeoutError: It did not return within the timeout (it is left to finish on
                its thread), or ``limit`` late calls still hold their threads (it is not
                made); the message says which, naming ``what``.
        """
        with self._lock:
            held = self._held
        if held >= self.limit:
            raise TimeoutError(refused_message(what, held))
        call = partial(contextvars.copy_context().run, fn, *args)
        future: Future[T] = self.executor.submit(call)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout)
        except asyncio.TimeoutError:
            if future.done() and not future.cancelled():  # it ended as the wait did
                return future.result()
            raise TimeoutError(late_message(what, self.timeout)) from None
        finally:
            # Timed out or cancelled: a call not started yet is dropped; one at work holds
            # its thread until it returns.
            if not future.done() and not future.cancel():
                self._hold(future)

    def _hold(self, future: Future[Any]) -> None:
        with self._lock:
            self._held += 1
        future.add_done_callback(self._release)

    def _release(self, _: Future[Any]) -> None:
        with self._lock:
            self._held -= 1
