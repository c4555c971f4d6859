"""``evaluate(..., workers=N)``: the parent and N - 1 worker processes pull jobs from one feed.

One process spends most of a run's CPU on building prompts, parsing answers and HTTP
plumbing under one interpreter lock; more processes use more cores. The calling process
scores at once on its own threads, exactly as with one process, while the workers start:
jobs are handed out from one feed as each side asks for them, the parent one at a time and
each worker a few at a time (a quarter of its concurrency, asked for before it runs dry), so
a worker's start-up is never on the critical path, a slow worker takes fewer jobs, and the
sides finish together.

How workers start (:func:`start_method`): on Linux, when the calling process runs a single
thread, they are forked before the parent's own scoring threads start, so they inherit the
imports and are ready in well under a second; otherwise (other threads alive, macOS, Windows)
they are spawned, which re-imports LangChain and takes a second or two of CPU each. A forked
worker keeps nothing live from the parent: it closes the parent's ends of the pipes, clears
langchain-openai's cached HTTP clients, and builds its judges, engine and verdict-cache
connection from the pickled recipe exactly as a spawned one does.

Scoring itself is the engine's on both sides: :meth:`ScoringEngine.run_feed` (slots, backoff
hand-over, timeouts) runs the jobs of a :class:`~langchain_ragmetrics._engine.JobFeed`, which
arrive while it runs. Each worker gets a
:class:`~langchain_ragmetrics.evaluation._recipe.ScoringRecipe` (never a live client), builds
its judges and engine once, and streams results back over its own pipe, up to
:data:`_RESULT_BATCH` to a message and none held longer than :data:`_RESULT_TICK_S` (a
message per result woke the parent's threads, and took its interpreter lock, once per job):
the caller's thread keeps the progress bar, ``on_result`` and the results, in input order
whatever order they arrive in.

Limits stay totals. ``max_concurrency`` is one budget of slots: the parent starts with all of
them, and when a worker is ready the parent hands it its share (``max_concurrency // N``)
one slot at a time, each as one of its own jobs finishes (taken ahead of the parent's new
jobs); so at no moment are more judge calls at work than ``max_concurrency`` (but for those
of a job abandoned at its timeout, whose slots go to the next jobs), and a worker that never
comes up costs the parent nothing. ``rate_limit_per_minute`` is divided the same
way: a ready worker meters its share of the rate (starting with an empty bucket) and the
parent's own limiter drops by as much.

Why processes of our own rather than ``ProcessPoolExecutor``: a worker that dies breaks a
whole pool and every pending future with it. Here each worker has its own pair of pipes and
its death is seen on its sentinel: the results it delivered are kept, its unfinished jobs go
back to the feed (once; a job whose second holder dies too fails with the cause) and its
slots and rate share go back to the parent. A worker the system refuses to start (a process
limit, no memory) is one fewer: the run goes on without it. Ctrl-C asks every worker to stop,
collects what they finished, and ends them; workers ignore SIGINT (forked or spawned from
the main thread, a Ctrl-C is held back from their first instant: :func:`_sigint_deferred`),
so a terminal's Ctrl-C reaches the parent only, even while a worker starts. A worker does
not re-run the caller's script when nothing it needs is defined there (the usual case), so
no ``if __name__ == "__main__":`` guard is needed then.

What cannot be pickled never stops a run: a row the parent cannot send is scored by the
parent, and a result whose details a worker cannot send goes with plain details
(:mod:`~langchain_ragmetrics.evaluation._sendable`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import multiprocessing.spawn
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any, Literal

from langchain_ragmetrics._engine import Job, JobFeed, ScoringEngine
from langchain_ragmetrics._interrupts import DeferredInterrupt
from langchain_ragmetrics._options import whole_number
from langchain_ragmetrics._schema import MetricResult, RagSample
from langchain_ragmetrics._transient import is_transient, transient_thread
from langchain_ragmetrics.evaluation._sendable import pickled_results

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from langchain_ragmetrics.evaluation._recipe import ScoringRecipe
    from langchain_ragmetrics.metrics import BaseRagMetric

__all__ = [
    "AUTO_MIN_JOBS",
    "AUTO_MIN_JOBS_FORKED",
    "AUTO_SLOTS_PER_PROCESS",
    "START_METHOD_ENV",
    "WORKER_RESTARTS",
    "Workers",
    "available_cores",
    "method_now",
    "needs_main",
    "score_in_processes",
    "start_method",
    "worker_count",
]

logger = logging.getLogger("langchain_ragmetrics")

Workers = int | Literal["auto"]
"""``evaluate``'s ``workers``: a number of processes, or ``"auto"``."""

WORKER_RESTARTS = 1
"""How many times a dead worker's unfinished job goes back to the feed before it fails."""

AUTO_MIN_JOBS = 400
"""``workers="auto"`` adds a spawned process per this many jobs at most (shorter runs stay in
one): a spawned worker takes seconds of CPU to start (``bench/auto_threshold.py``)."""

AUTO_MIN_JOBS_FORKED = 100
"""The same for forked workers, ready in well under a second: from 100 jobs a second process is
faster (``bench/auto_threshold.py``: 1.16x at 100 jobs, 1.04x at 52, 1.24x at 400)."""

AUTO_SLOTS_PER_PROCESS = 8
"""``workers="auto"`` gives every process at least this many of ``max_concurrency``'s slots."""

AUTO_MIN_RATE_PER_MINUTE = 3000.0
"""Below this ``rate_limit_per_minute`` one process keeps up (half a core): auto stays at 1."""

START_METHOD_ENV = "RAGMETRICS_START_METHOD"
"""Sets how workers start: ``fork``, ``spawn``, ``forkserver`` or ``auto`` (the default)."""

_INHERITED_CLIENT_CACHES = {
    "langchain_openai.chat_models._client_utils": (
        "_cached_sync_httpx_client",
        "_cached_async_httpx_client",
    ),
}
"""Functions that cache live HTTP clients per process: a forked worker clears them."""

_QUIESCE_S = 1.0
"""How long :func:`_single_threaded` waits for them before it settles for spawn."""

_POLL_S = 0.2  # bounded waits keep threads interruptible and watching for stop
_RESULT_BATCH = 16
"""A worker sends its results to the parent in messages of up to this many."""
_RESULT_TICK_S = 0.02
"""... and no later than this after they finished."""
_STOP_GRACE_S = 5.0  # how long stopping workers may take to hand over what they finished
_JOIN_S = 5.0
_KILL_AFTER_S = 1.0
"""How long a terminated worker may take to exit before it is killed (a stopped process
never acts on SIGTERM)."""
_STALL_GRACE_S = 10.0
"""With a ``timeout``, a worker that holds jobs and sends nothing for ``timeout`` plus
``max(this, timeout)`` seconds is taken for frozen and ended (see ``_Pool._end_stalled``)."""
_SPAWN_LOCK = threading.Lock()

Key = tuple[int, int]
"""One job: (row position, metric column)."""


# --------------------------------------------------------------------------- how many


def available_cores() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if callable(counter):
        count = counter()
        return int(count) if count else 1
    with contextlib.suppress(AttributeError, OSError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def worker_count(
    workers: Workers,
    *,
    jobs: int,
    max_concurrency: int,
    rate_limit_per_minute: float | None = None,
    cores: int | None = None,
    forked: bool = False,
) -> int:
    """The processes a run uses, the caller's included (1 means in-process only).

    An explicit number is capped by the jobs and by ``max_concurrency`` (every process needs
    a slot). ``"auto"`` uses more than one only where another process can pay off: more than
    one core, at least :data:`AUTO_MIN_JOBS` jobs per process (:data:`AUTO_MIN_JOBS_FORKED`
    when the workers will be ``forked``), at least
    :data:`AUTO_SLOTS_PER_PROCESS` slots per process (fewer concurrent jobs leave the judge,
    not our CPU, the bottleneck), no rate limit one process can meet on its own, and not
    inside a daemonic process (a ``multiprocessing`` pool's worker may not start children).

    A number may be any integer type that is not a bool (``numpy.int64`` too), as for
    ``max_concurrency``.

    Raises:
        ValueError: ``workers`` is neither ``"auto"`` nor a whole number of at least 1.
    """
    if workers == "auto":
        if rate_limit_per_minute is not None and rate_limit_per_minute < AUTO_MIN_RATE_PER_MINUTE:
            return 1
        if multiprocessing.current_process().daemon:  # may not have children of its own
            return 1
        cores = available_cores() if cores is None else cores
        per_process = AUTO_MIN_JOBS_FORKED if forked else AUTO_MIN_JOBS
        return max(1, min(cores, jobs // per_process, max_concurrency // AUTO_SLOTS_PER_PROCESS))
    try:
        count = whole_number("workers", workers)
    except ValueError:
        msg = f'`workers` must be a whole number of at least 1 or "auto", got {workers!r}'
        raise ValueError(msg) from None
    return max(1, min(count, jobs, max_concurrency))


def needs_main(recipe: ScoringRecipe) -> bool:
    """Whether the recipe refers to something defined in the caller's script (``__main__``).

    Only then must a worker re-run the script to unpickle it (which needs the script's
    ``if __name__ == "__main__":`` guard); otherwise workers skip it.
    """
    return b"__main__" in pickle.dumps(recipe)


@contextlib.contextmanager
def _main_left_alone() -> Iterator[None]:
    """Spawn without re-running the caller's script in the child (it needs nothing from it)."""
    original = multiprocessing.spawn.get_preparation_data

    def preparation(name: str) -> dict[str, Any]:
        data: dict[str, Any] = original(name)
        data.pop("init_main_from_name", None)
        data.pop("init_main_from_path", None)
        return data

    with _SPAWN_LOCK:
        multiprocessing.spawn.get_preparation_data = preparation
        try:
            yield
        finally:
            multiprocessing.spawn.get_preparation_data = original


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold a Ctrl-C back while a worker starts: the worker never gets it, this process does.

    A terminal's Ctrl-C goes to the whole process group. A worker ignores SIGINT once its
    code runs (:func:`_ignore_sigint`), but a spawned one gets there only after its imports,
    and a Ctrl-C in that time printed a ``KeyboardInterrupt`` traceback from it. So SIGINT
    is blocked on this thread while ``start()`` runs: a signal mask is inherited across
    fork and exec, so the worker holds a Ctrl-C pending from its first instant until it
    ignores SIGINT, which discards it. Here, a Ctrl-C held back (pending on this thread, or
    noted by a stand-in handler when another thread took it) is raised right after
    ``start()``, under the handler that was there before: nothing is lost. Only on the main
    thread, where ``signal.signal`` works, and when the handler was set from Python (else
    it could not be put back); otherwise nothing changes.
    """
    previous = signal.getsignal(signal.SIGINT)
    if (
        threading.current_thread() is not threading.main_thread()
        or previous is None
        or not hasattr(signal, "pthread_sigmask")
    ):
        yield
        return
    noted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        # The mask first: one pending on this thread is then taken by the stand-in. Were the
        # handler put back first, a Ctrl-C taken meanwhile could raise KeyboardInterrupt
        # between the two calls and leave SIGINT blocked on this thread for good.
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, previous)
        if noted:  # raise it again, for ``previous``
            signal.raise_signal(signal.SIGINT)


def _ignore_sigint() -> None:
    """A worker's first act: ignore Ctrl-C (the parent decides when to stop), then let it in.

    SIGINT was blocked since the worker's birth (:func:`_sigint_deferred`); ignoring it
    first discards a Ctrl-C held pending meanwhile.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _start(process: BaseProcess, *, keep_main: bool) -> None:
    """Start ``process`` with Ctrl-C held back, re-running ``__main__`` only if ``keep_main``.

    A spawned or forkserver worker needs multiprocessing's resource tracker, whose first
    start unblocks SIGINT on this thread: it is started first, so the block holds.
    """
    if getattr(process, "_start_method", None) != "fork":
        resource_tracker.ensure_running()
    with contextlib.ExitStack() as stack:
        if not keep_main:
            stack.enter_context(_main_left_alone())
        stack.enter_context(_sigint_deferred())
        process.start()


def method_now(method: str | None) -> str | None:
    """``method``, but a fork chosen earlier is a spawn if a thread has started since.

    A pre-flight request's thread, or a tracer's, may start between the choice and the
    workers' start; forking then could copy a lock another thread holds. A fork the user
    forced stays a fork.
    """
    if method == "fork" and not _method_forced() and not _single_threaded():
        return "spawn"
    return method


def start_method() -> str:
    """How worker processes start now: the user's choice, else fork where safe, else spawn.

    In order: ``$RAGMETRICS_START_METHOD`` when set to ``fork``, ``spawn`` or ``forkserver``
    (``auto`` or unset: decide); then a start method the program chose with
    ``multiprocessing.set_start_method`` when it is not the platform's default (a default
    that is merely fixed is no choice: tqdm, for one, fixes it as a side effect); then
    ``fork`` on Linux when this process runs a single Python thread at this moment (so no
    lock can be held by a thread the child lacks, and Python 3.12+ has nothing to warn
    about); otherwise ``spawn``.

    Raises:
        ValueError: ``$RAGMETRICS_START_METHOD`` names no start method of this platform.
    """
    wanted = os.environ.get(START_METHOD_ENV, "").strip().lower()
    if _method_forced():
        if wanted not in multiprocessing.get_all_start_methods():
            allowed = ", ".join(["auto", *multiprocessing.get_all_start_methods()])
            msg = f"${START_METHOD_ENV} must be one of {allowed}; got {wanted!r}"
            raise ValueError(msg)
        return wanted
    fixed = multiprocessing.get_start_method(allow_none=True)
    if fixed is not None and fixed != multiprocessing.get_all_start_methods()[0]:
        return fixed
    if sys.platform == "linux" and _single_threaded():
        return "fork"
    return "spawn"


def _method_forced() -> bool:
    """Whether ``$RAGMETRICS_START_METHOD`` names a start method (the user's choice stands)."""
    return os.environ.get(START_METHOD_ENV, "").strip().lower() not in ("", "auto")


def _single_threaded() -> bool:
    """Whether this process runs no Python thread but the calling one (waiting for ours).

    Threads this package left from earlier runs (made by ``transient_thread``: a user's
    thread of the same name is the user's) do not count when nothing else runs: job
    threads end within a poll interval, idle helper threads of per-context calls are told to
    end, and both are waited for (up to :data:`_QUIESCE_S`), so back-to-back ``evaluate()``
    calls fork too. Native threads of C libraries do not count either: those that may run at
    import (OpenBLAS's pool, started by ``import numpy``) shut themselves down at fork
    (``pthread_atfork``), and Python's own check, which warns on 3.12+, runs after that.
    """
    if threading.active_count() == 1:
        return True
    here = threading.current_thread()
    others = [t for t in threading.enumerate() if t is not here]
    if not all(is_transient(t) for t in others):
        return False
    from langchain_ragmetrics.metrics._base import retire_idle_call_threads

    retire_idle_call_threads()
    deadline = time.monotonic() + _QUIESCE_S
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    return threading.active_count() == 1


def _forget_parent_clients() -> None:
    """Clear the per-process caches of live HTTP clients a forked worker inherited."""
    for module_name, names in _INHERITED_CLIENT_CACHES.items():
        module = sys.modules.get(module_name)
        for name in names:
            clear = getattr(getattr(module, name, None), "cache_clear", None)
            if callable(clear):
                clear()


def _forked_main(
    target: Callable[[ScoringRecipe, Connection, Connection], None],
    recipe: bytes,
    conn: Connection,
    control: Connection,
    inherited: Sequence[Connection],
) -> None:
    """A forked worker: drop what it inherited live, then run ``target`` like a spawned one.

    ``inherited`` are the parent's ends of this worker's pipes and of earlier workers' pipes:
    closed here so that each pipe's end of file still means its peer is gone. The recipe
    arrives pickled, so judges, metrics and verdict-cache connections are built anew.
    """
    _ignore_sigint()
    for connection in inherited:
        with contextlib.suppress(OSError):
            connection.close()
    _forget_parent_clients()
    target(pickle.loads(recipe), conn, control)  # noqa: S301 (our own bytes, from the parent)


# --------------------------------------------------------------------------- the worker


class _WorkerSide:
    """A worker process's end of the protocol: its engine, its batch, its pipes."""

    def __init__(self, recipe: ScoringRecipe, conn: Connection, control: Connection) -> None:
        self.conn = conn
        self.control = control
        self.sending = threading.Lock()
        self.metrics = recipe.build_metrics()
        self.engine = recipe.build_engine()
        self.slots = self.engine.max_concurrency
        for _ in range(self.slots):  # every slot is the parent's until it grants it
            self.engine.gate.slots.acquire()
        if self.engine.limiter is not None:
            self.engine.limiter.available_tokens = 0.0  # no burst on top of the parent's bucket
        self.chunk = max(1, math.ceil(self.slots / 4))
        self.asking = threading.Lock()
        self.asked = False
        self.batch = JobFeed(self.refill, low=self.chunk)
        self.granted = threading.Event()
        self.pending: list[tuple[int, int, MetricResult]] = []
        self.pending_lock = threading.Lock()
        self.finished = threading.Event()
        self.converted: set[str] = set()
        """Metrics whose details were converted to be sent (the parent was told)."""

    def send(self, *message: Any) -> None:
        with self.sending:
            self.conn.send(message)

    def refill(self, block: bool) -> bool:
        """Ask the parent for more jobs, unless a request is on its way already."""
        del block
        with self.asking:
            if self.asked:
                return False
            self.asked = True
        self.send("more", self.chunk)
        return False

    def listen(self) -> None:
        """Handle the parent's messages until ``stop`` or end of file (a thread of its own)."""
        batch = self.batch
        try:
            while True:
                message = self.control.recv()
                kind = message[0]
                if kind == "grant":
                    self.engine.gate.slots.release()
                    self.granted.set()
                elif kind == "jobs":
                    jobs = [Job(s, self.metrics[c], (r, c)) for r, c, s in message[1]]
                    with self.asking:
                        self.asked = False
                    batch.add(jobs)
                elif kind == "end":
                    batch.close()
                else:
                    break
        except (EOFError, OSError):
            pass
        except Exception as exc:  # e.g. a sample holding an object of the caller's __main__
            # This process cannot read the jobs: the parent scores what it holds, and it ends.
            with contextlib.suppress(Exception):
                self.send("unreadable", f"{type(exc).__name__}: {exc}")
        batch.cancel()
        self.granted.set()

    def deliver(self, job: Job, result: MetricResult) -> None:
        """Queue a result for the parent; a full batch goes at once, the rest within a tick."""
        row, col = job.tag
        with self.pending_lock:
            self.pending.append((row, col, result))
            full = len(self.pending) >= _RESULT_BATCH
        if full:
            self.flush_results()

    def flush_results(self) -> None:
        """Send the queued results in one message (fewer wake-ups of the parent's threads).

        Sent under the queue's lock, so a flush that returned has sent what it took: the
        last flush before ``done`` leaves no result behind it. Pickling cannot fail (a
        result that cannot be pickled goes with plain details, see
        :func:`~langchain_ragmetrics.evaluation._sendable.pickled_results`), so no flush,
        the timer's included, loses a batch; the parent hears once of each metric whose
        details were converted (``converted``), and warns.
        """
        with self.pending_lock:
            batch, self.pending = self.pending, []
            if not batch:
                return
            data, converted = pickled_results(batch)
            news = sorted(set(converted) - self.converted)
            self.converted.update(news)
            with self.sending:
                if news:
                    self.conn.send(("converted", news))
                self.conn.send_bytes(data)

    def _tick(self) -> None:
        """Send queued results at least every :data:`_RESULT_TICK_S` (a thread of its own)."""
        while not self.finished.wait(_RESULT_TICK_S):
            self.flush_results()

    def run(self) -> None:
        threading.Thread(target=self.listen, name="ragmetrics-control", daemon=True).start()
        threading.Thread(target=self._tick, name="ragmetrics-tick", daemon=True).start()
        self.send("ready")
        self.granted.wait()  # no job is asked for before this process may run one
        try:
            if not self.batch.stop.is_set():
                self.refill(True)
                self.engine.run_feed(self.batch, on_result=self.deliver)
        finally:
            self.finished.set()
            self.flush_results()
        self.send("done")


def _worker_main(recipe: ScoringRecipe, conn: Connection, control: Connection) -> None:
    """A worker process: build metrics and engine, then score the jobs the parent hands out.

    To the parent (``conn``): ``ready``, ``more n``, ``results [(row, col, result), ...]``,
    ``raise exc``, ``done``; ``unstarted text`` when it cannot build its metrics or engine,
    ``unreadable text`` when it cannot read the jobs it was sent, ``converted [name, ...]``
    when results of these metrics had details it could not pickle (sent as plain data).
    From the parent (``control``): ``grant`` (one more slot), ``jobs [...]``, ``end`` (no
    more jobs), ``stop``; end of file means stop too.
    """
    _ignore_sigint()  # the parent decides when to stop
    side: _WorkerSide | None = None
    try:
        side = _WorkerSide(recipe, conn, control)
    except Exception as exc:  # no judge or metric here: the parent scores without us
        with contextlib.suppress(OSError):
            conn.send(("unstarted", f"{type(exc).__name__}: {exc}"))
        conn.close()
        return
    try:
        side.run()
    except BaseException as exc:
        try:  # the parent must be able to rebuild it too (keyword-only __init__ cannot)
            pickle.loads(pickle.dumps(exc))  # noqa: S301 (our own bytes)
        except Exception:
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(OSError):
            side.send("raise", exc)
    finally:
        conn.close()


# --------------------------------------------------------------------------- the parent


@dataclass
class _Worker:
    """One worker process as the parent sees it."""

    process: BaseProcess
    conn: Connection
    control: Connection
    share: int
    rate: float | None
    ready: bool = False
    done: bool = False
    granted: int = 0
    holding: set[Key] = field(default_factory=set)
    lending: threading.Event = field(default_factory=threading.Event)
    """Set to stop lending slots to this worker."""
    sending: threading.Lock = field(default_factory=threading.Lock)
    loans: threading.Lock = field(default_factory=threading.Lock)
    """Guards ``granted`` against the worker's exit while a slot is being lent."""
    heard: float = field(default_factory=time.monotonic)
    """When it last sent a message or was sent jobs (monotonic seconds)."""
    ended: bool = False
    """Killed for its silence (once)."""

    def send(self, *message: Any) -> bool:
        """Send a message to the worker: False when it is gone (its pipe is closed).

        The message is pickled before anything is written, so whatever pickling raises
        (``TypeError``, ``PicklingError``, ``ValueError`` from a ctypes pointer) goes to the
        caller as the message's own problem, never taken for a worker that is gone.
        """
        data = ForkingPickler.dumps(message)
        try:
            with self.sending:
                self.control.send_bytes(data)
        except (OSError, ValueError):
            return False
        return True


class _Feed:
    """The jobs not handed out yet, and which worker holds which of the others."""

    def __init__(self, keys: Sequence[Key]) -> None:
        self.pending: deque[Key] = deque(keys)
        self.lock = threading.Condition()
        self.held = 0  # jobs a worker holds, unfinished
        self.handed: dict[Key, int] = {}  # times a job went to a worker
        self.own_only: deque[Key] = deque()  # jobs no worker can take (see keep_for_parent)
        self.stopped = False

    def wait_own(self) -> bool:
        """Wait while the feed is empty but a worker holds jobs; True when one is there to take.

        A dead worker's jobs come back to the feed. This takes none: the caller holds no
        slot, and a job is taken only by a thread that holds one (none hoarded).
        """
        with self.lock:
            while not self.pending and not self.own_only and self.held and not self.stopped:
                self.lock.wait(_POLL_S)
            return bool(self.pending or self.own_only) and not self.stopped

    def take_own(self) -> tuple[Key | None, bool]:
        """A job for the parent (or None, at once), and whether more may come."""
        with self.lock:
            if self.stopped:
                return None, False
            if self.own_only:
                return self.own_only.popleft(), True
            if self.pending:
                return self.pending.popleft(), True
            return None, bool(self.held)

    def take_for(self, worker: _Worker, count: int) -> list[Key]:
        with self.lock:
            keys = [self.pending.popleft() for _ in range(min(count, len(self.pending)))]
            for key in keys:
                self.handed[key] = self.handed.get(key, 0) + 1
            worker.holding.update(keys)
            self.held += len(keys)
            return keys

    def finished(self, worker: _Worker, key: Key) -> None:
        with self.lock:
            if key in worker.holding:
                worker.holding.discard(key)
                self.held -= 1
                if not self.held:
                    self.lock.notify_all()

    def keep_for_parent(self, worker: _Worker, keys: Sequence[Key], back: Sequence[Key]) -> None:
        """Take ``keys`` and ``back`` from ``worker`` (not counted as handed out to it).

        The parent alone scores ``keys`` (no worker can receive or read them); ``back`` go
        to the front of the feed again.
        """
        with self.lock:
            for key in (*keys, *back):
                if key in worker.holding:
                    worker.holding.discard(key)
                    self.held -= 1
                    self.handed[key] -= 1
            self.own_only.extend(keys)
            self.pending.extendleft(reversed(back))
            self.lock.notify_all()

    def reclaim(self, worker: _Worker, restarts: int) -> list[Key]:
        """A dead worker's jobs go back to the front of the feed; returns those that fail."""
        with self.lock:
            back = sorted(k for k in worker.holding if self.handed.get(k, 0) <= restarts)
            failed = sorted(k for k in worker.holding if self.handed.get(k, 0) > restarts)
            self.held -= len(worker.holding)
            worker.holding.clear()
            self.pending.extendleft(reversed(back))
            self.lock.notify_all()
            return failed

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self.lock.notify_all()


Event = tuple[Any, ...]


class _Pool:
    """The parent's side: its own scoring, the workers, and the results of both."""

    def __init__(
        self,
        *,
        samples: Sequence[RagSample],
        metrics: Sequence[BaseRagMetric],
        engine: ScoringEngine,
        recipe: ScoringRecipe,
        processes: int,
        stop: threading.Event,
        method: str | None = None,
    ) -> None:
        self.samples = samples
        self.metrics = metrics
        self.engine = engine
        self.recipe = recipe
        self.stop = stop
        self.method = method or start_method()
        """How this run's workers start (fork, spawn, forkserver): see :func:`start_method`."""
        self.context: Any = multiprocessing.get_context(self.method)  # a start method's context
        self.feed = _Feed([(r, c) for r in range(len(samples)) for c in range(len(metrics))])
        self.events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self.workers: list[_Worker] = []
        self.closing = threading.Event()
        self.halt = threading.Event()
        self.share_recipe = recipe.split(processes)
        self.processes = processes
        self.limiter = engine.limiter
        self.own: JobFeed | None = None
        self.unsendable = False  # a row could not be sent to a worker (warned once)
        timeout = engine.timeout
        self.stall_s = None if timeout is None else timeout + max(_STALL_GRACE_S, timeout)
        """Silence after which a worker holding jobs is taken for frozen (None: never)."""
        self.converted: set[str] = set()  # metrics whose details a worker converted (warned)

    # ------------------------------------------------------------ start

    def start_workers(self) -> None:
        """Start the worker processes; one the system refuses ends the starting.

        ``start()`` raising ``OSError`` (``EAGAIN`` from a process limit, ``ENOMEM``) is
        warned about once and the run goes on with the workers already started: the
        parent scores what they do not, as when a worker dies. A second try would meet the
        same limit, so none is made.
        """
        forked = self.method == "fork"
        keep_main = forked or needs_main(self.recipe)
        recipe = pickle.dumps(self.share_recipe) if forked else None
        for _ in range(self.processes - 1):
            receiver, sender = self.context.Pipe(duplex=False)
            listener, control = self.context.Pipe(duplex=False)
            if recipe is not None:
                inherited = [receiver, control]
                inherited += [c for w in self.workers for c in (w.conn, w.control)]
                target: Callable[..., None] = _forked_main
                args: tuple[Any, ...] = (_worker_main, recipe, sender, listener, inherited)
            else:
                target, args = _worker_main, (self.share_recipe, sender, listener)
            process = self.context.Process(
                target=target, args=args, name="ragmetrics-worker", daemon=True
            )
            try:
                _start(process, keep_main=keep_main)
            except OSError as exc:
                for end in (receiver, sender, listener, control):
                    end.close()
                logger.warning(
                    "the system refused to start a worker process (%s: %s); the run "
                    "continues with %d of %d worker processes and this process scores the rest",
                    type(exc).__name__,
                    exc,
                    len(self.workers),
                    self.processes - 1,
                )
                return
            sender.close()  # the child holds its own copies: EOF here once it exits
            listener.close()
            share = self.share_recipe
            worker = _Worker(
                process, receiver, control, share.max_concurrency, share.rate_limit_per_minute
            )
            self.workers.append(worker)

    # ------------------------------------------------------------ the parent's own jobs

    def run_own(self) -> None:
        """The parent's threads score jobs from the feed, one at a time (a thread of its own)."""
        engine = self.engine

        def refill(block: bool) -> bool:
            # ``block``: the thread holds no slot; it waits while the workers hold the last
            # jobs, and takes none (it takes one once it holds a slot: none hoarded).
            if block and self.feed.wait_own():
                return True
            with taking:  # a job taken is added before another thread may close the batch
                key, more = self.feed.take_own()
                if key is not None:
                    row, col = key
                    batch.add([Job(self.samples[row], self.metrics[col], key)])
                elif not more:
                    batch.close()
                else:
                    return False
            return True

        def deliver(job: Job, result: MetricResult) -> None:
            row, col = job.tag
            self.events.put(("result", row, col, result))

        taking = threading.Lock()
        batch = self.own = JobFeed(refill)
        try:
            engine.run_feed(batch, on_result=deliver)
        except BaseException as exc:
            self.events.put(("raise", exc))

    # ------------------------------------------------------------ workers' messages

    def serve(self) -> None:
        """Answer the workers (a thread of its own): jobs on request, results, deaths.

        An error of ours here ends the run with that error, rather than leave it waiting
        for results nobody reads any more.
        """
        try:
            self._serve()
        except BaseException as exc:
            self.events.put(("raise", exc))

    def _serve(self) -> None:
        while self.workers and not self.closing.is_set():
            handles: list[Any] = [w.conn for w in self.workers if not w.done]
            handles += [w.process.sentinel for w in self.workers]
            ready = set(wait(handles, _POLL_S))
            for worker in list(self.workers):
                if not worker.done and worker.conn in ready:
                    self._read(worker)
                if worker.process.sentinel in ready:
                    if not worker.done:
                        self._read(worker)
                    self._retire(worker)
            self._end_stalled()

    def _end_stalled(self) -> None:
        """Kill a worker that holds jobs and has sent nothing for far longer than a job may take.

        With a ``timeout``, each job a worker holds ends (scored, or failed at its timeout)
        within it, and the worker sends its results at once: one that holds jobs and sends
        nothing for :attr:`stall_s` is frozen (stopped, or stuck in code that never lets
        its threads run). Its death then returns its jobs to the feed, as any worker's does.
        Without a timeout a job may take any time, and silence proves nothing.
        """
        if self.stall_s is None:
            return
        now = time.monotonic()
        for worker in self.workers:
            silent = now - worker.heard
            if worker.holding and not worker.done and not worker.ended and silent > self.stall_s:
                worker.ended = True
                logger.warning(
                    "a worker process (pid %s) holds %d jobs and has sent nothing for %.1f s, "
                    "longer than a job may take (timeout %gs): it was ended, and its jobs go "
                    "to the other processes (the judge calls it made for them are not in the "
                    "run's usage)",
                    worker.process.pid,
                    len(worker.holding),
                    silent,
                    self.engine.timeout,
                )
                worker.process.kill()

    def _read(self, worker: _Worker) -> None:
        try:
            while worker.conn.poll():
                data = worker.conn.recv_bytes()
                worker.heard = time.monotonic()
                try:
                    message = pickle.loads(data)  # noqa: S301 (our own worker's message)
                except Exception as exc:
                    # Its results cannot be read: end it, and its jobs go back to the feed.
                    logger.warning("a worker process sent what cannot be read (%r); ended", exc)
                    worker.process.terminate()
                    return
                self._handle(worker, message)
        except (EOFError, OSError):  # died mid-message: nothing more
            return

    def _handle(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "results":
            for row, col, result in message[1]:
                self.feed.finished(worker, (row, col))
                self._count_lookups(col, result)
                self.events.put(("result", row, col, result))
        elif kind == "more":
            self._send_jobs(worker, message[1])
        elif kind == "unstarted":
            logger.warning(
                "a worker process could not start (%s); this process scores without it",
                message[1],
            )
        elif kind == "unreadable":
            logger.warning(
                "a worker process could not read its jobs (%s); this process scores them",
                message[1],
            )
            self.feed.keep_for_parent(worker, sorted(worker.holding), ())
        elif kind == "converted":
            for name in message[1]:
                if name not in self.converted:
                    self.converted.add(name)
                    logger.warning(
                        "metric %r returned details that cannot be pickled: they were "
                        "converted to plain data (other values as their text) to send them "
                        "from a worker process; scores and reasons are unchanged",
                        name,
                    )
        elif kind == "ready":
            worker.ready = True
            self._rate_to(worker)
            transient_thread(self._lend, args=(worker,), name="ragmetrics-lend").start()
        elif kind == "done":
            worker.done = True
        elif kind == "raise":
            self.events.put(("raise", message[1]))

    def _count_lookups(self, col: int, result: MetricResult) -> None:
        """A worker's verdict-cache lookups, counted on the caller's cache object too.

        The worker looked up in its own copy; without this, ``cache.hits`` / ``misses``
        would count only this process's share of the run.
        """
        cache = getattr(self.metrics[col], "cache", None)
        usage = result.usage
        if cache is not None and (usage.cache_hits or usage.cache_misses):
            cache.record(hits=usage.cache_hits, misses=usage.cache_misses)

    def _send_jobs(self, worker: _Worker, count: int) -> None:
        """Up to ``count`` jobs for ``worker``, or ``end`` when none is left for it.

        A sample that cannot be pickled (a row holding a live object), whatever the
        exception says, cannot go to a worker: its jobs stay with the parent, which scores
        them as ``workers=1`` would. Jobs that could not be written because the worker is
        gone go back to the front of the feed at once (not counted as handed to it); its
        exit is seen on its sentinel, as for any worker that dies.
        """
        while True:
            stopped = self.halt.is_set() or self.stop.is_set()
            keys = [] if stopped else self.feed.take_for(worker, count)
            if not keys:
                worker.send("end")
                return
            try:
                sent = worker.send("jobs", [(r, c, self.samples[r]) for r, c in keys])
            except Exception as exc:  # pickling: nothing was written
                local = [k for k in keys if not _picklable(self.samples[k[0]])]
                rows = ", ".join(str(row) for row in sorted({row for row, _ in local}))
                level = logging.DEBUG if self.unsendable else logging.WARNING
                self.unsendable = True
                logger.log(
                    level,
                    "row(s) %s cannot be sent to a worker process (%r); this process scores them%s",
                    rows,
                    exc,
                    "" if level == logging.DEBUG else " (further rows: logged at DEBUG)",
                )
                back = [k for k in keys if k not in set(local)]
                self.feed.keep_for_parent(worker, local or keys, back if local else ())
                continue
            if not sent:  # the worker is gone: nobody will read these
                self.feed.keep_for_parent(worker, (), keys)
            else:  # its time to show progress on them starts now
                worker.heard = time.monotonic()
            return

    def _rate_to(self, worker: _Worker) -> None:
        """The parent's limiter gives up the worker's share of the rate (or takes it back)."""
        limiter = self.limiter
        if limiter is None or worker.rate is None:
            return
        sign = 1 if worker.ready else -1
        per_second = max(1e-9, limiter.requests_per_second - sign * worker.rate / 60.0)
        limiter.requests_per_second = per_second
        limiter.max_bucket_size = max(1.0, per_second)
        limiter.available_tokens = min(limiter.available_tokens, limiter.max_bucket_size)

    def _lend(self, worker: _Worker) -> None:
        """Move the worker's share of the slots from the parent to it, one as each frees."""
        gate = self.engine.gate
        while worker.granted < worker.share and not worker.lending.is_set():
            if not gate.acquire_resumed(timeout=_POLL_S):  # ahead of the parent's new jobs
                continue
            with worker.loans:  # the worker's exit takes back exactly what was granted
                if worker.lending.is_set() or not worker.send("grant"):
                    gate.slots.release()
                    return
                worker.granted += 1

    def _retire(self, worker: _Worker) -> None:
        """A worker exited: its slots and rate go back to the parent, its jobs to the feed."""
        worker.process.join(_JOIN_S)
        self.workers.remove(worker)
        with worker.loans:
            worker.lending.set()
            granted, worker.granted = worker.granted, 0
        worker.conn.close()
        worker.control.close()
        for _ in range(granted):
            self.engine.gate.slots.release()
        if worker.ready:
            worker.ready = False
            self._rate_to(worker)
        if self.closing.is_set():
            return
        held = len(worker.holding)
        failed = self.feed.reclaim(worker, WORKER_RESTARTS)
        why = (
            f"was ended after sending nothing for over {self.stall_s:g} s (frozen)"
            if worker.ended
            else _exit_cause(worker.process.exitcode)
        )
        if worker.process.exitcode != 0 and not worker.ended:  # ended: said when it was
            logger.warning(
                "a worker process (pid %s) %s; the results it sent are kept, its %d "
                "unfinished jobs go back to the other processes%s%s",
                worker.process.pid,
                why,
                held,
                f" ({len(failed)} of them fail: every process that held them died)"
                if failed
                else "",
                "; the judge calls it made for them are not in the run's usage" if held else "",
            )
        for row, col in failed:
            error = (
                f"WorkerDiedError: the worker process scoring this job {why} before finishing "
                f"it ({WORKER_RESTARTS + 1} processes tried)"
            )
            name = self.metrics[col].metric_name
            result = MetricResult(metric=name, score=math.nan, error=error)
            self.events.put(("result", row, col, result))

    # ------------------------------------------------------------ stop

    def close(self, record: Callable[[int, int, MetricResult], None]) -> None:
        """Stop everyone, collect what workers finished (on stop), then end them."""
        self.halt.set()
        if self.own is not None:
            self.own.cancel()
        self.feed.stop()
        workers = list(self.workers)
        for worker in workers:
            worker.lending.set()
            worker.send("stop")
        deadline = time.monotonic() + _STOP_GRACE_S
        while time.monotonic() < deadline and any(
            w.holding and w.ready and not w.done and w.process.is_alive() for w in workers
        ):
            time.sleep(0.01)  # the serving thread reads their last results meanwhile
        self.closing.set()
        for worker in workers:
            if worker.process.is_alive():
                worker.process.terminate()
        for worker in workers:
            worker.process.join(_KILL_AFTER_S)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(_JOIN_S)
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                break
            if event[0] == "result":
                record(*event[1:])


def _picklable(sample: RagSample) -> bool:
    """Whether ``sample`` can go to a worker (pickled as the pipe pickles it)."""
    try:
        ForkingPickler.dumps(sample)
    except Exception:
        return False
    return True


def _exit_cause(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def score_in_processes(
    samples: Sequence[RagSample],
    metrics: Sequence[BaseRagMetric],
    engine: ScoringEngine,
    recipe: ScoringRecipe,
    *,
    processes: int,
    on_result: Callable[[int, int, MetricResult], None],
    stop: threading.Event,
    on_start: Callable[[], None] | None = None,
    method: str | None = None,
) -> None:
    """Score every (row x metric) job here and in ``processes - 1`` workers; see the module.

    ``on_result`` runs on the calling thread with (row, column, result), once per job. Setting
    ``stop`` (or Ctrl-C, which propagates) ends the run: what was finished is collected, the
    rest stays unscored. ``on_start`` runs once the workers may be forked, before the first
    result: start anything that runs a thread there (a tqdm bar starts a monitor thread), so
    that it does not keep the workers from being forked. ``method`` is how workers start
    when the caller decided it already (None: :func:`start_method` decides now); a fork
    chosen then is checked again here, and becomes a spawn if a thread started since.
    """
    method = method_now(method)
    pool = _Pool(
        samples=samples,
        metrics=metrics,
        engine=engine,
        recipe=recipe,
        processes=processes,
        stop=stop,
        method=method,
    )
    total = len(samples) * len(metrics)
    received: set[Key] = set()

    def record(row: int, col: int, result: MetricResult) -> None:
        if (row, col) not in received:  # a job is recorded once, whoever sent it
            received.add((row, col))
            on_result(row, col, result)

    own = transient_thread(pool.run_own, name="ragmetrics-own")
    serving = transient_thread(pool.serve, name="ragmetrics-feed")
    try:
        # Ctrl-C stops the loop between two results and is raised after it (see
        # _interrupts): a result taken off the queue is always recorded.
        with DeferredInterrupt() as ctrl_c:
            if pool.method == "fork":  # forked while this process is single-threaded: in ms
                pool.start_workers()
                if on_start is not None:
                    on_start()
                own.start()
            else:  # the parent's jobs are under way before the first worker is spawned
                if on_start is not None:
                    on_start()
                own.start()
                pool.start_workers()
            serving.start()
            while len(received) < total and not stop.is_set() and not ctrl_c.pending:
                try:
                    event = pool.events.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                if event[0] == "raise":
                    raise event[1]
                record(*event[1:])
    finally:
        pool.close(record)
        if serving.ident is not None:
            serving.join(_JOIN_S)
