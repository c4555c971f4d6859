"""The user's ``question_from`` / ``answer_from``: one that never returns costs a retrieval.

Both runtimes turn a live trace into plain data off the caller's thread, and that is where
the user's functions run. A function that blocks (a lock, a network call without a timeout)
must not hold the thread that every other retrieval needs: the thread runtime's loop (it
schedules the judge calls) or the isolated mode's feeder (it sends the child its work). So a
user's function runs on another thread, and the per-job ``timeout`` bounds the wait for
it; past it, the retrieval's metrics fail with an error that names the function, as when it
raises. The feeder hands it to a helper (:class:`HookRunner`); the thread runtime to a judge
thread (:class:`~langchain_ragmetrics._user_calls.UserCalls`). Each bounds the threads that
late calls may hold.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import TYPE_CHECKING

from langchain_ragmetrics._retrieval import Capture, Retrieval
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics._user_calls import late_message, refused_message

if TYPE_CHECKING:
    from langchain_ragmetrics.callbacks._settings import HandlerSettings

__all__ = ["HookRunner", "hook_label", "hook_names", "late"]

MAX_STUCK = 4
"""Helper threads whose function has not returned, past which none is started: the next
retrievals fail at once, until one returns (a function that always hangs must not make a
thread per retrieval)."""


def hook_names(settings: HandlerSettings) -> tuple[str, ...]:
    """The names of the user's functions among ``question_from`` / ``answer_from``."""
    hooks = (("question_from", settings.question_from), ("answer_from", settings.answer_from))
    return tuple(name for name, hook in hooks if callable(hook))


def convert(capture: Capture, settings: HandlerSettings) -> Retrieval:
    """The retrieval of a live trace, through the user's functions (on the calling thread)."""
    return Retrieval.from_trace(
        capture, question_from=settings.question_from, answer_from=settings.answer_from
    )


def hook_label(settings: HandlerSettings) -> str:
    """The user's functions as errors name them: ``"question_from / answer_from"``."""
    return " / ".join(hook_names(settings))


def late(capture: Capture, error: str) -> Retrieval:
    """The retrieval as for a function that raised: the query, no answer but a streamed one.

    Its ``error`` (which says why the user's functions gave nothing) fails its metrics.
    """
    built = Retrieval.from_trace(capture)  # our own readers only: nothing of the user's runs
    return built._replace(question=capture.query, answer=capture.streamed_answer, error=error)


class HookRunner:
    """Converts retrievals on a helper thread, waiting at most ``settings.timeout`` for each.

    For a caller that is a plain thread (the isolated mode's feeder). A helper whose
    function did not return in time is left to it and replaced; at most ``MAX_STUCK`` are
    left at once.

    Args:
        settings: The handler's options (the functions, ``timeout``, the thread names).
    """

    def __init__(self, settings: HandlerSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._pool: DaemonThreadPool | None = None
        self._stuck: list[DaemonThreadPool] = []
        self._stopped = False

    @property
    def threads(self) -> list[threading.Thread]:
        """The helper threads, the one at work and those left to a function."""
        with self._lock:
            pools = self._pools()
        return [thread for pool in pools for thread in pool.threads]

    def convert(self, capture: Capture) -> Retrieval:
        """The retrieval of ``capture``; past the timeout, one whose metrics fail.

        Raises:
            Exception: What the conversion itself raised (not the user's functions: what
                they raise is the retrieval's ``error``).
        """
        settings = self.settings
        pool = self._helper()
        if pool is None:
            return late(capture, refused_message(hook_label(settings), MAX_STUCK))
        future = pool.submit(convert, capture, settings)
        try:
            return future.result(settings.timeout)
        except concurrent.futures.TimeoutError:
            if future.done():  # it ended as the wait did (its own error, if any, raises)
                return future.result()
            self._leave(pool)
            return late(capture, late_message(hook_label(settings), settings.timeout))

    def stop(self) -> None:
        """Let the helper threads exit (each once its function returns); no waiting."""
        with self._lock:
            self._stopped = True
            pools = self._pools()
            self._pool = None
        for pool in pools:
            pool.stop(0)

    def _pools(self) -> list[DaemonThreadPool]:
        """Those left to a function, and the one at work (lock held)."""
        return [*self._stuck, *([self._pool] if self._pool is not None else [])]

    def _helper(self) -> DaemonThreadPool | None:
        """The helper at work, or a new one; None when ``MAX_STUCK`` are still held.

        Raises:
            RuntimeError: After :meth:`stop`.
        """
        with self._lock:
            if self._stopped:
                msg = "the hooks' runner was stopped"
                raise RuntimeError(msg)
            if self._pool is not None:
                return self._pool
            self._stuck = [p for p in self._stuck if any(t.is_alive() for t in p.threads)]
            if len(self._stuck) >= MAX_STUCK:
                return None
            pool = DaemonThreadPool(name=f"{self.settings.name}-hooks")
            pool.start()
            self._pool = pool
            return pool

    def _leave(self, pool: DaemonThreadPool) -> None:
        """Leave ``pool`` to its function: it exits once that returns."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
            self._stuck.append(pool)
        pool.stop(0)
