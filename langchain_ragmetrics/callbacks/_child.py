"""The child process of the isolated mode: builds its setup, scores, reports back.

Started by :class:`~langchain_ragmetrics.callbacks._isolated.IsolatedBackground` with the
``spawn`` method. It receives plain retrievals and ``flush`` / ``close`` requests on one
pipe, scores them with the in-process :class:`Background` (same engine, pipeline and sinks
code), and sends its counters (when they change, and at least every ``heartbeat`` seconds:
the parent's proof of life) and its log records on the other pipe. If the parent goes away
the child closes its sinks briefly and exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from langchain_ragmetrics.callbacks._isolated import (
    ChildOptions,
    HookError,
    SetupSource,
    build_setup,
)
from langchain_ragmetrics.callbacks._otel import span_context_from_plain
from langchain_ragmetrics.callbacks._records import Capture
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog

__all__ = ["main"]

_ORPHAN_CLOSE_SECONDS = 5.0
_REPORT_EVERY_SECONDS = 0.05


class _Channel:
    """The pipe to the parent, shared by the child's threads."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self.broken = False

    def send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            if self.broken:
                return
            try:
                self._conn.send(message)
            except (OSError, ValueError):
                self.broken = True


class _ForwardLogs(logging.Handler):
    """Sends every record to the parent, already formatted (args and traceback applied)."""

    def __init__(self, channel: _Channel) -> None:
        super().__init__()
        self._channel = channel
        self._format = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = {
                "name": record.name,
                "levelno": record.levelno,
                "levelname": record.levelname,
                "msg": record.getMessage(),
                "args": None,
                "exc_text": (
                    self._format.formatException(record.exc_info) if record.exc_info else None
                ),
                "created": record.created,
                "threadName": record.threadName,
                "processName": record.processName,
            }
            extra = getattr(record, "ragmetrics", None)
            if extra is not None:
                fields["ragmetrics"] = extra
            self._channel.send(("log", fields))
        except Exception:
            self.handleError(record)


def _forward_logging(channel: _Channel, levels: dict[str, int]) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(_ForwardLogs(channel))
    for name, level in levels.items():
        logging.getLogger(name or None).setLevel(level)


def _question(resolved: tuple[Any, str | None]) -> Any:
    value, error = resolved
    if error is not None:
        raise HookError(error)
    return value


def _capture(item: dict[str, Any]) -> Capture:
    """Rebuild a Capture from plain data (documents as text and id)."""
    from langchain_core.documents import Document

    documents = [
        Document(page_content=doc[0], id=doc[1]) if isinstance(doc, tuple) else doc
        for doc in item["documents"]
    ]
    root_outputs = item["answer"]
    return Capture(
        root_run_id=item["root_run_id"],
        trace_id=item["trace_id"],
        run_id=item["run_id"],
        parent_run_id=item["parent_run_id"],
        retriever=item["retriever"],
        query=item["query"],
        documents=documents,
        tags=item["tags"],
        metadata=item["metadata"],
        root_metadata=item["root_metadata"],
        root_inputs=item["question"],
        root_outputs=root_outputs,
        otel_context=span_context_from_plain(item.get("otel_context")),
        links=item.get("links") or {},
    )


def _report(
    channel: _Channel, totals: Callable[[], dict[str, Any]], stop: threading.Event, heartbeat: float
) -> None:
    """Send the counters when they change, and at least every ``heartbeat`` seconds."""
    last: dict[str, Any] | None = None
    quiet = 0.0
    while not stop.wait(_REPORT_EVERY_SECONDS):
        quiet += _REPORT_EVERY_SECONDS
        current = totals()
        if current != last or quiet >= heartbeat:
            channel.send(("stats", current))
            last, quiet = current, 0.0


def main(
    recv: Connection, send: Connection, setup: SetupSource | None, options: ChildOptions
) -> None:
    """The child's entry point (``multiprocessing`` target)."""
    from langchain_ragmetrics.callbacks._background import Background
    from langchain_ragmetrics.callbacks._settings import HandlerSettings

    with contextlib.suppress(ValueError):  # Ctrl-C goes to the application, which closes us
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if options.niceness:
        with contextlib.suppress(OSError, AttributeError):  # not on every platform
            os.nice(options.niceness)
    channel = _Channel(send)
    _forward_logging(channel, options.log_levels)
    try:
        scoring = build_setup(setup)
        counters = Counters()
        settings = HandlerSettings(
            metrics=scoring.metrics,
            sinks=scoring.sinks,
            question_from=_question,
            answer_from=_question,
            reference_provider=scoring.reference_provider,
            max_queue_size=options.max_queue_size,
            max_concurrency=options.max_concurrency,
            rate_limit_per_minute=options.rate_limit_per_minute,
            timeout=options.timeout,
            trace_judge=options.trace_judge,
            name=options.name,
            sink_queue_size=options.sink_queue_size,
            exit_timeout=None,  # the parent owns the exit: it closes this process in time
        )
        background = Background(settings, counters=counters, failures=FailureLog())
    except Exception as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        channel.send(("fatal", text))
        return
    channel.send(("ready",))

    def _totals() -> dict[str, Any]:
        snapshot = counters.snapshot(queued=0, open_traces=0, sinks=background.sink_stats())
        return snapshot.model_dump()

    stop = threading.Event()
    reporter = threading.Thread(
        target=_report,
        args=(channel, _totals, stop, options.heartbeat),
        name=f"{options.name}-reporter",
        daemon=True,
    )
    reporter.start()

    def flush(token: int, timeout: float | None) -> None:
        ok = background.flush(timeout)
        channel.send(("flushed", token, ok, _totals()))

    while True:
        try:
            message = recv.recv()
        except (EOFError, OSError):  # the application's process is gone
            background.close(_ORPHAN_CLOSE_SECONDS)
            break
        kind = message[0]
        if kind == "items":
            for item in message[1]:
                background.submit(_capture(item))
        elif kind == "flush":
            threading.Thread(
                target=flush, args=message[1:], name=f"{options.name}-flush", daemon=True
            ).start()
        elif kind == "close":
            ok = background.close(message[1])
            channel.send(("closed", ok, _totals()))
            break
    stop.set()
