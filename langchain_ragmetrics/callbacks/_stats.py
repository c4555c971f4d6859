"""Counters of the online handler, their public snapshot, and log-once failure reporting."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping

from pydantic import BaseModel, ConfigDict, Field

from langchain_ragmetrics._schema import Usage

__all__ = ["Counters", "FailureLog", "HandlerStats", "SinkStats", "logger"]

logger = logging.getLogger("langchain_ragmetrics")
"""The package logger; the handler reports failures here (once per kind)."""


class SinkStats(BaseModel):
    """What one sink did with the results it was given.

    Every result handed to a sink ends up in exactly one bucket:
    ``delivered + skipped + errors + dropped + pending`` = results produced since the start
    (or the last reset: results produced before it are left out, wherever they end).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    delivered: int = 0
    """Results the sink took (``emit`` returned)."""
    skipped: int = 0
    """Results the sink had no place for (``SinkSkipError``: e.g. no MLflow trace)."""
    errors: int = 0
    """Results whose ``emit`` raised (logged once per kind)."""
    dropped: int = 0
    """Results never delivered: the outbox was full, the sink refused them without trying
    (``SinkUnavailableError``: LangSmith's circuit open or no API key), or ``close`` gave up."""
    pending: int = 0
    """Results waiting in the outbox or being delivered right now (of those produced since
    the last reset)."""


class HandlerStats(BaseModel):
    """A snapshot of what the online handler has seen and done.

    Retrieval counts: ``seen >= sampled = dropped + processed + queued + abandoned``.
    Result counts (one per metric per processed retrieval): ``scored + failed + skipped``,
    and for every sink ``scored + failed + skipped = delivered + skipped + errors + dropped +
    pending``. Both hold exactly once nothing is in flight, also after a reset (see
    :meth:`Counters.reset`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    traces: int = 0
    """Root runs that finished (successfully or not)."""
    errored: int = 0
    """Root runs that raised (or were cancelled): their retrievals are not scored."""
    seen: int = 0
    """Retrievals captured in traces that finished without error."""
    sampled: int = 0
    """Retrievals selected by sampling."""
    dropped: int = 0
    """Sampled retrievals refused because the queue was full or the handler was closed."""
    queued: int = 0
    """Retrievals waiting or being scored right now."""
    processed: int = 0
    """Retrievals whose metrics all finished and were handed to the sinks."""
    scored: int = 0
    """Metric results with a score."""
    failed: int = 0
    """Metric results that failed (score NaN: judge error, timeout, bad output ...)."""
    skipped: int = 0
    """Metric results that could not be assessed (score None: e.g. no reference)."""
    sink_errors: int = 0
    """Results whose delivery raised, over all sinks (see ``sinks`` for each one)."""
    handler_errors: int = 0
    """Internal errors swallowed in callback methods (the user's call went on)."""
    evicted: int = 0
    """Unfinished traces forgotten because ``max_open_traces`` was reached."""
    open_traces: int = 0
    """Traces in progress whose state the handler holds right now."""
    pending_at_deadline: int = 0
    """Retrievals still queued when the last ``flush``/``close`` hit its timeout (0 if none)."""
    abandoned: int = 0
    """Retrievals that ``close`` discarded unscored after its timeout."""
    usage: Usage = Field(default_factory=Usage)
    """Judge tokens and calls spent on processed retrievals."""
    sinks: dict[str, SinkStats] = Field(default_factory=dict)
    """Per-sink delivery figures, keyed by sink class name (``JsonlSink``, ``JsonlSink#2`` ...)."""


_GAUGES = ("queued", "open_traces", "sink_errors")
_COUNTERS = tuple(
    name
    for name, info in HandlerStats.model_fields.items()
    if info.annotation in (int, "int") and name not in _GAUGES
)


class Counters:
    """Thread-safe running totals shared by the handler's parts (the fields of HandlerStats)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: counted inside :meth:`hold` too
        self._totals = dict.fromkeys(_COUNTERS, 0)
        self._usage = Usage()
        self.generation = 0
        """How many times :meth:`reset` zeroed the totals (a count taken before is gone)."""

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the counters still: no count, snapshot or reset in another thread meanwhile.

        A step that counts results and queues them for the sinks runs under it, and so does a
        reading of the counters with the sinks' figures: the reading sees both or neither.
        """
        with self._lock:
            yield

    def add(self, **increments: int) -> None:
        """Add to named counters (unknown names raise KeyError)."""
        with self._lock:
            for name, value in increments.items():
                self._totals[name] += value

    def add_trace(self, *, seen: int, sampled: int) -> None:
        """Count one finished trace, as ``add(traces=1, seen=..., sampled=...)`` would.

        Without the keyword loop: it runs on the caller's thread once per request.
        """
        with self._lock:
            totals = self._totals
            totals["traces"] += 1
            totals["seen"] += seen
            totals["sampled"] += sampled

    def set(self, name: str, value: int) -> None:
        """Set one counter (used for the ``pending_at_deadline`` gauge)."""
        with self._lock:
            if name not in self._totals:
                raise KeyError(name)
            self._totals[name] = value

    def add_usage(self, usage: Usage) -> None:
        """Accumulate judge usage."""
        with self._lock:
            self._usage = self._usage + usage

    def snapshot(
        self, *, queued: int, open_traces: int, sinks: Mapping[str, SinkStats] | None = None
    ) -> HandlerStats:
        """Freeze the totals together with the live gauges and the sinks' figures."""
        with self._lock:
            values = dict(self._totals)
            usage = self._usage
        per_sink = dict(sinks or {})
        return HandlerStats(
            **values,
            queued=queued,
            open_traces=open_traces,
            usage=usage,
            sinks=per_sink,
            sink_errors=sum(s.errors for s in per_sink.values()),
        )

    def reset(self) -> None:
        """Zero every counter, but carry the retrievals in flight over (``seen``, ``sampled``).

        A retrieval sampled and not yet dropped, processed or abandoned is counted as seen
        and sampled in the new period too: it ends there (processed ...), wherever it is
        now (queued, or between two counts), so ``seen >= sampled = dropped + processed +
        queued + abandoned`` holds again once it has.
        """
        with self._lock:
            totals = self._totals
            in_flight = (
                totals["sampled"] - totals["dropped"] - totals["processed"] - totals["abandoned"]
            )
            self._totals = dict.fromkeys(_COUNTERS, 0)
            self._totals["seen"] = self._totals["sampled"] = max(0, in_flight)
            self._usage = Usage()
            self.generation += 1


class FailureLog:
    """Logs the first failure of each kind with its traceback; later ones only at DEBUG.

    A production handler must not flood logs when a judge is down, yet the first
    occurrence of every distinct problem must be visible.
    """

    def __init__(self, log: logging.Logger = logger) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._seen: set[str] = set()

    def report(self, kind: str, message: str, exc: BaseException | None = None) -> None:
        """Log ``message`` at WARNING the first time ``kind`` happens, at DEBUG afterwards."""
        with self._lock:
            first = kind not in self._seen
            self._seen.add(kind)
        level = logging.WARNING if first else logging.DEBUG
        if not self._log.isEnabledFor(level):
            return
        suffix = " (further failures of this kind are logged at DEBUG)" if first else ""
        self._log.log(level, "%s%s", message, suffix, exc_info=exc if first else None)

    def reset(self) -> None:
        """Forget which kinds were logged, so each is logged again once."""
        with self._lock:
            self._seen.clear()
