"""The scoring process's CPU priority: ``SCHED_IDLE`` for its scoring threads, never starved.

Under Linux's ``SCHED_IDLE`` any other thread of the machine gets a CPU before the scoring
threads, at once, so scoring cannot make a request of the application wait for a CPU
(``nice`` alone lets a running thread finish its time slice first). But while every CPU is
busy, idle-policy threads get almost nothing: scoring would slow to a crawl, and its queue
would fill and drop, for as long as the machine stays saturated.

So a guard thread (normal policy) reads, every ``period`` seconds (1), how long the scoring
threads ran and how long they waited, runnable, for a CPU (``/proc/self/task/*/schedstat``).
When they waited most of the period and ran a small part of what they waited, it puts them
under the normal policy (their ``nice`` value kept) for ``hold`` periods (3), then back under
``SCHED_IDLE`` to look again. On a machine with CPU to spare nothing changes; on a saturated
one scoring gets the share its ``nice`` value gives it, most of the time.

The kernel adds a wait to the counters when the thread gets the CPU, so a starved thread
shows its wait once it runs again, which under ``SCHED_IDLE`` is within a second or so:
the guard lifts a saturation after one to a few periods.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable

from langchain_ragmetrics.callbacks._stats import FailureLog

__all__ = ["IdleScoring", "SchedstatFiles", "read_schedstat", "starved"]

Reader = Callable[[int], "tuple[int, int] | None"]
"""A thread id's cumulative (time run, time waited for a CPU) in nanoseconds; None: gone."""

STARVED_WAIT = 0.5
"""Starved: the scoring threads waited, together, at least this fraction of the period ..."""
STARVED_RATIO = 20.0
"""... and at least this many times as long as they ran. Starved idle-policy threads wait
100 to 300 times as long as they run (measured beside busy processes); a burst of scoring on
a machine with CPU to spare, 4 to 5 times (many threads runnable at once, briefly), which is
no reason to take CPU from the application."""


def read_schedstat(tid: int) -> tuple[int, int] | None:
    """Thread ``tid``'s (run, run-queue wait) nanoseconds from ``/proc``; None if unreadable.

    Plain ``os`` calls, no file object: the guard reads every scoring thread each period, at
    normal priority, and what it costs there is CPU a request may wait for.
    """
    try:
        fd = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
        try:
            return _counters(os.read(fd, 128))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None


def _counters(raw: bytes) -> tuple[int, int]:
    """(run, wait) from a schedstat line (run ns, wait ns, time slices)."""
    run, wait, *_ = raw.split()
    return int(run), int(wait)


class SchedstatFiles:
    """The counters of threads, read from ``/proc`` files kept open from one look to the next.

    What a look costs runs at normal priority, where a request may wait for it: reading
    fourteen threads this way took about 50 us of CPU after a pause, against about 200 us
    opening each file anew (``read_schedstat``), on the benchmark machine.
    """

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}

    def __call__(self, tid: int) -> tuple[int, int] | None:
        try:
            fd = self._fds.get(tid)
            if fd is None:
                fd = self._fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            return _counters(os.pread(fd, 128, 0))
        except (OSError, ValueError):
            self._close(tid)
            return None

    def retain(self, tids: Iterable[int]) -> None:
        """Close the files of every thread but ``tids`` (an ended thread's stays readable)."""
        keep = set(tids)
        for tid in [tid for tid in self._fds if tid not in keep]:
            self._close(tid)

    def close(self) -> None:
        """Close every file."""
        self.retain(())

    def _close(self, tid: int) -> None:
        fd = self._fds.pop(tid, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _python_threads() -> list[int]:
    """The native ids of this process's Python threads (the child starts no other kind)."""
    return [tid for tid in (t.native_id for t in threading.enumerate()) if tid is not None]


def starved(run_ns: int, wait_ns: int, period_ns: float) -> bool:
    """Whether threads that ran ``run_ns`` and waited ``wait_ns`` in a period were starved."""
    return wait_ns >= STARVED_WAIT * period_ns and wait_ns >= STARVED_RATIO * run_ns


class IdleScoring:
    """Lowers the calling thread (and what it starts) to ``SCHED_IDLE``; guards against starvation.

    Call :meth:`start` from the thread whose work is to run idle, after starting the threads
    that must keep their priority (the heartbeat): they are left alone, and so is the guard.

    Args:
        period: Seconds between two looks at the scoring threads.
        hold: Periods the scoring threads stay under the normal policy once found starved.
        failures: Where the first starvation is reported (at WARNING, later ones at DEBUG).
        name: Prefix of the guard thread's name.
        read: Reads a thread's counters (default: :class:`SchedstatFiles`; tests pass
            scripted ones).
        tasks: Lists the process's thread ids (default: its Python threads; tests pass
            their own).
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        period: float = 1.0,
        hold: int = 3,
        failures: FailureLog | None = None,
        name: str = "ragmetrics",
        read: Reader | None = None,
        tasks: Callable[[], Iterable[int]] = _python_threads,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.period = period
        self.hold = hold
        self.name = name
        self.boosts = 0
        """How many times the scoring threads were found starved and put under the normal policy."""
        self._failures = failures or FailureLog()
        self._files: SchedstatFiles | None = None
        if read is None:
            read = self._files = SchedstatFiles()
        self._read = read
        self._tasks = tasks
        self._clock = clock
        self._exempt: frozenset[int] = frozenset()
        self._last: dict[int, tuple[int, int]] = {}
        self._looked = clock()
        self._boosted_for = 0  # periods left under the normal policy
        self._lock = threading.Lock()
        self._ended = False

    @staticmethod
    def supported(read: Reader = read_schedstat) -> bool:
        """Linux with ``SCHED_IDLE`` and readable scheduler counters (else: never go idle)."""
        return hasattr(os, "SCHED_IDLE") and read(threading.get_native_id()) is not None

    def start(self, stop: threading.Event) -> threading.Thread:
        """Start the guard (until ``stop`` is set), then lower the calling thread."""
        guard = threading.Thread(
            target=self._run, args=(stop,), name=f"{self.name}-priority", daemon=True
        )
        guard.start()
        self.lower()
        return guard

    def lower(self) -> None:
        """Put the calling thread under ``SCHED_IDLE``; the threads alive now but it are exempt."""
        me = threading.get_native_id()
        self._exempt = frozenset(self._tasks()) - {me}
        _set_policy([me], os.SCHED_IDLE)
        # What this thread ran and waited so far (the start-up) is not what it waits now:
        # the first look counts from here. Threads started later count from their start.
        counters = self._read(me)
        self._last = {} if counters is None else {me: counters}
        self._looked = self._clock()

    def end(self) -> None:
        """Put the scoring threads under the normal policy for good; the guard stops looking.

        For the child's close: the application waits for it (within its timeout), so it must
        not wait at the back of a saturated machine's run queue.
        """
        with self._lock:
            self._ended = True
            _set_policy(self._scoring(), os.SCHED_OTHER)

    def step(self) -> None:
        """One look: boost starved scoring threads, or put boosted ones back once held enough.

        Starved: together they waited at least half the time since the last look, and twenty
        times as long as they ran (see :func:`starved`). Nothing after :meth:`end`.
        """
        with self._lock:
            if not self._ended:
                self._step()

    def _scoring(self) -> list[int]:
        return [tid for tid in self._tasks() if tid not in self._exempt]

    def _step(self) -> None:
        scoring = self._scoring()
        run = wait = 0
        now: dict[int, tuple[int, int]] = {}
        for tid in scoring:
            counters = self._read(tid)
            if counters is None:
                continue
            now[tid] = counters
            before_run, before_wait = self._last.get(tid, (0, 0))
            run += max(0, counters[0] - before_run)
            wait += max(0, counters[1] - before_wait)
        self._last = now
        if self._files is not None:
            self._files.retain(now)
        looked, self._looked = self._looked, self._clock()
        elapsed = max(self._looked - looked, 1e-9)
        if self._boosted_for:
            self._boosted_for -= 1
            if not self._boosted_for:
                _set_policy(scoring, os.SCHED_IDLE)  # the next look measures them idle again
            return
        if starved(run, wait, elapsed * 1e9):
            _set_policy(scoring, os.SCHED_OTHER)
            self._boosted_for = self.hold
            self.boosts += 1
            self._failures.report(
                "isolated:starved",
                f"the CPUs are saturated: scoring waited {wait / 1e6:.0f} ms for a CPU and ran "
                f"{run / 1e6:.0f} ms in {elapsed:.2g} s, so its threads run under the normal "
                f"policy (at their nice value) for {self.hold * self.period:g} s, and again "
                "whenever this repeats",
            )

    def _run(self, stop: threading.Event) -> None:
        try:
            while not stop.wait(self.period):
                try:
                    self.step()
                except Exception as exc:  # reported; the child goes on, looks again next period
                    self._failures.report(
                        "isolated:priority",
                        f"the scoring threads' priority guard failed: {exc!r}",
                        exc,
                    )
        finally:
            if self._files is not None:
                self._files.close()


def _set_policy(tids: Iterable[int], policy: int) -> None:
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setscheduler(tid, policy, os.sched_param(0))
