"""The handler's background side: worker loop, judge threads, sink outboxes, their lifetime.

``submit`` is all the caller's thread pays. ``flush`` waits for earlier work, ``close``
flushes within a deadline and then stops everything, cancelling what is left. While its
threads run, the exit registry holds this object strongly (never the handler), so queued
work is flushed at interpreter exit even when the user dropped every reference.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from langchain_core.runnables import RunnableConfig

from langchain_ragmetrics._engine import ScoringEngine
from langchain_ragmetrics._queue import deadline_after, remaining, remaining_or
from langchain_ragmetrics._retrieval import Capture, OnlineResult, Retrieval
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics.callbacks import _exit
from langchain_ragmetrics.callbacks._outbox import SinkOutbox, close_all, flush_all, outboxes_for
from langchain_ragmetrics.callbacks._pipeline import ScoringPipeline
from langchain_ragmetrics.callbacks._settings import HandlerSettings
from langchain_ragmetrics.callbacks._setup import judge_callbacks, untraced
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog, SinkStats, logger
from langchain_ragmetrics.callbacks._worker import BackgroundWorker

__all__ = ["SINK_GRACE_SECONDS", "STOP_GRACE_SECONDS", "ThreadRuntime", "reporting_abandoned"]

STOP_GRACE_SECONDS = 2.0
"""What ``close`` gives the judge calls at work beyond its timeout, before it cancels them."""
SINK_GRACE_SECONDS = 2.0
"""What ``close`` gives the sinks to deliver and close, at least, whatever scoring used."""
_IDLE_EXIT_CLOSE_SECONDS = 5.0


@contextlib.contextmanager
def reporting_abandoned(counters: Counters, *, at_exit: bool) -> Iterator[None]:
    """Warn once, after the block (a close), of the retrievals it counted ``abandoned``.

    Both runtimes close inside it, so ``close`` and the exit hook say the same thing in
    both modes. A reset meanwhile leaves what was counted since it (a lower bound).
    """
    with counters.hold():
        generation = counters.generation
        before = counters.snapshot(queued=0, open_traces=0).abandoned
    yield
    with counters.hold():
        after = counters.snapshot(queued=0, open_traces=0).abandoned
        lost = after - (before if counters.generation == generation else 0)
    if lost <= 0:
        return
    if at_exit:
        when, advice = "at interpreter exit", "raise exit_timeout or flush() before exiting"
    else:
        when, advice = "when close() gave up", "raise its timeout or flush() before closing"
    logger.warning(
        "ragmetrics: %d retrievals were still pending %s (not scored, counted in "
        "stats.abandoned); %s",
        lost,
        when,
        advice,
    )


class ThreadRuntime:
    """Everything the handler runs off the request path, started on the first ``submit``.

    Judge calls run through the metrics' sync ``invoke`` on dedicated threads (async model
    clients are often shared process-wide and bound to the application's event loop), under
    the engine's concurrency limit, timeout and rate limit, scheduled by the worker's loop.
    Results go to one outbox per sink, each drained by that sink's own thread.

    Args:
        settings: The handler's options.
        counters: Shared counters.
        failures: Shared log-once reporter.
        forward: Also called with each retrieval's results (see ``ScoringPipeline``).
        in_child: It scores in the child process of the default mode, which exits after
            ``close``: the application's process warns of the abandoned retrievals (it
            also counts those the child's death leaves), and results a sink still holds
            when ``close`` gives up are lost with the process (counted dropped there).
    """

    def __init__(
        self,
        settings: HandlerSettings,
        *,
        counters: Counters,
        failures: FailureLog,
        forward: Callable[[list[OnlineResult]], None] | None = None,
        in_child: bool = False,
    ) -> None:
        name = settings.name
        self._in_child = in_child
        judge_config: RunnableConfig = {"callbacks": judge_callbacks(settings.trace_judge)}
        self.settings = settings
        self.judges = DaemonThreadPool(name=f"{name}-judge", size=settings.max_concurrency)
        self.engine = ScoringEngine(
            max_concurrency=settings.max_concurrency,
            timeout=settings.timeout,
            rate_limit_per_minute=settings.rate_limit_per_minute,
            config=judge_config,
            executor=self.judges,
        )
        self.outboxes: list[SinkOutbox] = outboxes_for(
            settings.sinks, max_size=settings.sink_queue_size, name=name, failures=failures
        )
        self.pipeline = ScoringPipeline(
            settings=settings,
            engine=self.engine,
            outboxes=self.outboxes,
            counters=counters,
            failures=failures,
            forward=forward,
        )
        self.worker: BackgroundWorker[Capture | Retrieval] = BackgroundWorker(
            self.pipeline.process,
            max_queue_size=settings.max_queue_size,
            max_active=settings.max_concurrency,
            name=f"{name}-worker",
            counters=counters,
            failures=failures,
            thread_context=untraced if settings.trace_judge is None else None,
            on_start=self._on_start,
            on_idle_exit=self._on_idle_exit,
        )
        self._counters = counters
        self._failures = failures
        self._close_lock = threading.Lock()
        self._closed = False
        self._shut = threading.Event()  # set once a close (or the idle exit) has finished

    # ------------------------------------------------------------------ figures

    @property
    def queued(self) -> int:
        """Retrievals waiting or being scored."""
        return self.worker.queued

    @property
    def exit_timeout(self) -> float | None:
        """Seconds the exit hook may spend on this object (None: not registered)."""
        return self.settings.exit_timeout

    def sink_stats(self) -> dict[str, SinkStats]:
        """Each sink's figures, by key."""
        return {box.key: box.stats() for box in self.outboxes}

    def reset_sink_stats(self) -> None:
        """Start a new period of every sink's figures (see ``SinkOutbox.reset``)."""
        for box in self.outboxes:
            box.reset()

    def reset_stats(self) -> None:
        """Start a new period of the counters and the sinks' figures, at one moment.

        Under ``Counters.hold``: no result is counted on one side of the reset and queued
        for a sink on the other. What is in flight is carried (see ``Counters.reset``).
        """
        with self._counters.hold():
            self._counters.reset()
            self.reset_sink_stats()

    # ------------------------------------------------------------------ work

    def submit(self, capture: Capture | Retrieval) -> bool:
        """Enqueue one retrieval (False when dropped): a live trace's, or one already plain."""
        return self.worker.submit(capture)

    def owns_current_thread(self, action: str) -> bool:
        """True (and logged once) when called from a background thread: it would deadlock."""
        current = threading.current_thread()
        own = [self.worker.thread, *self.judges.threads, *(b.thread for b in self.outboxes)]
        if not any(current is thread for thread in own):
            return False
        self._failures.report(
            f"{action}-from-worker",
            f"{action}() called from the handler's own background thread (a sink, a "
            "reference provider or a judge); ignored to avoid a deadlock",
        )
        return True

    def flush(self, timeout: float | None) -> bool:
        """Wait for the work submitted so far to be scored and delivered, within ``timeout``."""
        if self.owns_current_thread("flush"):
            return False
        deadline = deadline_after(timeout)
        done = self.worker.flush(timeout)
        return not flush_all(self.outboxes, remaining(deadline), self._failures) and done

    def close(self, timeout: float | None) -> bool:
        """Refuse new work, flush within ``timeout``, then stop and close the sinks.

        Returns:
            True when everything finished in time. Otherwise the unscored retrievals are
            counted in ``abandoned``, the undelivered results in each sink's ``dropped``,
            and a warning says what was left. A close already under way (another caller's,
            or the idle exit of a collected handler) is waited for, within ``timeout``.
        """
        return self._close(timeout, at_exit=False)

    def _close(self, timeout: float | None, *, at_exit: bool) -> bool:
        """:meth:`close`; ``at_exit``: the exit hook's, whose warning says so."""
        if self.owns_current_thread("close"):
            return False
        with self._close_lock:
            already = self._closed
            self._closed = True
        if already:
            return self._shut.wait(timeout)
        report = (
            contextlib.nullcontext()
            if self._in_child
            else reporting_abandoned(self._counters, at_exit=at_exit)
        )
        with report:
            deadline = deadline_after(timeout)
            self.worker.close_intake()
            flushed = self.flush(timeout)
            stopped = self.worker.stop(remaining_or(deadline, STOP_GRACE_SECONDS))
            # The sinks get a grace of their own: a judge that used the whole budget must not
            # leave idle sinks unflushed and unclosed (what they buffer would be lost).
            shut = self._shutdown(remaining_or(deadline, SINK_GRACE_SECONDS))
        _exit.unregister(self)
        self._shut.set()
        return shut and stopped and flushed

    def stop_when_idle(self) -> None:
        """Finish queued work, then let the threads exit (the handler was collected)."""
        self.worker.stop_when_idle()

    def forget(self) -> None:
        """In a forked process: the threads were the parent's; nothing here is to be closed."""

    # ------------------------------------------------------------------ lifetime

    def _on_start(self) -> None:
        """The worker thread starts: start the judges, and flush at exit from now on."""
        self.judges.start()
        if self.settings.exit_timeout is not None:
            _exit.register(self)

    def _on_idle_exit(self) -> None:
        """The worker finished after ``stop_when_idle``: stop the rest, leave the registry."""
        with self._close_lock:
            self._closed = True
        try:
            self._shutdown(_IDLE_EXIT_CLOSE_SECONDS)
        finally:
            _exit.unregister(self)
            self._shut.set()  # an exit-hook close waits for this

    def _shutdown(self, timeout: float | None) -> bool:
        """Stop the judge threads (queued calls cancelled), then close every sink in time."""
        deadline = deadline_after(timeout)
        self.judges.stop(0, cancel_pending=True)
        # The sinks first: a judge call stuck in its request must not eat their time.
        closed = close_all(
            self.outboxes, remaining(deadline), self._failures, process_ends=self._in_child
        )
        for thread in self.judges.threads:
            if thread is not threading.current_thread():
                thread.join(remaining(deadline))
        judges_done = not any(t.is_alive() for t in self.judges.threads)
        return closed and judges_done

    def _flush_at_exit(self, timeout: float) -> None:
        """The interpreter-exit hook: close within ``timeout``; never raises.

        Work still queued at the deadline is cancelled and reported. A judge request already
        in flight is not interrupted: give the judge a request timeout to bound it.
        """
        with contextlib.suppress(Exception):  # the exit hook must never raise
            self._close(timeout, at_exit=True)
