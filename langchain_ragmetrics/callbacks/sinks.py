"""Where online results go: a file, a logger, a list, or any function.

Each sink has its own bounded outbox and delivery thread: its methods are called there, one
call at a time, never on the caller's thread and never on another sink's. A sink that
raises is logged once per kind and counted in ``stats.sinks[key].errors``; a sink that hangs
only fills its own outbox (overflow counted in ``dropped``). The other sinks go on.
"""

from __future__ import annotations

import json
import logging
import numbers
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from typing_extensions import override

from langchain_ragmetrics._errors import SinkSkipError, SinkUnavailableError
from langchain_ragmetrics._options import flag, whole_number
from langchain_ragmetrics._retrieval import OnlineResult

__all__ = [
    "BaseSink",
    "CallableSink",
    "InMemorySink",
    "JsonlSink",
    "LoggingSink",
    "SinkSkipError",
    "SinkUnavailableError",
    "escape_unencodable",
]


def escape_unencodable(value: Any) -> Any:
    r"""``value`` with every string made UTF-8 safe: lone surrogates become ``\udXXX``.

    Strings inside dicts and lists are escaped too; other values are returned unchanged.
    Text from documents and models can hold lone surrogates, which no UTF-8 writer accepts.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {escape_unencodable(k): escape_unencodable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [escape_unencodable(v) for v in value]
    return value


class BaseSink(ABC):
    """Receives every metric result of every scored retrieval, on its own delivery thread."""

    max_concurrency: int = 1
    """How many results the sink's outbox hands to :meth:`emit` at once (on that many
    threads). Above 1, ``emit`` must be thread-safe; results with the same
    :meth:`order_key` are still delivered one after another, in order."""

    @property
    def name(self) -> str:
        """A label for logs."""
        return type(self).__name__

    @abstractmethod
    def emit(self, item: OnlineResult) -> None:
        """Deliver one result (called on this sink's thread).

        Raise :class:`SinkUnavailableError` to refuse it without trying (counted as dropped),
        or :class:`SinkSkipError` when it has no place in this
        backend (counted as skipped).
        """

    def order_key(self, item: OnlineResult) -> Hashable | None:
        """Results with equal keys are never delivered at once (None: no constraint).

        Only matters when :attr:`max_concurrency` is above 1.
        """
        del item
        return None

    def flush(self, timeout: float | None = None) -> None:  # noqa: B027 - optional hook
        """Push buffered results out, waiting at most ``timeout`` seconds."""

    def after_fork(self) -> None:  # noqa: B027 - optional hook
        """Called in a forked process before the sink delivers there.

        That is a pre-forking server's worker, when the handler was built before the fork.
        Drop what belongs to the parent: locks its threads may have held at the fork, the
        connections of a client the sink built. The default does nothing.
        """

    def for_child_process(self) -> Callable[[], BaseSink] | None:
        """How the handler's scoring process may build this sink again, or None: not at all.

        Under the default ``isolation="auto"`` a sink that returns a picklable callable here
        is built in the child process that scores, and delivers from there: its requests
        then cost the application's process nothing. The sink object passed to the handler
        stays idle; its figures are in ``handler.stats.sinks``. The default, None, keeps the
        sink in the application's process (it holds what the application reads: a list, a
        file, a callable, a client it was given).
        """
        return None

    def close(self, timeout: float | None = None) -> None:
        """Flush and release resources; called once by the handler's ``close``.

        Must return within ``timeout`` (the handler stops waiting for it then anyway).
        """
        self.flush(timeout)


class InMemorySink(BaseSink):
    """Keeps results in a list: for notebooks and tests (unbounded unless ``max_results``).

    Args:
        max_results: Keep only the most recent results when set.
    """

    def __init__(self, *, max_results: int | None = None) -> None:
        if max_results is not None:
            whole_number("max_results", max_results)
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

    @override
    def after_fork(self) -> None:
        """A lock of our own (the parent's may have been held at the fork)."""
        self._lock = threading.Lock()


class CallableSink(BaseSink):
    """Calls ``fn(result)`` for every result (a metrics client, a queue, a database ...).

    Args:
        fn: Called on the sink's thread with each :class:`OnlineResult`.
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


def _log_level(level: object) -> int:
    """``level`` as ``logging``'s number ("INFO" and 20 alike); else a ValueError naming it."""
    if isinstance(level, str) and isinstance(logging.getLevelName(level.upper()), int):
        return int(logging.getLevelName(level.upper()))
    if isinstance(level, numbers.Integral) and not isinstance(level, bool) and int(level) >= 0:
        return int(level)
    msg = f"`level` must be a logging level such as logging.INFO or 'INFO', got {level!r}"
    raise ValueError(msg)


class LoggingSink(BaseSink):
    """Logs one line per result; failed results at WARNING or above.

    The flat record (see :meth:`OnlineResult.to_record`) rides along as
    ``extra={"ragmetrics": ...}`` for structured-logging handlers. Text that cannot be
    encoded (lone surrogates) is escaped, so no handler drops the line.

    Args:
        logger: A logger or a logger's name; defaults to
            ``logging.getLogger("langchain_ragmetrics.online")``.
        level: Level of successful and skipped results: a number or a name (``"INFO"``).

    Raises:
        TypeError: ``logger`` is neither a logger nor a name.
        ValueError: ``level`` is not a level ``logging`` knows.
    """

    def __init__(
        self, logger: logging.Logger | str | None = None, *, level: int | str = logging.INFO
    ) -> None:
        if isinstance(logger, str):
            logger = logging.getLogger(logger)
        elif logger is not None and not isinstance(logger, (logging.Logger, logging.LoggerAdapter)):
            msg = f"`logger` must be a logging.Logger or its name, got {type(logger).__name__}"
            raise TypeError(msg)
        self.logger = logger or logging.getLogger("langchain_ragmetrics.online")
        self.level = _log_level(level)

    @override
    def emit(self, item: OnlineResult) -> None:
        result = item.result
        level = max(self.level, logging.WARNING) if result.failed else self.level
        if not self.logger.isEnabledFor(level):
            return
        if result.failed:
            outcome = f"failed ({escape_unencodable(result.error)})"
        elif result.skipped:
            outcome = f"skipped ({escape_unencodable(result.reason)})"
        else:
            outcome = f"{result.score:.3f}"
        self.logger.log(
            level,
            "ragmetrics %s=%s trace=%s retriever=%s question=%r",
            result.metric,
            outcome,
            item.trace_id or item.root_run_id,
            escape_unencodable(item.retriever),
            escape_unencodable(item.question),
            extra={"ragmetrics": escape_unencodable(item.to_record())},
        )


def _write(fd: int, data: memoryview) -> int:
    """``os.write`` (one place for tests to make a disk full)."""
    return os.write(fd, data)


def _ends_with_newline(path: Path) -> bool:
    """Whether the file's last byte is a newline (True when it cannot be read)."""
    try:
        with path.open("rb") as file:
            file.seek(-1, os.SEEK_END)
            return file.read(1) == b"\n"
    except OSError:
        return True


class JsonlSink(BaseSink):
    r"""Appends one JSON object per result to a file, written and flushed line by line.

    Each line has ``timestamp``, ``trace_id``, ``root_run_id``, ``run_id``, ``retriever``,
    ``tags``, ``question``, ``metric``, ``score`` (null when failed or skipped), ``skipped``,
    ``reason``, ``error``, ``details``, ``usage``, ``judge`` and ``latency_s``. Lone
    surrogates are written as JSON escapes (``\ud800``): reading the line back gives the
    original text.

    Each line goes out in one unbuffered append, so a failed write (a full disk) leaves
    nothing behind to be written later under another count. A file renamed or removed
    under the sink (log rotation) is noticed at the next line, which starts a new file at
    ``path``, as ``logging.handlers.WatchedFileHandler`` does. A line cut short by an
    error, or an existing file that does not end with a newline, gets one first, so every
    later record stays a line of its own.

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
        # Checked as bools: "no" is truthy and would write the documents it means to leave out.
        include_contexts = flag("include_contexts", include_contexts)
        include_answer = flag("include_answer", include_answer)
        self.path = Path(path).expanduser()
        if self.path.is_dir():
            msg = f"JsonlSink: {self.path} is a directory, expected a file path"
            raise ValueError(msg)
        if not self.path.parent.is_dir():
            msg = f"JsonlSink: directory {self.path.parent} does not exist"
            raise ValueError(msg)
        existed = self.path.exists()
        # A file we cannot create or append to is refused now, not at the first result.
        # Only a regular file (or none yet) is tried: opening a FIFO would wait for a reader.
        if not existed or self.path.is_file():
            try:
                self.path.open("a", encoding="utf-8").close()
            except OSError as exc:
                msg = f"JsonlSink: cannot write {self.path}: {exc.strerror or exc}"
                raise ValueError(msg) from exc
            if not existed:
                self.path.unlink(missing_ok=True)  # still created on the first write
        self.include_contexts = include_contexts
        self.include_answer = include_answer
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None  # (device, inode) of the file open
        self._torn = False  # the file does not end with a newline: start with one

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
        # Only lone surrogates cannot be encoded; they sit inside JSON strings, where the
        # backslash escape is valid JSON for the same code point.
        data = (line + "\n").encode("utf-8", errors="backslashreplace")
        with self._lock:
            try:
                fd = self._open()
                if self._torn:
                    data = b"\n" + data
                self._append(fd, data)
            except OSError as exc:  # the message names the file (disk full, removed, ...)
                msg = f"JsonlSink: cannot write {self.path}: {exc.strerror or exc}"
                raise OSError(exc.errno, msg) from exc

    def _open(self) -> int:
        """The descriptor of the file at ``path`` now (lock held): reopened when rotated."""
        fd = self._fd
        if fd is not None:
            try:
                st = os.stat(self.path)
                if (st.st_dev, st.st_ino) == self._identity:
                    return fd
            except FileNotFoundError:
                pass
            self._fd = None  # renamed or removed: a new file at the path
            os.close(fd)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        st = os.fstat(fd)
        self._fd, self._identity = fd, (st.st_dev, st.st_ino)
        self._torn = st.st_size > 0 and not _ends_with_newline(self.path)
        return fd

    def _append(self, fd: int, data: bytes) -> None:
        """Write all of ``data``; a write that fails after part of it marks the line torn."""
        view = memoryview(data)
        while view:
            try:
                written = _write(fd, view)
            except OSError:
                if len(view) < len(data):
                    self._torn = True
                raise
            view = view[written:]
        self._torn = False

    @override
    def close(self, timeout: float | None = None) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)

    @override
    def after_fork(self) -> None:
        """A lock of our own; the descriptor is kept (appends from both stay whole lines)."""
        self._lock = threading.Lock()
