"""A small fixed pool of daemon threads, started eagerly: the worker's judge and sink threads.

Unlike ``ThreadPoolExecutor`` (which spawns threads on demand and refuses work once the
interpreter starts shutting down), every thread exists from ``start()`` on, so the exit
flush can still score and deliver. Threads start in an empty ``contextvars.Context``.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from typing_extensions import ParamSpec, override

from langchain_ragmetrics._options import whole_number
from langchain_ragmetrics._queue import BoundedQueue

__all__ = ["DaemonThreadPool"]

T = TypeVar("T")
P = ParamSpec("P")
_Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], Future[Any]]
"""A queued call: the function, its arguments and the future of its result."""


class DaemonThreadPool(Executor):
    """``size`` daemon threads running submitted calls; with ``size=1`` calls run in order.

    Args:
        name: Thread name (suffixed with the index when ``size > 1``).
        size: Number of threads.
    """

    def __init__(self, *, name: str, size: int = 1) -> None:
        whole_number("size", size)
        self.name = name
        self.size = size
        self._queue: BoundedQueue[_Call] = BoundedQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopped = False

    @property
    def threads(self) -> list[threading.Thread]:
        """The pool's threads, once started."""
        return list(self._threads)

    @property
    def started(self) -> bool:
        """Whether the threads were started (and the pool not stopped)."""
        return bool(self._threads) and not self._stopped

    def start(self) -> None:
        """Start every thread now (idempotent), each in an empty context."""
        with self._lock:
            if self._threads or self._stopped:
                return
            for i in range(self.size):
                name = self.name if self.size == 1 else f"{self.name}-{i}"
                context = contextvars.Context()
                thread = threading.Thread(
                    target=context.run, args=(self._run,), name=name, daemon=True
                )
                thread.start()
                self._threads.append(thread)

    @override
    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Queue ``fn(*args, **kwargs)``; the future holds its result or exception."""
        future: Future[T] = Future()
        with self._lock:
            if self._stopped or not self._threads:
                future.set_exception(RuntimeError(f"{self.name} is not running"))
                return future
            self._queue.put((fn, args, kwargs, future))
        return future

    def stop(self, timeout: float | None = None, *, cancel_pending: bool = False) -> bool:
        """Let the threads finish (queued calls first, unless cancelled); False if still busy.

        ``timeout`` bounds the whole wait, for all the threads together (None: no bound).
        """
        with self._lock:
            if self._stopped:
                return True
            self._stopped = True
            if cancel_pending:
                for entry in self._queue.abandon():
                    entry.item[3].cancel()
            self._queue.close()
            threads = [t for t in self._threads if t is not threading.current_thread()]
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    @override
    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """``Executor`` API: stop, waiting for the threads when ``wait``."""
        self.stop(None if wait else 0, cancel_pending=cancel_futures)

    def _run(self) -> None:
        while (entry := self._queue.take()) is not None:
            fn, args, kwargs, future = entry.item
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(*args, **kwargs))
                    except BaseException as exc:  # delivered to the waiter, never lost
                        future.set_exception(exc)
            finally:
                self._queue.done(entry)
