"""Where online results go: a file, a logger, a list, or any function.

Sinks are called on the handler's sink thread, one call at a time, never on the caller's
thread. ``flush`` and ``close`` run there too. A sink that raises is logged once per kind
and counted in ``stats.sink_errors``; the other sinks still run.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import IO

from typing_extensions import override

from langchain_ragmetrics.callbacks._records import OnlineResult

__all__ = ["BaseSink", "CallableSink", "InMemorySink", "JsonlSink", "LoggingSink"]


class BaseSink(ABC):
    """Receives every metric result of every scored retrieval."""

    @property
    def name(self) -> str:
        """A label for logs."""
        return type(self).__name__

    @abstractmethod
    def emit(self, item: OnlineResult) -> None:
        """Deliver one result (called on the sink thread)."""

    def flush(self, timeout: float | None = None) -> None:  # noqa: B027 - optional hook
        """Push buffered results out, waiting at most ``timeout`` seconds."""

    def close(self, timeout: float | None = None) -> None:
        """Flush and release resources; called once by the handler's ``close``."""
        self.flush(timeout)


class InMemorySink(BaseSink):
    """Keeps results in a list: for notebooks and tests (unbounded unless ``max_results``).

    Args:
        max_results: Keep only the most recent results when set.
    """

    def __init__(self, *, max_results: int | None = None) -> None:
        if max_results is not None and max_results < 1:
            msg = "`max_results` must be at least 1"
            raise ValueError(msg)
        self.max_results = max_results
        self._lock = threading.Lock()
        self._results: list[OnlineResult] = []

    @property
    def results(self) -> list[OnlineResult]:
        """A copy of the results received so far, in arrival order."""
        with self._lock:
            return list(self._results)

    @override
    def emit(self, item: OnlineResult) -> None:
        with self._lock:
            self._results.append(item)
            if self.max_results is not None and len(self._results) > self.max_results:
                del self._results[: len(self._results) - self.max_results]

    def clear(self) -> None:
        """Forget the results received so far."""
        with self._lock:
            self._results.clear()


class CallableSink(BaseSink):
    """Calls ``fn(result)`` for every result (a metrics client, a queue, a database ...).

    Args:
        fn: Called on the sink thread with each :class:`OnlineResult`.
    """

    def __init__(self, fn: Callable[[OnlineResult], object]) -> None:
        if not callable(fn):
            msg = f"CallableSink needs a callable, got {type(fn).__name__}"
            raise TypeError(msg)
        self.fn = fn

    @property
    @override
    def name(self) -> str:
        return f"CallableSink({getattr(self.fn, '__qualname__', type(self.fn).__name__)})"

    @override
    def emit(self, item: OnlineResult) -> None:
        self.fn(item)


class LoggingSink(BaseSink):
    """Logs one line per result; failed results at WARNING or above.

    The flat record (see :meth:`OnlineResult.to_record`) rides along as
    ``extra={"ragmetrics": ...}`` for structured-logging handlers.

    Args:
        logger: Defaults to ``logging.getLogger("langchain_ragmetrics.online")``.
        level: Level of successful and skipped results.
    """

    def __init__(self, logger: logging.Logger | None = None, *, level: int = logging.INFO) -> None:
        self.logger = logger or logging.getLogger("langchain_ragmetrics.online")
        self.level = level

    @override
    def emit(self, item: OnlineResult) -> None:
        result = item.result
        level = max(self.level, logging.WARNING) if result.failed else self.level
        if not self.logger.isEnabledFor(level):
            return
        if result.failed:
            outcome = f"failed ({result.error})"
        elif result.skipped:
            outcome = f"skipped ({result.reason})"
        else:
            outcome = f"{result.score:.3f}"
        self.logger.log(
            level,
            "ragmetrics %s=%s trace=%s retriever=%s question=%r",
            result.metric,
            outcome,
            item.trace_id or item.root_run_id,
            item.retriever,
            item.question,
            extra={"ragmetrics": item.to_record()},
        )


class JsonlSink(BaseSink):
    """Appends one JSON object per result to a file, written and flushed line by line.

    Each line has ``timestamp``, ``trace_id``, ``root_run_id``, ``run_id``, ``retriever``,
    ``tags``, ``question``, ``metric``, ``score`` (null when failed or skipped), ``skipped``,
    ``reason``, ``error``, ``details``, ``usage``, ``judge`` and ``latency_s``.

    Args:
        path: The file; created on first write, appended to if it exists.
        include_contexts: Also write the retrieved contexts and their ids.
        include_answer: Also write the generated answer.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        include_contexts: bool = False,
        include_answer: bool = False,
    ) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            msg = f"JsonlSink: {self.path} is a directory, expected a file path"
            raise ValueError(msg)
        if not self.path.parent.is_dir():
            msg = f"JsonlSink: directory {self.path.parent} does not exist"
            raise ValueError(msg)
        self.include_contexts = include_contexts
        self.include_answer = include_answer
        self._lock = threading.Lock()
        self._file: IO[str] | None = None

    @property
    @override
    def name(self) -> str:
        return f"JsonlSink({self.path})"

    @override
    def emit(self, item: OnlineResult) -> None:
        record = item.to_record(
            include_contexts=self.include_contexts, include_answer=self.include_answer
        )
        line = json.dumps(record, ensure_ascii=False, default=str, allow_nan=False)
        with self._lock:
            if self._file is None or self._file.closed:
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(line + "\n")
            self._file.flush()

    @override
    def close(self, timeout: float | None = None) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
