"""Setups that the child process of an isolated handler imports and calls (tests only).

They must be importable by name in a fresh interpreter: the child is started with the
``spawn`` method and receives ``functools.partial`` objects of these functions.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

from langchain_openai import ChatOpenAI

from langchain_ragmetrics import (
    BaseSink,
    CallableSink,
    ContextRelevance,
    IDBasedContextRecall,
    JsonlSink,
    OnlineResult,
)
from langchain_ragmetrics.callbacks import ScoringSetup
from langchain_ragmetrics.metrics import RetryPolicy

__all__ = [
    "BrokenInChild",
    "FileInChild",
    "HeldInChild",
    "crashing_setup",
    "jsonl_setup",
    "kill_on_emit_setup",
    "sample_dump_setup",
    "setup_that_returns_nothing",
]

FAST = RetryPolicy(initial_backoff=0.01, max_backoff=0.02)


def _judge(base_url: str) -> ChatOpenAI:
    return ChatOpenAI(
        model="judge-model", base_url=base_url, api_key="test", max_retries=0, timeout=10
    )


def jsonl_setup(base_url: str, path: str, *, reference: str | None = None) -> ScoringSetup:
    """ContextRelevance on the loopback judge, results to a JSONL file with contexts."""

    def provider(question: str | None, metadata: Any) -> str | None:
        return reference

    return ScoringSetup(
        metrics=[ContextRelevance(llm=_judge(base_url), retry=FAST)],
        sinks=[JsonlSink(path, include_contexts=True, include_answer=True)],
        reference_provider=provider if reference is not None else None,
    )


def kill_on_emit_setup(base_url: str, path: str, marker: str) -> ScoringSetup:
    """Like ``jsonl_setup``, but the child kills itself on the first result after ``marker``
    exists (a crash in the middle of a run)."""

    def maybe_die(item: OnlineResult) -> None:
        if Path(marker).exists():
            Path(marker).unlink()
            os.kill(os.getpid(), signal.SIGKILL)

    setup = jsonl_setup(base_url, path)
    assert setup.sinks is not None
    return ScoringSetup(metrics=setup.metrics, sinks=[CallableSink(maybe_die), *setup.sinks])


def hanging_sink_setup(base_url: str, path: str) -> ScoringSetup:
    """A sink that blocks for ever on its first result: the child never finishes."""
    never = threading.Event()

    setup = jsonl_setup(base_url, path)
    assert setup.sinks is not None
    return ScoringSetup(
        metrics=setup.metrics, sinks=[CallableSink(lambda item: never.wait()), *setup.sinks]
    )


def crashing_setup() -> ScoringSetup:
    """A setup that raises (e.g. a missing API key): the handler must turn itself off."""
    msg = "no judge configured for this test"
    raise RuntimeError(msg)


def setup_that_returns_nothing() -> Any:
    """A setup returning the wrong type."""
    return None


def _write_sample(path: str, item: OnlineResult) -> None:
    with Path(path).open("a", encoding="utf-8") as out:
        out.write(item.sample.model_dump_json() + "\n")


def sample_dump_setup(path: str) -> ScoringSetup:
    """A metric that needs no judge; each judged sample is appended to ``path`` as JSON."""
    return ScoringSetup(
        metrics=[IDBasedContextRecall()],
        sinks=[CallableSink(partial(_write_sample, path))],
    )


class FileInChild(BaseSink):
    """Built again in the default child as a ``JsonlSink`` of ``path`` (another class: its
    figures must still land under this sink's key); never delivers here."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def emit(self, item: OnlineResult) -> None:
        msg = "FileInChild delivers from the child only"
        raise AssertionError(msg)

    def for_child_process(self) -> Any:
        return partial(JsonlSink, self.path)


def _no_backend() -> BaseSink:
    msg = "no backend here"
    raise RuntimeError(msg)


class BrokenInChild(BaseSink):
    """Its factory raises in the child: it must not turn scoring off for the other sinks."""

    def emit(self, item: OnlineResult) -> None:
        msg = "BrokenInChild delivers from the child only"
        raise AssertionError(msg)

    def for_child_process(self) -> Any:
        return _no_backend


def _hold_until_exists(gate: str, item: OnlineResult) -> None:
    while not Path(gate).exists():  # the test creates it: a gate across the processes
        time.sleep(0.005)


class HeldInChild(BaseSink):
    """Built again in the default child as a sink whose ``emit`` waits until the file
    ``gate`` exists (the test creates it to let the results through)."""

    def __init__(self, gate: Path) -> None:
        self.gate = gate

    def emit(self, item: OnlineResult) -> None:
        msg = "HeldInChild delivers from the child only"
        raise AssertionError(msg)

    def for_child_process(self) -> Any:
        return partial(CallableSink, partial(_hold_until_exists, str(self.gate)))
