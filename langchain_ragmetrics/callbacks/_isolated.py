"""Isolated online scoring: judges, segmentation and sinks run in a child process.

With ``isolation="process"`` the handler's runtime is a :class:`ProcessRuntime`. The
caller's thread puts a finished retrieval, as recorded, in the package's
:class:`~langchain_ragmetrics._queue.BoundedQueue`; a feeder thread turns each into a plain
:class:`~langchain_ragmetrics._retrieval.Retrieval` and pickles batches down a
pipe (typed messages, see ``_messages``) to a child process started with the ``spawn``
method, which builds its metrics and sinks from :attr:`ProcessIsolation.setup` and scores
with the same :class:`~langchain_ragmetrics.callbacks._background.ThreadRuntime` as the
in-process mode. The child's counters and log records come back up another pipe. The
application's process thus runs no judge client and no segmentation: its threads never wait
behind them for the GIL.

Where the sinks run depends on who asked for the child. With an explicit
``ProcessIsolation(setup=...)`` the setup builds them in the child. Under the default
``isolation="auto"`` the handler passes the user's own sink objects (``sinks``): the child
sends its results up in batches (:class:`~langchain_ragmetrics.callbacks._messages.Results`)
and this process delivers them through one outbox per sink, as the thread mode does (see
``_outbox``), so an ``InMemorySink`` the application holds fills up, a callable runs here and
files are written by the application. The exception is a sink the child builds again
(``BaseSink.for_child_process``): it delivers there, and its figures come up with the
child's reports, under the key it has here.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing.process
import os
import pickle
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from langchain_ragmetrics._errors import HookError
from langchain_ragmetrics._queue import BoundedQueue, deadline_after, remaining, remaining_or
from langchain_ragmetrics._retrieval import Capture, Retrieval
from langchain_ragmetrics._schema import Usage
from langchain_ragmetrics.callbacks import _exit
from langchain_ragmetrics.callbacks._background import (
    SINK_GRACE_SECONDS,
    STOP_GRACE_SECONDS,
    reporting_abandoned,
)
from langchain_ragmetrics.callbacks._hooks import HookRunner, Outcome, convert_batch, hook_names
from langchain_ragmetrics.callbacks._isolation import (
    ProcessIsolation,
    ScoringSetup,
    SetupSource,
    build_setup,
)
from langchain_ragmetrics.callbacks._launch import ChildProcess, start_child
from langchain_ragmetrics.callbacks._messages import (
    ChildMessage,
    ChildStart,
    Closed,
    CloseRequest,
    Fatal,
    Flushed,
    FlushRequest,
    LogRecordData,
    ParentMessage,
    Ready,
    Report,
    ResetRequest,
    Results,
    ScoreItems,
    WasReset,
    picklable,
)
from langchain_ragmetrics.callbacks._outbox import (
    SinkOutbox,
    close_all,
    flush_all,
    outboxes_for,
    sink_keys,
)
from langchain_ragmetrics.callbacks._settings import HandlerSettings
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog, HandlerStats, SinkStats
from langchain_ragmetrics.callbacks.sinks import BaseSink

__all__ = [
    "HookError",
    "ProcessIsolation",
    "ProcessRuntime",
    "ScoringSetup",
    "SetupSource",
    "build_setup",
]

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
_FEED_PAUSE_SECONDS = 0.2
"""While retrievals keep coming the feeder sends at most every this often (a batch each):
at 20 a second that is 5 wake-ups instead of 20, and scoring starts at most 0.2 s later."""
_KILL_GRACE_SECONDS = 2.0
_CHILD_CLOSE_GRACE_SECONDS = STOP_GRACE_SECONDS + SINK_GRACE_SECONDS + _KILL_GRACE_SECONDS
"""How far past ``close``'s timeout the child may take to close (its own two graces, and as
long again as a kill may take, to answer and exit) before it is killed."""
_IDLE_EXIT_CLOSE_SECONDS = 30.0
_RESET_WAIT_SECONDS = 5.0
"""How long ``reset_stats`` waits for the child to start its new period (past that, the
reset happens when the child's answer comes, or when it exits)."""


@dataclass(eq=False)
class _Child:
    """One child process and what the parent knows of it."""

    process: ChildProcess
    send: Connection
    recv: Connection
    sent: int = 0
    done: int = 0
    ready: bool = False
    dead: bool = False
    lost: int = 0
    """Retrievals counted abandoned at its death, less those a later report showed done."""
    lost_in: int = 0
    """The counters' generation ``lost`` was counted in (a reset since drops it)."""
    fatal: bool = False
    closed: bool | None = None
    heard: float = field(default_factory=time.monotonic)
    totals: dict[str, int] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    sinks: dict[str, dict[str, int]] = field(default_factory=dict)
    tokens: set[int] = field(default_factory=set)
    resets: set[int] = field(default_factory=set)
    """Tokens of the resets sent to it and not yet done (done at its answer, or its death)."""
    listener: threading.Thread | None = None
    greeting: ChildStart | None = None
    """The first message to send (a script child's :class:`ChildStart`), sent by the feeder."""


_Entry = Capture | FlushRequest | ResetRequest | CloseRequest
"""What waits for the feeder: finished retrievals as recorded, and controls."""

_Outgoing = Retrieval | FlushRequest | ResetRequest | CloseRequest
"""What the feeder sends: retrievals (in runs, as one :class:`ScoreItems`) and controls."""


class ProcessRuntime:
    """The runtime of ``isolation="process"``: scoring in a child process.

    Args:
        settings: The handler's options (``question_from`` / ``answer_from`` run here, on
            the feeder thread; the queue, concurrency and sink bounds go to the child).
        isolation: The child's setup and supervision options.
        counters: Shared counters (the child's are added in as they arrive).
        failures: Shared log-once reporter.
        sinks: The user's sinks (``isolation="auto"``): the child sends its results here
            and these deliver them, each through its own outbox, except those at the
            positions ``in_child``, which the child's setup builds again and delivers with.
            None: the child's setup builds and runs the sinks.
        in_child: Positions in ``sinks`` of those delivered by the child.
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
        sinks: Sequence[BaseSink] | None = None,
        in_child: Sequence[int] = (),
    ) -> None:
        self._child_start = settings.for_child()  # checks trace_judge now, not in the child
        name = settings.name
        self.settings = settings
        self.isolation = isolation
        self.max_queue_size = settings.max_queue_size
        self.name = name
        self._counters = counters
        self._failures = failures
        self._sinks: dict[str, dict[str, int]] = {}
        self._sink_pending: dict[str, int] = {}
        self._cond = threading.Condition()
        self._queue: BoundedQueue[_Entry] = BoundedQueue()
        """What waits for the feeder; the bound (``max_queue_size``) is on retrievals
        outstanding, those in the child included, so it is checked in :meth:`submit`."""
        self._child: _Child | None = None
        self._children = 0
        self._crashes = 0
        self._feeder: threading.Thread | None = None
        self._accepting = True
        self._stopping = False
        self._disabled = False
        # close() passed its deadline: no child starts again, what is queued is abandoned.
        self._gave_up = False
        self._resets_queued: set[int] = set()  # queued, not yet sent with a child's batch
        # stop_when_idle() asked the child to finish: the handler was collected.
        self._idle_exit = False
        # A close is under way: close()'s, or the idle exit's (which sets _shut when done).
        self._closing = False
        self._shut = threading.Event()
        self._tokens = itertools.count(1)
        self._flushed: dict[int, bool] = {}
        self._waiting: set[int] = set()  # tokens of the flush() calls still waiting
        self._hurry = threading.Event()
        """Set with a flush or close request: the feeder sends at once, without its pause."""
        self._hooks = HookRunner(settings) if hook_names(settings) else None
        """Runs the user's ``question_from`` / ``answer_from`` for the feeder, bounded by
        ``timeout`` (None: there are none; the conversion runs on the feeder)."""
        self._outboxes: list[SinkOutbox] | None = None
        """This process's sink outboxes (None: the sinks run in the child)."""
        self._order: list[str] = []
        """Every sink's key, in the user's order (empty: the keys the child reports)."""
        self._child_keys: list[str] = []
        """The keys here of the sinks the child builds again, in the child's order (its
        figures come in that order, under names of its own: they are matched by position)."""
        self._idle: list[BaseSink] = []
        """The user's objects of those sinks: idle here, closed with the others."""
        if sinks is not None:
            keys = sink_keys(sinks)
            moved = set(in_child)
            here = [i for i in range(len(sinks)) if i not in moved]
            self._outboxes = outboxes_for(
                [sinks[i] for i in here],
                keys=[keys[i] for i in here],
                max_size=settings.sink_queue_size,
                name=name,
                failures=failures,
            )
            there = sorted(moved)
            self._child_keys = [keys[i] for i in there]
            self._idle = [sinks[i] for i in there]
            self._order = keys
            self._sinks = {keys[i]: dict.fromkeys(_SINK_COUNTS, 0) for i in there}

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
    def sinks_in_child(self) -> list[str]:
        """Keys of the user's sinks that the child builds again and delivers with."""
        return list(self._child_keys)

    @property
    def children_started(self) -> int:
        """How many child processes were started so far (restarts included)."""
        return self._children

    def _outstanding(self) -> int:
        if self._gave_up:  # everything left was counted as abandoned
            return 0
        child = self._child
        in_child = 0 if child is None or child.dead else child.sent - child.done
        return self._queue.size + in_child

    def submit(self, capture: Capture) -> bool:
        """Enqueue a finished retrieval as recorded (False when dropped).

        This runs on the caller's thread, so it only checks the bound and enqueues: the
        feeder turns the retrieval into plain data (the user's ``question_from`` /
        ``answer_from`` run there, in this process: the root run's input and output never
        leave it).
        """
        with self._cond:
            accepted = (
                self._accepting
                and not self._disabled
                and self._outstanding() < self.max_queue_size
                and (self._feeder is not None or self._start_feeder())
            )
            if accepted:
                self._queue.put(capture)
        if not accepted:
            self._counters.add(dropped=1)
        return accepted

    def owns_current_thread(self, action: str) -> bool:
        """True (and logged once) when called from this object's own threads."""
        if not self._on_own_thread():
            return False
        self._failures.report(
            f"{action}-from-worker",
            f"{action}() called from the handler's own background thread; ignored",
        )
        return True

    def _on_own_thread(self) -> bool:
        """Whether the calling thread is one of this object's (which must never wait on it)."""
        current = threading.current_thread()
        with self._cond:
            child = self._child
            own = [self._feeder, None if child is None else child.listener]
        own.extend(box.thread for box in self._outboxes or ())
        own.extend(self._hooks.threads if self._hooks is not None else ())
        return any(current is thread for thread in own)

    def flush(self, timeout: float | None) -> bool:
        """Wait until the retrievals submitted so far are scored and delivered.

        Delivered by the child's sinks, or (``sinks`` given) sent up by the child and then
        delivered by this process's sinks, within the same deadline.

        Returns:
            False at the deadline (``stats.pending_at_deadline`` says how many were left,
            ``stats.sinks[key].pending`` what each sink here still holds), or when the child
            died meanwhile (its retrievals count as ``abandoned``).
        """
        if self.owns_current_thread("flush"):
            return False
        deadline = deadline_after(timeout)
        with self._cond:
            if self._outstanding() == 0 and (self._child is None or self._child.dead):
                done, left = True, 0
            elif self._stopping:
                return False
            else:
                token = next(self._tokens)
                self._waiting.add(token)
                try:
                    self._queue.put(FlushRequest(token, timeout), counted=False)
                    self._hurry.set()
                    self._cond.wait_for(lambda: token in self._flushed, timeout)
                finally:  # also on Ctrl-C: an answer after the wait ends is not kept
                    self._waiting.discard(token)
                    done = self._flushed.pop(token, False)
                left = 0 if done else self._outstanding()
        self._counters.set("pending_at_deadline", left)
        if self._outboxes:  # the child's answer came after its results: deliver them here
            unfinished = flush_all(self._outboxes, remaining(deadline), self._failures)
            done = done and not unfinished
        return done

    def close(self, timeout: float | None) -> bool:
        """Refuse new work, let the child flush and close its sinks within ``timeout``.

        A child still running at the deadline is terminated (then killed); what it held
        counts as ``abandoned``, and a warning says how many retrievals were left.
        """
        return self._close(timeout, at_exit=False)

    def _close(self, timeout: float | None, *, at_exit: bool) -> bool:
        """:meth:`close`; ``at_exit``: the exit hook's, whose warning says so."""
        if self.owns_current_thread("close"):
            return False
        deadline = deadline_after(timeout)
        with self._cond:
            self._accepting = False
            feeder = self._feeder
            idle_closing = self._idle_exit and self._closing
            self._closing = True
        if idle_closing:  # a collected handler's child is closing the sinks: wait for it
            return self._shut.wait(timeout)
        if feeder is None:  # never started: nothing was scored, only the sinks to close
            return self._close_sinks(remaining(deadline))
        with reporting_abandoned(self._counters, at_exit=at_exit):
            return self._close_child(feeder, timeout, deadline)

    def _close_child(
        self, feeder: threading.Thread, timeout: float | None, deadline: float | None
    ) -> bool:
        """Close the child (killed past its graces), then this process's sinks."""
        # The child closes as the thread runtime does: scoring within ``timeout``, then the
        # graces to stop its judge calls and to close its sinks. It is killed only past them.
        child_deadline = None if deadline is None else deadline + _CHILD_CLOSE_GRACE_SECONDS
        with self._cond:
            if not self._stopping:
                self._stopping = True
                self._queue.put(CloseRequest(timeout), counted=False)
                self._hurry.set()
            settled = self._cond.wait_for(self._settled, remaining(deadline))
            left = self._outstanding()  # still queued or being scored at the deadline
            if not settled:
                settled = self._cond.wait_for(self._settled, remaining(child_deadline))
            child = self._child
            if not settled:  # the feeder must not start a child after this close gave up
                self._gave_up = True
                self._abandon_queued()
        if child is not None and not child.dead:
            self._kill(child, "did not finish closing in time")
            self._on_death(child, None)  # account now, not when the listener wakes
        feeder.join(_KILL_GRACE_SECONDS)
        # This process's sinks deliver what the child sent last: their own grace, as in the
        # thread runtime, however much of the budget the child used.
        sinks_closed = self._close_sinks(remaining_or(deadline, SINK_GRACE_SECONDS))
        _exit.unregister(self)
        self._shut.set()
        self._counters.set("pending_at_deadline", left)
        clean = child is None or child.closed is not False
        return settled and clean and left == 0 and sinks_closed and not feeder.is_alive()

    def _abandon_queued(self) -> None:
        """Count what never reached the child as abandoned, once (lock held; close gave up).

        That is what waits in the queue and what the feeder holds (a user's hook that never
        returns keeps it there): the feeder drops its batch uncounted when it comes back.
        """
        if self._resets_queued:  # queued, or in the feeder's batch: they reach no child now
            self._reset_figures()  # first: what is abandoned below ends in the new period
            for token in self._resets_queued:
                self._answer(token, ok=True)
            self._resets_queued.clear()
        lost = self._queue.size
        for entry in self._queue.abandon():
            if isinstance(entry.item, FlushRequest):
                self._answer(entry.item.token, ok=False)
        if lost:
            self._counters.add(abandoned=lost)
        self._cond.notify_all()

    def _close_sinks(self, timeout: float | None) -> bool:
        """Deliver what this process's sinks hold and close them, within ``timeout``."""
        for sink in self._idle:  # it sent nothing; a client it was asked for is closed
            try:
                sink.close(0)
            except Exception as exc:
                self._failures.report(
                    f"sink-close:{type(sink).__name__}", f"{type(sink).__name__}.close: {exc}", exc
                )
        if self._outboxes is None:
            return True
        return close_all(self._outboxes, timeout, self._failures)

    def _settled(self) -> bool:
        """Whether the child exited (or never started) and nothing is left to send (lock held)."""
        child = self._child
        return not self._queue.unfinished and (child is None or child.dead)

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
            self._idle_exit = True
            self._queue.put(CloseRequest(_IDLE_EXIT_CLOSE_SECONDS), counted=False)
            self._hurry.set()
        _exit.register(self)

    def forget(self) -> None:
        """In a forked process: drop the parent's child, and never stop it from here.

        Our copies of the pipes to it are closed, so it still sees the parent's end.
        """
        child = self._child
        if child is None:
            return
        for end in (child.recv, child.send):
            with contextlib.suppress(Exception):
                end.close()
        with contextlib.suppress(Exception):
            os.close(child.process.sentinel)
        children = getattr(multiprocessing.process, "_children", None)
        if isinstance(children, set):  # else multiprocessing would terminate it at our exit
            children.discard(child.process)

    def _finish_idle_exit(self) -> None:
        """Close the sinks here and leave the exit registry once a collected handler is done.

        As close() would; a no-op unless the child that ended was the last one.
        """
        with self._cond:
            child = self._child
            done = (
                self._idle_exit
                and not self._closing
                and not self._queue.unfinished
                and (child is None or child.dead)
            )
            if done:
                self._closing = True
        if not done:
            return
        try:
            self._close_sinks(_IDLE_EXIT_CLOSE_SECONDS)
        finally:
            _exit.unregister(self)
            self._shut.set()

    @property
    def exit_timeout(self) -> float | None:
        """Seconds the exit hook may spend on this object (a collected handler's child too)."""
        if self.settings.exit_timeout is not None:
            return self.settings.exit_timeout
        return _IDLE_EXIT_CLOSE_SECONDS + _KILL_GRACE_SECONDS if self._stopping else None

    def _flush_at_exit(self, timeout: float) -> None:
        """The exit hook: close within ``timeout`` (bounded) and warn of what was left.

        Never raises.
        """
        with contextlib.suppress(Exception):
            self._close(timeout, at_exit=True)

    def sink_stats(self) -> dict[str, SinkStats]:
        """Each sink's figures: this process's sinks, and the child's added up over restarts."""
        here = {box.key: box.stats() for box in self._outboxes or ()}
        with self._cond:
            there = {
                key: SinkStats(**totals, pending=self._sink_pending.get(key, 0))
                for key, totals in self._sinks.items()
            }
        if not self._order:
            return {**here, **there}
        return {key: here[key] if key in here else there[key] for key in self._order}

    def reset_stats(self) -> None:
        """Start a new period of every figure, here and the child's, at one moment.

        With a child at work that moment is its answer (:class:`WasReset`): the child zeroes
        its sinks' figures between two consistent readings of them and of its counters, and
        this process starts the new period of all its figures as it reads that answer, in
        order with the child's reports. This call waits for it, within
        ``_RESET_WAIT_SECONDS`` (past that the reset happens when the answer comes; called
        from one of the handler's own threads, a sink's or a hook's, it does not wait, since
        the answer may need that thread); a child that is closing is reset when it has
        exited, and a reset still queued when a close gives up is done then.
        """
        wait = not self._on_own_thread()
        with self._cond:
            child = self._child
            if child is None or child.dead:
                self._reset_figures()
                return
            token = next(self._tokens)
            if self._stopping:  # no request reaches it any more: at its exit (_on_death)
                child.resets.add(token)
                return
            if not self._queue.put(ResetRequest(token), counted=False):
                self._reset_figures()
                return
            self._resets_queued.add(token)
            if not wait:
                self._hurry.set()
                return
            self._waiting.add(token)
            try:
                self._hurry.set()
                self._cond.wait_for(lambda: token in self._flushed, _RESET_WAIT_SECONDS)
            finally:
                self._waiting.discard(token)
                self._flushed.pop(token, None)

    def _reset_figures(self) -> None:
        """Start the new period of every figure kept here (lock held).

        The counters carry what is in flight (``Counters.reset``); this process's outboxes
        leave out the results they hold, which the child counted before; the child's sinks
        count from zero (it zeroed them at its answer, or it is gone).
        """
        self._counters.reset()
        for box in self._outboxes or ():
            box.reset()
        self._sinks = {key: dict.fromkeys(totals, 0) for key, totals in self._sinks.items()}
        self._sink_pending = dict.fromkeys(self._sink_pending, 0)

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
        """Send queued entries to the child, starting (or restarting) it when needed."""
        try:
            self._feed_all()
        finally:
            if self._hooks is not None:
                self._hooks.stop()  # the feeder was their only user

    def _feed_all(self) -> None:
        while (first := self._queue.take()) is not None:
            batch = [first, *self._queue.take_ready(self.max_queue_size + 2)]
            entries = self._plain([entry.item for entry in batch])
            with self._cond:
                try:
                    if self._gave_up:  # a close gave up on this batch and counted it
                        return
                    child = self._child
                    if child is None or child.dead:
                        child = self._replace_child(entries)
                    if child is not None:
                        child.sent += sum(isinstance(e, Retrieval) for e in entries)
                        child.tokens.update(e.token for e in entries if isinstance(e, FlushRequest))
                        resets = {e.token for e in entries if isinstance(e, ResetRequest)}
                        child.resets.update(resets)
                        self._resets_queued.difference_update(resets)
                finally:
                    for entry in batch:  # in the child's count now: outstanding stays exact
                        self._queue.done(entry)
                    self._cond.notify_all()
            if child is None:  # stopping, or scoring turned off (work abandoned)
                if self._stopping:
                    self._finish_idle_exit()  # no child will end after this: done here
                    return
                continue
            self._send(child, entries)
            if any(isinstance(e, CloseRequest) for e in entries):
                return
            if all(isinstance(e, Retrieval) for e in entries):
                # Busy: let retrievals gather for a moment rather than wake for each one.
                # Every wake-up of this thread takes the GIL from the application's threads;
                # a flush or close cuts the pause short.
                self._hurry.wait(_FEED_PAUSE_SECONDS)
            self._hurry.clear()

    def _plain(self, taken: list[_Entry]) -> list[_Outgoing]:
        """The batch with each retrieval as plain data; one that cannot be is not sent.

        It counts as processed, with a handler error (as the thread runtime counts a
        retrieval whose scoring raised), so ``sampled = dropped + processed + queued +
        abandoned`` still holds.

        Off the caller's thread on purpose: the conversion reads every document and the
        metadata, and runs the user's hooks (what they raise is the result's ``error``).
        With hooks, the whole batch goes to their helper at once (one handoff, not one per
        retrieval), which still bounds each retrieval by ``timeout``.
        """
        captures = [entry for entry in taken if isinstance(entry, Capture)]
        hooks = self._hooks
        outcomes: list[Outcome] = []
        if captures:
            try:
                if hooks is None:
                    outcomes = convert_batch(captures, self.settings)
                else:
                    outcomes = hooks.convert_batch(captures)
            except Exception as exc:  # the runner's own failure: each retrieval's, as before
                outcomes = [exc] * len(captures)
        converted = iter(outcomes)
        plain: list[_Outgoing] = []
        for entry in taken:
            if not isinstance(entry, Capture):
                plain.append(entry)
                continue
            outcome = next(converted)
            if isinstance(outcome, Exception):  # e.g. a document type we cannot read
                self._counters.add(handler_errors=1, processed=1)
                self._failures.report(
                    f"isolated:convert:{type(outcome).__name__}",
                    f"a retrieval could not be turned into plain data: {outcome!r}",
                    outcome,
                )
                continue
            plain.append(outcome)
        return plain

    def _answer(self, token: int, *, ok: bool) -> None:
        """Answer the ``flush()`` waiting on ``token`` (lock held); dropped once it gave up."""
        if token in self._waiting:
            self._flushed[token] = ok

    def _replace_child(self, taken: list[_Outgoing]) -> _Child | None:
        """A new child, or None (queued work abandoned) when disabled or idle and stopping.

        Called with the lock held.
        A close that comes before the first child started (a short script: one chain, then
        exit) still starts one: the retrievals submitted before the close are scored.
        """
        work = any(isinstance(e, Retrieval) for e in taken) or self._queue.size > 0
        if not self._disabled and not self._gave_up and (work or not self._stopping):
            child = self._spawn()
            if child is not None:
                return child
        dropped = [*taken, *(entry.item for entry in self._queue.abandon(close=False))]
        for entry in dropped:
            if isinstance(entry, FlushRequest):
                self._answer(entry.token, ok=False)
            elif isinstance(entry, ResetRequest):  # no child: nothing to reset but here
                self._resets_queued.discard(entry.token)
                self._reset_figures()
                self._answer(entry.token, ok=True)
        lost = sum(isinstance(entry, Retrieval | Capture) for entry in dropped)
        if lost:
            self._counters.add(abandoned=lost)
        return None

    def _spawn(self) -> _Child | None:
        """Start a child process and its listener thread (lock held); None if impossible."""
        from langchain_ragmetrics.callbacks import _child

        start = ChildStart(
            self._child_start,
            log_levels=_log_levels(),
            forward_results=bool(self._outboxes),
        )
        self._children += 1
        try:
            process, parent_recv, parent_send, first = start_child(
                _child.main, start, name=f"{self.name}-child-{self._children}"
            )
        except Exception as exc:
            self._failures.report("child-start", f"cannot start the scoring process: {exc}", exc)
            self._disabled = True
            return None
        child = _Child(process=process, send=parent_send, recv=parent_recv, greeting=first)
        child.listener = threading.Thread(
            target=self._listen, args=(child,), name=f"{self.name}-listener", daemon=True
        )
        try:
            child.listener.start()
        except RuntimeError as exc:  # e.g. "can't start new thread", at interpreter shutdown
            _stop(process)  # no listener will release this child: it is done here
            _release(child)
            self._failures.report("child-start", f"cannot start the listener thread: {exc}", exc)
            self._disabled = True
            return None
        self._child = child
        return child

    def _send(self, child: _Child, batch: list[_Outgoing]) -> None:
        """Pickle and send a batch: runs of retrievals go as one message, controls alone."""
        messages: list[ParentMessage | ChildStart] = []
        for is_item, run in itertools.groupby(batch, key=lambda e: isinstance(e, Retrieval)):
            entries = list(run)
            if is_item:
                messages.append(ScoreItems([e for e in entries if isinstance(e, Retrieval)]))
            else:
                messages.extend(e for e in entries if not isinstance(e, Retrieval))
        if child.greeting is not None:
            messages.insert(0, child.greeting)
            child.greeting = None
        for message in messages:
            try:
                data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                if not isinstance(message, ScoreItems):
                    raise
                data = self._pickle_each(child, message, exc)
            try:
                child.send.send_bytes(data)
            except Exception as exc:  # the child died (or was killed, its pipe closed) meanwhile
                self._on_death(child, f"the pipe to the scoring process broke ({exc!r})")
                return

    def _pickle_each(self, child: _Child, message: ScoreItems, exc: Exception) -> bytes:
        """Pickle the items that can be; the others are counted as errors and dropped."""
        kept = [item for item in message.items if picklable(item)]
        lost = len(message.items) - len(kept)
        with self._cond:
            # A child that died meanwhile counted everything sent to it as abandoned.
            self._counters.add(handler_errors=lost, abandoned=0 if child.dead else lost)
            if not child.dead:
                child.sent -= lost
            self._cond.notify_all()
        self._failures.report(
            f"isolated:pickle:{type(exc).__name__}",
            f"a retrieval could not be sent to the scoring process: {exc!r}",
            exc,
        )
        return pickle.dumps(ScoreItems(kept), protocol=pickle.HIGHEST_PROTOCOL)

    # ------------------------------------------------------------------ listener thread

    def _listen(self, child: _Child) -> None:
        """Read the child's reports until it exits; kill it when it stays silent too long."""
        hang = self.isolation.hang_timeout
        start = self.isolation.start_timeout
        reason = "exited"
        # The sentinel is released by this thread alone (below), once it is done with it:
        # a close() that reaps the child meanwhile leaves it open, so no wait meets a
        # descriptor closed, or closed and reused, under it.
        waited: list[Connection | int] = [child.recv, child.process.sentinel]
        while True:
            try:
                ready = wait(waited, _TICK_SECONDS)
            except (OSError, ValueError):
                break
            if child.recv in ready:
                try:
                    data = child.recv.recv_bytes()
                except (EOFError, OSError):
                    break
                try:
                    message = pickle.loads(data)  # noqa: S301 - our own child's message
                except Exception as exc:  # e.g. an exception class that cannot be rebuilt
                    self._failures.report(
                        f"isolated:unpickle:{type(exc).__name__}",
                        f"a message from the scoring process could not be read: {exc!r}",
                        exc,
                    )
                    child.heard = time.monotonic()
                    continue
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
        _release(child)
        self._finish_idle_exit()

    def _handle(self, child: _Child, message: ChildMessage) -> None:
        child.heard = time.monotonic()
        if isinstance(message, LogRecordData):
            _relog(message.fields)
            return
        dropped: list[tuple[SinkOutbox, int]] = []
        with self._cond:  # queued and counted at one moment, as a reset sees them
            if isinstance(message, Results):
                for box in self._outboxes or ():  # never blocks: a full one drops (counted)
                    dropped.append((box, box.put(message.items)))
            if isinstance(message, Ready):
                child.ready = True
            elif isinstance(message, Report | Results) and message.stats is not None:
                self._apply(child, message.stats)
            elif isinstance(message, WasReset):
                self._apply(child, message.stats)  # the last figures of the period
                if message.token in child.resets:  # else it was reset at the child's death
                    child.resets.discard(message.token)
                    child.sinks.clear()  # its sinks count from zero again
                    self._reset_figures()
                    self._answer(message.token, ok=True)
            elif isinstance(message, Flushed):
                self._apply(child, message.stats)
                if message.token in child.tokens:  # else its waiter was answered already
                    child.tokens.discard(message.token)
                    self._answer(message.token, ok=message.ok)
            elif isinstance(message, Closed):
                self._apply(child, message.stats)
                child.closed = message.ok
            elif isinstance(message, Fatal):
                child.fatal = True
                self._disabled = True
            self._cond.notify_all()
        for box, count in dropped:  # logged with no lock held: a log handler may stall
            box.report_dropped(count)
        if isinstance(message, Fatal):
            self._failures.report(
                "isolated:setup",
                f"the scoring process could not start, online scoring is off: {message.text}",
            )

    def _apply(self, child: _Child, stats: HandlerStats) -> None:
        """Add what the child counted since its last report (lock held)."""
        totals = {k: getattr(stats, k) for k in _CHILD_COUNTERS}
        delta = {k: totals[k] - child.totals.get(k, 0) for k in _CHILD_COUNTERS}
        usage = stats.usage.model_dump()
        used = {k: usage[k] - child.usage.get(k, 0) for k in _USAGE_FIELDS}
        child.totals = totals
        child.usage = usage
        if not child.dead:  # a report read after its death: what its sinks held is counted
            self._apply_sinks(child, stats)
        done = stats.processed + stats.dropped + stats.abandoned
        if done > child.done and not child.dead:
            self._crashes = 0
        if done > child.done and child.lost:
            # Read after its death: these were counted abandoned, and are not.
            recovered = min(child.lost, done - child.done)
            child.lost -= recovered
            if child.lost_in == self._counters.generation:
                delta["abandoned"] -= recovered
            else:  # abandoned before a reset: they end in this period, carried into it
                delta["seen"] = delta["sampled"] = recovered
        child.done = done
        if any(delta.values()):
            self._counters.add(**delta)
        if any(used.values()):
            self._counters.add_usage(Usage(**used))

    def _apply_sinks(self, child: _Child, stats: HandlerStats) -> None:
        """Add what the child's sinks counted since its last report (lock held).

        The sinks the child builds again from the user's are matched by position: the
        child names them after what it built, the user knows them by their keys here.
        """
        mapped = self._child_keys or list(stats.sinks)
        for key, figures in zip(mapped, stats.sinks.values(), strict=False):
            seen = child.sinks.setdefault(key, {})
            sums = self._sinks.setdefault(key, dict.fromkeys(_SINK_COUNTS, 0))
            for name in _SINK_COUNTS:
                value = getattr(figures, name)
                sums[name] += value - seen.get(name, 0)
                seen[name] = value
            self._sink_pending[key] = figures.pending

    def _kill(self, child: _Child, reason: str) -> None:
        _stop(child.process)
        self._failures.report("isolated:kill", f"the scoring process {reason}")

    def _on_death(self, child: _Child, reason: str | None) -> None:
        """Account for a child that is gone (once): what it held is abandoned."""
        with self._cond:
            if child.dead:
                return
            child.dead = True
            lost = child.lost = max(0, child.sent - child.done)
            child.lost_in = self._counters.generation
            for key, held in self._sink_pending.items():  # what its sinks held is lost
                self._sinks.setdefault(key, dict.fromkeys(_SINK_COUNTS, 0))["dropped"] += held
            self._sink_pending.clear()
            for token in child.tokens:
                self._answer(token, ok=False)
            child.tokens.clear()
            switched_off = False  # by this death: too many crashes in a row
            if reason is not None:
                self._crashes += 1
                if self._crashes > self.isolation.max_restarts and not self._disabled:
                    self._disabled = switched_off = True
            ends = self._stopping or self._disabled  # no child starts after this one
            crashes = self._crashes
            if lost:  # counted before a waiting flush wakes: its caller sees the figure
                self._counters.add(abandoned=lost)
            if child.resets:  # what it held is counted: its figures are final, reset here
                self._reset_figures()
                for token in child.resets:
                    self._answer(token, ok=True)
                child.resets.clear()
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            child.send.close()
        if reason is None:
            return
        died = f"the scoring process {reason}: {lost} retrievals lost"
        if switched_off:  # a kind of its own: logged at WARNING however many deaths came first
            self._failures.report(
                "isolated:disabled",
                f"{died}; online scoring is off ({crashes} crashes in a row, more than "
                f"max_restarts={self.isolation.max_restarts})",
            )
            return
        tail = "" if ends else "; a new one starts with the next retrieval"
        self._failures.report("isolated:child-died", f"{died}{tail}")


def _log_levels() -> dict[str, int]:
    """The application's effective levels, for the child to mirror."""
    names = ("", "langchain_ragmetrics", "langchain_ragmetrics.online")
    return {name: logging.getLogger(name).getEffectiveLevel() for name in names}


def _relog(fields: dict[str, Any]) -> None:
    """Re-emit a log record of the child through this process's logging configuration."""
    logger = logging.getLogger(fields["name"])
    if logger.isEnabledFor(fields["levelno"]):
        logger.handle(logging.makeLogRecord(fields))


def _stop(process: ChildProcess) -> None:
    """Terminate ``process``, then kill it if it outlives the grace period; reap it."""
    with contextlib.suppress(Exception):
        process.terminate()
        process.join(_KILL_GRACE_SECONDS)
        if process.is_alive():
            process.kill()
            process.join(_KILL_GRACE_SECONDS)


def _release(child: _Child) -> None:
    """Close the parent's ends of a child's pipes and its process handle (sentinel included).

    Only the thread that waits on them calls this, once done: the listener, or the spawn
    that could not start one. A ``multiprocessing.Process`` still running refuses (ValueError)
    and keeps its handle until it is collected.
    """
    for end in (child.recv, child.send):
        with contextlib.suppress(OSError):
            end.close()
    with contextlib.suppress(OSError, ValueError):
        child.process.close()
