"""The gate's bookkeeping: one slot per worker of a job that is awake, never one more."""

from __future__ import annotations

import asyncio
import threading
import time

from langchain_ragmetrics._gate import Admission, Gate


def free_slots(gate: Gate) -> int:
    """Take every free slot and give them back: how many there were."""
    taken = 0
    while gate.slots.acquire(blocking=False):
        taken += 1
    for _ in range(taken):
        gate.slots.release()
    return taken


def started(gate: Gate) -> Admission:
    """A job that took its slot, as the engine starts one."""
    assert gate.slots.acquire(blocking=False)
    return Admission(gate, holding=True)


def test_a_helper_joins_only_on_a_free_slot_and_gives_it_back() -> None:
    gate = Gate(2)
    job = started(gate)
    assert job.try_join()  # the second slot was free
    assert (job.held, free_slots(gate)) == (2, 0)
    assert not job.try_join()  # none left: the call waits for the job's others instead
    job.leave()
    assert (job.held, free_slots(gate)) == (1, 1)
    job.close()
    assert free_slots(gate) == 2


def test_a_helper_does_not_pass_a_job_back_from_its_backoff() -> None:
    gate = Gate(2)
    job = started(gate)
    with gate._turns:
        gate._resuming += 1  # a job back from its backoff is about to take the free slot
    assert not job.try_join()
    assert free_slots(gate) == 1  # left for it
    with gate._turns:
        gate._resuming -= 1
    assert job.try_join()
    job.leave()
    job.close()


def test_a_sleeping_helper_holds_no_slot_and_takes_one_back() -> None:
    gate = Gate(3)
    job = started(gate)
    assert job.try_join()
    job._park()  # one of its two workers sleeps out a backoff
    assert (job.held, free_slots(gate)) == (1, 2)
    job._unpark()  # ...and wakes: a slot again
    assert (job.held, free_slots(gate)) == (2, 1)
    job.leave()
    job.close()
    assert free_slots(gate) == 3


def test_waiting_for_the_helpers_gives_the_jobs_own_slot_to_them() -> None:
    """With one slot, a helper that sleeps can wake only if the job's thread, waiting for
    it, has given its slot back: else both would wait for ever."""
    gate = Gate(2)
    job = Admission(gate, deadline=time.monotonic() + 60, holding=True)
    assert gate.slots.acquire(blocking=False)
    assert job.try_join()
    helper_asleep, done = threading.Event(), threading.Event()
    job_waits = threading.Event()
    woke: list[bool] = []

    def helper() -> None:
        job._park()  # the helper's backoff
        helper_asleep.set()
        job_waits.wait(30)
        assert gate.slots.acquire(blocking=False)  # another job takes a slot meanwhile
        try:
            job._unpark()  # it needs the slot the job's thread gave back (or times out)
            job.leave()
            woke.append(True)
        finally:
            done.set()

    thread = threading.Thread(target=helper)
    thread.start()
    helper_asleep.wait(30)
    job_waits.set()
    job.wait(done)  # returns: the helper got the job's slot, finished, and it came back
    thread.join(30)
    assert woke == [True]
    assert job.held == 1
    job.close()
    gate.slots.release()  # the other job's
    assert free_slots(gate) == 2


def test_closing_gives_every_slot_back_once() -> None:
    gate = Gate(2)
    job = started(gate)
    assert job.try_join()
    job.close()  # abandoned at its deadline, its helper still running
    assert free_slots(gate) == 2
    job.leave()  # the helper ends later: nothing more to give back (no over-release)
    assert free_slots(gate) == 2
    assert not job.try_join()  # a closed job takes no slot


def test_on_an_event_loop_a_helper_joins_on_the_loops_free_slot() -> None:
    async def run() -> tuple[bool, bool, int]:
        gate = Gate(2)
        slots = gate.loop_slots()
        await slots.acquire()
        job = Admission(gate, holding=True, loop_slots=slots)
        joined = job.try_join()
        again = job.try_join()
        job.leave()
        job.close()
        free = sum(slots.try_acquire() for _ in range(3))
        return joined, again, free

    assert asyncio.run(run()) == (True, False, 2)
