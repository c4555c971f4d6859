"""Ctrl-C during a run stops it between two deliveries: a finished result is never lost."""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

import pytest

from langchain_ragmetrics import IDBasedContextRecall, RagSample
from langchain_ragmetrics._engine import Job, ScoringEngine
from langchain_ragmetrics._interrupts import DeferredInterrupt
from langchain_ragmetrics._schema import MetricResult


def jobs(count: int) -> list[Job]:
    metric = IDBasedContextRecall()
    return [
        Job(RagSample(question=f"q{i}", contexts=["c"], context_ids=["a"],
                      reference_context_ids=["a"]), metric)
        for i in range(count)
    ]  # fmt: skip


def ctrl_c() -> None:
    """What the terminal sends: SIGINT to this process (its handler runs on the main thread)."""
    signal.raise_signal(signal.SIGINT)


def test_ctrl_c_while_a_result_is_delivered_lets_the_delivery_end() -> None:
    """Before, ``KeyboardInterrupt`` was raised inside the delivery (here, in the middle of
    the caller's callback; in ``ragmetrics evaluate``, between taking a result off the queue
    and recording it) and that finished result was lost. Now the delivery ends, then the
    run stops and raises."""
    recorded: list[str | None] = []

    def record(job: Job, _result: MetricResult) -> None:
        if not recorded:
            ctrl_c()
        recorded.append(job.sample.question)

    with pytest.raises(KeyboardInterrupt):
        ScoringEngine(max_concurrency=1).run(jobs(20), on_result=record)
    assert recorded[0] == "q0"  # recorded whole, then the others that had finished, once
    assert recorded == [f"q{i}" for i in range(len(recorded))]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_a_second_ctrl_c_is_raised_at_once() -> None:
    """The first Ctrl-C waits for the delivery; a second one does not (the way out of a
    callback that hangs)."""
    reached: list[str] = []

    def record(_job: Job, _result: MetricResult) -> None:
        ctrl_c()  # deferred
        reached.append("first")
        ctrl_c()  # raised here
        reached.append("second")

    with pytest.raises(KeyboardInterrupt):
        ScoringEngine(max_concurrency=1).run(jobs(3), on_result=record)
    assert reached == ["first"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_applications_own_sigint_handler_is_left_alone() -> None:
    caught: list[int] = []

    def own(signum: int, _frame: FrameType | None) -> None:
        caught.append(signum)

    previous = signal.signal(signal.SIGINT, own)
    try:
        seen: list[object] = []

        def record(_job: Job, _result: MetricResult) -> None:
            seen.append(signal.getsignal(signal.SIGINT))
            if len(seen) == 1:
                ctrl_c()

        results = ScoringEngine(max_concurrency=1).run(jobs(3), on_result=record)
        assert [r.score for r in results] == [1.0, 1.0, 1.0]  # not stopped: it is theirs
        assert caught == [signal.SIGINT]
        assert seen == [own, own, own]
        assert signal.getsignal(signal.SIGINT) is own
    finally:
        signal.signal(signal.SIGINT, previous)


def test_off_the_main_thread_nothing_is_installed() -> None:
    """Signals reach the main thread only (and ``signal.signal`` works there only)."""
    seen: list[object] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            ScoringEngine(max_concurrency=1).run(
                jobs(2), on_result=lambda _j, _r: seen.append(signal.getsignal(signal.SIGINT))
            )
        except BaseException as exc:  # reported to the test's thread
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    assert failure == []
    assert seen == [signal.default_int_handler] * 2


def test_leaving_the_block_raises_a_ctrl_c_not_raised_yet() -> None:
    stopped = threading.Event()
    deferred = DeferredInterrupt(stopped.set)

    def block() -> None:
        with deferred:
            ctrl_c()
            assert stopped.is_set()
            assert deferred.pending

    with pytest.raises(KeyboardInterrupt):
        block()
    assert not deferred.pending
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_error_leaving_the_block_is_not_replaced_by_the_ctrl_c() -> None:
    def block() -> None:
        with DeferredInterrupt(lambda: None):
            ctrl_c()
            raise ValueError("the run's own error")

    with pytest.raises(ValueError, match="the run's own error"):
        block()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_process_forked_during_a_run_gets_pythons_own_ctrl_c() -> None:
    """A child forked while the run's handler is installed (from an ``on_result``, say)
    would otherwise defer its first Ctrl-C to a run that is not its own, forever."""
    with DeferredInterrupt():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        pid = os.fork()
        if pid == 0:  # the child: report, never return into pytest
            os._exit(0 if signal.getsignal(signal.SIGINT) is signal.default_int_handler else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_the_application_installs_during_the_run_is_kept() -> None:
    """Leaving the block puts Python's handler back only where the run's own is in place."""

    def own(_signum: int, _frame: FrameType | None) -> None:
        pass

    try:
        with DeferredInterrupt():
            signal.signal(signal.SIGINT, own)  # say, from an on_result callback
        assert signal.getsignal(signal.SIGINT) is own
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
