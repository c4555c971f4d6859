"""The typed messages the isolated mode's parent and child process exchange over their pipes.

Both sides import these classes, so a message is read by attribute, never by position. The
parent sends :class:`ScoreItems`, :class:`FlushRequest`, :class:`ResetRequest` and
:class:`CloseRequest`; the child answers with :class:`Ready`, :class:`Report`,
:class:`Results`, :class:`Flushed`, :class:`WasReset`, :class:`Closed`, :class:`Fatal` and
:class:`LogRecordData`. All are frozen dataclasses: cheap to build and to pickle.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from langchain_ragmetrics._retrieval import OnlineResult, Retrieval
from langchain_ragmetrics.callbacks._settings import HandlerSettings
from langchain_ragmetrics.callbacks._stats import HandlerStats

__all__ = [
    "ChildMessage",
    "ChildStart",
    "CloseRequest",
    "Closed",
    "Fatal",
    "FlushRequest",
    "Flushed",
    "LogRecordData",
    "ParentMessage",
    "Ready",
    "Report",
    "ResetRequest",
    "Results",
    "ScoreItems",
    "WasReset",
    "picklable",
]

# --------------------------------------------------------------------------- parent -> child


@dataclass(frozen=True)
class ChildStart:
    """What a child process is started with (its ``multiprocessing`` argument)."""

    settings: HandlerSettings
    """The handler's settings, picklable copy (:meth:`HandlerSettings.for_child`)."""
    log_levels: dict[str, int] = field(default_factory=dict)
    """Effective levels of the application's loggers, mirrored in the child."""
    forward_results: bool = False
    """Send every result up as :class:`Results` (the parent delivers them to the user's own
    sinks) instead of delivering them to sinks built in the child."""


@dataclass(frozen=True)
class ScoreItems:
    """Retrievals to score, in order."""

    items: list[Retrieval]


@dataclass(frozen=True)
class FlushRequest:
    """Flush what was sent before; answer with :class:`Flushed` carrying ``token``."""

    token: int
    timeout: float | None


@dataclass(frozen=True)
class ResetRequest:
    """Start a new period of the sinks' figures now; answer with :class:`WasReset`."""

    token: int


@dataclass(frozen=True)
class CloseRequest:
    """Flush, close the sinks within ``timeout``, answer with :class:`Closed`, and exit."""

    timeout: float | None


ParentMessage = ScoreItems | FlushRequest | ResetRequest | CloseRequest
"""Anything the parent sends."""

# --------------------------------------------------------------------------- child -> parent


@dataclass(frozen=True)
class Ready:
    """The child built its setup and takes work."""


@dataclass(frozen=True)
class Report:
    """The child's counters (totals since it started): on change and every heartbeat."""

    stats: HandlerStats


@dataclass(frozen=True)
class Results:
    """Results for the parent's sinks, in order, batched (at most every report interval).

    Sent before the :class:`Flushed` or :class:`Closed` that counts them, so a parent that
    has read an answer has every result it covers. While results flow they carry the
    counters too (``stats``, read at the moment the results were taken: they count these
    and every result sent before, no other), in place of a :class:`Report`: one message,
    one wake-up of the parent's listener per interval.
    """

    items: list[OnlineResult]
    stats: HandlerStats | None = None


@dataclass(frozen=True)
class Flushed:
    """The answer to a :class:`FlushRequest`."""

    token: int
    ok: bool
    stats: HandlerStats


@dataclass(frozen=True)
class WasReset:
    """The answer to a :class:`ResetRequest`: the child's sinks count from zero again.

    ``stats`` are its counters and sinks' figures just before, and every result they count
    went up before this message: the parent starts the new period of every figure here,
    between two consistent readings.
    """

    token: int
    stats: HandlerStats


@dataclass(frozen=True)
class Closed:
    """The answer to a :class:`CloseRequest`, sent just before the child exits."""

    ok: bool
    stats: HandlerStats


@dataclass(frozen=True)
class Fatal:
    """The child could not build its setup: online scoring is off."""

    text: str


@dataclass(frozen=True)
class LogRecordData:
    """A log record of the child, already formatted, to be re-emitted by the parent."""

    fields: dict[str, Any]


ChildMessage = Ready | Report | Results | Flushed | WasReset | Closed | Fatal | LogRecordData
"""Anything the child sends."""


def picklable(item: object) -> bool:
    """Whether ``item`` can cross the pipe (a message with one that cannot is sent without it)."""
    try:
        pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False
    return True
