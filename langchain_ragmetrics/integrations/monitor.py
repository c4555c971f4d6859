"""Score the retriever runs a LangSmith project already holds, off the application's machines.

:class:`LangSmithMonitor` (and the ``ragmetrics monitor`` command) lists the retriever runs
of a project, joins each with its trace's root run for the question and the answer (the
same extraction as the online callback and the LangSmith evaluators), scores them through
the :class:`~langchain_ragmetrics._engine.ScoringEngine` and posts one feedback per metric
on each retriever run, with ids derived from (run id, metric) so nothing is ever duplicated.

Feedback goes through the same client as the online sink (``_langsmith_feedback``): one
set of rules for ids, 409, 404 on a run not ingested yet, a later score replacing an earlier
error, and the circuit breaker.

A failed read or send fails that one (run, metric) pair, never the poll. Unsent pairs are
kept and tried again whatever their age: on every later poll with ``follow``, in up to
``retry_rounds`` extra rounds (with backoff) before a one-shot run ends, and by the next run
with the same checkpoint, which reads them again by id whatever its ``since`` window; what
is still unsent when a run ends is counted in ``MonitorSummary.runs_unsent`` (the command
exits 12). A judged result whose feedback was not accepted is kept in the checkpoint and
sent again as it is: the judge is paid once per pair, however long LangSmith refuses.

Runs are read through ``client.runs.query`` (LangSmith's v2 run query) when the installed
langsmith has it and the server is 0.16 or later, through the deprecated ``Client.list_runs``
otherwise (an older langsmith or self-hosted server); both give the same runs.

It is restartable (a SQLite checkpoint of settled (run, metric) pairs, those settled more
than ``retention`` ago pruned so that the file stays bounded) and scales out:
``shard=(i, n)`` keeps the runs whose trace id hashes to ``i``, so ``n`` workers share a
project with every run scored exactly once; sampling uses the online handler's trace-id
hash, so both pick the same traces at the same rate.

Example::

    from langchain_ragmetrics.integrations.monitor import LangSmithMonitor

    summary = LangSmithMonitor("my-rag-app", since="24h", shard=(0, 3)).run()
    print(summary.render())
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import hashlib
import math
import os
import re
import threading
import time
import warnings
import weakref
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Sequence,
)
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from langchain_ragmetrics._engine import ScoringEngine
from langchain_ragmetrics._errors import CheckpointError, MonitorError
from langchain_ragmetrics._langsmith_feedback import (
    FeedbackClient,
    FeedbackItem,
    read_environment_once,
)
from langchain_ragmetrics._loops import cancel_and_wait, new_event_loop, quiet_stale_closes
from langchain_ragmetrics._options import flag, number_above_zero, whole_number
from langchain_ragmetrics._retrieval import OnlineResult, QuestionFrom, Retrieval, score_retrieval
from langchain_ragmetrics._schema import Usage
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics.callbacks._sampling import is_sampled
from langchain_ragmetrics.callbacks._settings import HandlerSettings
from langchain_ragmetrics.callbacks._setup import untraced
from langchain_ragmetrics.callbacks.sinks import BaseSink
from langchain_ragmetrics.integrations._monitor_checkpoint import Checkpoint
from langchain_ragmetrics.metrics._base import BaseRagMetric

if TYPE_CHECKING:
    from langsmith import Client
    from langsmith.pagination import AsyncItemsCursorPostPagination
    from langsmith.schemas import LangSmithInfo, Run
    from langsmith.types.run import Run as V2Run
    from langsmith.types.run_select_field import RunSelectField

    V2Page = AsyncItemsCursorPostPagination[V2Run]

__all__ = ["LangSmithMonitor", "MonitorSummary", "monitor"]

T = TypeVar("T")
Reason = Literal["waiting", "langsmith", "judge"]
"""Why a run still has unsent pairs: its trace is not complete in LangSmith yet, a
LangSmith read or send failed, or a judge failure waits for its next attempt."""


_PAGE = 100  # runs read from the listing at a time
_V2_MIN_VERSION = (0, 16, 0)
"""The first LangSmith backend serving ``POST /api/v2/runs/query`` (``Client.runs.query``)."""
_INFO_RETRY_SECONDS = 60.0
"""How long an unreadable ``/info`` is taken as "version unknown" before it is read again."""
_V2_SELECTS: list[RunSelectField] = [
    "ID",
    "NAME",
    "RUN_TYPE",
    "START_TIME",
    "END_TIME",
    "INPUTS",
    "OUTPUTS",
    "ERROR",
    "EXTRA",
    "METADATA",
    "TAGS",
    "TRACE_ID",
    "PARENT_RUN_IDS",
    "PROJECT_ID",
]
"""The fields of a v2 run the monitor reads (v2 answers only ``id`` unless asked)."""
_BY_ID_SINCE = datetime(2000, 1, 1, tzinfo=timezone.utc)
"""Where a v2 read by id starts looking: v2 queries default to the last day, while a run read
again (a trace's root, a run whose pairs stayed unsent) may be older (list_runs has no bound)."""
_PRUNE_EVERY = 3600.0
"""Seconds between two prunes of the checkpoint in a long (``follow``) run."""
_CLOCK_MARGIN = timedelta(hours=1)
"""A prune spares the pairs settled within this of the listing window's start: a run's start
comes from the application's clock, its ``settled_at`` from the monitor's."""
_SHARD_PERSON = b"ragmetrics-shard"  # a different hash than sampling: shards stay uniform
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def shard_of(trace_id: UUID, count: int) -> int:
    """The shard (0 to ``count - 1``) a trace belongs to: a hash of its id, stable forever.

    Independent of the sampling hash, so sampling at 10 % still spreads over every shard.
    """
    digest = hashlib.blake2b(trace_id.bytes, digest_size=8, person=_SHARD_PERSON).digest()
    return int.from_bytes(digest, "big") % count


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` (0 <= I < N) as ``(I, N)``.

    Raises:
        ValueError: Naming the expected form.
    """
    index, sep, count = text.partition("/")
    try:
        shard = (int(index), int(count)) if sep else None
    except ValueError:
        shard = None
    if shard is None or shard[1] < 1 or not 0 <= shard[0] < shard[1]:
        msg = f"`shard` must be I/N with 0 <= I < N (e.g. 0/3), got {text!r}"
        raise ValueError(msg)
    return shard


def parse_duration(value: str | timedelta, *, name: str) -> timedelta:
    """``"10m"``/``"24h"``/``"7d"`` (s, m, h, d, w) or a timedelta of at least 0.

    Raises:
        ValueError: A negative duration or an unreadable text, naming ``name``.
        TypeError: Neither a text nor a timedelta.
    """
    if isinstance(value, timedelta):
        if value < timedelta(0):
            msg = f"`{name}` must look back (a duration of at least 0), got {value!r}"
            raise ValueError(msg)
        return value
    if not isinstance(value, str):
        msg = f"`{name}` must be a duration such as '24h' or a timedelta, got "
        raise TypeError(msg + type(value).__name__)
    match = _DURATION.match(value)
    if match is None:
        msg = f"`{name}` must be a duration such as 30m, 24h or 7d, got {value!r}"
        raise ValueError(msg)
    return timedelta(**{_UNITS[match[2]]: float(match[1])})


def parse_since(value: str | timedelta | datetime) -> datetime:
    """The start of the window: ``"24h"``/``"30m"``/``"7d"``, a timedelta, or a datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if not isinstance(value, (str, timedelta)):
        msg = "`since` must be a duration such as '24h', a timedelta or a datetime, got "
        raise TypeError(msg + type(value).__name__)
    return datetime.now(timezone.utc) - parse_duration(value, name="since")


def _retention(
    retention: str | timedelta | None, since: str | timedelta | datetime, start: datetime
) -> timedelta | None:
    """``retention`` parsed, once sure that ``since`` (``start`` parsed) reaches no further.

    Raises:
        ValueError: An unreadable ``retention``, or a ``since`` reaching further back (naming
            both options, their values and the ways out).
    """
    if retention is None:
        return None
    kept = parse_duration(retention, name="retention")
    reach = (
        datetime.now(timezone.utc) - start
        if isinstance(since, datetime)
        else parse_duration(since, name="since")
    )
    if reach <= kept:
        return kept
    msg = (
        f"`since` ({since!r}) reaches further back than `retention` ({retention!r}): the "
        "checkpoint forgets the pairs settled more than `retention` ago, so runs older than "
        "that would be listed, judged and paid for again; use a shorter `since`, a longer "
        "`retention`, or `retention=None` to keep every settled pair (`--retention none`)"
    )
    raise ValueError(msg)


MAX_ERRORS_KEPT = 1000
"""Errors a :class:`MonitorSummary` keeps the text of (the count goes on)."""


class MonitorSummary(BaseModel):
    """What a monitor run did; ``render()`` gives the exit summary."""

    model_config = ConfigDict(extra="forbid")

    project: str
    """The LangSmith project."""
    shard: tuple[int, int] = (0, 1)
    """This worker's shard ``(index, count)``."""
    polls: int = 0
    """Times the project was listed."""
    runs_listed: int = 0
    """Retriever runs returned by LangSmith (every shard)."""
    runs_seen: int = 0
    """Retriever runs of this shard."""
    runs_sampled_out: int = 0
    """Runs of this shard left out by sampling."""
    runs_already_scored: int = 0
    """Runs whose metrics were all settled by an earlier run (checkpoint)."""
    runs_waiting: int = 0
    """Runs left for a later poll: their run or trace was not finished (or ingested) yet."""
    runs_unsent: int = 0
    """Runs with pairs still unsent when the monitor stopped (waiting runs, failed LangSmith
    reads or sends, judge failures waiting for their next attempt): run the monitor again."""
    runs_already_failed: int = 0
    """Runs settled earlier whose feedback is a failure (``error=True``), not a score."""
    retry_rounds: int = 0
    """Extra rounds a one-shot run made for unsent pairs before it ended."""
    pairs_pruned: int = 0
    """Settled pairs deleted from the checkpoint as older than ``retention`` (at its opening,
    then at most once an hour)."""
    runs_scored: int = 0
    """Runs scored in this run."""
    runs_incomplete: int = 0
    """Runs whose trace stayed incomplete (or invisible) longer than ``max_wait``: their pairs
    are settled unsent, so a trace that never ends is not waited for without a bound."""
    runs_gone: int = 0
    """Runs with unsent pairs that LangSmith no longer holds (deleted since they were read):
    their pairs are settled unsent."""
    runs_skipped: int = 0
    """Runs not scored because the retriever or its trace raised."""
    results_scored: int = 0
    """Metric results with a score."""
    results_failed: int = 0
    """Metric results that failed (judge error, timeout ...)."""
    results_skipped: int = 0
    """Metric results that could not be assessed (e.g. no reference)."""
    feedback_sent: int = 0
    """Feedback accepted by LangSmith."""
    feedback_failed: int = 0
    """Sends that failed (tried again in a retry round, on the next poll, or the next run)."""
    results_resent: int = 0
    """Results judged by an earlier attempt whose feedback was not accepted then, sent again
    from the checkpoint without calling the judge."""
    listing_failed: bool = False
    """The last listing of the project's runs failed partway: runs past the failure were
    not read, so not scored. Run the monitor again (nothing is sent twice)."""
    listing_stopped: bool = False
    """:meth:`LangSmithMonitor.stop` (SIGTERM) came while the runs were listed: the runs in
    hand were finished, the rest of the window was not read. The next run lists it."""
    errors: list[str] = Field(default_factory=list)
    """LangSmith errors (listing, reads and sends: unreachable, 5xx, timeouts), the last
    :data:`MAX_ERRORS_KEPT` of them: a long ``follow`` run through an outage keeps no more."""
    errors_total: int = 0
    """Every error counted, those no longer in :attr:`errors` included."""
    usage: Usage = Field(default_factory=Usage)
    """Judge tokens and calls."""

    def render(self) -> str:
        """The human-readable summary printed when the monitor exits."""
        index, count = self.shard
        lines = [
            f"ragmetrics monitor: project {self.project!r}, shard {index}/{count}, "
            f"{self.polls} poll{'s' if self.polls != 1 else ''}",
            f"  runs seen {self.runs_seen} (of {self.runs_listed} listed), scored "
            f"{self.runs_scored}, already scored {self.runs_already_scored}, sampled out "
            f"{self.runs_sampled_out}, skipped {self.runs_skipped}, waiting {self.runs_waiting}",
            f"  unsent {self.runs_unsent} after {self.retry_rounds} retry round"
            f"{'s' if self.retry_rounds != 1 else ''}, settled earlier as failed "
            f"{self.runs_already_failed}, settled pairs pruned {self.pairs_pruned}",
            f"  results scored {self.results_scored}, failed {self.results_failed}, "
            f"skipped {self.results_skipped}",
            f"  feedback sent {self.feedback_sent}, failed {self.feedback_failed}, resent "
            f"{self.results_resent} without judging again; gone {self.runs_gone}, incomplete "
            f"{self.runs_incomplete}; judge calls "
            f"{self.usage.judge_calls}, tokens {self.usage.input_tokens} in / "
            f"{self.usage.output_tokens} out",
        ]
        if self.listing_failed:
            lines.append("  the listing of runs failed partway: runs past it were not read")
        if self.listing_stopped:
            lines.append(
                "  stopped while listing runs: the runs in hand were finished, the rest of "
                "the window is listed by the next run"
            )
        if self.errors_total > 5:
            lines.append(f"  {self.errors_total} errors, the last 5:")
        lines += [f"  error: {e}" for e in self.errors[-5:]]
        return "\n".join(lines)

    def add_error(self, text: str) -> None:
        """Record an error, keeping the last :data:`MAX_ERRORS_KEPT`."""
        self.errors_total += 1
        self.errors.append(text)
        if len(self.errors) > MAX_ERRORS_KEPT:
            del self.errors[: len(self.errors) - MAX_ERRORS_KEPT]

    @property
    def complete(self) -> bool:
        """Whether every pair the monitor saw is settled and every listed page was read."""
        return self.runs_unsent == 0 and not self.listing_failed and not self.listing_stopped


def _uuid(value: Any) -> UUID | None:
    return None if value is None else UUID(str(value))


async def _within(future: concurrent.futures.Future[T], what: str, allowed: float) -> T:
    """The result of ``future`` (a thread's or another loop's), given up after ``allowed``.

    Giving up cancels the future (``wrap_future`` passes the cancellation on): a coroutine
    on the SDK's loop is cancelled there, a queued call never starts, and a call already
    running on a thread goes on until its own HTTP timeout, its result ignored.

    Raises:
        TimeoutError: Naming ``what`` and the time allowed.
    """
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), allowed)
    except asyncio.TimeoutError:
        msg = f"{what}: no answer from LangSmith within {allowed:g}s"
        raise TimeoutError(msg) from None


class _SdkLoop:
    """One event loop, on a daemon thread, per client, for its async (v2) resources.

    ``Client.runs`` uses an ``httpx.AsyncClient`` that the ``Client`` keeps, and its pooled
    connections belong to the loop that opened them: on another loop (each
    :meth:`LangSmithMonitor.run` has its own) a request fails with "Event loop is closed"
    and is retried. Run on its client's loop only, a client's connections always match it.
    The loop lives as long as its client: when the client is garbage collected, the loop
    stops and its thread ends. A ``langsmith.Client`` that traces in the background is kept
    alive by its own tracing thread until ``client.close()``: close a client you are done
    with. A forked child starts a loop of its own (the parent's does not run there).
    """

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _loops: ClassVar[weakref.WeakKeyDictionary[Client, _LoopThread]] = weakref.WeakKeyDictionary()

    @classmethod
    def _after_fork(cls) -> None:
        """In a forked child: a fresh lock (the parent's may have been held at the fork)."""
        cls._lock = threading.Lock()

    @classmethod
    def of(cls, client: Client) -> asyncio.AbstractEventLoop:
        """``client``'s running loop, started on first use (and again in a forked child)."""
        with cls._lock:
            held = cls._loops.get(client)
            if held is None or held.pid != os.getpid():
                held = _LoopThread()
                cls._loops[client] = held
                weakref.finalize(client, held.stop)
            return held.loop


if hasattr(os, "register_at_fork"):  # POSIX only
    os.register_at_fork(after_in_child=_SdkLoop._after_fork)


class _LoopThread:
    """An event loop running on its own daemon thread until :meth:`stop`."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = new_event_loop()
        self.thread = threading.Thread(
            target=contextvars.Context().run,
            args=(self._run,),
            name="ragmetrics-langsmith-sdk",
            daemon=True,
        )
        self.thread.start()

    def _run(self) -> None:
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def stop(self) -> None:
        """Stop the loop (its thread then ends); a no-op in another process or once closed."""
        if self.pid == os.getpid() and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self.loop.call_soon_threadsafe(self.loop.stop)


def _version(text: str) -> tuple[int, ...]:
    """A version's first three numbers (``"0.16.2-rc1"``: ``(0, 16, 2)``); ``()`` if none."""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _queries_v2(client: Client, *, read_again: bool = False) -> bool | None:
    """Whether the monitor reads runs through ``client.runs.query`` (see :class:`_RunReader`).

    Reads ``/info`` once per client (the SDK keeps it, a failed read too); with
    ``read_again``, a failed read is tried again here. A blocking call, for an I/O thread.

    Returns:
        None when the backend's version is unknown (``/info`` could not be read).
    """
    if getattr(type(client), "runs", None) is None:
        return False  # an SDK before runs.query
    if not callable(getattr(client, "list_runs", None)):
        return True  # an SDK after list_runs
    info = client.info  # an empty version when /info could not be read
    if not info.version and read_again:
        info = _read_info(client) or info
    if not (info.instance_flags or {}).get("ch_query_enabled", True):
        return True  # queries are served by SmithDB only, which list_runs cannot reach
    if not info.version:
        return None
    return _version(info.version) >= _V2_MIN_VERSION


def _read_info(client: Client) -> LangSmithInfo | None:
    """The backend's ``/info``, read again (None when it still cannot be read)."""
    from langsmith.schemas import LangSmithInfo

    try:
        response = client.request_with_retries(
            "GET", "/info", headers={"Accept": "application/json"}
        )
        response.raise_for_status()
        return LangSmithInfo(**response.json())
    except Exception:
        return None


def _run_from_v2(run: V2Run) -> Run:
    """A v2 run as the ``langsmith.schemas.Run`` that ``list_runs`` gives (``_V2_SELECTS``).

    ``run_type`` is lower case again, the parent is the last of ``parent_run_ids``, the
    project is ``session_id``, and the metadata is ``extra["metadata"]`` as in v1.
    """
    from langsmith.schemas import Run

    parents = run.parent_run_ids or []
    extra = dict(run.extra or {})
    if run.metadata is not None:
        extra.setdefault("metadata", run.metadata)
    fields: dict[str, Any] = {
        "id": run.id,
        "name": run.name,
        "run_type": run.run_type.lower() if run.run_type else None,
        "start_time": run.start_time,
        "end_time": run.end_time,
        "inputs": run.inputs or {},
        "outputs": run.outputs,
        "error": run.error,
        "extra": extra,
        "tags": run.tags,
        "trace_id": run.trace_id or run.id,
        "parent_run_id": parents[-1] if parents else None,
        "session_id": run.project_id,
    }
    return Run(**{name: value for name, value in fields.items() if value is not None})


async def _v2_page(fetch: Callable[[], Awaitable[V2Page]]) -> tuple[list[Run], V2Page]:
    """One v2 page and its runs as ``list_runs`` gives them (on the SDK's loop)."""
    page = await fetch()
    return [_run_from_v2(run) for run in page.items], page


def _has_more(page: V2Page, cursor: str | None) -> bool:
    """Whether a v2 page has a next one: by its cursor, not its items.

    The SDK's ``has_next_page()`` is False for an empty page, but a page may come back
    empty with runs after it; a cursor that repeats the last one ends the listing.
    """
    return bool(page.next_cursor) and page.next_cursor != cursor


def _take(runs: Iterator[Run], size: int) -> list[Run]:
    """The next ``size`` runs of a ``list_runs`` listing (fewer at its end)."""
    batch: list[Run] = []
    for run in runs:
        batch.append(run)
        if len(batch) >= size:
            break
    return batch


class _IO(Protocol):
    """:meth:`LangSmithMonitor._io`: a blocking call on an I/O thread, within a time."""

    def __call__(self, fn: Callable[[], T], what: str) -> Awaitable[T]: ...


class _RunReader:
    """Where the monitor reads runs: ``Client.runs.query`` (v2) when it can, else ``list_runs``.

    The choice is made from the SDK and the client's ``/info``: v2 when the SDK has
    ``Client.runs`` and the backend is 0.16 or later (or serves queries from SmithDB only);
    ``list_runs`` (deprecated in langsmith 0.15, its warning silenced) with an older SDK or
    an older (self-hosted) backend. Once known, it is kept. While ``/info`` cannot be read
    the monitor lists with ``list_runs`` (every backend before SmithDB serves it) and reads
    ``/info`` again at most every minute, so a SmithDB-only backend whose first read failed
    is not listed with ``list_runs`` for good.

    Either way the monitor gets ``langsmith.schemas.Run`` objects with the same fields, a page
    (at most ``_PAGE`` runs) at a time, and each request, a page or a read by id, has one
    request timeout. v2 coroutines run on :class:`_SdkLoop`, awaited from the monitor's loop
    and cancelled when their time is up; ``list_runs`` runs on the monitor's I/O threads.

    Args:
        client: The monitor's client (built on first use).
        io: The monitor's I/O-thread call.
        timeout: Seconds allowed per request.
    """

    def __init__(self, client: Callable[[], Client], io: _IO, timeout: float) -> None:
        self._client = client
        self._io = io
        self._timeout = timeout
        self._v2: bool | None = None
        self._next_read: float | None = None  # when /info is read again (None: not read yet)

    async def uses_v2(self) -> bool:
        """Whether runs are read through ``client.runs.query`` (decided on first use).

        While the version is unknown (``/info`` unreadable, or slower than a request
        timeout) the answer is False, and ``/info`` is read again at most once a minute.
        """
        if self._v2 is not None:
            return self._v2
        now = time.monotonic()
        if self._next_read is not None and now < self._next_read:
            return False  # version unknown: list_runs until /info is read again
        client, again = self._client, self._next_read is not None
        self._next_read = now + _INFO_RETRY_SECONDS  # one read at a time, set before it
        try:
            decided = await self._io(
                lambda: _queries_v2(client(), read_again=again), "reading LangSmith's version"
            )
        except TimeoutError:
            return False  # a slow read: still unknown, list_runs meanwhile
        if decided is None:
            self._next_read = time.monotonic() + _INFO_RETRY_SECONDS
            return False
        self._v2 = decided
        return self._v2

    async def pages(self, project_id: UUID, since: datetime) -> AsyncGenerator[list[Run], None]:
        """The project's retriever runs that started at ``since`` or later, page by page."""
        if not await self.uses_v2():
            runs = await self._io(partial(self._listing, project_id, since), "listing runs")
            while batch := await self._io(partial(_take, runs, _PAGE), "listing runs"):
                yield batch
            return
        query = partial(
            self._query,
            project_ids=[str(project_id)],
            run_type="RETRIEVER",
            min_start_time=since,
            page_size=_PAGE,
        )
        async for batch in self._v2_pages(query, "listing runs"):
            yield batch

    async def by_id(self, project_id: UUID, run_ids: list[str], what: str) -> dict[str, Run]:
        """The runs of the project with these ids that LangSmith holds, by id."""
        if not await self.uses_v2():
            return await self._io(partial(self._listed, project_id, run_ids), what)
        query = partial(
            self._query,
            project_ids=[str(project_id)],
            ids=run_ids,
            min_start_time=_BY_ID_SINCE,
            page_size=max(1, min(len(run_ids), 1000)),
        )
        return {str(run.id): run async for batch in self._v2_pages(query, what) for run in batch}

    async def _v2_pages(
        self, query: Callable[[], Awaitable[V2Page]], what: str
    ) -> AsyncGenerator[list[Run], None]:
        """A v2 query's runs, page by page, each page read within one request timeout."""
        batch, page = await self._on_sdk_loop(partial(_v2_page, query), what)
        cursor = None
        while True:
            if batch:
                yield batch
            if not _has_more(page, cursor):
                return
            cursor = page.next_cursor
            batch, page = await self._on_sdk_loop(partial(_v2_page, page.get_next_page), what)

    async def _on_sdk_loop(self, make: Callable[[], Coroutine[Any, Any, T]], what: str) -> T:
        """``make()`` run on the SDK's loop, awaited here for one request timeout."""
        future = asyncio.run_coroutine_threadsafe(make(), _SdkLoop.of(self._client()))
        return await _within(future, what, self._timeout)

    def _query(self, **query: Any) -> Awaitable[V2Page]:
        """``client.runs.query`` with the fields the monitor reads; awaiting it reads a page."""
        return self._client().runs.query(selects=_V2_SELECTS, **query)

    def _listing(self, project_id: UUID, since: datetime) -> Iterator[Run]:
        with warnings.catch_warnings():
            # Deprecated in langsmith 0.15 for runs.query, which older backends lack.
            warnings.simplefilter("ignore", DeprecationWarning)
            return iter(
                self._client().list_runs(
                    project_id=project_id, run_type="retriever", start_time=since
                )
            )

    def _listed(self, project_id: UUID, run_ids: list[str]) -> dict[str, Run]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            found = self._client().list_runs(project_id=project_id, run_ids=run_ids)
        return {str(run.id): run for run in found}


class LangSmithMonitor:
    """Scores the retriever runs of a LangSmith project and posts feedback on them.

    Args:
        project_name: The project the application traces to.
        client: A ``langsmith.Client``; default one from the environment with
            ``request_timeout`` as its HTTP timeout.
        metrics: Default ``[ContextRelevance(), ContextPrecision()]`` (as the handler).
        sinks: Extra sinks that also receive every settled result, e.g. an
            ``OpenTelemetrySink`` for the score metrics (LangSmith feedback is always sent).
        since: How far back to look on the first poll (``"24h"``, a timedelta, a datetime).
        shard: ``(index, count)``: score only the traces whose id hashes to ``index``.
        sample_rate: Fraction of traces scored (the online handler's hash).
        checkpoint: SQLite file of settled pairs; default
            ``.ragmetrics-monitor-<project>-<i>of<n>.sqlite`` in the working directory.
        question_from: ``"query"`` (the retriever's query), ``"input"`` (the root input)
            or ``fn(root_input) -> str | None``.
        max_concurrency: Runs scored at once (judge jobs are bounded by the engine too).
        rate_limit_per_minute: Optional cap on judge calls per minute.
        timeout: Seconds allowed per metric job.
        request_timeout: Seconds allowed per LangSmith call (list page, feedback).
        follow: Keep polling for new runs until :meth:`stop` (or ``max_polls``).
        poll_interval: Seconds between polls when following.
        max_polls: Stop after this many polls (None: no bound).
        lookback: Later polls re-list this far before the previous poll, for late arrivals
            (``"10m"`` or a timedelta).
        retention: How long settled pairs stay in the checkpoint (``"30d"``, a timedelta, or
            None: for ever); older ones are deleted when it is opened, then at most once an
            hour. Unsettled work (intents, kept results, failure counts) is never deleted.
            ``since`` may not reach back further: a pair is settled after its run started, so
            a pruned pair's run started before any window this monitor lists. Later polls start
            at ``max(since, previous poll - lookback)``, never earlier, and a prune spares the
            pairs settled after the current window's start (less an hour for clock skew), so
            ``lookback`` needs no check of its own.
        max_wait: How long a run whose trace is not complete in LangSmith (or not visible
            yet) is waited for, from its start (or from when this monitor first saw it
            waiting); then its pairs are settled unsent (``runs_incomplete``).
        max_attempts: Failed results are retried on later polls and runs; after this many
            failures the failure itself is posted (``error=True``) and the pair settled.
        retry_rounds: Without ``follow``: extra rounds (backoff 1 s, 2 s, 4 s ...) for pairs
            whose trace was not complete yet or whose LangSmith read or send failed.
        retry_backoff: Seconds before the first retry round, doubled for each next one
            (tests pass a tiny value so that they do not wait for the default schedule).
    """

    def __init__(
        self,
        project_name: str,
        *,
        client: Client | None = None,
        metrics: Sequence[BaseRagMetric] | None = None,
        sinks: Sequence[BaseSink] = (),
        since: str | timedelta | datetime = "24h",
        shard: tuple[int, int] | str = (0, 1),
        sample_rate: float = 1.0,
        checkpoint: str | Path | None = None,
        question_from: QuestionFrom = "query",
        max_concurrency: int = 8,
        rate_limit_per_minute: float | None = None,
        timeout: float | None = 120.0,
        request_timeout: float = 30.0,
        follow: bool = False,
        poll_interval: float = 30.0,
        max_polls: int | None = None,
        lookback: str | timedelta = timedelta(minutes=10),
        retention: str | timedelta | None = "30d",
        max_wait: str | timedelta = timedelta(hours=24),
        max_attempts: int = 3,
        retry_rounds: int = 3,
        retry_backoff: float = 1.0,
    ) -> None:
        if not project_name:
            msg = "`project_name` must name a LangSmith project"
            raise ValueError(msg)
        # The options the online handler shares are checked by its settings, defined once.
        shared = HandlerSettings(
            metrics=metrics,
            sinks=sinks,
            sample_rate=sample_rate,
            question_from=question_from,
            max_concurrency=max_concurrency,
            rate_limit_per_minute=rate_limit_per_minute,
            timeout=timeout,
        )
        whole_number("max_attempts", max_attempts)
        if max_polls is not None:
            whole_number("max_polls", max_polls)
        whole_number("retry_rounds", retry_rounds, minimum=0)
        for name, number in (
            ("request_timeout", request_timeout),
            ("poll_interval", poll_interval),
            ("retry_backoff", retry_backoff),
        ):
            number_above_zero(name, number)
        self.project_name = project_name
        self.shard = parse_shard(shard if isinstance(shard, str) else f"{shard[0]}/{shard[1]}")
        self.since = parse_since(since)
        self.retention = _retention(retention, since, self.since)
        self.sample_rate = shared.sample_rate
        self.metrics = shared.metrics
        self.sinks = shared.sinks
        self.question_from = shared.question_from
        self.max_concurrency = shared.max_concurrency
        self.request_timeout = request_timeout
        follow = flag("follow", follow)  # "no" is truthy: it would poll, and pay, forever
        lookback = parse_duration(lookback, name="lookback")
        self.max_wait = parse_duration(max_wait, name="max_wait")
        self.follow = follow
        self.poll_interval = poll_interval
        self.max_polls = max_polls
        self.lookback = lookback
        self.max_attempts = max_attempts
        self.retry_rounds = retry_rounds
        self.retry_backoff = retry_backoff
        index, count = self.shard
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", project_name)
        self.checkpoint_path = Path(
            checkpoint or f".ragmetrics-monitor-{safe}-{index}of{count}.sqlite"
        ).expanduser()
        self.engine = ScoringEngine(
            max_concurrency=shared.max_concurrency,
            timeout=shared.timeout,
            rate_limit_per_minute=shared.rate_limit_per_minute,
        )
        self._client = client
        # Retries here stay short: the pair's next chance is the next round or poll.
        self._feedback = FeedbackClient(
            lambda: self.client, name="LangSmithMonitor", max_retries=1, ingest_retries=3
        )
        self._project_id: UUID | None = None
        self._runs = _RunReader(lambda: self.client, self._io, request_timeout)
        self._pool = DaemonThreadPool(name="ragmetrics-monitor-io", size=4)
        self._judge_pool = DaemonThreadPool(name="ragmetrics-monitor-judge")
        self._stop = threading.Event()
        self._wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._unsent: dict[str, Reason] = {}
        self._waiting_since: dict[str, float] = {}  # run id -> monotonic time first seen so
        self._last_poll: datetime | None = None
        self._next_prune: float | None = None  # monotonic time of the next prune (None: now)
        self._roots: dict[str, Run | None] = {}
        self.summary = MonitorSummary(project=project_name, shard=self.shard)

    # ------------------------------------------------------------------ public

    @property
    def client(self) -> Client:
        """The LangSmith client (built from the environment on first use)."""
        if self._client is None:
            from langsmith import Client
            from urllib3.util.retry import Retry

            millis = int(self.request_timeout * 1000)
            retry = Retry(
                total=1,
                backoff_factor=0.2,
                status_forcelist=[429, 500, 502, 503, 504],
                allowed_methods=None,
                raise_on_status=False,
            )
            # No background tracing thread: the monitor traces nothing, and its feedback
            # goes without a trace id, so nothing would ride its batches.
            self._client = read_environment_once(
                Client(timeout_ms=(millis, millis), retry_config=retry, auto_batch_tracing=False)
            )
        return self._client

    def run(self) -> MonitorSummary:
        """Poll (once, or until stopped when following) and return the summary.

        Raises:
            MonitorError: LangSmith has no project named ``project_name``.
            CheckpointError: The checkpoint file cannot be used, or an earlier run pruned
                pairs of runs this run's ``since`` would list again, or the file stopped
                working mid-run (a full disk, say): the run stops there, as nothing it
                judged could be recorded; ``summary`` holds what it did until then.
        """
        return asyncio.run(self._arun_own_loop())

    async def _arun_own_loop(self) -> MonitorSummary:
        quiet_stale_closes(asyncio.get_running_loop())  # run()'s loop is ours, not the user's
        return await self.arun()

    async def arun(self) -> MonitorSummary:
        """:meth:`run` on the running event loop."""
        wake = asyncio.Event()
        self._wake = (asyncio.get_running_loop(), wake)
        self._feedback.requests.closing.clear()  # the previous run's end stopped its retries
        checkpoint = Checkpoint(self.checkpoint_path, project=self.project_name)
        # What an earlier run left unsent is read again by id, whatever this run's window.
        try:
            self._within_pruned(checkpoint)
            self._next_prune = None  # pruned at each opening
            self._prune(checkpoint)
            unsettled = checkpoint.unsettled()
        except BaseException:
            checkpoint.close()  # and its lock: the next run may have it
            raise
        for run_id, why in unsettled.items():
            self._unsent.setdefault(run_id, "judge" if why == "judge" else "langsmith")
        # Blocking LangSmith calls and the metrics' sync ``invoke`` run on daemon threads:
        # each run() has its own event loop, while async model clients are shared per
        # process and tied to the loop that first used them.
        size = self.max_concurrency
        self._pool = DaemonThreadPool(name="ragmetrics-monitor-io", size=max(4, size))
        self._judge_pool = DaemonThreadPool(name="ragmetrics-monitor-judge", size=size)
        self.engine.executor = self._judge_pool
        self._pool.start()
        self._judge_pool.start()
        try:
            with untraced():
                while not self._stop.is_set():
                    self._prune(checkpoint)
                    await self._poll(checkpoint)
                    if not self.follow or (
                        self.max_polls is not None and self.summary.polls >= self.max_polls
                    ):
                        break
                    await self._sleep(self.poll_interval)
                if not self.follow:
                    await self._retry_rounds(checkpoint)
        finally:
            self.summary.runs_unsent = len(self._unsent)
            self.summary.runs_waiting = sum(why == "waiting" for why in self._unsent.values())
            self._feedback.requests.closing.set()
            for sink in self.sinks:
                with contextlib.suppress(Exception):
                    close = partial(sink.close, self.request_timeout)
                    await self._io(close, f"closing {sink.name}")
            self._wake = None
            self._stop.clear()  # a stop() ends the run it came in; a later run() runs
            checkpoint.close()
            self._pool.stop(0)
            self._judge_pool.stop(0)
        return self.summary

    def _within_pruned(self, checkpoint: Checkpoint) -> None:
        """Refuse a window reaching back past what an earlier run pruned from the checkpoint.

        Raises:
            CheckpointError: The runs between would be judged (and paid for) again.
        """
        pruned = checkpoint.pruned_before()
        if pruned is None:
            return
        forgotten = datetime.fromtimestamp(pruned, timezone.utc)
        start = self._window_start()
        if start >= forgotten:
            return
        msg = (
            f"checkpoint {checkpoint.path} no longer holds the pairs settled before "
            f"{forgotten.isoformat(timespec='seconds')} (pruned by `retention`), but `since` "
            f"reaches back to {start.isoformat(timespec='seconds')}: runs started between "
            "would be judged and paid for again; use a shorter `since`, or another checkpoint"
        )
        raise CheckpointError(msg)

    def _prune(self, checkpoint: Checkpoint) -> None:
        """Delete the settled pairs older than ``retention``: at most once an hour.

        The cutoff never passes the listing window's start (less :data:`_CLOCK_MARGIN`),
        which only moves forward: no run this monitor lists again lost its pairs.
        """
        if self.retention is None:
            return
        now = time.monotonic()
        if self._next_prune is not None and now < self._next_prune:
            return
        self._next_prune = now + _PRUNE_EVERY
        cutoff = min(
            datetime.now(timezone.utc) - self.retention, self._window_start() - _CLOCK_MARGIN
        )
        self.summary.pairs_pruned += checkpoint.prune(cutoff.timestamp(), spare=self._unsent)

    async def _sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less when :meth:`stop` is called."""
        if self._wake is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake[1].wait(), seconds)

    async def _retry_rounds(self, checkpoint: Checkpoint) -> None:
        """One-shot mode: try unsent pairs again (not judge failures) before ending."""
        for round_ in range(self.retry_rounds):
            retry = [run_id for run_id, why in self._unsent.items() if why != "judge"]
            if not retry or self._stop.is_set():
                return
            await self._sleep(self.retry_backoff * 2.0**round_)
            if self._stop.is_set():
                return
            self.summary.retry_rounds += 1
            await self._revisit(retry, checkpoint)

    def stop(self) -> None:
        """Stop listing, finish the runs in hand, and return (thread-safe).

        A poll that is listing runs reads no further page: the runs already read are scored
        and sent, the rest of the window is left for the next run (the summary says so).
        """
        self._stop.set()
        wake = self._wake
        if wake is not None:
            with contextlib.suppress(RuntimeError):
                wake[0].call_soon_threadsafe(wake[1].set)

    # ------------------------------------------------------------------ polling

    async def _io(self, fn: Callable[[], T], what: str, *, allowed: float | None = None) -> T:
        """A blocking LangSmith call on the I/O threads, abandoned after its time is up.

        ``allowed``: seconds the call may take (default: one request timeout).
        """
        allowed = self.request_timeout if allowed is None else allowed
        return await _within(self._pool.submit(fn), what, allowed)

    @property
    def _project(self) -> UUID:
        """The project's id, read by the poll before any of its runs."""
        if self._project_id is None:  # pragma: no cover - a wiring error
            msg = "the project's runs were read before the project"
            raise RuntimeError(msg)
        return self._project_id

    def _window_start(self) -> datetime:
        if self._last_poll is None:
            return self.since
        return max(self.since, self._last_poll - self.lookback)

    async def _resolve_project(self) -> bool:
        """Find the project id once; False (error recorded) while LangSmith cannot answer.

        Raises:
            MonitorError: LangSmith has no such project (a misspelled name, say).
        """
        from langsmith.utils import LangSmithNotFoundError

        if self._project_id is not None:
            return True
        resolve = partial(self._feedback.resolve_project, self.project_name)
        try:
            self._project_id = await self._io(resolve, "reading the project")
        except LangSmithNotFoundError:
            msg = f"LangSmith has no project named {self.project_name!r} (check --project)"
            raise MonitorError(msg) from None
        except Exception as exc:
            self.summary.add_error(f"{type(exc).__name__}: {exc}")
            return False
        return True

    async def _poll(self, checkpoint: Checkpoint) -> None:
        """List the window page by page; score while the next page is read.

        At most two pages of runs are in flight, so memory stays bounded on large projects
        and the judge never idles at a page boundary.
        """
        started = datetime.now(timezone.utc)
        since = self._window_start()
        self.summary.polls += 1
        if not await self._resolve_project():
            return
        gate = asyncio.Semaphore(self.max_concurrency)
        inflight: set[asyncio.Task[None]] = set()
        listed: set[str] = set()
        stopped = False
        try:
            async with contextlib.aclosing(self._runs.pages(self._project, since)) as pages:
                async for batch in pages:
                    if batch and self._stop.is_set():  # stop(): finish what is in hand only
                        stopped = True
                        break
                    listed.update(str(run.id) for run in batch)
                    inflight.update(await self._batch(batch, checkpoint, gate))
                    while len(inflight) > _PAGE:
                        _done, inflight = await asyncio.wait(
                            inflight, return_when=asyncio.FIRST_COMPLETED
                        )
            await asyncio.gather(*inflight)
        except CheckpointError:  # nothing can be recorded: stop judging
            await cancel_and_wait(inflight)
            raise
        except Exception as exc:  # the listing failed: its runs are listed again next time
            self.summary.add_error(f"{type(exc).__name__}: {exc}")
            self.summary.listing_failed = True
            await asyncio.gather(*inflight)
            return
        self.summary.listing_failed = False
        self.summary.listing_stopped = stopped
        if stopped:  # the window's start stays: the next poll or run lists the rest
            return
        self._last_poll = started
        # Unsent pairs of runs outside this poll's window: tried whatever their age.
        older = [run_id for run_id in self._unsent if run_id not in listed]
        if older:
            await self._revisit(older, checkpoint)
        for run_id in [r for r in self._waiting_since if r not in self._unsent]:
            del self._waiting_since[run_id]  # settled since: not waiting any more

    async def _revisit(self, run_ids: list[str], checkpoint: Checkpoint) -> None:
        """Read runs with unsent pairs again, by id, and settle what can be settled now."""
        try:
            found = await self._runs.by_id(self._project, run_ids, "reading runs")
        except Exception as exc:
            self.summary.add_error(f"{type(exc).__name__}: {exc}")
            return
        for run_id in run_ids:
            if run_id in found:
                continue
            if self._unsent.get(run_id, "waiting") == "waiting":
                self._wait(run_id, None, checkpoint)  # not visible in LangSmith yet
                continue
            # Read and judged before, gone now (retention, a deleted trace): nothing to send to.
            self.summary.runs_gone += 1
            self.summary.add_error(f"run {run_id}: no longer in LangSmith; its pairs are dropped")
            for metric in self.metrics:
                checkpoint.settle(run_id, metric.metric_name, "run-gone")
            self._unsent.pop(run_id, None)
        gate = asyncio.Semaphore(self.max_concurrency)
        tasks = await self._batch(list(found.values()), checkpoint, gate, seen=True)
        try:
            await asyncio.gather(*tasks)
        except CheckpointError:
            await cancel_and_wait(tasks)
            raise

    def _mine(self, batch: list[Run]) -> list[Run]:
        """The runs of a listed page that this worker scores (its shard, sampled in)."""
        summary = self.summary
        summary.runs_listed += len(batch)
        index, count = self.shard
        mine: list[Run] = []
        for run in batch:
            trace_id = _uuid(run.trace_id) or run.id
            if shard_of(trace_id, count) != index:
                continue
            summary.runs_seen += 1
            if not is_sampled(trace_id, self.sample_rate):
                summary.runs_sampled_out += 1
                continue
            mine.append(run)
        return mine

    async def _batch(
        self,
        batch: list[Run],
        checkpoint: Checkpoint,
        gate: asyncio.Semaphore,
        *,
        seen: bool = False,
    ) -> list[asyncio.Task[None]]:
        """Filter a page (shard, sampling, checkpoint), read its roots, start its runs.

        ``seen``: the runs were filtered and counted before (a revisit of unsent pairs).
        """
        summary = self.summary
        mine = batch if seen else self._mine(batch)
        outcomes = checkpoint.outcomes(str(r.id) for r in mine)
        keys = {m.metric_name for m in self.metrics}
        todo = []
        for run in mine:
            settled = outcomes.get(str(run.id), {})
            if set(settled) >= keys:
                if "failed" in settled.values():
                    summary.runs_already_failed += 1
                else:
                    summary.runs_already_scored += 1
                self._unsent.pop(str(run.id), None)
            else:
                todo.append(run)
        if not todo:
            return []
        missing = sorted(
            {str(r.trace_id) for r in todo if r.trace_id and str(r.trace_id) not in self._roots}
        )
        unread: set[str] = set()  # traces whose root could not be read: not "waiting"
        if missing:
            try:
                roots = await self._runs.by_id(self._project, missing, "reading root runs")
            except Exception as exc:  # these runs wait for the next round or poll
                summary.add_error(f"{type(exc).__name__}: {exc}")
                roots, unread = {}, set(missing)
            for trace in missing:
                root = roots.get(trace)
                if root is not None and root.end_time is not None:
                    self._roots[trace] = root
            while len(self._roots) > 10_000:
                self._roots.pop(next(iter(self._roots)))

        async def one(run: Run) -> None:
            async with gate:
                if str(run.trace_id) in unread:  # LangSmith failed, not the trace: no wait
                    self._unsent[str(run.id)] = "langsmith"
                    return
                await self._run(run, set(outcomes.get(str(run.id), {})), checkpoint)

        return [asyncio.ensure_future(one(run)) for run in todo]

    # ------------------------------------------------------------------ one run

    def _step(self, step: str, run_id: str, metric: str) -> None:
        """Called at each step of sending one pair's feedback; does nothing.

        The steps are ``before_intent``, ``after_intent``, ``after_post`` (on an I/O
        thread) and ``before_settle``. Tests override it to kill the worker at that point.
        """

    async def _run(self, run: Run, done: set[str], checkpoint: Checkpoint) -> None:
        """Score and settle one run's pairs; a failure stays with this run's pairs."""
        run_id = str(run.id)
        unsent: Reason | None
        try:
            unsent = await self._run_pairs(run, done, checkpoint)
        except CheckpointError:
            raise  # its outcome cannot be recorded: the run stops (see Checkpoint)
        except Exception as exc:
            self.summary.add_error(f"run {run_id}: {type(exc).__name__}: {exc}")
            unsent = "langsmith"
        if unsent == "waiting":
            self._wait(run_id, run.start_time, checkpoint)
        elif unsent is None:
            self._unsent.pop(run_id, None)
            self._waiting_since.pop(run_id, None)
        else:
            self._unsent[run_id] = unsent
            self._waiting_since.pop(run_id, None)

    def _wait(self, run_id: str, started: datetime | None, checkpoint: Checkpoint) -> None:
        """Keep a run whose trace is incomplete for a later poll, for ``max_wait`` at most.

        Its age is the larger of its own (from its start) and how long this monitor has seen
        it waiting; older than ``max_wait``, its pairs are settled unsent.
        """
        now = time.monotonic()
        seen = now - self._waiting_since.setdefault(run_id, now)
        age = timedelta(seconds=seen)
        if started is not None:
            begun = started if started.tzinfo else started.replace(tzinfo=timezone.utc)
            age = max(age, datetime.now(timezone.utc) - begun)
        if age <= self.max_wait:
            self._unsent[run_id] = "waiting"
            return
        self.summary.runs_incomplete += 1
        self.summary.add_error(
            f"run {run_id}: its trace stayed incomplete in LangSmith for more than "
            f"{self.max_wait}; its pairs are dropped"
        )
        for metric in self.metrics:
            checkpoint.settle(run_id, metric.metric_name, "incomplete")
        self._unsent.pop(run_id, None)
        self._waiting_since.pop(run_id, None)

    async def _run_pairs(self, run: Run, done: set[str], checkpoint: Checkpoint) -> Reason | None:
        """Why some pairs of ``run`` are still unsent (None when all are settled)."""
        summary = self.summary
        run_id = str(run.id)
        trace = str(run.trace_id or run.id)
        root = run if run.parent_run_id is None else self._roots.get(trace)
        errored = bool(run.error) or bool(root is not None and root.error)
        if not errored and (run.end_time is None or root is None):
            return "waiting"
        todo = [m for m in self.metrics if m.metric_name not in done]
        todo, unread = await self._already_sent(run_id, todo, checkpoint)
        if not todo:
            if unread is None:
                summary.runs_already_scored += 1
            return unread
        if errored:
            summary.runs_skipped += 1
            for metric in todo:
                checkpoint.settle(run_id, metric.metric_name, "trace-error")
            return unread
        reasons = {unread}
        kept = self._kept(run_id, todo, checkpoint)
        for item in kept:  # judged before, not accepted then: sent again, not judged again
            summary.results_resent += 1
            reasons.add(await self._deliver(item, checkpoint))
        resent = {item.result.metric for item in kept}
        todo = [m for m in todo if m.metric_name not in resent]
        if todo:
            retrieval = Retrieval.from_langsmith_run(run, root, question_from=self.question_from)
            results = await score_retrieval(retrieval, todo, self.engine)
            summary.runs_scored += 1
            for item in results:
                summary.usage = summary.usage + item.result.usage
                reasons.add(await self._settle(item, checkpoint))
        if "langsmith" in reasons:
            return "langsmith"
        return "judge" if "judge" in reasons else None

    async def _already_sent(
        self, run_id: str, todo: list[BaseRagMetric], checkpoint: Checkpoint
    ) -> tuple[list[BaseRagMetric], Reason | None]:
        """Settle the pairs whose score a killed worker sent but did not record.

        Only a score counts: a pair whose only feedback is an error is scored again. A pair
        whose read fails is left unsent (reason ``"langsmith"``); the others go on.
        """
        intended = checkpoint.intended(run_id) & {m.metric_name for m in todo}
        unread: set[str] = set()
        budget = self._feedback.send_budget(self.request_timeout)
        for metric in sorted(intended):
            read = partial(self._feedback.confirm_score, run_id, metric)
            try:
                held = await self._io(read, "reading feedback", allowed=budget)
            except Exception as exc:
                self.summary.add_error(f"run {run_id} {metric}: {type(exc).__name__}: {exc}")
                unread.add(metric)
                continue
            if held:
                checkpoint.settle(run_id, metric, "sent-before-restart")
        done = checkpoint.settled([run_id]).get(run_id, set()) | unread
        left = [m for m in todo if m.metric_name not in done]
        return left, ("langsmith" if unread else None)

    def _kept(
        self, run_id: str, todo: list[BaseRagMetric], checkpoint: Checkpoint
    ) -> list[OnlineResult]:
        """The results of ``todo`` judged by an earlier attempt and kept (see Checkpoint)."""
        names = {m.metric_name for m in todo}
        found: list[OnlineResult] = []
        for metric, text in checkpoint.kept(run_id).items():
            if metric not in names:
                continue
            try:
                item = OnlineResult.model_validate_json(text)
            except ValueError as exc:  # unreadable (a newer version's?): judged again
                self.summary.add_error(f"run {run_id} {metric}: kept result unreadable: {exc}")
                checkpoint.drop_kept(run_id, metric)
                continue
            if item.result.error is not None and item.result.score is None:
                item.result.score = math.nan  # JSON has no NaN: a failure's score came back None
            found.append(item)
        return found

    async def _settle(self, item: OnlineResult, checkpoint: Checkpoint) -> Reason | None:
        """Count, send and record one fresh result; why it is unsent, or None once settled."""
        summary = self.summary
        result = item.result
        run_id, metric = str(item.run_id), result.metric
        if result.failed:
            summary.results_failed += 1
            if checkpoint.failed_attempt(run_id, metric) < self.max_attempts:
                return "judge"  # retried on the next poll or run
        else:
            summary.results_scored += int(not result.skipped)
        if result.skipped:
            summary.results_skipped += 1
            checkpoint.settle(run_id, metric, "skipped")
            await self._to_sinks(item)
            return None
        return await self._deliver(item, checkpoint)

    async def _deliver(self, item: OnlineResult, checkpoint: Checkpoint) -> Reason | None:
        """Send one result's feedback (kept until settled) and record it; None once settled."""
        summary = self.summary
        result = item.result
        run_id, metric = str(item.run_id), result.metric
        self._step("before_intent", run_id, metric)
        checkpoint.intend(run_id, metric, item.model_dump_json())
        self._step("after_intent", run_id, metric)
        budget = self._feedback.send_budget(self.request_timeout)
        try:
            sent = await self._io(partial(self._send, item), "sending feedback", allowed=budget)
        except Exception as exc:
            summary.feedback_failed += 1
            summary.add_error(f"run {run_id} {metric}: {type(exc).__name__}: {exc}")
            return "langsmith"
        self._step("before_settle", run_id, metric)
        summary.feedback_sent += int(sent == "sent")
        # "superseded": an error not sent, as the pair has a score already (settled so)
        failed = result.failed and sent != "superseded"
        checkpoint.settle(run_id, metric, "failed" if failed else "scored")
        await self._to_sinks(item)
        return None

    async def _to_sinks(self, item: OnlineResult) -> None:
        """Hand a settled result to the extra sinks (a failing sink is counted, not fatal)."""
        for sink in self.sinks:
            try:
                await self._io(partial(sink.emit, item), f"sink {sink.name}")
            except Exception as exc:
                self.summary.add_error(f"sink {sink.name}: {type(exc).__name__}: {exc}")

    def _send(self, item: OnlineResult) -> str:
        """Post one feedback and wait for LangSmith's answer (no background batching)."""
        feedback = FeedbackItem.of(
            item.result,
            run_id=item.run_id,
            key_run_id=item.run_id,
            trace_id=None,  # with a trace id the SDK may batch in the background
            retriever=item.retriever,
        )
        if feedback is None:  # pragma: no cover - skipped results never get here
            return "sent"
        run_id, metric = str(item.run_id), item.result.metric
        return self._feedback.send(
            feedback,
            session_id=self._project_id,
            after_post=partial(self._step, "after_post", run_id, metric),
        )


def monitor(project_name: str, **options: Any) -> MonitorSummary:
    """Run a :class:`LangSmithMonitor` and return its summary (options as the class's)."""
    return LangSmithMonitor(project_name, **options).run()
