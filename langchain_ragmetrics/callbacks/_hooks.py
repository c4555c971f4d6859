"""The user's ``question_from`` / ``answer_from``: one that never returns costs a retrieval.

Both runtimes turn a live trace into plain data off the caller's thread, and that is where
the user's functions run. A function that blocks (a lock, a network call without a timeout)
must not hold the thread that every other retrieval needs: the thread runtime's loop (it
schedules the judge calls) or the isolated mode's feeder (it sends the child its work). So a
user's function runs on another thread, and the per-job ``timeout`` bounds the wait for
it; past it, the retrieval's metrics fail with an error that names the function, as when it
raises. The feeder hands a whole batch to a helper (:class:`HookRunner`), which converts its
retrievals one after another, each within the timeout; the thread runtime hands each to a
judge thread (:class:`~langchain_ragmetrics._user_calls.UserCalls`). Each bounds the threads
that late calls may hold.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from langchain_ragmetrics._retrieval import Capture, Retrieval
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics._user_calls import late_message, refused_message

if TYPE_CHECKING:
    from langchain_ragmetrics.callbacks._settings import HandlerSettings

__all__ = [
    "HookRunner",
    "Outcome",
    "convert",
    "convert_batch",
    "hook_label",
    "hook_names",
    "late",
]

MAX_STUCK = 4
"""Helper threads whose function has not returned, past which none is started: the next
retrievals fail at once, until one returns (a function that always hangs must not make a
thread per retrieval)."""

Outcome = Retrieval | Exception
"""A retrieval as plain data, or what its conversion raised (not the user's functions:
what they raise is the retrieval's ``error``)."""


def hook_names(settings: HandlerSettings) -> tuple[str, ...]:
    """The names of the user's functions among ``question_from`` / ``answer_from``."""
    hooks = (("question_from", settings.question_from), ("answer_from", settings.answer_from))
    return tuple(name for name, hook in hooks if callable(hook))


def convert(capture: Capture, settings: HandlerSettings) -> Retrieval:
    """The retrieval of a live trace, through the user's functions (on the calling thread)."""
    return Retrieval.from_trace(
        capture, question_from=settings.question_from, answer_from=settings.answer_from
    )


def convert_batch(captures: Sequence[Capture], settings: HandlerSettings) -> list[Outcome]:
    """The retrievals of ``captures``, one after another on the calling thread, in order."""
    return [outcome for _, outcome in _converted(captures, settings)]


def _converted(
    captures: Sequence[Capture], settings: HandlerSettings, start: int = 0
) -> Iterator[tuple[int, Outcome]]:
    """Each retrieval's index and outcome from ``start`` on, one after another."""
    for index in range(start, len(captures)):
        if index > start:
            # Between two retrievals, hand the GIL to an application thread waiting for it:
            # it waits one conversion at most, not a whole batch's (or the 5 ms switch
            # interval).
            time.sleep(0)
        outcome: Outcome
        try:
            outcome = convert(captures[index], settings)
        except Exception as exc:  # e.g. a document type we cannot read: this one only
            outcome = exc
        yield index, outcome


def hook_label(settings: HandlerSettings) -> str:
    """The user's functions as errors name them: ``"question_from / answer_from"``."""
    return " / ".join(hook_names(settings))


def late(capture: Capture, error: str) -> Retrieval:
    """The retrieval as for a function that raised: the query, no answer but a streamed one.

    Its ``error`` (which says why the user's functions gave nothing) fails its metrics.
    """
    built = Retrieval.from_trace(capture)  # our own readers only: nothing of the user's runs
    return built._replace(question=capture.query, answer=capture.streamed_answer, error=error)


class _Batch:
    """A batch's conversions, one after another, and how far they got.

    A run (:meth:`run`) converts from an index on; whoever waits for it (:meth:`wait`) wakes
    when the batch is done, or when the retrieval at work is past the timeout: it then cuts
    that run off, and what the run does after that is ignored. ``cond`` guards the progress
    (the runner's, shared by its batches: one waiter at a time, and a run cut off never
    notifies).
    """

    def __init__(
        self,
        captures: Sequence[Capture],
        settings: HandlerSettings,
        *,
        cond: threading.Condition,
        clock: Callable[[], float],
    ) -> None:
        self.captures = tuple(captures)
        self.settings = settings
        self._clock = clock
        self._done: list[Outcome | None] = [None] * len(self.captures)
        self._cond = cond
        self._at = 0
        """The retrieval at work (``len(captures)`` once all are converted)."""
        self._since = clock()
        """When it was handed over or the one before it was done: its timeout runs from then."""
        self._run = 0
        """The run that may record outcomes; a run cut off finds another number here."""
        self._raised: BaseException | None = None
        """What ended the run other than a conversion's ``Exception`` (re-raised to the waiter)."""

    def hand(self, start: int) -> int:
        """A new run's number, converting from ``start`` on, whose clock starts now."""
        with self._cond:
            self._run += 1
            self._at = start
            self._since = self._clock()
            return self._run

    def run(self, start: int, number: int) -> None:
        """Convert from ``start`` on, recording each outcome, until done or cut off."""
        try:
            for index, outcome in _converted(self.captures, self.settings, start):
                with self._cond:
                    if self._run != number:  # cut off while late: the rest is another run's
                        return
                    self._done[index] = outcome
                    self._at = index + 1
                    self._since = self._clock()
                    if self._at == len(self.captures):
                        self._cond.notify_all()
        except BaseException as exc:
            with self._cond:
                if self._run == number:
                    self._raised = exc
                    self._cond.notify_all()
            raise

    def wait(self, timeout: float | None) -> int | None:
        """Until the run is done (None), or the index of the retrieval it was cut off at.

        Raises:
            BaseException: What ended the run other than a conversion's ``Exception``.
        """
        with self._cond:
            while self._at < len(self.captures) and self._raised is None:
                if timeout is None:
                    self._cond.wait()
                    continue
                left = self._since + timeout - self._clock()
                if left <= 0:  # the retrieval at work is late: cut its run off
                    self._run += 1
                    return self._at
                self._cond.wait(left)
            if self._raised is not None:
                raise self._raised
            return None

    def settle(self, index: int, retrieval: Retrieval) -> None:
        """Record ``retrieval`` for ``index`` (one no run converted: late or refused)."""
        with self._cond:
            self._done[index] = retrieval

    def outcomes(self) -> list[Outcome]:
        """Every outcome, in order (each retrieval's is recorded by now)."""
        with self._cond:
            done = [outcome for outcome in self._done if outcome is not None]
        if len(done) != len(self.captures):
            msg = "a batch's outcomes were read before every retrieval had one"
            raise RuntimeError(msg)
        return done


class HookRunner:
    """Converts batches of retrievals on a helper thread, each within ``settings.timeout``.

    For a caller that is a plain thread (the isolated mode's feeder): one handoff per batch,
    the helper converting its retrievals one after another. A helper whose function did not
    return in time is left to it and replaced, and the retrievals after that one go to the
    new helper; at most ``MAX_STUCK`` are left at once.

    Args:
        settings: The handler's options (the functions, ``timeout``, the thread names).
        clock: Seconds from which the timeouts are measured (a test's own clock).
    """

    def __init__(
        self, settings: HandlerSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._progress = threading.Condition(threading.Lock())
        """Guards the progress of the batches (see :class:`_Batch`)."""
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
        (outcome,) = self.convert_batch([capture])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def convert_batch(self, captures: Sequence[Capture]) -> list[Outcome]:
        """The retrievals of ``captures`` in order, handed to a helper at once.

        The wait for each retrieval is bounded by ``timeout`` from when the helper takes it
        up; one past it is a retrieval whose metrics fail, and the helper is left to it: the
        retrievals after it go to a new helper (or, with ``MAX_STUCK`` left, fail at once).
        What a conversion raises is that retrieval's outcome; the others are converted.

        Raises:
            RuntimeError: After :meth:`stop`.
        """
        settings = self.settings
        batch = _Batch(captures, settings, cond=self._progress, clock=self._clock)
        start: int | None = 0
        while start is not None and start < len(batch.captures):
            pool = self._helper()
            if pool is None:
                refused = refused_message(hook_label(settings), MAX_STUCK)
                for index in range(start, len(batch.captures)):
                    batch.settle(index, late(batch.captures[index], refused))
                break
            future = pool.submit(batch.run, start, batch.hand(start))
            if future.done():  # not run at all (the pool refused it), or already over
                future.result()
            cut = batch.wait(settings.timeout)
            if cut is None:
                break
            self._leave(pool)
            error = late_message(hook_label(settings), settings.timeout)
            batch.settle(cut, late(batch.captures[cut], error))
            start = cut + 1
        return batch.outcomes()

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
