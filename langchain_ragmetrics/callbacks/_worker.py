"""The background worker: the package's bounded queue drained by its own thread and event loop.

``submit`` is what the caller's thread pays: a lock, an append, and at most one wake-up
of the loop (:class:`~langchain_ragmetrics._queue.BoundedQueue` wakes it only when idle).
The thread starts lazily inside an empty ``contextvars.Context`` so nothing launched from
it becomes part of the caller's trace (LangChain keeps the current run, the tracer and the
inherited callbacks in context variables).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, Generic, Literal, TypeVar

from langchain_ragmetrics._loops import cancel_and_wait, new_event_loop
from langchain_ragmetrics._options import whole_number
from langchain_ragmetrics._queue import BoundedQueue, Entry
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog

__all__ = ["BackgroundWorker"]

T = TypeVar("T")

_StopMode = Literal["now", "when_idle"]


class BackgroundWorker(Generic[T]):
    """Runs ``process(item)`` for submitted items, at most ``max_active`` at a time.

    Args:
        process: The coroutine function run on the worker loop for each item.
        max_queue_size: Bound on items waiting or in progress; beyond it ``submit`` drops
            the new item (drop newest) and counts it in ``dropped``.
        max_active: Items processed concurrently.
        name: Thread name.
        counters: Where ``dropped``, ``processed``, ``abandoned`` and ``pending_at_deadline``
            are counted.
        failures: Log-once reporter for unexpected errors.
        thread_context: Entered on the worker thread around the loop (e.g. to disable
            tracing of everything that runs there).
        on_start: Called once, under the worker lock, when the thread is started.
        on_idle_exit: Called on the worker thread when it exits after ``stop_when_idle``.
    """

    def __init__(
        self,
        process: Callable[[T], Awaitable[None]],
        *,
        max_queue_size: int,
        max_active: int,
        name: str,
        counters: Counters,
        failures: FailureLog,
        thread_context: Callable[[], AbstractContextManager[Any]] | None = None,
        on_start: Callable[[], object] | None = None,
        on_idle_exit: Callable[[], object] | None = None,
    ) -> None:
        whole_number("max_queue_size", max_queue_size)
        whole_number("max_concurrency", max_active)
        self.max_queue_size = max_queue_size
        self.max_active = max_active
        self.name = name
        self._process = process
        self._counters = counters
        self._failures = failures
        self._thread_context = thread_context or contextlib.nullcontext
        self._on_start = on_start
        self._on_idle_exit = on_idle_exit
        self._lock = threading.Lock()
        self._queue: BoundedQueue[T] = BoundedQueue(
            max_size=max_queue_size, count_active=True, on_wake=self._wake_loop
        )
        self._stop: _StopMode | None = None
        self._gave_up = False
        """A stop that timed out counted everything unfinished as abandoned: from then on
        the thread's own accounting is dropped (it would count those items twice)."""
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._wake_context = contextvars.Context()

    # ------------------------------------------------------------------ caller side

    @property
    def queued(self) -> int:
        """Items waiting or in progress (none once a stop gave up: they were abandoned)."""
        return 0 if self._gave_up else self._queue.size

    @property
    def thread(self) -> threading.Thread | None:
        """The worker thread, once started."""
        return self._thread

    @property
    def accepting(self) -> bool:
        """Whether ``submit`` still takes work."""
        return not self._queue.closed

    def submit(self, item: T) -> bool:
        """Queue an item; False (and counted as dropped) when full or closed."""
        started = self._thread is not None or self._start_thread()
        if not (started and self._queue.put(item)):
            self._counters.add(dropped=1)
            return False
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the items submitted before this call are done; False at the deadline.

        Items still unfinished at the deadline are counted in ``pending_at_deadline``.
        """
        if self._thread is not None and threading.current_thread() is self._thread:
            self._failures.report("flush-on-worker", "flush() called from the worker thread")
            return False
        finished, left = self._queue.flush(timeout)
        self._counters.set("pending_at_deadline", left)
        return finished

    def close_intake(self) -> None:
        """Refuse new items from now on (they count as dropped)."""
        self._queue.close()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop now: unfinished items are cancelled and counted as abandoned.

        Returns:
            True when the thread has exited within ``timeout``.
        """
        return self._request_stop("now", timeout)

    def stop_when_idle(self) -> None:
        """Finish the queued items, then let the thread exit (no waiting here)."""
        self._request_stop("when_idle", 0)

    def _request_stop(self, mode: _StopMode, timeout: float | None) -> bool:
        with self._lock:
            if self._stop != "now":
                self._stop = mode
            thread = self._thread
        if thread is None:
            abandoned = len(self._queue.abandon())
            if abandoned:
                self._counters.add(abandoned=abandoned)
        else:
            self._queue.close()  # wakes the loop
        if thread is None or thread is threading.current_thread() or mode == "when_idle":
            return thread is None
        thread.join(timeout)
        if not thread.is_alive():
            return True
        self._give_up()
        return False

    def _give_up(self) -> None:
        """A stop timed out (a user's hook blocks the loop): count what is left, once, now.

        Waiting and in-progress items are counted as abandoned when the stop returns, not
        whenever the loop comes back; the thread's own accounting is dropped from here on.
        """
        with self._lock:
            if self._gave_up:
                return
            self._gave_up = True
            lost = self._queue.size
            self._queue.abandon()
        if lost:
            self._counters.add(abandoned=lost)

    def _settle(self, entry: Entry[T] | None, outcome: str, count: int = 1) -> None:
        """Mark ``entry`` done and count ``count`` items with ``outcome`` (unless given up)."""
        with self._lock:
            counted = not self._gave_up
            if entry is not None:
                self._queue.done(entry)
        if counted and count:
            self._counters.add(**{outcome: count})

    def _wake_loop(self) -> None:
        """Wake the worker's loop (a put found it idle, or the queue closed).

        Without the lock (the queue calls it, also from :meth:`_give_up` under the lock):
        a stale read only wakes a loop that is already closing, which is ignored.
        """
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(wake.set, context=self._wake_context)

    def _start_thread(self) -> bool:
        """Start the worker thread in an empty context (once); False if impossible."""
        with self._lock:
            if self._thread is not None:
                return True
            if self._stop is not None or self._queue.closed:
                return False
            try:
                if self._on_start is not None:
                    self._on_start()
                context = contextvars.Context()
                thread = threading.Thread(
                    target=context.run, args=(self._thread_main,), name=self.name, daemon=True
                )
                thread.start()
            except RuntimeError as exc:  # e.g. "can't create new thread at interpreter shutdown"
                self._failures.report("worker-start", f"cannot start the worker thread: {exc}", exc)
                return False
            self._thread = thread
            return True

    # ------------------------------------------------------------------ worker side

    def _thread_main(self) -> None:
        with self._thread_context():
            loop = new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve(loop))
                loop.run_until_complete(loop.shutdown_asyncgens())
            except Exception as exc:  # pragma: no cover - defensive: the loop itself broke
                self._failures.report("worker-loop", f"worker loop crashed: {exc!r}", exc)
            finally:
                with self._lock:
                    self._loop = None
                    self._wake = None
                    mode = self._stop
                    abandoned = len(self._queue.abandon())
                self._settle(None, "abandoned", abandoned)
                asyncio.set_event_loop(None)
                loop.close()
        if mode == "when_idle" and self._on_idle_exit is not None:
            self._on_idle_exit()

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        wake = asyncio.Event()
        with self._lock:
            self._loop, self._wake = loop, wake
        tasks: set[asyncio.Task[None]] = set()
        unstarted: dict[int, Entry[T]] = {}  # taken, and their task has not run yet
        while self._stop != "now":
            wake.clear()  # before taking: a put from now on sets it again
            batch = self._queue.take_ready(self.max_active - self._queue.busy)
            for entry in batch:
                unstarted[id(entry)] = entry
                task = loop.create_task(self._one(entry, wake, unstarted))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if batch:
                continue
            if self._stop == "when_idle" and self._queue.size == 0:
                break
            await wake.wait()
        await cancel_and_wait(tasks)
        # A task cancelled before its first step never ran its own accounting.
        for entry in unstarted.values():
            self._settle(entry, "abandoned")

    async def _one(self, entry: Entry[T], wake: asyncio.Event, unstarted: dict[int, Any]) -> None:
        del unstarted[id(entry)]  # from here on, the finally below accounts for it
        outcome = "processed"
        try:
            await self._process(entry.item)
        except asyncio.CancelledError:
            outcome = "abandoned"
            raise
        except Exception as exc:
            self._counters.add(handler_errors=1)
            self._failures.report(
                f"worker:{type(exc).__name__}", f"online scoring raised {exc!r}", exc
            )
        finally:
            self._settle(entry, outcome)
            wake.set()
