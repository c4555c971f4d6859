"""Admission of jobs and judge requests: concurrency slots, the request rate, backoff sleeps.

The scoring engine gives each job an :class:`Admission` through a context variable. The job
holds one of the engine's slots while it works and gives it back while it sleeps out a retry
backoff (:meth:`Admission.sleep`), so a job waiting to retry costs no concurrency; the rate
limiter (langchain-core's ``InMemoryRateLimiter``) meters every HTTP attempt, retries
included (:meth:`Admission.request`). Outside the engine (a metric invoked on its own) there
is no admission and nothing is limited.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

from langchain_ragmetrics._errors import DeadlineExceededError

if TYPE_CHECKING:
    from langchain_core.rate_limiters import BaseRateLimiter

__all__ = [
    "HELD_PER_SLOT",
    "RESUME_AFTER_S",
    "Admission",
    "DeadlineExceededError",
    "Gate",
    "admitted",
    "current_admission",
]

_RATE_POLL_S = 0.05


RESUME_AFTER_S = 10.0
"""Seconds a job back from its backoff lets jobs not started yet take the free slots first."""
HELD_PER_SLOT = 8
"""How many jobs back from their backoff may wait behind new ones, per concurrency slot."""


class _Resumed:
    """A job back from its backoff, waiting for a slot: since when, and its own wake-up."""

    __slots__ = ("since", "turn")

    def __init__(self, since: float, lock: threading.Lock) -> None:
        self.since = since
        self.turn = threading.Condition(lock)


class Gate:
    """The engine's limits: ``max_concurrency`` working jobs, ``rate_limiter``'s request rate.

    Threads share one pool of slots; each event loop gets its own ``asyncio.Semaphore`` of the
    same size (an engine runs its jobs on threads or on one loop, not both at once).

    Who gets a free slot (threads): a job not started yet before a job back from its backoff,
    unless that job has waited ``resume_after`` seconds for a slot already, or more than
    ``max_held`` such jobs wait; then the oldest goes first. Every job's first request thus
    goes out as early as the slots allow,
    so the chains of retries a faulty judge causes (whose waits the server may set: a
    ``Retry-After`` cannot be shortened) start early and run while the rest of the batch
    proceeds; the retries held back are served when no job is left to start, which keeps the
    slots busy while the last jobs' chains sleep, instead of those chains running alone after
    everything else is done. ``resume_after`` bounds how long a retry waits behind new jobs
    (what it may cost a job's timeout), ``max_held`` how many wait (each is a parked thread).

    Args:
        max_concurrency: Jobs at work at once.
        rate_limiter: Meters every HTTP attempt (None: no limit).
        resume_after: Seconds a job back from its backoff yields to jobs not started yet.
        max_held: Jobs back from their backoff that may wait behind new ones (default
            ``HELD_PER_SLOT * max_concurrency``); beyond it the oldest goes first.
    """

    def __init__(
        self,
        max_concurrency: int,
        rate_limiter: BaseRateLimiter | None = None,
        *,
        resume_after: float = RESUME_AFTER_S,
        max_held: int | None = None,
    ) -> None:
        if max_concurrency < 1:
            msg = "`max_concurrency` must be at least 1"
            raise ValueError(msg)
        if resume_after < 0 or (max_held is not None and max_held < 0):
            msg = "`resume_after` and `max_held` must not be negative"
            raise ValueError(msg)
        self.max_concurrency = max_concurrency
        self.rate_limiter = rate_limiter
        self.resume_after = resume_after
        self.max_held = HELD_PER_SLOT * max_concurrency if max_held is None else max_held
        self._lock = threading.Lock()
        self._free = max_concurrency
        self._fresh_turn = threading.Condition(self._lock)  # jobs about to start wait here
        self._fresh_waiting = 0
        self._resumed: deque[_Resumed] = deque()  # oldest first; each waits on its own turn
        self._fresh_pending: list[Callable[[], bool]] = []  # one per running batch
        self._loop_slots: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Semaphore
        ] = weakref.WeakKeyDictionary()

    @property
    def resuming(self) -> int:
        """Jobs back from a backoff that wait for a slot."""
        return len(self._resumed)

    @property
    def free(self) -> int:
        """Thread slots free right now."""
        return self._free

    @contextlib.contextmanager
    def fresh_work(self, pending: Callable[[], bool]) -> Iterator[None]:
        """While the block runs, ``pending()`` says whether a batch has jobs left to start.

        :meth:`ScoringEngine.run` tells the gate so: a job back from its backoff then yields
        to the batch's next job even in the instant no worker waits for the slot yet.
        """
        with self._lock:
            self._fresh_pending.append(pending)
        try:
            yield
        finally:
            with self._lock:
                self._fresh_pending.remove(pending)
                self._signal()

    def wake(self) -> None:
        """Re-check who gets a slot (a batch ran out of jobs to start, or stopped)."""
        with self._lock:
            self._signal()

    def _signal(self) -> None:
        """Wake whoever may take a free slot (lock held): the oldest resumed job, one new job.

        Each decides for itself (the resumed one may yield to new jobs, a new one to an overdue
        resumed one); waking only these two keeps hundreds of parked jobs asleep.
        """
        if self._free <= 0:
            return
        if self._resumed:
            self._resumed[0].turn.notify()
        if self._fresh_waiting:
            self._fresh_turn.notify()

    def _overdue(self) -> bool:
        """Whether the oldest resumed job goes before new ones: waited too long, or too many."""
        if not self._resumed:
            return False
        too_long = time.monotonic() >= self._resumed[0].since + self.resume_after
        return too_long or len(self._resumed) > self.max_held

    def _fresh_ahead(self) -> bool:
        return self._fresh_waiting > 0 or any(pending() for pending in self._fresh_pending)

    @staticmethod
    def _wait(turn: threading.Condition, until: float | None, deadline: float | None) -> bool:
        """Wait on ``turn`` for a notify, ``until`` or ``deadline``; False past the deadline."""
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return False
        ends = [t for t in (until, deadline) if t is not None]
        turn.wait(None if not ends else max(0.0, min(ends) - now))
        return True

    def acquire_fresh(self, timeout: float | None) -> bool:
        """A slot for a job about to start: free, and no resumed job has waited too long."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._fresh_waiting += 1
            try:
                while True:
                    if self._free > 0 and not self._overdue():
                        self._free -= 1
                        return True
                    # no free slot, or it is an overdue resumed job's (woken with us)
                    if not self._wait(self._fresh_turn, None, deadline):
                        return False
            finally:
                self._fresh_waiting -= 1
                self._signal()  # a slot still free goes to the next one

    def acquire_resumed(self, timeout: float | None) -> bool:
        """A slot for a job back from its backoff: after new jobs, for ``resume_after`` at most."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            me = _Resumed(time.monotonic(), self._lock)
            overdue = me.since + self.resume_after
            self._resumed.append(me)
            self._signal()  # one too many held back: the oldest goes now
            try:
                while True:
                    until: float | None = None  # a notify: a slot freed, or our turn came
                    if self._free > 0 and self._resumed[0] is me:
                        if self._overdue() or not self._fresh_ahead():
                            self._free -= 1
                            return True
                        until = overdue  # yield to new jobs until then (or a notify)
                    if not self._wait(me.turn, until, deadline):
                        return False
            finally:
                self._resumed.remove(me)
                self._signal()

    def release(self) -> None:
        """Give a thread slot back."""
        with self._lock:
            if self._free >= self.max_concurrency:
                msg = "Gate released more slots than it gave"
                raise ValueError(msg)
            self._free += 1
            self._signal()

    def loop_slots(self) -> asyncio.Semaphore:
        """The slots of the running event loop."""
        loop = asyncio.get_running_loop()
        slots = self._loop_slots.get(loop)
        if slots is None:
            slots = self._loop_slots[loop] = asyncio.Semaphore(self.max_concurrency)
        return slots


class Admission:
    """One job's standing with the gate: whether it holds a slot, and its deadline.

    A job may run several judge calls at once (``per_context`` metrics); they share the job's
    slot, which is given back only while all of them sleep.

    Args:
        gate: The engine's gate.
        deadline: ``time.monotonic()`` after which the job sends no more requests.
        holding: Whether the job already holds a slot (taken by the engine before it started).
        on_park: Called (on a thread) when the job gives its slot back to sleep: the engine
            may start another worker so the slot does not idle.
        loop_slots: The event loop's slots for an async job (None: the threads' semaphore).
    """

    def __init__(
        self,
        gate: Gate,
        deadline: float | None = None,
        *,
        holding: bool = False,
        on_park: Callable[[], object] | None = None,
        loop_slots: asyncio.Semaphore | None = None,
    ) -> None:
        self.gate = gate
        self.deadline = deadline
        self._on_park = on_park
        self._loop_slots = loop_slots
        self._state = threading.Lock()
        self._turn = threading.Lock()  # one sibling call at a time takes the slot back
        self._active = 1
        self._held = holding
        self._closed = False

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None without one), never negative."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def _check(self) -> None:
        if self._closed:
            raise DeadlineExceededError("the engine gave up on this job")
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise DeadlineExceededError("the job's deadline passed")

    # ----------------------------------------------------------------- requests

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Around one HTTP attempt on a thread: spend one request of the rate limit."""
        self._check()
        limiter = self.gate.rate_limiter
        if limiter is not None:
            while not limiter.acquire(blocking=False):
                time.sleep(_RATE_POLL_S)
                self._check()
        yield

    @contextlib.asynccontextmanager
    async def arequest(self) -> AsyncIterator[None]:
        """Async twin of :meth:`request`."""
        self._check()
        limiter = self.gate.rate_limiter
        if limiter is not None:
            while not await limiter.aacquire(blocking=False):
                await asyncio.sleep(_RATE_POLL_S)
                self._check()
        yield

    # ----------------------------------------------------------------- backoff

    def sleep(self, seconds: float) -> None:
        """Sleep out a backoff without the slot, then take a slot again (thread)."""
        self._park()
        try:
            time.sleep(seconds)
        finally:
            self._unpark()

    async def asleep(self, seconds: float) -> None:
        """Async twin of :meth:`sleep`."""
        self._park()
        try:
            await asyncio.sleep(seconds)
        finally:
            await self._aunpark()

    def _park(self) -> None:
        with self._state:
            self._active -= 1
            release = self._active == 0 and self._held
            if release:
                self._held = False
        if release:
            self._release()
            if self._on_park is not None:
                self._on_park()

    def enter(self) -> None:
        """Take a slot for the job on this thread (DeadlineExceededError at the deadline)."""
        with self._turn:
            with self._state:
                if self._held or self._closed:
                    return
            self._took(self.gate.acquire_fresh(timeout=self.remaining()))

    def _unpark(self) -> None:
        with self._turn:
            with self._state:
                self._active += 1
                if self._held or self._closed:
                    return
            ok = self.gate.acquire_resumed(timeout=self.remaining())
            if not ok:
                with self._state:
                    self._active -= 1
            self._took(ok)

    async def _aunpark(self) -> None:
        with self._state:
            self._active += 1
            if self._held or self._closed:
                return
        slots = self._loop_slots or self.gate.loop_slots()
        await slots.acquire()
        self._took(ok=True)

    def _took(self, ok: bool) -> None:
        """Record a slot just taken (or give it back when the job was closed meanwhile)."""
        if not ok:
            raise DeadlineExceededError("the job's deadline passed waiting for a slot")
        with self._state:
            give_back = self._closed or self._held
            self._held = True if not give_back else self._held
        if give_back:
            self._release()

    def _release(self) -> None:
        if self._loop_slots is not None:
            self._loop_slots.release()
        else:
            self.gate.release()

    def close(self) -> None:
        """The job is over (finished, or abandoned at its deadline): give the slot back."""
        with self._state:
            self._closed = True
            release, self._held = self._held, False
        if release:
            self._release()


_CURRENT: ContextVar[Admission | None] = ContextVar("ragmetrics_admission", default=None)


def current_admission() -> Admission | None:
    """The admission of the job running in this context, if the engine runs it."""
    return _CURRENT.get()


@contextlib.contextmanager
def admitted(admission: Admission | None) -> Iterator[None]:
    """Run the block as (part of) a job with this admission."""
    token = _CURRENT.set(admission)
    try:
        yield
    finally:
        _CURRENT.reset(token)
