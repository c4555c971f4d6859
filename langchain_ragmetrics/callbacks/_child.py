"""The child process of the isolated mode: builds its setup, scores, reports back.

Started by :class:`~langchain_ragmetrics.callbacks._isolated.ProcessRuntime` with the
``spawn`` method. It receives :class:`~langchain_ragmetrics._retrieval.Retrieval` values and
flush / close requests on one pipe (typed messages, see ``_messages``), scores them with the
in-process :class:`ThreadRuntime` (same engine, ``score_retrieval`` and sinks code), and
sends its counters (when they change, and at least every ``heartbeat`` seconds:
the parent's proof of life) and its log records on the other pipe. If the parent goes away
the child closes its sinks briefly and exits.

Under ``isolation="auto"`` (``ChildStart.forward_results``) the child sends its results up as
:class:`Results` batches, with each report (every 0.2 s at most) and before each flush or
close answer, and the parent's sinks deliver them; its own sinks are only those it builds
again (``BaseSink.for_child_process``), and without parent sinks nothing is sent up.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import traceback
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection

from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics.callbacks._background import ThreadRuntime
from langchain_ragmetrics.callbacks._isolation import ProcessIsolation, build_setup
from langchain_ragmetrics.callbacks._messages import (
    ChildMessage,
    ChildStart,
    Closed,
    CloseRequest,
    Fatal,
    Flushed,
    FlushRequest,
    LogRecordData,
    Ready,
    Report,
    ResetRequest,
    Results,
    ScoreItems,
    WasReset,
    picklable,
)
from langchain_ragmetrics.callbacks._priority import IdleScoring
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog, HandlerStats, logger

__all__ = ["bootstrap", "main"]

_ORPHAN_CLOSE_SECONDS = 5.0
_REPORT_EVERY_SECONDS = 0.2
"""Counters go up at most this often: each report is unpickled by a thread of the
application's process, which takes the GIL from its requests (flush and close answers
carry their own, exact, counters)."""


class _Channel:
    """The pipe to the parent, shared by the child's threads."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self.broken = False
        # Held from reading the counters to sending them: messages that carry counters reach
        # the parent in the order they were read, so an older report never lands after a
        # Flushed or Closed and undoes its figures.
        self.in_order = threading.Lock()

    def send(self, message: ChildMessage) -> None:
        with self._lock:
            if self.broken:
                return
            try:
                self._conn.send(message)
            except (OSError, ValueError):
                self.broken = True


class _ResultBuffer:
    """Results waiting to go up to the parent: appended by scoring, sent in batches.

    Taken together with the counters that count them (see ``_Reading``) and sent with the
    channel's ``in_order`` lock held, so batches go up in the order they were taken.
    """

    def __init__(self, channel: _Channel, counters: Counters) -> None:
        self._channel = channel
        self._counters = counters
        self._items: list[OnlineResult] = []
        self._lock = threading.Lock()

    def add(self, items: list[OnlineResult]) -> None:
        """Keep one retrieval's results for the next batch (scoring's side: an append)."""
        with self._lock:
            self._items.extend(items)

    def take(self) -> list[OnlineResult]:
        """What is waiting, emptied."""
        with self._lock:
            items, self._items = self._items, []
        return items

    def send(self, items: list[OnlineResult], stats: HandlerStats) -> None:
        """Send ``items`` and the counters that count them as one :class:`Results` message."""
        try:
            self._channel.send(Results(items, stats))
        except Exception as exc:  # a result that does not pickle: send the others
            kept = [item for item in items if picklable(item)]
            lost = len(items) - len(kept)
            self._counters.add(handler_errors=lost)
            logger.warning(
                "ragmetrics: %d results could not be sent to the application's sinks "
                "(%r); they are lost",
                lost,
                exc,
            )
            self._channel.send(Results(kept, stats))


class _Reading:
    """Reads the child's counters, its sinks' figures and the results not yet sent up.

    All at one moment (under ``Counters.hold``, which scoring holds from counting a
    retrieval's results to queueing them): a reading never counts a result that no sink
    bucket holds and that has not gone up, so the last report before a kill is exact too.
    """

    def __init__(
        self,
        channel: _Channel,
        counters: Counters,
        background: ThreadRuntime,
        results: _ResultBuffer | None,
        failures: FailureLog,
    ) -> None:
        self._channel = channel
        self._counters = counters
        self._background = background
        self._results = results
        self._failures = failures

    def __call__(self, *, reset: bool = False) -> tuple[HandlerStats, list[OnlineResult]]:
        """The figures and the results to send with them; ``reset``: then start a new period.

        That zeroes the sinks' figures and logs every failure kind once again (the child
        logs its judges' and sinks' failures), at the moment the parent's period starts.
        """
        with self._counters.hold():
            stats = self._counters.snapshot(
                queued=0, open_traces=0, sinks=self._background.sink_stats()
            )
            items = [] if self._results is None else self._results.take()
            if reset:  # the parent starts its new period at this reading (``WasReset``)
                self._background.reset_sink_stats()
                self._failures.reset()
        return stats, items

    def answer(self, make: Callable[[HandlerStats], ChildMessage], *, reset: bool = False) -> None:
        """Send ``make(figures)`` once every result they count has gone up, in order."""
        with self._channel.in_order:
            stats, items = self(reset=reset)
            if self._results is not None and items:
                self._results.send(items, stats)
            self._channel.send(make(stats))


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
            self._channel.send(LogRecordData(fields))
        except Exception:
            self.handleError(record)


def _forward_logging(channel: _Channel, levels: dict[str, int]) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(_ForwardLogs(channel))
    for name, level in levels.items():
        logging.getLogger(name or None).setLevel(level)


def _report(
    channel: _Channel,
    read: Callable[[], tuple[HandlerStats, list[OnlineResult]]],
    stop: threading.Event,
    heartbeat: float,
    results: _ResultBuffer | None,
) -> None:
    """Send the results waiting, then the counters when changed (or every ``heartbeat`` s).

    The counters and the results they count are read at one moment and go up in one
    message, in order with every other message that carries counters.
    """
    last: HandlerStats | None = None
    quiet = 0.0
    while not stop.wait(_REPORT_EVERY_SECONDS):
        quiet += _REPORT_EVERY_SECONDS
        with channel.in_order:
            current, items = read()
            if results is not None and items:
                results.send(items, current)
                last, quiet = current, 0.0  # the results carried the counters
            elif current != last or quiet >= heartbeat:
                channel.send(Report(current))
                last, quiet = current, 0.0


def bootstrap(recv_fd: int, send_fd: int, alive_fd: int, name: str) -> None:
    """The entry point of a child started with ``subprocess`` (see ``_launch``).

    ``alive_fd`` stays open until this process exits: its end of file tells the parent.
    ``name`` becomes the process name in log records, as ``multiprocessing`` would set it.
    """
    for fd in (recv_fd, send_fd, alive_fd):  # a process this one starts must not hold them
        with contextlib.suppress(OSError):
            os.set_inheritable(fd, False)
    del alive_fd  # held, never used
    multiprocessing.current_process().name = name
    recv = Connection(recv_fd, writable=False)
    send = Connection(send_fd, readable=False)
    try:
        start = recv.recv()
    except (EOFError, OSError):  # the parent went away before sending anything
        return
    if not isinstance(start, ChildStart):  # pragma: no cover - the parent's bug
        msg = f"the child expected a ChildStart first, got {type(start).__name__}"
        raise TypeError(msg)
    main(recv, send, start)


def _settle_in(isolation: ProcessIsolation) -> None:
    """Leave Ctrl-C to the application (which closes us) and lower our priority if asked."""
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if isolation.niceness:
        with contextlib.suppress(OSError, AttributeError):  # not on every platform
            os.nice(isolation.niceness)


def _go_idle(isolation: ProcessIsolation, name: str, stop: threading.Event) -> IdleScoring | None:
    """Lower this thread to ``SCHED_IDLE`` when asked and possible; None when not.

    The scoring threads, started later from this one, inherit it; a guard lifts it while
    the CPUs are saturated, so scoring never stops.
    """
    if not (isolation.idle_priority and IdleScoring.supported()):
        return None
    idle = IdleScoring(name=name)
    idle.start(stop)
    return idle


def main(recv: Connection, send: Connection, start: ChildStart) -> None:
    """The child's entry point (``multiprocessing`` target)."""
    settings = start.settings
    isolation = settings.isolation
    if not isinstance(isolation, ProcessIsolation):  # pragma: no cover - the parent's bug
        msg = "the child process needs the settings of an isolated handler"
        raise TypeError(msg)
    _settle_in(isolation)
    channel = _Channel(send)
    _forward_logging(channel, start.log_levels)
    try:
        counters = Counters()
        failures = FailureLog()
        child_settings = settings.in_child(build_setup(isolation.setup))
        results = _ResultBuffer(channel, counters) if start.forward_results else None
        background = ThreadRuntime(
            child_settings,
            counters=counters,
            failures=failures,
            forward=None if results is None else results.add,
            in_child=True,
        )
    except Exception as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        channel.send(Fatal(text))
        return
    channel.send(Ready())
    read = _Reading(channel, counters, background, results, failures)

    stop = threading.Event()
    reporter = threading.Thread(
        target=_report,
        args=(channel, read, stop, isolation.heartbeat, results),
        name=f"{settings.name}-reporter",
        daemon=True,
    )
    reporter.start()  # before the next line: the heartbeat keeps its priority
    idle = _go_idle(isolation, settings.name, stop)

    def flush(request: FlushRequest) -> None:
        ok = background.flush(request.timeout)
        read.answer(partial(Flushed, request.token, ok))

    while True:
        try:
            message = recv.recv()
        except (EOFError, OSError):  # the application's process is gone
            background.close(_ORPHAN_CLOSE_SECONDS)
            break
        if isinstance(message, ScoreItems):
            for item in message.items:
                background.submit(item)
        elif isinstance(message, ResetRequest):
            read.answer(partial(WasReset, message.token), reset=True)
        elif isinstance(message, FlushRequest):
            threading.Thread(
                target=flush, args=(message,), name=f"{settings.name}-flush", daemon=True
            ).start()
        elif isinstance(message, CloseRequest):
            if idle is not None:  # the application waits for this close: no idle priority
                idle.end()
            ok = background.close(message.timeout)
            read.answer(partial(Closed, ok))
            break
    stop.set()
