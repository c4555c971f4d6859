"""Admission of jobs and judge requests: concurrency slots, the request rate, backoff sleeps.

The scoring engine gives each job an :class:`Admission` through a context variable. The job
holds one of the engine's slots while it works and gives it back while it sleeps out a retry
backoff (:meth:`Admission.sleep`), so a job waiting to retry costs no concurrency; the rate
limiter (langchain-core's ``InMemoryRateLimiter``) meters every HTTP attempt, retries
included (:meth:`Admission.request`). A job that sends several judge calls at once (entity
recall's two lists, ``per_context`` precision) holds one slot per call in flight: each call
beyond its first runs at once only on a slot that is free (:meth:`Admission.try_join`),
else after the job's other calls, so ``max_concurrency`` bounds the judge calls at work, not
only the jobs. Outside the engine (a metric invoked on its own) there is no admission and
nothing is limited.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._errors import DeadlineExceededError
from langchain_ragmetrics._options import whole_number

if TYPE_CHECKING:
    from langchain_core.rate_limiters import BaseRateLimiter

__all__ = [
    "Admission",
    "DeadlineExceededError",
    "Gate",
    "LoopSlots",
    "admitted",
    "current_admission",
]

_RATE_POLL_S = 0.05


class LoopSlots:
    """The slots of one event loop: a semaphore whose jobs back from a backoff go first.

    ``asyncio.Semaphore`` serves its waiters in arrival order: ``arun`` starts every job at
    once, so a job back from its backoff would wait behind every job not started yet (and
    could pass its timeout there). Here :meth:`acquire` with ``resumed=True`` goes before the
    fresh waiters, as :meth:`Gate.acquire_resumed` does for threads. A released slot is handed
    to the next waiter directly.
    """

    def __init__(self, value: int) -> None:
        self._value = value
        self._resumed: deque[asyncio.Future[None]] = deque()
        self._fresh: deque[asyncio.Future[None]] = deque()

    @property
    def resuming(self) -> int:
        """Jobs back from a backoff that wait for a slot."""
        return sum(1 for waiter in self._resumed if not waiter.done())

    async def acquire(self, *, resumed: bool = False) -> None:
        """Take a slot; ``resumed`` for a job back from its backoff (ahead of new jobs)."""
        if self._value > 0:  # a free slot means no live waiter: release hands slots over
            self._value -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._resumed if resumed else self._fresh
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a slot, then cancelled
                self.release()
            else:
                with contextlib.suppress(ValueError):
                    queue.remove(waiter)
            raise

    def try_acquire(self) -> bool:
        """Take a slot only if one is free now (then no job waits for one)."""
        if self._value > 0:
            self._value -= 1
            return True
        return False

    def release(self) -> None:
        """Give a slot back: to the first resumed waiter, else the first fresh one."""
        for queue in (self._resumed, self._fresh):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self._value += 1


class Gate:
    """The engine's limits: ``max_concurrency`` working jobs, ``rate_limiter``'s request rate.

    Threads share one counting semaphore; each event loop gets its own :class:`LoopSlots` of
    the same size (an engine runs its jobs on threads or on one loop, not both at once).
    """

    def __init__(self, max_concurrency: int, rate_limiter: BaseRateLimiter | None = None) -> None:
        whole_number("max_concurrency", max_concurrency)
        self.max_concurrency = max_concurrency
        self.rate_limiter = rate_limiter
        self.slots = threading.BoundedSemaphore(max_concurrency)
        self._resuming = 0  # jobs back from a backoff, waiting for a slot
        self._turns = threading.Condition()
        self._loop_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopSlots] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def resuming(self) -> int:
        """Jobs back from a backoff that wait for a slot (they go before new jobs)."""
        return self._resuming

    def acquire_resumed(self, timeout: float | None) -> bool:
        """A slot for a job back from its backoff: ahead of jobs not started yet."""
        with self._turns:
            self._resuming += 1
        try:
            return self.slots.acquire(timeout=timeout)
        finally:
            with self._turns:
                self._resuming -= 1
                self._turns.notify_all()

    def acquire_fresh(self, timeout: float) -> bool:
        """A slot for a job about to start, once no resumed job waits for one.

        A thread that just released a slot would otherwise take it straight back and a job
        back from its backoff would wait behind every new one, so the retries of a faulty
        judge would pile up at the end of the run.
        """
        deadline = time.monotonic() + timeout
        with self._turns:
            if not self._turns.wait_for(lambda: self._resuming == 0, timeout):
                return False
        return self.slots.acquire(timeout=max(0.0, deadline - time.monotonic()))

    def try_acquire(self) -> bool:
        """A slot only if one is free now and no job back from its backoff waits for one."""
        with self._turns:
            if self._resuming:
                return False
        return self.slots.acquire(blocking=False)

    def loop_slots(self) -> LoopSlots:
        """The slots of the running event loop."""
        loop = asyncio.get_running_loop()
        slots = self._loop_slots.get(loop)
        if slots is None:
            slots = self._loop_slots[loop] = LoopSlots(self.max_concurrency)
        return slots


class Admission:
    """One job's standing with the gate: the slots it holds, and its deadline.

    A job is worked on by its own thread (or task) and, while it sends several judge calls at
    once, by helpers that each joined with a slot of their own (:meth:`try_join`). Each of
    them that is awake (not sleeping out a backoff, not waiting for the others) holds one
    slot: sleeping gives it back (to the job's own next call first, see
    :meth:`starting_siblings`), waking takes one again ahead of jobs not started yet.

    Args:
        gate: The engine's gate.
        deadline: ``time.monotonic()`` after which the job sends no more requests.
        holding: Whether the job already holds a slot (taken by the engine before it started).
        on_park: Called (on a thread) when the job gives a slot back mid-job (a worker
            sleeps, waits or leaves): the engine may start another worker so the slot does
            not idle.
        loop_slots: The event loop's slots for an async job (None: the threads' semaphore).
    """

    def __init__(
        self,
        gate: Gate,
        deadline: float | None = None,
        *,
        holding: bool = False,
        on_park: Callable[[], object] | None = None,
        loop_slots: LoopSlots | None = None,
    ) -> None:
        self.gate = gate
        self.deadline = deadline
        self._on_park = on_park
        self._loop_slots = loop_slots
        self._state = threading.Lock()
        self._awake = 1  # the job's own thread or task, and the helpers that joined
        self._held = 1 if holding else 0
        self._closed = False
        self._on_sleep: Callable[[], bool] | None = None
        """Set while the job has calls not started (:meth:`starting_siblings`)."""

    @property
    def held(self) -> int:
        """Slots the job holds now."""
        return self._held

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

    # ----------------------------------------------------------------- helpers

    def try_join(self) -> bool:
        """A helper for one more call at once, if a slot is free now; it ends with :meth:`leave`.

        Never waits: with no free slot the call runs after the job's others, on their
        slots. No worker waits for a slot while it holds one (a sleeping worker, or the
        job's thread waiting for its helpers, holds none), so jobs cannot wait for each
        other's slots.
        """
        with self._state:
            if self._closed:
                return False
        slots = self._loop_slots
        took = slots.try_acquire() if slots is not None else self.gate.try_acquire()
        if not took:
            return False
        with self._state:
            closed = self._closed
            if not closed:
                self._awake += 1
                self._held += 1
        if closed:  # closed meanwhile: the slot is not the job's to keep
            self._release()
            return False
        return True

    def leave(self) -> None:
        """A helper that joined is done: its slot goes back (as when a worker sleeps)."""
        self._park()

    def wait(self, done: threading.Event) -> None:
        """Wait for ``done`` (the job's helpers) without a slot, then take one again."""
        if not done.is_set():
            with self._parked():
                done.wait()

    async def await_all(self, tasks: Sequence[asyncio.Future[Any]]) -> None:
        """Async twin of :meth:`wait`: wait for ``tasks`` without a slot."""
        if not all(task.done() for task in tasks):
            async with self._aparked():
                await asyncio.wait(tasks)

    @contextlib.contextmanager
    def starting_siblings(self, start: Callable[[], bool]) -> Iterator[None]:
        """While the block runs, a worker sleeping out a backoff hands its slot to ``start``.

        The slot is handed over, never released and taken again (a job not started yet
        waiting for one would get it first), unless a job back from its backoff waits for a
        slot. ``start`` then starts a helper on that slot, which ends with :meth:`leave`, and
        returns True; or returns False when the job has no call left to start, and the slot
        goes back as when a helper leaves. So the job's own calls not started yet go first
        (the retry's wait overlaps them): a job's calls do not wait for each other's
        backoffs.
        """
        previous, self._on_sleep = self._on_sleep, start
        try:
            yield
        finally:
            self._on_sleep = previous

    # ----------------------------------------------------------------- backoff

    def sleep(self, seconds: float) -> None:
        """Sleep out a backoff without the slot, then take a slot again (thread)."""
        with self._parked(backoff=True):
            time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        """Async twin of :meth:`sleep`."""
        async with self._aparked(backoff=True):
            await asyncio.sleep(seconds)

    @contextlib.contextmanager
    def _parked(self, *, backoff: bool = False) -> Iterator[None]:
        """The block runs without this worker's slot; a slot is taken again after it.

        A block that raises (Ctrl-C, a cancelled task) ends the job: the worker is counted
        awake again without waiting for a slot.
        """
        try:
            self._park(backoff=backoff)
            yield
        except BaseException:
            self._count(woke=True, took=False)
            raise
        self._unpark()

    @contextlib.asynccontextmanager
    async def _aparked(self, *, backoff: bool = False) -> AsyncIterator[None]:
        """Async twin of :meth:`_parked` (a timeout cancels the task in the block)."""
        try:
            self._park(backoff=backoff)
            yield
        except BaseException:
            self._count(woke=True, took=False)
            raise
        await self._aunpark()

    def _spare(self) -> int:
        """Slots held beyond one per awake worker, now no longer held (under the lock)."""
        spare = max(0, self._held - self._awake)
        self._held -= spare
        return spare

    def _park(self, *, backoff: bool = False) -> None:
        """This worker stops using its slot (it sleeps, waits or leaves); see ``_spare``.

        A backoff under :meth:`starting_siblings` hands the slot to the job's next call.
        """
        start = self._on_sleep if backoff else None
        with self._state:
            self._awake -= 1
            spare = self._spare()
            handed = start is not None and spare > 0 and not self._closed and not self._resumed()
            if handed:  # kept for the helper ``start`` begins: counted awake, as try_join does
                spare -= 1
                self._held += 1
                self._awake += 1
        self._release(spare)
        if handed and start is not None:
            try:
                started = start()
            except BaseException:
                self.leave()  # the handed slot goes back
                raise
            if not started:
                self.leave()  # no call left to start: given back, as when a helper leaves
            return
        if spare and self._on_park is not None:
            self._on_park()

    def _resumed(self) -> bool:
        """Whether a job back from its backoff waits for a slot (it goes first)."""
        slots = self._loop_slots
        return (slots.resuming if slots is not None else self.gate.resuming) > 0

    def enter(self) -> None:
        """Take a slot for the job on this thread (DeadlineExceededError at the deadline)."""
        with self._state:
            if self._closed or self._held >= self._awake:
                return
        self._took(self.gate.slots.acquire(timeout=self.remaining()))

    def _unpark(self) -> None:
        """Take a slot again (ahead of jobs not started yet), then count the worker awake.

        Counted awake only once it holds its slot: a slot a sibling gives back meanwhile
        goes to whoever waits, not to this job for a worker already blocked on the gate.
        """
        took = False
        try:
            took = not self._closed and self.gate.acquire_resumed(timeout=self.remaining())
        finally:
            self._count(woke=True, took=took)
        if not took and not self._closed:
            raise DeadlineExceededError("the job's deadline passed waiting for a slot")

    async def _aunpark(self) -> None:
        """Async twin of :meth:`_unpark` (its deadline is the task's timeout)."""
        took = False
        try:
            if not self._closed:
                slots = self._loop_slots or self.gate.loop_slots()
                await slots.acquire(resumed=True)  # ahead of the jobs not started yet
                took = True
        finally:
            self._count(woke=True, took=took)

    def _took(self, ok: bool) -> None:
        """Record a slot just taken for the job's own thread (DeadlineExceededError if not)."""
        if not ok:
            raise DeadlineExceededError("the job's deadline passed waiting for a slot")
        self._count(woke=False, took=True)

    def _count(self, *, woke: bool, took: bool) -> None:
        """One more worker awake (``woke``) and one more slot held (``took``), together.

        A worker counted awake without a slot is one whose job is ending (its deadline
        passed, or it was interrupted): its later park or leave then gives back nothing of
        its siblings'. A slot taken after the job closed goes straight back.
        """
        with self._state:
            self._awake += woke
            if not took:
                return
            self._held += 1
            spare = self._held if self._closed else self._spare()
            if self._closed:
                self._held = 0
        self._release(spare)

    def _release(self, count: int = 1) -> None:
        for _ in range(count):
            if self._loop_slots is not None:
                self._loop_slots.release()
            else:
                self.gate.slots.release()

    def close(self) -> None:
        """The job is over (finished, or abandoned at its deadline): give its slots back."""
        with self._state:
            self._closed = True
            release, self._held = self._held, 0
        self._release(release)


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
