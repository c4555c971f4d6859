"""The default ``isolation="auto"``: score in a child process where that is safe, else here.

Safe means the child can score exactly what the handler would have scored in this process,
and deliver it the same way:

* the metrics and the ``reference_provider`` cross to the child by value (they pickle, and
  without anything defined in ``__main__``, which the child does not import): the default
  metrics with the default judge do; a metric holding a live client (``llm=ChatOpenAI(...)``)
  does not;
* every sink is a :class:`LoggingSink` (its records are re-logged in this process, so its
  output is the same): any other sink keeps state or a connection that the application reads
  or owns (an ``InMemorySink``, a file, a callable), so it must stay in this process;
* ``trace_judge`` is None or a project name (a tracer object cannot cross);
* the platform can start a fresh interpreter with inherited pipes (POSIX), the application
  is not a frozen executable (``sys.frozen``: ``sys.executable`` is the app) and the
  interpreter to start looks like Python (an embedding server such as uWSGI reports its own
  binary; ``multiprocessing.set_executable`` names the right one).

Otherwise scoring runs on this process's threads, and one warning per process says why and
how to choose (``isolation="thread"`` silences it; ``ProcessIsolation(setup=...)`` builds
live objects in the child).
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from typing import Any, Literal, NamedTuple

from langchain_core.callbacks import BaseCallbackHandler

from langchain_ragmetrics.callbacks._isolation import ProcessIsolation, ScoringSetup
from langchain_ragmetrics.callbacks._launch import interpreter
from langchain_ragmetrics.callbacks._stats import logger
from langchain_ragmetrics.callbacks.sinks import BaseSink, LoggingSink
from langchain_ragmetrics.metrics._base import BaseRagMetric

__all__ = [
    "Resolved",
    "ShippedSetup",
    "mark_warned",
    "platform_reason",
    "reset_warning",
    "resolve_auto",
]

_warned = False
_warn_lock = threading.Lock()


class Resolved(NamedTuple):
    """What ``isolation="auto"`` chose."""

    isolation: Literal["thread"] | ProcessIsolation
    """``"thread"``, or the isolated mode with a setup that rebuilds the objects given."""
    reason: str | None
    """Why scoring stays in this process (None when it goes to a child)."""


class ShippedSetup:
    """The child's setup under ``isolation="auto"``: the parent's own objects, by value."""

    def __init__(self, blob: bytes, names: list[str]) -> None:
        self.blob = blob
        self.names = names

    def __call__(self) -> ScoringSetup:
        metrics, sinks, provider = pickle.loads(self.blob)  # noqa: S301 - our parent's bytes
        return ScoringSetup(metrics=metrics, sinks=sinks, reference_provider=provider)

    def __repr__(self) -> str:
        return f"ShippedSetup({', '.join(self.names)}; {len(self.blob):,} bytes)"


def _portable(value: object) -> bytes | None:
    """The pickle of ``value`` if a fresh interpreter can load it (nothing from ``__main__``)."""
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None
    return None if b"__main__" in data else data


def platform_reason() -> str | None:
    """Why this interpreter cannot start the scoring process itself (None: it can)."""
    if os.name != "posix":
        return f"the isolated mode's default launcher needs POSIX (this is {os.name!r})"
    if getattr(sys, "frozen", False):
        return "the application is a frozen executable (sys.frozen)"
    executable = interpreter()
    if not executable:
        return "sys.executable is unknown"
    if "python" not in os.path.basename(executable).lower():
        return (
            f"the interpreter to start ({executable}) does not look like Python (an embedding "
            "server?); name one with multiprocessing.set_executable(...)"
        )
    return None


def resolve_auto(
    *,
    metrics: list[BaseRagMetric],
    sinks: list[BaseSink],
    reference_provider: Any,
    trace_judge: str | BaseCallbackHandler | None,
) -> Resolved:
    """Choose the isolated mode when the child can do the same work (see the module doc).

    The arguments are the handler's checked options; a fallback warns once per process.
    """

    def stay(reason: str) -> Resolved:
        _warn_once(reason)
        return Resolved("thread", reason)

    reason = platform_reason()
    if reason is not None:
        return stay(reason)
    if trace_judge is not None and not isinstance(trace_judge, str):
        return stay("`trace_judge` is a tracer object, which cannot reach a child process")
    kept = [type(s).__name__ for s in sinks if type(s) is not LoggingSink]
    if kept:
        return stay(
            f"the sinks {', '.join(kept)} keep state or connections this process reads "
            "(only LoggingSink is delivered the same from a child process)"
        )
    blob = _portable((metrics, sinks, reference_provider))
    if blob is None:
        what = "the metrics" if _portable(metrics) is None else "`reference_provider`"
        return stay(
            f"{what} cannot be sent to a child process (a live client such as "
            "llm=ChatOpenAI(...), a lock, or something defined in __main__)"
        )
    names = [m.metric_name for m in metrics] + [type(s).__name__ for s in sinks]
    return Resolved(ProcessIsolation(setup=ShippedSetup(blob, names)), None)


def _warn_once(reason: str) -> None:
    """One warning per process: scoring stays on the application's threads, and why."""
    global _warned  # noqa: PLW0603 - one warning per process, by design
    with _warn_lock:
        if _warned:
            return
        _warned = True
    logger.warning(
        "RagMetricsCallbackHandler scores on this process's threads (isolation='thread') "
        "because %s. Scoring then competes with your requests for the GIL (a few ms on "
        "the slowest ones). Pass isolation='thread' to choose this explicitly (no warning), "
        "or ProcessIsolation(setup=...) to build these objects in a child process.",
        reason,
    )


def mark_warned() -> None:
    """Count the fallback warning as given (tests that count warnings)."""
    global _warned  # noqa: PLW0603 - see _warn_once
    with _warn_lock:
        _warned = True


def reset_warning() -> None:
    """Let the next fallback warn again (tests)."""
    global _warned  # noqa: PLW0603 - see _warn_once
    with _warn_lock:
        _warned = False
