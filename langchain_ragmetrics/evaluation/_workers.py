"""``evaluate(..., workers=N)``: the jobs of one run spread over N worker processes.

One process spends most of a run's CPU on building prompts, parsing answers and HTTP
plumbing under one interpreter lock; N spawned processes use N cores. Each worker gets a
:class:`~langchain_ragmetrics.evaluation._recipe.ScoringRecipe` (never a live client), builds
its judges and engine once, and scores an interleaved share of the rows (row ``k``, ``k+N``
...), so shares cost about the same. Results stream back over one pipe per worker as they
finish: the caller's thread keeps the progress bar, ``on_result`` and the results, in input
order whatever order they arrive in.

Why processes of our own rather than ``ProcessPoolExecutor``: a worker that dies breaks a
whole pool and every pending future with it, and a killed process can leave a shared queue's
lock held. Here each worker has its own pipe and its death is seen on its sentinel: the
results it delivered are kept, its unfinished jobs go to a replacement (once), and only then
fail with the cause. (No ``multiprocessing.Event`` either: setting one waits for sleepers
that a dead worker never wakes.) Ctrl-C asks every worker to stop, collects what they
finished, and ends them; workers ignore SIGINT themselves, so a terminal's Ctrl-C reaches
the parent only.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import pickle
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._engine import Job
from langchain_ragmetrics._schema import MetricResult, RagSample

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from langchain_ragmetrics.evaluation._recipe import ScoringRecipe

__all__ = ["WORKER_RESTARTS", "Task", "score_in_processes", "worker_count"]

Task = tuple[int, int, RagSample]
"""One job for a worker: (row position, metric column, sample)."""

WORKER_RESTARTS = 1
"""How many times the unfinished jobs of a dead worker go to a replacement before they fail."""

_POLL_S = 0.2  # bounded waits keep the caller's thread interruptible by Ctrl-C
_STOP_GRACE_S = 5.0  # how long stopping workers may take to hand over what they finished
_JOIN_S = 5.0


def worker_count(workers: int, rows: int) -> int:
    """The processes actually used: never more than rows (1 means in-process)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        msg = f"`workers` must be a whole number of at least 1, got {workers!r}"
        raise ValueError(msg)
    return max(1, min(workers, rows))


def _worker_main(
    recipe: ScoringRecipe, tasks: list[Task], conn: Connection, control: Connection
) -> None:
    """A worker process: build the metrics and engine from the recipe, score, stream results."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    try:
        metrics = recipe.build_metrics()
        engine = recipe.build_engine()
        halt = threading.Event()

        def watch() -> None:  # any message, or the parent gone (EOF), means stop
            with contextlib.suppress(EOFError, OSError):
                control.recv()
            halt.set()

        threading.Thread(target=watch, name="ragmetrics-stop", daemon=True).start()
        jobs = [Job(sample, metrics[col], (row, col)) for row, col, sample in tasks]

        def send(job: Job, result: MetricResult) -> None:
            row, col = job.tag
            conn.send(("result", row, col, result))

        engine.run(jobs, on_result=send, stop=halt)
        conn.send(("done",))
    except BaseException as exc:
        try:
            pickle.dumps(exc)
        except Exception:
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(OSError):
            conn.send(("raise", exc))
    finally:
        conn.close()


@dataclass
class _Share:
    """The jobs one worker process owns, and its state."""

    tasks: list[Task]
    attempt: int
    process: BaseProcess
    conn: Connection
    control: Connection
    done: bool = False
    delivered: set[tuple[int, int]] = field(default_factory=set)


class _Pool:
    """The worker processes of one run and the results they delivered."""

    def __init__(
        self,
        recipe: ScoringRecipe,
        on_result: Callable[[int, int, MetricResult], None],
    ) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.recipe = recipe
        self.on_result = on_result
        self.stopping = False
        self.active: list[_Share] = []
        self.received: set[tuple[int, int]] = set()

    def start(self, tasks: list[Task], attempt: int) -> None:
        """Start one worker for ``tasks``."""
        # One pipe each way per worker: a killed worker can leave no shared lock held.
        receiver, sender = self.context.Pipe(duplex=False)
        listener, control = self.context.Pipe(duplex=False)
        process = self.context.Process(
            target=_worker_main,
            args=(self.recipe, tasks, sender, listener),
            name="ragmetrics-worker",
            daemon=True,
        )
        process.start()
        sender.close()  # the child holds its own copies: EOF here once it exits
        listener.close()
        self.active.append(_Share(tasks, attempt, process, receiver, control))

    def _handle(self, share: _Share, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "result":
            _, row, col, result = message
            share.delivered.add((row, col))
            if (row, col) not in self.received:  # a job is recorded once, whoever sent it
                self.received.add((row, col))
                self.on_result(row, col, result)
        elif kind == "done":
            share.done = True
        elif kind == "raise":
            raise message[1]

    def _read(self, share: _Share) -> None:
        """Handle every message the worker has sent so far."""
        try:
            while share.conn.poll():
                self._handle(share, share.conn.recv())
        except (EOFError, OSError, pickle.UnpicklingError):  # died mid-message: nothing more
            return

    def pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` for results or exits; handle them; replace dead workers."""
        handles: list[Any] = [s.conn for s in self.active if not s.done]
        handles += [s.process.sentinel for s in self.active]
        ready = set(wait(handles, timeout))
        for share in list(self.active):
            if not share.done and share.conn in ready:
                self._read(share)
            if share.process.sentinel in ready:  # exited: read what is left, then retire it
                if not share.done:
                    self._read(share)
                self._retire(share)

    def _retire(self, share: _Share) -> None:
        """A worker is finished or dead: its unfinished jobs go to a replacement, or fail."""
        share.process.join(_JOIN_S)
        self.active.remove(share)
        share.conn.close()
        share.control.close()
        if self.stopping:
            return  # stopped on purpose: unfinished jobs stay "not run"
        missing = [t for t in share.tasks if (t[0], t[1]) not in self.received]
        if not missing:
            return
        if share.attempt < WORKER_RESTARTS:
            self.start(missing, share.attempt + 1)
            return
        code = share.process.exitcode
        why = _exit_cause(code)
        for row, col, _ in missing:
            self.received.add((row, col))
            error = (
                f"WorkerDiedError: the worker process scoring this job {why} before finishing "
                f"it ({share.attempt + 1} processes tried)"
            )
            name = self.recipe.metrics[col].metric_name
            self.on_result(row, col, MetricResult(metric=name, score=math.nan, error=error))

    def close(self) -> None:
        """Ask every worker to stop, collect what they finished, then end them."""
        self.stopping = True
        for share in self.active:
            with contextlib.suppress(OSError):
                share.control.send("stop")
        deadline = time.monotonic() + _STOP_GRACE_S
        try:
            while any(not s.done for s in self.active) and time.monotonic() < deadline:
                self.pump(min(_POLL_S, max(0.0, deadline - time.monotonic())))
        finally:
            for share in self.active:
                if share.process.is_alive():
                    share.process.terminate()
            for share in self.active:
                share.process.join(_JOIN_S)
                if share.process.is_alive():
                    share.process.kill()
                    share.process.join(_JOIN_S)
                share.conn.close()
                share.control.close()
            self.active.clear()


def _exit_cause(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def score_in_processes(
    samples: Sequence[RagSample],
    recipe: ScoringRecipe,
    *,
    workers: int,
    on_result: Callable[[int, int, MetricResult], None],
    stop: threading.Event,
) -> None:
    """Score every (row x metric) job in ``workers`` processes; results go to ``on_result``.

    ``on_result`` runs on the calling thread with (row, column, result), once per job. Setting
    ``stop`` (or Ctrl-C, which propagates) ends the run: what workers finished is collected,
    the rest stays unscored.
    """
    share = recipe.split(workers)
    columns = range(len(recipe.metrics))
    pool = _Pool(share, on_result)
    try:
        for k in range(workers):
            rows = range(k, len(samples), workers)
            pool.start([(row, col, samples[row]) for row in rows for col in columns], 0)
        total = len(samples) * len(columns)
        while pool.active and len(pool.received) < total and not stop.is_set():
            pool.pump(_POLL_S)
    finally:
        pool.close()
