import logging
import threading

import pytest

from langchain_ragmetrics import HandlerStats, Usage
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog


def test_counters_add_snapshot_and_reset() -> None:
    counters = Counters()
    counters.add(seen=3, sampled=2)
    counters.add(dropped=1)
    counters.add_usage(Usage(input_tokens=5, judge_calls=1))
    counters.set("pending_at_deadline", 4)
    snap = counters.snapshot(queued=7, open_traces=2)
    assert isinstance(snap, HandlerStats)
    assert (snap.seen, snap.sampled, snap.dropped, snap.queued, snap.open_traces) == (
        3,
        2,
        1,
        7,
        2,
    )
    assert snap.pending_at_deadline == 4
    assert snap.usage.judge_calls == 1
    with pytest.raises(KeyError):
        counters.add(unknown=1)
    with pytest.raises(KeyError):
        counters.set("queued", 1)  # a gauge, not a counter
    counters.reset()
    assert counters.snapshot(queued=0, open_traces=0) == HandlerStats()


def test_counters_are_thread_safe() -> None:
    counters = Counters()
    threads = [
        threading.Thread(target=lambda: [counters.add(seen=1) for _ in range(1000)])
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counters.snapshot(queued=0, open_traces=0).seen == 8000


def test_stats_snapshot_is_frozen() -> None:
    snap = HandlerStats()
    with pytest.raises(ValueError, match="frozen"):
        snap.seen = 3  # type: ignore[misc]


def test_failure_log_warns_once_per_kind(caplog: pytest.LogCaptureFixture) -> None:
    log = FailureLog(logging.getLogger("test.failures"))
    with caplog.at_level(logging.DEBUG, logger="test.failures"):
        for _ in range(3):
            log.report("judge:429", "judge failed")
        log.report("sink:x", "sink failed", ValueError("boom"))
        log.reset()
        log.report("judge:429", "judge failed again")
    levels = [(r.levelno, r.getMessage().split(" (")[0]) for r in caplog.records]
    assert levels == [
        (logging.WARNING, "judge failed"),
        (logging.DEBUG, "judge failed"),
        (logging.DEBUG, "judge failed"),
        (logging.WARNING, "sink failed"),
        (logging.WARNING, "judge failed again"),
    ]
    assert caplog.records[3].exc_info is not None
