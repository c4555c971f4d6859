"""Scenarios shared by the tests of sinks that talk to a real server (MLflow, Phoenix)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_ragmetrics import InMemorySink, OnlineResult
from langchain_ragmetrics.callbacks import SinkStats
from langchain_ragmetrics.callbacks.sinks import BaseSink
from tests._support.rag import RagApp, online_handler, question

__all__ = ["one_scored_item", "outage_mid_run"]


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

    Returns:
        The sink's figures after a flush; the 3 first are asserted delivered here.
    """
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
