"""A long-lived event loop in a daemon thread, on which synchronous ``evaluate()`` runs.

Why one loop for the whole process, instead of a fresh loop per call:

* It works the same from a plain script and from inside a running event loop (Jupyter, an
  async web handler): the caller's thread only waits, so no ``nest_asyncio`` is needed.
* HTTP clients outlive a call. langchain-openai shares one async HTTP client per base URL
  across the process; its pooled connections belong to the loop that opened them, so a
  second ``asyncio.run()`` with the same judge fails with "Event loop is closed". One
  long-lived loop keeps those connections valid from one ``evaluate()`` to the next.
* Ctrl-C lands in the waiting thread, which cancels the task and waits for it to unwind, so
  the caller keeps what was scored before the interrupt.

The loop starts on first use; :func:`shutdown_background_loop` stops it (it restarts on the
next use) and runs at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["BackgroundLoop", "run_cancellable", "shutdown_background_loop"]

CoroutineFactory = Callable[[], Coroutine[Any, Any, None]]
_WAIT_POLL_S = 0.2  # bounded waits keep the caller interruptible by Ctrl-C everywhere
_SHUTDOWN_TIMEOUT_S = 5.0


class BackgroundLoop:
    """An event loop running forever in a daemon thread, started on first use."""

    def __init__(self, name: str = "ragmetrics-loop") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._atexit = False

    @property
    def running(self) -> bool:
        """True while the loop thread is alive (in this process)."""
        thread = self._thread
        return thread is not None and thread.is_alive() and self._pid == os.getpid()

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, started now if needed."""
        with self._lock:
            if self._loop is not None and self.running:
                return self._loop
            ready = threading.Event()
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=self._serve,
                args=(loop, ready),
                name=self.name,
                daemon=True,
            )
            self._loop, self._thread, self._pid = loop, thread, os.getpid()
            thread.start()
            ready.wait()
            if not self._atexit:
                atexit.register(self.shutdown)
                self._atexit = True
            return loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        while True:
            try:
                loop.run_forever()
            except BaseException:  # noqa: S112 - a KeyboardInterrupt or SystemExit from a task
                # escaped run_forever; keep serving so waiters still hear about their tasks.
                continue
            break
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()

    def shutdown(self, timeout: float = _SHUTDOWN_TIMEOUT_S) -> None:
        """Stop the loop and its thread; unfinished tasks are cancelled. Restarts on next use."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None or not thread.is_alive():
            return
        with contextlib.suppress(RuntimeError):  # already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)

    def run(self, factory: CoroutineFactory) -> bool:
        """Run ``factory()`` on the loop and wait; False when Ctrl-C cancelled it first.

        The coroutine runs in a copy of the caller's context (tracing, callbacks). Its
        exceptions propagate. A second Ctrl-C while the cancellation unwinds is raised.
        """
        if threading.current_thread() is self._thread:
            msg = (
                "evaluate() cannot run inside its own loop (from an on_result callback or a "
                "metric): it would wait for itself; use `await aevaluate(...)` there"
            )
            raise RuntimeError(msg)
        loop = self.loop()
        done = threading.Event()
        stop = threading.Event()
        box: dict[str, asyncio.Task[None]] = {}

        def start() -> None:
            if stop.is_set():  # Ctrl-C came before the task was created
                done.set()
                return
            task = loop.create_task(factory())
            box["task"] = task
            task.add_done_callback(lambda _t: done.set())

        def cancel() -> None:
            task = box.get("task")
            if task is None:
                done.set()
            else:
                task.cancel()

        try:
            loop.call_soon_threadsafe(start, context=contextvars.copy_context())
            while not done.wait(_WAIT_POLL_S):
                pass
        except KeyboardInterrupt:
            # Ctrl-C can land anywhere above, even before ``start`` was queued: ``cancel``
            # (queued after it) settles every case. A second Ctrl-C here propagates.
            stop.set()
            loop.call_soon_threadsafe(cancel)
            while not done.wait(_WAIT_POLL_S):
                pass
        task = box.get("task")
        if task is None or task.cancelled():
            return False
        error = task.exception()
        if error is not None:
            raise error
        return True


_DEFAULT = BackgroundLoop()


def run_cancellable(factory: CoroutineFactory) -> bool:
    """Run ``factory()`` on the shared background loop; False if Ctrl-C cancelled it."""
    return _DEFAULT.run(factory)


def shutdown_background_loop() -> None:
    """Stop the shared loop that synchronous ``evaluate()`` uses (it restarts when needed)."""
    _DEFAULT.shutdown()
