"""One bounded outbox and one delivery thread per sink, so sinks never wait on each other.

The scoring side only appends to an outbox (a lock and a deque append); each sink's own
daemon thread takes results out in order and calls ``sink.emit``. A sink that hangs, is
slow or raises holds up nobody but itself: its outbox fills up, and what does not fit is
dropped and counted in that sink's figures, so an outage is visible in numbers.

A sink whose every ``emit`` is a network round trip (LangSmith feedback) keeps up with more
traffic when several run at once: with ``sink.max_concurrency`` above 1 the delivery thread
hands results to that many helper threads, in order, never two results of the same
``sink.order_key`` at once, and a flush or close still runs after every result queued before
it was delivered.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Literal

from langchain_ragmetrics._guarded import http_status
from langchain_ragmetrics._options import whole_number
from langchain_ragmetrics._queue import BoundedQueue, Entry, deadline_after, remaining
from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics.callbacks._stats import FailureLog, SinkStats, logger
from langchain_ragmetrics.callbacks.sinks import BaseSink, SinkSkipError, SinkUnavailableError

__all__ = [
    "SinkOutbox",
    "close_all",
    "failure_kind",
    "flush_all",
    "outboxes_for",
    "sink_concurrency",
    "sink_keys",
]

_ALONE: Hashable = object()
"""The order key of results whose sink could not give one: they go one at a time."""


def failure_kind(exc: BaseException) -> str:
    """A sink failure's kind for the log-once: class, HTTP status and error code if any.

    A 401 after a 500 (a key revoked during an outage) is news: both may be raised as the
    same class (``MlflowException``, ``HTTPError``).
    """
    parts = [type(exc).__name__]
    status = http_status(exc)
    if status is not None:
        parts.append(str(status))
    code = getattr(exc, "error_code", None)  # MLflow's (RESOURCE_DOES_NOT_EXIST ...)
    if isinstance(code, str) and code:
        parts.append(code)
    return ":".join(parts)


def sink_concurrency(sink: BaseSink) -> int:
    """``sink.max_concurrency`` (1 when it has none), checked: a whole number of at least 1.

    Raises:
        ValueError: It is not a whole number of at least 1 (the message names the sink).
    """
    try:
        return whole_number("max_concurrency", getattr(sink, "max_concurrency", 1))
    except ValueError as exc:
        msg = f"{type(sink).__name__}: {exc}"
        raise ValueError(msg) from None


@dataclass
class _Call:
    """A control entry run on the delivery thread, in order with the results (flush/close)."""

    fn: Callable[[], object]
    future: Future[object]


class SinkOutbox:
    """A bounded FIFO of results in front of one sink, drained by the sink's own thread.

    Args:
        sink: The sink.
        key: The sink's key in ``stats.sinks``.
        max_size: Bound on results waiting; beyond it new results are dropped (counted).
        thread_name: Name of the delivery thread.
        failures: Log-once reporter.
    """

    def __init__(
        self, sink: BaseSink, *, key: str, max_size: int, thread_name: str, failures: FailureLog
    ) -> None:
        self.sink = sink
        self.key = key
        self.max_size = max_size
        self.thread_name = thread_name
        self._failures = failures
        self._queue: BoundedQueue[OnlineResult | _Call] = BoundedQueue(max_size=max_size)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._delivered = self._errors = self._dropped = self._skipped = 0
        self._stale_upto = 0
        """Results queued up to this position came before the last :meth:`reset`: their
        outcome belongs to the period before it and is not counted."""
        self._stale = 0
        """How many of those are still waiting or being delivered."""
        self.max_concurrency = sink_concurrency(sink)
        """How many results are handed to ``sink.emit`` at once."""
        self._lanes: DaemonThreadPool | None = None
        self._moving = threading.Condition()
        self._in_flight = 0
        self._keys_in_flight: set[Hashable] = set()
        self.held_back = 0
        """Results that waited for an earlier result of the same order key to be delivered."""

    # ------------------------------------------------------------------ producer side

    @property
    def thread(self) -> threading.Thread | None:
        """The delivery thread, once started."""
        return self._thread

    def put(self, items: Sequence[OnlineResult]) -> int:
        """Queue results for the sink without ever blocking; what does not fit is dropped.

        Returns:
            How many were dropped (counted here): the caller reports them with
            :meth:`report_dropped` once it holds no lock, since a report logs, and a log
            handler may take its time (a full pipe, a log shipper that is down).
        """
        open_ = not self._queue.closed and (self._thread is not None or self._start())
        with self._lock:  # queued and counted together: stats() sees them pending or dropped
            taken = self._queue.put_many(items) if open_ else 0
            self._dropped += len(items) - taken
        return len(items) - taken

    def report_dropped(self, count: int) -> None:
        """Log (once per kind, see ``FailureLog``) that :meth:`put` dropped ``count`` results."""
        if count:
            self._failures.report(
                f"outbox-full:{self.key}",
                f"sink {self.key} is not keeping up (its outbox of {self.max_size} is full "
                f"or closed): results are dropped and counted in stats.sinks[{self.key!r}]",
            )

    def stats(self) -> SinkStats:
        """A snapshot of this sink's figures (of the results queued since the last reset)."""
        with self._lock:
            pending = self._queue.size - self._stale
            return SinkStats(
                delivered=self._delivered,
                skipped=self._skipped,
                errors=self._errors,
                dropped=self._dropped,
                pending=pending,
            )

    def reset(self) -> None:
        """Start a new period: zero the counts, and leave the results queued so far out of it.

        Those were counted (``scored`` ...) before the reset: where they end is not counted
        after it, and ``pending`` no longer shows them, so the sink's figures add up to the
        results produced since the reset. The caller holds still whatever queues results
        and counts them (``Counters.hold``), so no result is counted on one side only.
        """
        with self._lock:
            self._delivered = self._errors = self._dropped = self._skipped = 0
            self._stale = self._queue.size
            self._stale_upto = self._queue.last_seq

    def request(self, fn: Callable[[], object]) -> Future[object]:
        """Run ``fn`` on the delivery thread after the results queued so far.

        A sink that was never given a result gets its thread now: its ``close`` must still
        run (it may hold a client or a file it opened when it was built).
        """
        future: Future[object] = Future()
        running = self._thread is not None or (not self._queue.closed and self._start())
        if not running or not self._queue.put(_Call(fn, future), counted=False):
            future.set_result(None)  # no thread can start (interpreter exit), or closed
        return future

    def stop(self) -> None:
        """Refuse new results; the thread exits once the queued entries are done."""
        self._queue.close()

    def abandon(self) -> tuple[int, int]:
        """Drop what is still queued (counted), after a deadline passed.

        Returns:
            ``(dropped, delivering)``: the results dropped here (now in ``dropped``), and
            those the delivery thread has taken and not finished (in ``emit``, or waiting
            for a free helper), which stay in ``pending`` until their call returns.
        """
        with self._lock:  # taken off and counted together, as in stats()
            busy = self._queue.busy
            entries = self._queue.abandon()
            left = sum(not isinstance(entry.item, _Call) for entry in entries)
            stale = sum(self._is_stale(entry) for entry in entries)
            self._stale -= stale
            self._dropped += left - stale
        for entry in entries:
            if isinstance(entry.item, _Call):
                entry.item.future.cancel()
        return left, busy

    # ------------------------------------------------------------------ delivery thread

    def _start(self) -> bool:
        """Start the delivery thread in an empty context; False if impossible."""
        with self._lock:
            if self._thread is not None:
                return True
            try:
                thread = threading.Thread(
                    target=contextvars.Context().run,
                    args=(self._serve,),
                    name=self.thread_name,
                    daemon=True,
                )
                thread.start()
            except RuntimeError as exc:  # e.g. at interpreter shutdown
                self._failures.report(
                    f"outbox-start:{self.key}", f"cannot start sink thread {self.key}: {exc}", exc
                )
                return False
            self._thread = thread
            return True

    def _serve(self) -> None:
        if self.max_concurrency > 1:
            self._lanes = DaemonThreadPool(
                name=f"{self.thread_name}-emit", size=self.max_concurrency
            )
        try:
            while (entry := self._queue.take()) is not None:
                item = entry.item
                if self._lanes is not None and not isinstance(item, _Call):
                    self._hand_over(entry, item, self._lanes)
                    continue
                if self._lanes is not None:
                    self._settle()  # a flush or close comes after every earlier result
                self._serve_one(entry)
            self._settle()
        finally:
            if self._lanes is not None:
                self._lanes.stop(0)

    def _serve_one(self, entry: Entry[OnlineResult | _Call]) -> None:
        outcome = "errors"
        try:
            if isinstance(entry.item, _Call):
                self._run(entry.item)
            else:
                outcome = self._deliver(entry.item)
        finally:
            with self._lock:  # counted and released together: stats() never sees it twice
                if self._is_stale(entry):
                    self._stale -= 1  # counted before the last reset: not in these figures
                elif not isinstance(entry.item, _Call):
                    self._count(outcome)
                self._queue.done(entry)

    def _hand_over(
        self, entry: Entry[OnlineResult | _Call], item: OnlineResult, lanes: DaemonThreadPool
    ) -> None:
        """Start delivering ``entry`` on a helper thread once one is free and its key is."""
        key = self._order_key(item)
        with self._moving:
            if key is not None and key in self._keys_in_flight:
                self.held_back += 1
            while self._in_flight >= self.max_concurrency or (
                key is not None and key in self._keys_in_flight
            ):
                self._moving.wait()
            self._in_flight += 1
            if key is not None:
                self._keys_in_flight.add(key)
        with contextlib.suppress(RuntimeError):  # no new thread (interpreter exiting)
            lanes.start()
        if lanes.started:
            lanes.submit(self._deliver_on_lane, entry, key)
        else:  # delivered here, one at a time, rather than not at all
            self._deliver_on_lane(entry, key)

    def _deliver_on_lane(self, entry: Entry[OnlineResult | _Call], key: Hashable | None) -> None:
        try:
            self._serve_one(entry)
        finally:
            with self._moving:
                self._in_flight -= 1
                self._keys_in_flight.discard(key)
                self._moving.notify_all()

    def _settle(self) -> None:
        """Wait until no result is being delivered on a helper thread."""
        with self._moving:
            while self._in_flight:
                self._moving.wait()

    def _order_key(self, item: OnlineResult) -> Hashable | None:
        try:
            key = self.sink.order_key(item)
            hash(key)  # an unhashable key is a broken one
        except Exception as exc:  # a broken key must not stop delivery: deliver in order
            self._failures.report(
                f"sink:{self.key}:order_key:{type(exc).__name__}",
                f"sink {self.key} failed to give an order key: {exc!r}",
                exc,
            )
            return _ALONE
        return key

    def _deliver(self, item: OnlineResult) -> str:
        try:
            self.sink.emit(item)
        except SinkSkipError:
            return "skipped"  # no place for it in this sink (it warns once itself)
        except SinkUnavailableError:
            return "dropped"  # the sink logs its own state changes (breaker, disabled)
        except BaseException as exc:  # CancelledError, SystemExit too: this thread lives on
            self._failures.report(
                f"sink:{self.key}:emit:{failure_kind(exc)}",
                f"sink {self.key} failed to emit: {exc!r}",
                exc,
            )
            return "errors"
        return "delivered"

    def _is_stale(self, entry: Entry[OnlineResult | _Call]) -> bool:
        """Whether ``entry`` is a result queued before the last reset (lock held)."""
        return entry.seq <= self._stale_upto and not isinstance(entry.item, _Call)

    def _count(self, outcome: str) -> None:
        if outcome == "delivered":
            self._delivered += 1
        elif outcome == "dropped":
            self._dropped += 1
        elif outcome == "skipped":
            self._skipped += 1
        else:
            self._errors += 1

    def _run(self, call: _Call) -> None:
        if not call.future.set_running_or_notify_cancel():
            return
        try:
            call.future.set_result(call.fn())
        except BaseException as exc:  # as in _deliver: this thread lives on
            call.future.set_exception(exc)


def sink_keys(sinks: Sequence[BaseSink]) -> list[str]:
    """Each sink's key in ``stats.sinks``: its class name, then ``#2``, ``#3`` ... for repeats."""
    out: list[str] = []
    for sink in sinks:
        base = type(sink).__name__
        key, n = base, 1
        while key in out:
            n += 1
            key = f"{base}#{n}"
        out.append(key)
    return out


def outboxes_for(
    sinks: Sequence[BaseSink],
    *,
    max_size: int,
    name: str,
    failures: FailureLog,
    keys: Sequence[str] | None = None,
) -> list[SinkOutbox]:
    """One outbox per sink, keyed by ``keys`` (default :func:`sink_keys`)."""
    keys = sink_keys(sinks) if keys is None else keys
    return [
        SinkOutbox(
            sink, key=key, max_size=max_size, thread_name=f"{name}-sink-{i}", failures=failures
        )
        for i, (sink, key) in enumerate(zip(sinks, keys, strict=True))
    ]


def flush_all(
    outboxes: Sequence[SinkOutbox],
    timeout: float | None,
    failures: FailureLog,
    *,
    action: Literal["flush", "close"] = "flush",
) -> list[SinkOutbox]:
    """Run ``sink.flush`` (or ``close``) on every sink's thread, all at once, within ``timeout``.

    Each call is queued behind the results already in that sink's outbox, so a sink that
    finished has been handed every result produced so far.

    Returns:
        The outboxes that did not finish in time (empty when all did).
    """
    deadline = deadline_after(timeout)

    def make(sink: BaseSink) -> Callable[[], object]:
        def call() -> None:
            left = remaining(deadline)
            if action == "close":
                sink.close(left)
            else:
                sink.flush(left)

        return call

    unfinished: list[SinkOutbox] = []
    for box, future in [(box, box.request(make(box.sink))) for box in outboxes]:
        try:
            future.result(remaining(deadline))
        except (futures.TimeoutError, futures.CancelledError):
            unfinished.append(box)
        except Exception as exc:  # the sink's own flush/close raised: it is done, badly
            failures.report(
                f"sink:{box.key}:{action}:{type(exc).__name__}",
                f"sink {box.key} failed to {action}: {exc!r}",
                exc,
            )
    return unfinished


def close_all(
    outboxes: Sequence[SinkOutbox],
    timeout: float | None,
    failures: FailureLog,
    *,
    process_ends: bool = False,
) -> bool:
    """Deliver what is queued, close every sink and stop its thread, all within ``timeout``.

    A sink still busy at the deadline has its queue dropped (counted in its ``dropped``) and
    a warning names it; its thread is left to finish the call it is stuck in, whose results
    stay in ``pending`` until it returns. ``process_ends``: this process exits right after
    (the scoring child), so the warning says those are lost, counted dropped by the parent.

    Returns:
        True when every sink closed in time.
    """
    deadline = deadline_after(timeout)
    unfinished = flush_all(outboxes, remaining(deadline), failures, action="close")
    left: dict[str, tuple[int, int]] = {}
    for box in outboxes:
        if box in unfinished:
            left[box.key] = box.abandon()
        else:
            box.stop()
    for box in outboxes:
        if box.thread is not None and box not in unfinished:
            box.thread.join(remaining(deadline))
    described = ", ".join(
        f"{key}: {dropped} dropped, {delivering} still being delivered"
        for key, (dropped, delivering) in left.items()
        if dropped or delivering
    )
    if described:
        fate = (
            "are lost when the scoring process exits (then counted in dropped)"
            if process_ends
            else "stay in stats.sinks[...].pending until the sink's call returns"
        )
        logger.warning(
            "ragmetrics: sinks still busy when close gave up; results not delivered - %s "
            "(dropped ones are counted in stats.sinks[...].dropped, those still being "
            "delivered %s)",
            described,
            fate,
        )
    return not unfinished
