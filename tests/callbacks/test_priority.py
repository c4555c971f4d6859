"""The scoring threads' CPU priority: SCHED_IDLE, and a guard that lifts it while they starve."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from langchain_ragmetrics.callbacks._priority import (
    STARVED_RATIO,
    STARVED_WAIT,
    IdleScoring,
    SchedstatFiles,
    read_schedstat,
    starved,
)
from tests._support.concurrency import wait_until

pytestmark = pytest.mark.skipif(
    not IdleScoring.supported(), reason="Linux's SCHED_IDLE and /proc schedstat"
)

PERIOD_NS = 0.5e9
MS = 1_000_000


@pytest.mark.parametrize(
    ("run_ms", "wait_ms", "expected"),
    [
        (2, 436, True),  # waited almost all of it, ran next to nothing: a saturated machine
        (12, 250, True),  # at the bounds: half the period, twenty times what it ran
        (12, 249, False),  # waited less than half the period
        (13, 260, True),
        (14, 270, False),  # ran more than a twentieth of what it waited
        (941, 4393, False),  # a burst of scoring on a machine with CPU to spare (measured)
        (450, 3, False),  # a machine with CPU to spare
        (0, 0, False),  # nothing to do
    ],
)
def test_starved_means_waited_most_of_the_period_and_ran_little_of_it(
    run_ms: int, wait_ms: int, expected: bool
) -> None:
    assert (STARVED_WAIT, STARVED_RATIO) == (0.5, 20.0)  # the bounds the cases sit on
    assert starved(run_ms * MS, wait_ms * MS, PERIOD_NS) is expected


def test_read_schedstat_reads_a_live_thread_and_none_for_one_that_is_gone() -> None:
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    me = threading.get_native_id()
    first = read_schedstat(me)
    sum(range(200_000))  # run a little
    time.sleep(0.001)  # not a wait for luck: leaving the CPU is when the kernel adds up the run
    second = read_schedstat(me)
    assert first is not None
    assert second is not None
    assert second[0] > first[0]  # it ran
    assert read_schedstat(ended.native_id or 0) is None
    assert IdleScoring.supported(read=lambda tid: None) is False


def _open_counters() -> set[int]:
    """The thread ids whose schedstat file this process holds open."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed meanwhile
            continue
        if target.endswith("/schedstat") and "/task/" in target:
            held.add(int(target.split("/task/")[1].split("/")[0]))
    return held


def test_schedstat_files_stay_open_between_looks_until_their_thread_is_no_longer_listed() -> None:
    """An ended thread's file stays readable (the kernel keeps its counters), so the files
    of threads no longer listed are closed by ``retain``, the rest by ``close``."""
    files = SchedstatFiles()
    threads = _Threads()
    try:
        first, second = threads.start(), threads.start()
        one, again = files(first), files(first)
        assert one is not None
        assert again is not None
        assert files(second) is not None
        assert {first, second} <= _open_counters()
        files.retain([first])
        assert first in _open_counters()
        assert second not in _open_counters()
        files.close()
        assert first not in _open_counters()
        assert files(2**22 + 1) is None  # no such thread: nothing opened
    finally:
        threads.stop()


class _Threads:
    """Threads that wait until released, each reporting its native id."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> int:
        ready = threading.Event()
        ids: list[int] = []

        def body() -> None:
            ids.append(threading.get_native_id())
            ready.set()
            self.release.wait()

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        ready.wait()
        self.threads.append(thread)
        return ids[0]

    def stop(self) -> None:
        self.release.set()
        for thread in self.threads:
            thread.join()


@contextmanager
def _lowered(**options: object) -> Iterator[tuple[IdleScoring, tuple[int, int, int]]]:
    """A guard, and (exempt, lowered, started after) thread ids: one thread started before
    ``guard.lower()`` (SCHED_BATCH, to see that nothing touches it), the thread that lowered
    itself, and one it started afterwards. The guard sees only these three threads (the other
    threads of the test process are left alone); the test's own thread keeps its policy."""
    known: list[int] = []
    guard = IdleScoring(tasks=lambda: list(known), **options)  # type: ignore[arg-type]
    threads = _Threads()
    exempt = threads.start()
    known.append(exempt)
    os.sched_setscheduler(exempt, os.SCHED_BATCH, os.sched_param(0))
    done = threading.Event()

    def lowering() -> None:
        guard.lower()
        known.append(threading.get_native_id())
        known.append(threads.start())  # inherits SCHED_IDLE
        done.set()
        threads.release.wait()

    lowering_thread = threading.Thread(target=lowering, daemon=True)
    lowering_thread.start()
    done.wait()
    try:
        yield guard, (known[0], known[1], known[2])
    finally:
        threads.stop()
        lowering_thread.join()


def test_threads_started_after_lower_inherit_it_and_earlier_ones_keep_theirs() -> None:
    with _lowered() as (_, (exempt, lowered, later)):
        policies = [os.sched_getscheduler(tid) for tid in (exempt, lowered, later)]
    assert policies == [os.SCHED_BATCH, os.SCHED_IDLE, os.SCHED_IDLE]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


class _Script:
    """Scripted counters and clock: each look finds every thread ran and waited what the last
    ``advance`` said, in half a second; a thread in ``gone`` has no counters."""

    def __init__(self, gone: frozenset[int] = frozenset()) -> None:
        self.totals: dict[int, tuple[int, int]] = {}
        self.gone = gone
        self.now = 0.0

    def advance(self, run_ms: int, wait_ms: int) -> None:
        self.now += 0.5
        self.totals = {
            tid: (run + run_ms * MS, wait + wait_ms * MS)
            for tid, (run, wait) in self.totals.items()
        }

    def clock(self) -> float:
        return self.now

    def __call__(self, tid: int) -> tuple[int, int] | None:
        if tid in self.gone:
            return None
        return self.totals.setdefault(tid, (0, 0))


def test_starved_scoring_threads_run_under_the_normal_policy_for_hold_periods_then_idle_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    script = _Script()
    with _lowered(period=0.5, hold=2, read=script, clock=script.clock) as (
        guard,
        (exempt, lowered, later),
    ):

        def now() -> list[int]:
            return [os.sched_getscheduler(tid) for tid in (exempt, lowered, later)]

        guard.step()  # no time has passed: nothing to judge
        script.advance(run_ms=50, wait_ms=10)  # CPU to spare
        guard.step()
        assert now() == [os.SCHED_BATCH, os.SCHED_IDLE, os.SCHED_IDLE]
        with caplog.at_level(logging.DEBUG, logger="langchain_ragmetrics"):
            script.advance(run_ms=2, wait_ms=240)  # two threads: 4 ms run, 480 ms waited
            guard.step()
            assert now() == [os.SCHED_BATCH, os.SCHED_OTHER, os.SCHED_OTHER]
            script.advance(run_ms=1, wait_ms=400)  # held: not looked at
            guard.step()
            assert now() == [os.SCHED_BATCH, os.SCHED_OTHER, os.SCHED_OTHER]
            guard.step()  # held for its two periods: idle again, to look once more
            assert now() == [os.SCHED_BATCH, os.SCHED_IDLE, os.SCHED_IDLE]
            script.advance(run_ms=2, wait_ms=240)  # still saturated: lifted again
            guard.step()
            assert now() == [os.SCHED_BATCH, os.SCHED_OTHER, os.SCHED_OTHER]
    assert guard.boosts == 2
    reports = [r for r in caplog.records if "the CPUs are saturated" in r.getMessage()]
    assert [r.levelno for r in reports] == [logging.WARNING, logging.DEBUG]  # once, then quiet
    assert "waited 480 ms for a CPU and ran 4 ms in 0.5 s" in reports[0].getMessage()


def test_end_puts_the_scoring_threads_under_the_normal_policy_for_good() -> None:
    """The child's close: the application waits for it, so no idle priority from then on,
    and a later look that finds them unstarved does not lower them again."""
    script = _Script()
    with _lowered(period=0.5, hold=1, read=script, clock=script.clock) as (
        guard,
        (exempt, lowered, later),
    ):

        def now() -> list[int]:
            return [os.sched_getscheduler(tid) for tid in (exempt, lowered, later)]

        guard.step()
        guard.end()
        assert now() == [os.SCHED_BATCH, os.SCHED_OTHER, os.SCHED_OTHER]
        script.advance(run_ms=2, wait_ms=240)  # starved, then held, then idle again before
        guard.step()
        guard.step()
        guard.step()
        assert now() == [os.SCHED_BATCH, os.SCHED_OTHER, os.SCHED_OTHER]
    assert guard.boosts == 0


def test_a_thread_that_ended_between_two_looks_is_left_out() -> None:
    """Its counters are gone and setting its policy fails: the look goes on with the rest."""
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    gone = ended.native_id or 0
    script = _Script(gone=frozenset({gone}))
    listed: list[int] = []
    guard = IdleScoring(
        period=0.5, hold=1, read=script, clock=script.clock, tasks=lambda: list(listed)
    )
    lowering = threading.Thread(target=guard.lower)  # nothing listed yet: nothing exempt
    lowering.start()
    lowering.join()
    alive = _Threads()
    try:
        listed.extend([gone, alive.start()])
        os.sched_setscheduler(listed[1], os.SCHED_IDLE, os.sched_param(0))
        guard.step()
        script.advance(run_ms=1, wait_ms=300)
        guard.step()
        assert os.sched_getscheduler(listed[1]) == os.SCHED_OTHER
        assert guard.boosts == 1
    finally:
        alive.stop()


def test_a_look_that_fails_is_reported_and_the_guard_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    looks: list[int] = []

    def tasks() -> list[int]:
        looks.append(len(looks))
        if len(looks) == 1:  # lower(): nothing exempt
            return []
        raise RuntimeError("unreadable")

    guard = IdleScoring(period=0.001, tasks=tasks)
    stop = threading.Event()
    with caplog.at_level(logging.DEBUG, logger="langchain_ragmetrics"):
        thread = threading.Thread(target=guard.start, args=(stop,))
        thread.start()  # a thread of its own: lower() changes the caller's policy
        thread.join()
        wait_until(lambda: len(looks) >= 4, "the guard to look three times")
        stop.set()
    failures = [r for r in caplog.records if "priority guard failed" in r.getMessage()]
    assert failures[0].levelno == logging.WARNING
    assert "unreadable" in failures[0].getMessage()


@contextmanager
def _hog_on(cpu: int) -> Iterator[None]:
    """A process that keeps ``cpu`` busy at the normal policy."""
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]
    )
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def test_a_real_starvation_is_found_and_lifted() -> None:
    """An idle-policy thread that wants a CPU shares one with a busy process of normal
    policy: the scheduler gives it next to nothing, the guard sees it wait, and lifts it."""
    cpu = min(os.sched_getaffinity(0))
    stop = threading.Event()
    guard = IdleScoring(period=0.1, hold=1_000_000)
    spinning: list[int] = []

    def scoring() -> None:
        guard.start(stop)  # the guard thread is not pinned: only this one is
        os.sched_setaffinity(0, {cpu})
        spinning.append(threading.get_native_id())
        while not stop.is_set():
            pass

    thread = threading.Thread(target=scoring, daemon=True)
    with _hog_on(cpu):
        thread.start()
        try:
            wait_until(lambda: guard.boosts >= 1, "the guard to find the thread starved")
            assert os.sched_getscheduler(spinning[0]) == os.SCHED_OTHER
        finally:
            stop.set()
            thread.join()
