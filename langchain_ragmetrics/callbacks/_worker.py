"""The background worker: a bounded queue drained by its own thread and event loop.

``submit`` is what the caller's thread pays: a lock, an append, and at most one wake-up
of the loop. The thread starts lazily inside an empty ``contextvars.Context`` so nothing
launched from it becomes part of the caller's trace (LangChain keeps the current run, the
tracer and the inherited callbacks in context variables).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, Generic, Literal, TypeVar

from langchain_ragmetrics.callbacks._stats import Counters, FailureLog

__all__ = ["BackgroundWorker", "deadline_after", "remaining"]

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
        if max_queue_size < 1:
            msg = "`max_queue_size` must be at least 1"
            raise ValueError(msg)
        if max_active < 1:
            msg = "`max_concurrency` must be at least 1"
            raise ValueError(msg)
        self.max_queue_size = max_queue_size
        self.max_active = max_active
        self.name = name
        self._process = process
        self._counters = counters
        self._failures = failures
        self._thread_context = thread_context or contextlib.nullcontext
        self._on_start = on_start
        self._on_idle_exit = on_idle_exit
        self._cond = threading.Condition()
        self._pending: deque[tuple[int, T]] = deque()
        self._active: set[int] = set()
        self._seq = 0
        self._accepting = True
        self._stop: _StopMode | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._idle = False
        self._wake_context = contextvars.Context()

    # ------------------------------------------------------------------ caller side

    @property
    def queued(self) -> int:
        """Items waiting or in progress."""
        with self._cond:
            return len(self._pending) + len(self._active)

    @property
    def thread(self) -> threading.Thread | None:
        """The worker thread, once started."""
        return self._thread

    @property
    def accepting(self) -> bool:
        """Whether ``submit`` still takes work."""
        return self._accepting

    def submit(self, item: T) -> bool:
        """Queue an item; False (and counted as dropped) when full or closed."""
        wake: asyncio.AbstractEventLoop | None = None
        with self._cond:
            accepted = (
                self._accepting
                and len(self._pending) + len(self._active) < self.max_queue_size
                and (self._thread is not None or self._start_thread())
            )
            if accepted:
                self._seq += 1
                self._pending.append((self._seq, item))
                wake = self._loop if self._idle else None
                self._idle = False
        if not accepted:
            self._counters.add(dropped=1)
            return False
        if wake is not None:
            self._signal(wake)
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the items submitted before this call are done; False at the deadline.

        Items still unfinished at the deadline are counted in ``pending_at_deadline``.
        """
        if self._thread is not None and threading.current_thread() is self._thread:
            self._failures.report("flush-on-worker", "flush() called from the worker thread")
            return False
        with self._cond:
            target = self._seq

            def done() -> bool:
                head_done = not self._pending or self._pending[0][0] > target
                return head_done and (not self._active or min(self._active) > target)

            finished = self._cond.wait_for(done, timeout)
            left = 0
            if not finished:
                left = sum(1 for seq, _ in self._pending if seq <= target)
                left += sum(1 for seq in self._active if seq <= target)
        self._counters.set("pending_at_deadline", left)
        return finished

    def close_intake(self) -> None:
        """Refuse new items from now on (they count as dropped)."""
        with self._cond:
            self._accepting = False

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
        with self._cond:
            self._accepting = False
            if self._stop != "now":
                self._stop = mode
            thread, loop = self._thread, self._loop
            self._idle = False
            if thread is None:
                abandoned = len(self._pending)
                self._pending.clear()
            else:
                abandoned = 0
        if abandoned:
            self._counters.add(abandoned=abandoned)
        if loop is not None:
            self._signal(loop)
        if thread is None or thread is threading.current_thread() or mode == "when_idle":
            return thread is None
        thread.join(timeout)
        return not thread.is_alive()

    def _signal(self, loop: asyncio.AbstractEventLoop) -> None:
        wake = self._wake
        if wake is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(wake.set, context=self._wake_context)

    def _start_thread(self) -> bool:
        """Start the worker thread in an empty context (lock held); False if impossible."""
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
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve(loop))
                loop.run_until_complete(loop.shutdown_asyncgens())
            except Exception as exc:  # pragma: no cover - defensive: the loop itself broke
                self._failures.report("worker-loop", f"worker loop crashed: {exc!r}", exc)
            finally:
                with self._cond:
                    self._loop = None
                    self._wake = None
                    mode = self._stop
                    abandoned = len(self._pending)
                    self._pending.clear()
                    self._cond.notify_all()
                if abandoned:
                    self._counters.add(abandoned=abandoned)
                asyncio.set_event_loop(None)
                loop.close()
        if mode == "when_idle" and self._on_idle_exit is not None:
            self._on_idle_exit()

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        wake = asyncio.Event()
        with self._cond:
            self._loop, self._wake = loop, wake
        tasks: set[asyncio.Task[None]] = set()
        while True:
            batch: list[tuple[int, T]] = []
            with self._cond:
                if self._stop == "now":
                    break
                while self._pending and len(self._active) < self.max_active:
                    seq, item = self._pending.popleft()
                    self._active.add(seq)
                    batch.append((seq, item))
                if not batch:
                    if self._stop == "when_idle" and not self._pending and not self._active:
                        break
                    self._idle = True
                    wake.clear()
            for seq, item in batch:
                task = loop.create_task(self._one(seq, item, wake))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if not batch:
                await wake.wait()
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, seq: int, item: T, wake: asyncio.Event) -> None:
        outcome = "processed"
        try:
            await self._process(item)
        except asyncio.CancelledError:
            outcome = "abandoned"
            raise
        except Exception as exc:
            self._counters.add(handler_errors=1)
            self._failures.report(
                f"worker:{type(exc).__name__}", f"online scoring raised {exc!r}", exc
            )
        finally:
            self._counters.add(**{outcome: 1})
            with self._cond:
                self._active.discard(seq)
                self._cond.notify_all()
            wake.set()


def remaining(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (a ``time.monotonic`` value), never negative."""
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())


def deadline_after(timeout: float | None) -> float | None:
    """The ``time.monotonic`` deadline ``timeout`` seconds from now (None = no deadline)."""
    return None if timeout is None else time.monotonic() + timeout
