"""Results and scenarios shared by the tests of sinks that talk to a real server."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from langchain_ragmetrics import InMemorySink, MetricResult, OnlineResult, RagSample
from langchain_ragmetrics.callbacks import SinkStats
from langchain_ragmetrics.callbacks.sinks import BaseSink
from tests._support.rag import RagApp, online_handler, question

__all__ = [
    "HoldUntil",
    "deliver",
    "delivers_after_a_fork",
    "linked_item",
    "one_scored_item",
    "outage_mid_run",
    "run_item",
]


def run_item(
    run_id: uuid.UUID, score: float | None = 0.5, error: str | None = None
) -> OnlineResult:
    """A context-relevance result about run ``run_id`` (its own trace and root)."""
    return OnlineResult(
        trace_id=run_id,
        root_run_id=run_id,
        run_id=run_id,
        query="q",
        sample=RagSample(question="q", contexts=["c"]),
        result=MetricResult(metric="context_relevance", score=score, error=error),
        timestamp=datetime.now(timezone.utc),
    )


def linked_item(link: str, trace_id: str, span_id: str) -> OnlineResult:
    """A scored result linked to a trace and span of ``link`` (``"mlflow"``, ...), no app run."""
    return OnlineResult(
        trace_id=None,
        root_run_id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        query="q",
        sample=RagSample(question="q", contexts=["c"]),
        result=MetricResult(metric="context_relevance", score=0.5, judge="judge-model"),
        timestamp=datetime.now(timezone.utc),
        links={link: (trace_id, span_id)},
    )


def one_scored_item(app: RagApp, i: int) -> OnlineResult:
    """Run the chain for question ``i`` with a memory sink and return its one result."""
    memory = InMemorySink()
    handler = online_handler(app.llm, sinks=[memory])
    with handler:
        app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(timeout=60)
    (item,) = memory.results
    return item


def outage_mid_run(app: RagApp, sink: BaseSink, key: str, stop: Callable[[], Any]) -> SinkStats:
    """3 requests delivered, ``stop()`` the server, 9 more: the app never sees an error.

    The sink must send one result at a time (``max_concurrency=1``): then its failures come
    in a row and the breaker opens before the last results are sent, every time. With
    several sends at once, all 9 can be in flight before the breaker hears of a failure,
    and whether any is refused depends on timing.

    Returns:
        The sink's figures after a flush; the 3 first are asserted delivered here.
    """
    assert getattr(sink, "max_concurrency", None) == 1, "outage_mid_run needs a serial sink"
    handler = online_handler(app.llm, sinks=[InMemorySink(), sink])
    with handler:
        for i in range(3):
            app.chain.invoke(question(i), config={"callbacks": [handler]})
        assert handler.flush(timeout=60)
        assert handler.stats.sinks[key].delivered == 3
        stop()
        for i in range(3, 12):
            app.chain.invoke(question(i), config={"callbacks": [handler]})  # never raises
        handler.flush(timeout=60)
    figures = handler.stats.sinks[key]
    assert figures.delivered == 3
    assert figures.errors + figures.dropped == 9
    assert figures.dropped > 0  # the breaker opened and later results were refused
    return figures


class HoldUntil:
    """A ``LossyProxy`` answer: holds the replies to POSTs to ``fragment`` until ``count``
    of them are held at once (or ``wait_s`` passed), then lets them all go.

    ``all_in`` is set when ``count`` were held together: requests sent one at a time never
    set it.
    """

    def __init__(self, count: int, fragment: str, wait_s: float) -> None:
        self.count = count
        self.fragment = fragment
        self.wait_s = wait_s
        self.lock = threading.Lock()
        self.held = 0
        self.most = 0
        self.all_in = threading.Event()

    def __call__(self, method: str, path: str) -> int | None:
        if method == "POST" and self.fragment in path:
            with self.lock:
                self.held += 1
                self.most = max(self.most, self.held)
                if self.held >= self.count:
                    self.all_in.set()
            self.all_in.wait(self.wait_s)
            with self.lock:
                self.held -= 1
        return None  # the server's own reply


def deliver(sink: BaseSink, items: list[OnlineResult], timeout: float = 60) -> SinkStats:
    """Hand ``items`` to ``sink`` through its outbox (as the handler does) and flush."""
    from langchain_ragmetrics.callbacks._outbox import SinkOutbox
    from langchain_ragmetrics.callbacks._stats import FailureLog

    box = SinkOutbox(sink, key="sink", max_size=1000, thread_name="test", failures=FailureLog())
    box.put(items)
    assert box.request(lambda: None).result(timeout) is None
    stats = box.stats()
    box.stop()
    return stats


_FORK_SCRIPT = """
import os
from langchain_ragmetrics import ContextRelevance, RagMetricsCallbackHandler
from {module} import {cls}

sink = {cls}()
handler = RagMetricsCallbackHandler(
    metrics=[ContextRelevance()], sinks=[sink], isolation="thread"
)
def ask(answer):
    return sink.delivery.call(lambda: answer, classify=lambda exc: "failed")
assert ask("parent") == "parent"  # the sink's request threads start in the parent
client = sink.client if hasattr(sink, "_client") else None  # one it built, if it builds one
pid = os.fork()
if pid == 0:  # the handler's fork hook hands the sink to after_fork
    try:
        answer = ask("child")
    except Exception as exc:
        answer = type(exc).__name__
    fresh = client is None or sink._client is not client
    print("child", answer, fresh, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent", ask("again"), flush=True)
"""


def delivers_after_a_fork(sink_class: type[BaseSink]) -> list[str]:
    """Run a script that uses a ``sink_class()`` sink, forks, and sends from the child.

    Returns its output lines: ``["child child True", "parent again"]`` when the child's
    requests ran on threads of its own (the parent's do not exist after a fork).
    """
    from tests._support.processes import script_output

    return script_output(_FORK_SCRIPT.format(module=sink_class.__module__, cls=sink_class.__name__))
