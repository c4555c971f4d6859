"""The one bounded work queue of the package: put without blocking, flush and close by deadline.

Every place that hands work to a background consumer uses it: the online worker (retrievals),
each sink's outbox (results), the judge thread pool (calls), the isolated mode's feeder.
A producer never blocks: what does not fit is refused (the caller counts it). A consumer
takes entries (``take`` on a thread, ``take_ready`` from an event loop) and reports each one
``done``; :meth:`BoundedQueue.flush` waits, within a deadline, until everything put before it
is done; :meth:`BoundedQueue.close` refuses new work and lets the consumers drain;
:meth:`BoundedQueue.abandon` drops what is still waiting.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from langchain_ragmetrics._options import whole_number

__all__ = ["BoundedQueue", "Entry", "deadline_after", "remaining", "remaining_or"]

T = TypeVar("T")


def deadline_after(timeout: float | None) -> float | None:
    """The ``time.monotonic`` deadline ``timeout`` seconds from now (None = no deadline)."""
    return None if timeout is None else time.monotonic() + timeout


def remaining(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (a ``time.monotonic`` value), never negative."""
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())


def remaining_or(deadline: float | None, grace: float) -> float | None:
    """Seconds left until ``deadline``, but at least ``grace`` (a step owed its own time)."""
    left = remaining(deadline)
    return None if left is None else max(left, grace)


class Entry(Generic[T]):
    """One queued item, with its position (for flush) and whether it counts toward the bound.

    Built by the consumer when it takes the entry: the producer (often the application's
    thread) only appends a plain tuple.

    Attributes:
        seq: Its position: a flush waits for every entry up to the last one put before it.
        item: The work.
        counted: Whether it counts toward the bound (False: a control entry).
    """

    __slots__ = ("counted", "item", "seq")

    def __init__(self, seq: int, item: T, counted: bool = True) -> None:
        self.seq = seq
        self.item = item
        self.counted = counted


class BoundedQueue(Generic[T]):
    """A FIFO with a bound, consumers that report ``done``, and flush / close by deadline.

    Args:
        max_size: Bound on counted entries (None: unbounded); beyond it ``put`` refuses.
        count_active: Whether entries taken but not yet done count toward the bound (the
            online worker's "waiting or being scored") or only waiting ones (a sink outbox).
        on_wake: Called (outside the lock) when a ``put`` finds an event-loop consumer
            idle, i.e. after a ``take_ready`` that returned nothing: the loop's wake-up.
    """

    def __init__(
        self,
        *,
        max_size: int | None = None,
        count_active: bool = False,
        on_wake: Callable[[], object] | None = None,
    ) -> None:
        if max_size is not None:
            whole_number("max_size", max_size)
        self.max_size = max_size
        self.count_active = count_active
        self.on_wake = on_wake
        self._cond = threading.Condition()
        self._entries: deque[tuple[int, T, bool]] = deque()  # (seq, item, counted)
        self._active: dict[int, bool] = {}  # seq -> counted
        self._seq = 0
        self._waiting = 0  # counted entries waiting
        self._busy = 0  # counted entries taken, not done
        self._closed = False
        self._idle = False
        self._takers = 0  # consumers blocked in take(): a put notifies only when there are

    # ------------------------------------------------------------------ figures

    @property
    def waiting(self) -> int:
        """Counted entries waiting to be taken."""
        with self._cond:
            return self._waiting

    @property
    def busy(self) -> int:
        """Counted entries taken and not yet done."""
        with self._cond:
            return self._busy

    @property
    def size(self) -> int:
        """Counted entries waiting or being worked on."""
        with self._cond:
            return self._waiting + self._busy

    @property
    def unfinished(self) -> int:
        """Every entry waiting or being worked on, counted or not (controls included)."""
        with self._cond:
            return len(self._entries) + len(self._active)

    @property
    def last_seq(self) -> int:
        """The position of the last entry put (0: none yet); an :class:`Entry` has its own."""
        with self._cond:
            return self._seq

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` (or :meth:`abandon`) was called."""
        return self._closed

    @property
    def drained(self) -> bool:
        """Closed, and every entry taken and done: a consumer may exit."""
        with self._cond:
            return self._closed and not self._entries and not self._active

    # ------------------------------------------------------------------ producers

    def _room(self) -> int:
        if self._closed:
            return 0
        if self.max_size is None:
            return 1 << 62
        used = self._waiting + (self._busy if self.count_active else 0)
        return self.max_size - used

    def put(self, item: T, *, counted: bool = True) -> bool:
        """Queue ``item`` without blocking; False when full or closed.

        ``counted=False`` queues a control entry (a flush or close request that must run in
        order with the items): it ignores the bound, but not :meth:`close`.
        """
        with self._cond:
            if self._closed:
                return False
            if counted:
                size = self.max_size
                if size is not None and (
                    self._waiting + (self._busy if self.count_active else 0) >= size
                ):
                    return False
                self._waiting += 1
            self._seq += 1
            self._entries.append((self._seq, item, counted))
            wake = self._idle
            self._idle = False
            if self._takers:
                self._cond.notify_all()
        if wake and self.on_wake is not None:
            self.on_wake()
        return True

    def put_many(self, items: Iterable[T], *, counted: bool = True) -> int:
        """Queue as many of ``items`` as fit, in order; returns how many were taken."""
        taken = 0
        with self._cond:
            room = self._room() if counted else (0 if self._closed else 1 << 62)
            for item in items:
                if taken >= room:
                    break
                self._seq += 1
                self._entries.append((self._seq, item, counted))
                taken += 1
            if counted:
                self._waiting += taken
            wake = self._idle and taken > 0
            if taken:
                self._idle = False
                if self._takers:
                    self._cond.notify_all()
        if wake and self.on_wake is not None:
            self.on_wake()
        return taken

    # ------------------------------------------------------------------ consumers

    def _pop(self) -> Entry[T]:
        seq, item, counted = self._entries.popleft()
        self._active[seq] = counted
        if counted:
            self._waiting -= 1
            self._busy += 1
        return Entry(seq, item, counted)

    def take(self, timeout: float | None = None) -> Entry[T] | None:
        """The next entry, waiting for one; None once closed and empty, or at ``timeout``."""
        with self._cond:
            if not self._entries and not self._closed:
                self._takers += 1
                try:
                    self._cond.wait_for(lambda: self._entries or self._closed, timeout)
                finally:
                    self._takers -= 1
            return self._pop() if self._entries else None

    def take_ready(self, limit: int) -> list[Entry[T]]:
        """Up to ``limit`` entries without waiting; when none, the consumer counts as idle.

        An event loop calls this, and sleeps when it gets nothing: the next ``put`` calls
        ``on_wake`` to wake it (only then, so a busy loop costs producers nothing).
        """
        with self._cond:
            batch = [self._pop() for _ in range(min(limit, len(self._entries)))]
            self._idle = not batch
            return batch

    def done(self, entry: Entry[T]) -> None:
        """The consumer finished ``entry`` (successfully or not)."""
        with self._cond:
            counted = self._active.pop(entry.seq, None)
            if counted:
                self._busy -= 1
            self._cond.notify_all()

    # ------------------------------------------------------------------ lifetime

    def flush(self, timeout: float | None = None) -> tuple[bool, int]:
        """Wait until every entry put before this call is done.

        Returns:
            ``(finished, left)``: whether it finished within ``timeout``, and how many counted
            entries put before the call were still waiting or worked on at the deadline.
        """
        with self._cond:
            target = self._seq

            def done() -> bool:
                head_done = not self._entries or self._entries[0][0] > target
                return head_done and (not self._active or min(self._active) > target)

            finished = self._cond.wait_for(done, timeout)
            if finished:
                return True, 0
            left = sum(1 for seq, _, counted in self._entries if seq <= target and counted)
            left += sum(1 for seq, counted in self._active.items() if seq <= target and counted)
            return False, left

    def wait_drained(self, timeout: float | None = None) -> bool:
        """Wait until closed and every entry is done; False at ``timeout``."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._closed and not self._entries and not self._active, timeout
            )

    def close(self) -> None:
        """Refuse new entries; consumers take what is left, then ``take`` returns None."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self.on_wake is not None:
            self.on_wake()

    def abandon(self, *, close: bool = True) -> list[Entry[T]]:
        """Drop every waiting entry (counted or not) and close; returns them, oldest first.

        ``close=False`` only drops them: the queue keeps taking new entries.
        """
        with self._cond:
            self._closed = self._closed or close
            dropped = [Entry(*entry) for entry in self._entries]
            self._entries.clear()
            self._waiting = 0
            self._cond.notify_all()
        if self.on_wake is not None:
            self.on_wake()
        return dropped
