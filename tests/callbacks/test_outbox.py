"""Sink isolation: a hung, slow or failing sink holds up nobody but itself, in numbers."""

import logging
import threading
from collections.abc import Callable, Iterator

import pytest
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import CallableSink, HandlerStats, InMemorySink, OnlineResult
from tests._support.openai_server import JudgeServer
from tests._support.rag import online_handler, question, rag_app

JudgeFactory = Callable[..., ChatOpenAI]
TRACES = 6


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Holds the hung sink; always released at the end of the test."""
    event = threading.Event()
    yield event
    event.set()


class Counting:
    """A sink function that sets an event once it has seen ``expected`` results."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.items: list[OnlineResult] = []
        self.lock = threading.Lock()
        self.all_in = threading.Event()

    def __call__(self, item: OnlineResult) -> None:
        with self.lock:
            self.items.append(item)
            if len(self.items) >= self.expected:
                self.all_in.set()


def balanced(stats: HandlerStats) -> bool:
    produced = stats.scored + stats.failed + stats.skipped
    return all(
        s.delivered + s.errors + s.dropped + s.pending == produced for s in stats.sinks.values()
    )


def test_a_hung_sink_holds_up_nobody_and_its_backlog_is_counted(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    release: threading.Event,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = rag_app(judge_server, make_judge)
    entered = threading.Event()

    def hung(item: OnlineResult) -> None:
        entered.set()
        release.wait()  # accepts the first result and never returns (until released)

    healthy = Counting(TRACES)
    sinks = [CallableSink(hung), CallableSink(healthy), InMemorySink()]
    handler = online_handler(app.llm, sinks=sinks, sink_queue_size=3)
    app.chain.invoke(question(0), config={"callbacks": [handler]})
    assert entered.wait(30)  # the hung sink holds the first result
    for i in range(1, TRACES):
        app.chain.invoke(question(i), config={"callbacks": [handler]})
    # Scoring and the other sinks went on while the first sink is stuck.
    assert healthy.all_in.wait(30)
    assert handler.flush(0.2) is False  # the hung sink still holds results
    stats = handler.stats
    assert stats.scored == TRACES
    assert stats.sinks["CallableSink#2"].delivered == TRACES
    assert stats.sinks["InMemorySink"].delivered == TRACES
    hung_figures = stats.sinks["CallableSink"]
    # One result in the sink's hands, 3 waiting in its outbox, the overflow dropped.
    assert (hung_figures.delivered, hung_figures.pending, hung_figures.dropped) == (0, 4, 2)
    assert balanced(stats)

    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
        assert handler.close(0.5) is False  # bounded although a sink hangs
    stats = handler.stats
    assert stats.sinks["CallableSink"].dropped == 5  # the 3 waiting were abandoned
    assert stats.sinks["CallableSink"].pending == 1  # still stuck in emit
    assert balanced(stats)
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "results not delivered" in warnings
    assert "CallableSink: 4" in warnings  # what was left, by sink

    release.set()  # the hung call returns: it was delivered after all
    thread = next(t for t in threading.enumerate() if t.name == f"{handler.name}-sink-0")
    thread.join(10)
    assert not thread.is_alive()
    stats = handler.stats
    assert (stats.sinks["CallableSink"].delivered, stats.sinks["CallableSink"].pending) == (1, 0)
    assert balanced(stats)


def test_a_failing_sink_is_counted_and_the_others_get_everything(
    judge_server: JudgeServer, make_judge: JudgeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = rag_app(judge_server, make_judge)

    def broken(item: OnlineResult) -> None:
        raise ConnectionError("metrics backend down")

    memory = InMemorySink()
    handler = online_handler(app.llm, sinks=[CallableSink(broken), memory])
    with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"), handler:
        for i in range(TRACES):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(30)
        stats = handler.stats
    assert len(memory.results) == TRACES
    assert stats.sinks["CallableSink"].errors == TRACES
    assert stats.sink_errors == TRACES
    assert stats.sinks["InMemorySink"].delivered == TRACES
    assert balanced(stats)
    logged = [r for r in caplog.records if "failed to emit" in r.getMessage()]
    assert len(logged) == 1  # once per kind


def test_two_sinks_of_one_class_get_their_own_keys(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    app = rag_app(judge_server, make_judge)
    first, second = InMemorySink(), InMemorySink()
    with online_handler(app.llm, sinks=[first, second]) as handler:
        app.chain.invoke(question(1), config={"callbacks": [handler]})
        assert handler.flush(30)
        assert set(handler.stats.sinks) == {"InMemorySink", "InMemorySink#2"}
    assert len(first.results) == len(second.results) == 1


def test_bad_sink_queue_size() -> None:
    with pytest.raises(ValueError, match="sink_queue_size"):
        online_handler(None, sink_queue_size=0)  # type: ignore[arg-type]
