"""The handler's runtime: one interface, two implementations, chosen by ``isolation``.

* :class:`~langchain_ragmetrics.callbacks._background.ThreadRuntime` scores on background
  threads of this process;
* :class:`~langchain_ragmetrics.callbacks._isolated.ProcessRuntime` hands plain
  :class:`~langchain_ragmetrics._retrieval.Retrieval` values to a child process (typed
  messages, :mod:`~langchain_ragmetrics.callbacks._messages`), which scores them with a
  ``ThreadRuntime`` of its own.

Both call :func:`~langchain_ragmetrics._retrieval.score_retrieval` in the end, so the rules
cannot drift between the modes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from langchain_ragmetrics.callbacks._background import ThreadRuntime
from langchain_ragmetrics.callbacks._isolated import ProcessRuntime

if TYPE_CHECKING:
    from langchain_ragmetrics._engine import ScoringEngine
    from langchain_ragmetrics._retrieval import Capture
    from langchain_ragmetrics.callbacks._settings import HandlerSettings
    from langchain_ragmetrics.callbacks._stats import Counters, FailureLog, SinkStats
    from langchain_ragmetrics.callbacks.sinks import BaseSink

__all__ = ["ProcessRuntime", "Runtime", "ThreadRuntime", "start_runtime"]


class Runtime(Protocol):
    """What the handler needs of its background: enqueue, flush, close, figures."""

    settings: HandlerSettings

    @property
    def engine(self) -> ScoringEngine | None:
        """The scoring engine in this process (None when scoring runs in a child)."""

    @property
    def queued(self) -> int:
        """Retrievals waiting or being scored."""

    @property
    def exit_timeout(self) -> float | None:
        """Seconds the interpreter-exit hook may spend on this runtime (None: no hook)."""

    def submit(self, capture: Capture) -> bool:
        """Enqueue one retrieval of a finished trace (False when dropped, counted)."""

    def forget(self) -> None:
        """In a forked process: let go of the parent's threads and processes, touching none."""

    def flush(self, timeout: float | None) -> bool:
        """Wait for what was submitted so far to be scored and delivered, within ``timeout``."""

    def close(self, timeout: float | None) -> bool:
        """Refuse new work, flush within ``timeout``, then stop and close the sinks."""

    def stop_when_idle(self) -> None:
        """Finish queued work, then stop (the handler was garbage-collected)."""

    def owns_current_thread(self, action: str) -> bool:
        """True (and logged once) when called from the runtime's own threads."""

    def sink_stats(self) -> dict[str, SinkStats]:
        """Each sink's figures, by key."""

    def reset_stats(self) -> None:
        """Start a new period of the counters and every sink's figures, at one moment."""


def start_runtime(
    settings: HandlerSettings,
    *,
    counters: Counters,
    failures: FailureLog,
    sinks: Sequence[BaseSink] | None = None,
    in_child: Sequence[int] = (),
) -> Runtime:
    """The runtime ``settings.isolation`` asks for (threads started lazily, on first work).

    ``sinks``: with a child process, the user's sinks (``isolation="auto"``): those at the
    positions ``in_child`` are built again in the child and deliver there, the others
    deliver the child's results here; None: the child's setup builds its own.
    """
    process = settings.process
    if process is not None:
        return ProcessRuntime(
            settings, process, counters=counters, failures=failures, sinks=sinks, in_child=in_child
        )
    return ThreadRuntime(settings, counters=counters, failures=failures)
