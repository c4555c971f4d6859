"""Isolated online scoring: judges, segmentation and sinks run in a child process.

With ``isolation="process"`` the handler's background is an :class:`IsolatedBackground`.
On the caller's thread a finished retrieval becomes plain data (strings, ids, numbers) and
is appended to a bounded queue; a feeder thread pickles batches down a pipe to a child
process started with the ``spawn`` method, which builds its metrics and sinks from
:attr:`ProcessIsolation.setup` and scores with the same
:class:`~langchain_ragmetrics.callbacks._background.Background` as the in-process mode. The
child's counters and log records come back up another pipe. The application's process thus
runs no judge client, no segmentation and no sink: its threads never wait behind them for
the GIL.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import multiprocessing
import pickle
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from langchain_ragmetrics._errors import HookError
from langchain_ragmetrics._schema import Usage, _document_id
from langchain_ragmetrics.callbacks import _exit
from langchain_ragmetrics.callbacks._mapping import REFERENCE_FIELDS, default_answer
from langchain_ragmetrics.callbacks._otel import plain_span_context
from langchain_ragmetrics.callbacks._pipeline import AnswerFrom, QuestionFrom
from langchain_ragmetrics.callbacks._records import Capture
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog, SinkStats
from langchain_ragmetrics.callbacks._worker import deadline_after, remaining
from langchain_ragmetrics.callbacks.sinks import BaseSink
from langchain_ragmetrics.metrics._base import BaseRagMetric

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from langchain_ragmetrics.callbacks._settings import HandlerSettings

__all__ = [
    "ChildOptions",
    "HookError",
    "IsolatedBackground",
    "ProcessIsolation",
    "ScoringSetup",
    "SetupSource",
    "build_setup",
    "plain_capture",
]

_SCALARS = (str, int, float, bool, type(None))
_CHILD_COUNTERS = (
    "processed",
    "scored",
    "failed",
    "skipped",
    "handler_errors",
    "abandoned",
    "dropped",
)
"""Counters the child keeps and the parent adds up (the rest are counted by the parent)."""
_USAGE_FIELDS = tuple(Usage.model_fields)
_SINK_COUNTS = ("delivered", "skipped", "errors", "dropped")
"""Per-sink counts the parent adds up over the child's restarts (``pending`` is a gauge)."""
_TICK_SECONDS = 0.5
_KILL_GRACE_SECONDS = 2.0
_IDLE_EXIT_CLOSE_SECONDS = 30.0


class ScoringSetup(BaseModel):
    """What the child process of an isolated handler scores with; built in the child.

    Judges hold HTTP clients and sinks hold files or network clients: none of them can
    cross a process boundary, so the child builds its own from the function named by
    :attr:`ProcessIsolation.setup`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    metrics: list[BaseRagMetric] | None = None
    """The metrics; default ``[ContextRelevance(), ContextPrecision()]`` with the default
    judge (configured by the ``OPENAI_*`` variables the child inherits)."""
    sinks: list[BaseSink] | None = None
    """The sinks; default a ``LoggingSink``, whose records are logged by the application's
    process (the child forwards its log records)."""
    reference_provider: Callable[..., Any] | None = None
    """See the handler's ``reference_provider``; called in the child."""


SetupSource = str | Callable[[], ScoringSetup]
"""A ``"package.module:function"`` path or a picklable callable returning a ScoringSetup."""


class ProcessIsolation(BaseModel):
    """Options of the isolated mode: ``RagMetricsCallbackHandler(isolation=ProcessIsolation())``.

    Trade-offs: the child is a second Python process (about 100 MiB with the judge stack,
    a few seconds to start, paid once, in the background); metrics, judges, sinks and the
    ``reference_provider`` are built in the child from ``setup`` (so they cannot share
    objects with the application: an ``InMemorySink`` there is out of the application's
    reach); ``question_from`` and ``answer_from`` run on the caller's thread, as the root
    run's input and output are turned into plain data there.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    setup: SetupSource | None = None
    """Builds the metrics and sinks in the child: ``"package.module:function"`` or a
    picklable callable (a module-level function or a ``functools.partial`` of one) returning
    a :class:`ScoringSetup`. None: the default metrics and a ``LoggingSink``."""
    hang_timeout: float | None = Field(default=60.0, gt=0)
    """A running child silent this long (it reports every second while alive) is killed
    and replaced; the retrievals it held count as ``abandoned``. None: never."""
    start_timeout: float = Field(default=120.0, gt=0)
    """Seconds a new child may take to import its libraries and build its setup before it
    is treated as hung."""
    niceness: int = Field(default=10, ge=0, le=19)
    """Added to the child's scheduling niceness (POSIX ``nice``): when the CPUs are busy the
    operating system runs the application first and scoring with what is left. 0 keeps the
    application's priority."""
    max_restarts: int = Field(default=3, ge=0)
    """Crashes in a row (without any work done in between) after which the handler stops
    starting children and drops new work, with one warning."""

    @field_validator("setup")
    @classmethod
    def _check_setup(cls, value: SetupSource | None) -> SetupSource | None:
        if value is None:
            return None
        if isinstance(value, str):
            _resolve(value)
            return value
        if not callable(value):
            msg = "`setup` must be a 'package.module:function' path or a callable"
            raise TypeError(msg)
        try:
            pickle.dumps(value)
        except Exception as exc:
            msg = (
                f"`setup` must be picklable to reach the child process ({exc}); use a "
                "module-level function, a functools.partial of one, or a "
                "'package.module:function' path"
            )
            raise ValueError(msg) from exc
        return value


def _resolve(path: str) -> Callable[[], ScoringSetup]:
    """The callable a ``"package.module:function"`` path names (imported now)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        msg = f"`setup` {path!r} must look like 'package.module:function'"
        raise ValueError(msg)
    try:
        target = reduce(getattr, attr.split("."), importlib.import_module(module_name))
    except (ImportError, AttributeError) as exc:
        msg = f"`setup` {path!r} cannot be found: {exc}"
        raise ValueError(msg) from exc
    if not callable(target):
        msg = f"`setup` {path!r} is not callable"
        raise TypeError(msg)
    return target


def build_setup(source: SetupSource | None) -> ScoringSetup:
    """Call the setup function (in the child) and check what it returned."""
    if source is None:
        return ScoringSetup()
    target = _resolve(source) if isinstance(source, str) else source
    setup = target()
    if not isinstance(setup, ScoringSetup):
        msg = f"`setup` must return a ScoringSetup, got {type(setup).__name__}"
        raise TypeError(msg)
    return setup


# --------------------------------------------------------------------------- plain data


def _hook(fn: Callable[[Any], Any], value: Any, name: str) -> tuple[Any, str | None]:
    """``(fn(value), None)``, or ``(None, error)`` when the user's hook raised."""
    try:
        return fn(value), None
    except Exception as exc:
        return None, f"{name} raised {type(exc).__name__}: {exc}"


def _plain_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The reference fields and scalar values of run metadata (what the child may use)."""
    return {k: v for k, v in metadata.items() if k in REFERENCE_FIELDS or isinstance(v, _SCALARS)}


def _plain_documents(documents: Sequence[Any]) -> list[Any]:
    from langchain_core.documents import Document

    return [
        (doc.page_content, _document_id(doc)) if isinstance(doc, Document) else doc
        for doc in documents
    ]


def plain_capture(
    capture: Capture, question_from: QuestionFrom, answer_from: AnswerFrom | None
) -> dict[str, Any]:
    """A retrieval as plain, picklable data: run ids, texts, and the resolved Q and A.

    The root input and output are reduced here, with the user's hooks, to the question and
    answer they give (or the error they raised), so nothing of the application's objects
    crosses to the child.
    """
    question: tuple[Any, str | None] = (None, None)
    if question_from == "input":
        from langchain_ragmetrics.callbacks._mapping import default_question

        question = _hook(default_question, capture.root_inputs, "question_from")
    elif callable(question_from):
        question = _hook(question_from, capture.root_inputs, "question_from")
    answer = None
    if capture.root_outputs is not None:
        answer = _hook(answer_from or default_answer, capture.root_outputs, "answer_from")
    return {
        "root_run_id": capture.root_run_id,
        "trace_id": capture.trace_id,
        "run_id": capture.run_id,
        "parent_run_id": capture.parent_run_id,
        "retriever": capture.retriever,
        "query": capture.query,
        "documents": _plain_documents(capture.documents),
        "tags": list(capture.tags),
        "metadata": _plain_metadata(capture.metadata),
        "root_metadata": _plain_metadata(capture.root_metadata),
        "question": question,
        "answer": answer,
        "otel_context": plain_span_context(capture.otel_context),
        "links": dict(capture.links),
    }


class ChildOptions(BaseModel):
    """What the child needs besides its setup (picklable)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_queue_size: int
    """Bound of the child's own queue (the parent never sends more than this)."""
    max_concurrency: int
    """Judge jobs at once."""
    rate_limit_per_minute: float | None
    """Cap on judge calls per minute."""
    timeout: float | None
    """Seconds per metric job."""
    trace_judge: str | None
    """LangSmith project of the judge runs, or None."""
    name: str
    """Prefix of the child's thread names."""
    sink_queue_size: int = 10_000
    """Bound of each sink's outbox in the child."""
    log_levels: dict[str, int]
    """Effective levels of the application's loggers, mirrored in the child."""
    heartbeat: float
    """Seconds between the child's reports when nothing changed."""
    niceness: int
    """Added to the child's niceness."""


# --------------------------------------------------------------------------- parent side


@dataclass(eq=False)
class _Child:
    """One child process and what the parent knows of it."""

    process: BaseProcess
    send: Connection
    recv: Connection
    sent: int = 0
    done: int = 0
    ready: bool = False
    dead: bool = False
    fatal: bool = False
    closed: bool | None = None
    heard: float = field(default_factory=time.monotonic)
    totals: dict[str, int] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    sinks: dict[str, dict[str, int]] = field(default_factory=dict)
    tokens: set[int] = field(default_factory=set)
    listener: threading.Thread | None = None


_Entry = (
    tuple[Literal["item"], dict[str, Any]]
    | tuple[Literal["flush"], int, float | None]
    | tuple[Literal["close"], float | None]
)


class IsolatedBackground:
    """The handler's background in a child process: same methods as ``Background``.

    Args:
        settings: The handler's options (``question_from`` / ``answer_from`` run on the
            caller's thread here; the queue, concurrency and sink bounds go to the child).
        isolation: The child's setup and supervision options.
        counters: Shared counters (the child's are added in as they arrive).
        failures: Shared log-once reporter.
    """

    engine = None
    """No scoring engine in this process (it lives in the child)."""

    def __init__(
        self,
        settings: HandlerSettings,
        isolation: ProcessIsolation,
        *,
        counters: Counters,
        failures: FailureLog,
    ) -> None:
        trace_judge = settings.trace_judge
        if trace_judge is not None and not isinstance(trace_judge, str):
            msg = "with isolation='process', `trace_judge` must be a project name or None"
            raise TypeError(msg)
        max_queue_size = settings.max_queue_size
        name = settings.name
        self._options: dict[str, Any] = {
            "max_queue_size": max_queue_size,
            "max_concurrency": settings.max_concurrency,
            "rate_limit_per_minute": settings.rate_limit_per_minute,
            "timeout": settings.timeout,
            "trace_judge": trace_judge,
            "name": name,
            "sink_queue_size": settings.sink_queue_size,
            "heartbeat": min(1.0, (isolation.hang_timeout or 4.0) / 4),
            "niceness": isolation.niceness,
        }
        self.settings = settings
        self.isolation = isolation
        self.max_queue_size = max_queue_size
        self.name = name
        self._question_from = settings.question_from
        self._answer_from = settings.answer_from
        self._counters = counters
        self._failures = failures
        self._sinks: dict[str, dict[str, int]] = {}
        self._sink_pending: dict[str, int] = {}
        self._cond = threading.Condition()
        self._pending: deque[_Entry] = deque()
        self._pending_items = 0
        self._child: _Child | None = None
        self._children = 0
        self._crashes = 0
        self._feeder: threading.Thread | None = None
        self._accepting = True
        self._stopping = False
        self._disabled = False
        self._tokens = itertools.count(1)
        self._flushed: dict[int, bool] = {}

    # ------------------------------------------------------------------ caller side

    @property
    def queued(self) -> int:
        """Retrievals waiting here, in transit or being scored in the child."""
        with self._cond:
            return self._outstanding()

    @property
    def child_pid(self) -> int | None:
        """The running child's process id (None before the first retrieval)."""
        with self._cond:
            child = self._child
            return None if child is None or child.dead else child.process.pid

    @property
    def children_started(self) -> int:
        """How many child processes were started so far (restarts included)."""
        return self._children

    def _outstanding(self) -> int:
        child = self._child
        in_child = 0 if child is None or child.dead else child.sent - child.done
        return self._pending_items + in_child

    def submit(self, capture: Capture) -> bool:
        """Turn a retrieval into plain data and enqueue it (False when dropped)."""
        item = plain_capture(capture, self._question_from, self._answer_from)
        with self._cond:
            accepted = (
                self._accepting
                and not self._disabled
                and self._outstanding() < self.max_queue_size
                and (self._feeder is not None or self._start_feeder())
            )
            if accepted:
                self._pending.append(("item", item))
                self._pending_items += 1
                self._cond.notify_all()
        if not accepted:
            self._counters.add(dropped=1)
        return accepted

    def owns_current_thread(self, action: str) -> bool:
        """True (and logged once) when called from this object's own threads."""
        current = threading.current_thread()
        with self._cond:
            child = self._child
            own = [self._feeder, None if child is None else child.listener]
        if not any(current is thread for thread in own):
            return False
        self._failures.report(
            f"{action}-from-worker",
            f"{action}() called from the handler's own background thread; ignored",
        )
        return True

    def flush(self, timeout: float | None) -> bool:
        """Wait until the retrievals submitted so far are scored and delivered by the child.

        Returns:
            False at the deadline (``stats.pending_at_deadline`` says how many were left),
            or when the child died meanwhile (its retrievals count as ``abandoned``).
        """
        if self.owns_current_thread("flush"):
            return False
        with self._cond:
            if self._outstanding() == 0 and (self._child is None or self._child.dead):
                self._counters.set("pending_at_deadline", 0)
                return True
            if self._stopping:
                return False
            token = next(self._tokens)
            self._pending.append(("flush", token, timeout))
            self._cond.notify_all()
            answered = self._cond.wait_for(lambda: token in self._flushed, timeout)
            done = self._flushed.pop(token, False) if answered else False
            left = 0 if done else self._outstanding()
        self._counters.set("pending_at_deadline", left)
        return done

    def close(self, timeout: float | None) -> bool:
        """Refuse new work, let the child flush and close its sinks within ``timeout``.

        A child still running at the deadline is terminated (then killed); what it held
        counts as ``abandoned``.
        """
        if self.owns_current_thread("close"):
            return False
        deadline = deadline_after(timeout)
        with self._cond:
            self._accepting = False
            feeder = self._feeder
            if feeder is None:
                return True
            if not self._stopping:
                self._stopping = True
                self._pending.append(("close", timeout))
                self._cond.notify_all()
            settled = self._cond.wait_for(self._settled, remaining(deadline))
            child = self._child
            left = self._outstanding()
        if child is not None and not child.dead:
            self._kill(child, "did not finish closing in time")
            self._on_death(child, None)  # account now, not when the listener wakes
        feeder.join(_KILL_GRACE_SECONDS)
        _exit.unregister(self)
        self._counters.set("pending_at_deadline", left)
        clean = child is None or child.closed is not False
        return settled and clean and left == 0 and not feeder.is_alive()

    def _settled(self) -> bool:
        """Whether the child exited (or never started) and nothing is left to send (lock held)."""
        child = self._child
        return not self._pending and (child is None or child.dead)

    def stop_when_idle(self) -> None:
        """Ask the child to finish its queue and exit (the handler was collected).

        Until the child is done, interpreter exit waits for it (within its close timeout):
        ``multiprocessing`` would otherwise terminate it at exit with its work unfinished.
        """
        with self._cond:
            self._accepting = False
            if self._feeder is None or self._stopping:
                return
            self._stopping = True
            self._pending.append(("close", _IDLE_EXIT_CLOSE_SECONDS))
            self._cond.notify_all()
        _exit.register(self)

    @property
    def exit_timeout(self) -> float | None:
        """Seconds the exit hook may spend on this object (a collected handler's child too)."""
        if self.settings.exit_timeout is not None:
            return self.settings.exit_timeout
        return _IDLE_EXIT_CLOSE_SECONDS + _KILL_GRACE_SECONDS if self._stopping else None

    def _flush_at_exit(self, timeout: float) -> None:
        """The exit hook: close within ``timeout``, bounded; never raises."""
        with contextlib.suppress(Exception):
            self.close(timeout)

    def sink_stats(self) -> dict[str, SinkStats]:
        """Each sink's figures in the child, added up over its restarts."""
        with self._cond:
            return {
                key: SinkStats(**totals, pending=self._sink_pending.get(key, 0))
                for key, totals in self._sinks.items()
            }

    def reset_sink_stats(self) -> None:
        """Zero the sinks' counts (``pending`` stays live)."""
        with self._cond:
            self._sinks = {key: dict.fromkeys(totals, 0) for key, totals in self._sinks.items()}

    # ------------------------------------------------------------------ feeder thread

    def _start_feeder(self) -> bool:
        """Start the feeder thread (lock held); False if that is impossible."""
        try:
            if self.settings.exit_timeout is not None:
                _exit.register(self)  # flushed at exit even if the handler is dropped
            thread = threading.Thread(target=self._feed, name=f"{self.name}-feeder", daemon=True)
            thread.start()
        except RuntimeError as exc:  # e.g. at interpreter shutdown
            self._failures.report("feeder-start", f"cannot start the feeder thread: {exc}", exc)
            return False
        self._feeder = thread
        return True

    def _feed(self) -> None:
        """Send pending entries to the child, starting (or restarting) it when needed."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending))
                child = self._child
                if child is None or child.dead:
                    child = self._replace_child()
                    if child is None:  # stopping, or scoring turned off (work abandoned)
                        if self._stopping:
                            return
                        continue
                batch = list(self._pending)
                self._pending.clear()
                items = [entry[1] for entry in batch if entry[0] == "item"]
                self._pending_items -= len(items)
                child.sent += len(items)
                for entry in batch:
                    if entry[0] == "flush":
                        child.tokens.add(entry[1])
                closing = any(entry[0] == "close" for entry in batch)
            self._send(child, batch)
            if closing:
                return

    def _replace_child(self) -> _Child | None:
        """A new child, or None (pending work abandoned) when stopping or disabled (lock held)."""
        if self._stopping or self._disabled:
            dropped = self._pending_items
            for entry in self._pending:
                if entry[0] == "flush":
                    self._flushed[entry[1]] = False
            self._pending.clear()
            self._pending_items = 0
            if dropped:
                self._counters.add(abandoned=dropped)
            self._cond.notify_all()
            return None
        return self._spawn()

    def _spawn(self) -> _Child | None:
        """Start a child process and its listener thread (lock held)."""
        from langchain_ragmetrics.callbacks import _child

        context = multiprocessing.get_context("spawn")
        parent_recv, child_send = context.Pipe(duplex=False)
        child_recv, parent_send = context.Pipe(duplex=False)
        options = ChildOptions(log_levels=_log_levels(), **self._options)
        self._children += 1
        process = context.Process(
            target=_child.main,
            args=(child_recv, child_send, self.isolation.setup, options),
            name=f"{self.name}-child-{self._children}",
            daemon=True,
        )
        try:
            process.start()
        except Exception as exc:
            for conn in (parent_recv, child_send, child_recv, parent_send):
                conn.close()
            self._failures.report("child-start", f"cannot start the scoring process: {exc}", exc)
            self._disabled = True
            return self._replace_child()
        child_send.close()
        child_recv.close()
        child = _Child(process=process, send=parent_send, recv=parent_recv)
        child.listener = threading.Thread(
            target=self._listen, args=(child,), name=f"{self.name}-listener", daemon=True
        )
        child.listener.start()
        self._child = child
        return child

    def _send(self, child: _Child, batch: list[_Entry]) -> None:
        """Pickle and send a batch: runs of items go as one message, controls alone."""
        messages: list[tuple[Any, ...]] = []
        for kind, run in itertools.groupby(batch, key=lambda entry: entry[0]):
            entries = list(run)
            if kind == "item":
                messages.append(("items", [entry[1] for entry in entries]))
            else:
                messages.extend(entries)
        for message in messages:
            try:
                data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                data = self._pickle_each(child, message, exc)
            try:
                child.send.send_bytes(data)
            except (OSError, ValueError) as exc:  # the child died (or was killed) meanwhile
                self._on_death(child, f"the pipe to the scoring process broke ({exc!r})")
                return

    def _pickle_each(self, child: _Child, message: tuple[Any, ...], exc: Exception) -> bytes:
        """Pickle the items that can be; the others are counted as errors and dropped."""
        kept = [item for item in message[1] if _picklable(item)]
        lost = len(message[1]) - len(kept)
        self._counters.add(handler_errors=lost, abandoned=lost)
        with self._cond:
            child.sent -= lost
            self._cond.notify_all()
        self._failures.report(
            f"isolated:pickle:{type(exc).__name__}",
            f"a retrieval could not be sent to the scoring process: {exc!r}",
            exc,
        )
        return pickle.dumps(("items", kept), protocol=pickle.HIGHEST_PROTOCOL)

    # ------------------------------------------------------------------ listener thread

    def _listen(self, child: _Child) -> None:
        """Read the child's reports until it exits; kill it when it stays silent too long."""
        hang = self.isolation.hang_timeout
        start = self.isolation.start_timeout
        reason = "exited"
        while True:
            try:
                ready = wait([child.recv, child.process.sentinel], _TICK_SECONDS)
            except OSError:
                break
            if child.recv in ready:
                try:
                    message = child.recv.recv()
                except (EOFError, OSError):
                    break
                self._handle(child, message)
                continue
            if ready:  # the process ended and nothing is left to read
                break
            limit = hang if child.ready else start
            if limit is not None and time.monotonic() - child.heard > limit:
                reason = f"was silent for {limit:g} s and was killed"
                self._kill(child, reason)
                break
        child.process.join(_KILL_GRACE_SECONDS)
        code = child.process.exitcode
        quiet = child.closed is not None or child.fatal  # a normal exit, or already reported
        self._on_death(child, None if quiet else f"{reason} (exit code {code})")
        with contextlib.suppress(OSError):
            child.recv.close()

    def _handle(self, child: _Child, message: tuple[Any, ...]) -> None:
        kind = message[0]
        child.heard = time.monotonic()
        if kind == "log":
            _relog(message[1])
            return
        with self._cond:
            if kind == "ready":
                child.ready = True
            elif kind == "stats":
                self._apply(child, message[1])
            elif kind == "flushed":
                _, token, ok, stats = message
                self._apply(child, stats)
                child.tokens.discard(token)
                self._flushed[token] = ok
            elif kind == "closed":
                self._apply(child, message[2])
                child.closed = bool(message[1])
            elif kind == "fatal":
                child.fatal = True
                self._disabled = True
            self._cond.notify_all()
        if kind == "fatal":
            self._failures.report(
                "isolated:setup",
                f"the scoring process could not start, online scoring is off: {message[1]}",
            )

    def _apply(self, child: _Child, stats: Mapping[str, Any]) -> None:
        """Add what the child counted since its last report (lock held)."""
        delta = {k: stats[k] - child.totals.get(k, 0) for k in _CHILD_COUNTERS}
        usage = stats["usage"]
        used = {k: usage[k] - child.usage.get(k, 0) for k in _USAGE_FIELDS}
        child.totals = {k: stats[k] for k in _CHILD_COUNTERS}
        child.usage = dict(usage)
        for key, figures in (stats.get("sinks") or {}).items():
            seen = child.sinks.setdefault(key, {})
            totals = self._sinks.setdefault(key, dict.fromkeys(_SINK_COUNTS, 0))
            for name in _SINK_COUNTS:
                totals[name] += figures[name] - seen.get(name, 0)
                seen[name] = figures[name]
            self._sink_pending[key] = figures["pending"]
        done = stats["processed"] + stats["dropped"] + stats["abandoned"]
        if done > child.done:
            self._crashes = 0
        child.done = done
        if any(delta.values()):
            self._counters.add(**delta)
        if any(used.values()):
            self._counters.add_usage(Usage(**used))

    def _kill(self, child: _Child, reason: str) -> None:
        process = child.process
        with contextlib.suppress(Exception):
            process.terminate()
            process.join(_KILL_GRACE_SECONDS)
            if process.is_alive():
                process.kill()
                process.join(_KILL_GRACE_SECONDS)
        self._failures.report("isolated:kill", f"the scoring process {reason}")

    def _on_death(self, child: _Child, reason: str | None) -> None:
        """Account for a child that is gone (once): what it held is abandoned."""
        with self._cond:
            if child.dead:
                return
            child.dead = True
            lost = max(0, child.sent - child.done)
            for key, held in self._sink_pending.items():  # what its sinks held is lost
                self._sinks.setdefault(key, dict.fromkeys(_SINK_COUNTS, 0))["dropped"] += held
            self._sink_pending.clear()
            for token in child.tokens:
                self._flushed[token] = False
            child.tokens.clear()
            if reason is not None:
                self._crashes += 1
                if self._crashes > self.isolation.max_restarts:
                    self._disabled = True
            disabled, stopping = self._disabled, self._stopping
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            child.send.close()
        if lost:
            self._counters.add(abandoned=lost)
        if reason is not None:
            tail = ""
            if disabled:
                tail = "; online scoring is off (too many crashes in a row)"
            elif not stopping:
                tail = "; a new one starts with the next retrieval"
            self._failures.report(
                "isolated:child-died",
                f"the scoring process {reason}: {lost} retrievals lost{tail}",
            )


def _picklable(item: object) -> bool:
    try:
        pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False
    return True


def _log_levels() -> dict[str, int]:
    """The application's effective levels, for the child to mirror."""
    names = ("", "langchain_ragmetrics", "langchain_ragmetrics.online")
    return {name: logging.getLogger(name).getEffectiveLevel() for name in names}


def _relog(fields: dict[str, Any]) -> None:
    """Re-emit a log record of the child through this process's logging configuration."""
    logger = logging.getLogger(fields["name"])
    if logger.isEnabledFor(fields["levelno"]):
        logger.handle(logging.makeLogRecord(fields))
