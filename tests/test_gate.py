"""The gate's bookkeeping: one slot per worker of a job that is awake, never one more."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from langchain_ragmetrics._gate import Admission, Gate, admitted
from langchain_ragmetrics.metrics._base import arun_parallel


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


def test_a_slot_given_back_while_a_sibling_waits_for_one_is_not_kept_idle() -> None:
    """A helper blocked waiting for a slot is not counted awake: when the job's own thread
    then parks, its slot goes back to the gate, and so to the helper (before, the job kept
    it "for" the helper, which kept waiting on the gate: two such jobs waited for ever)."""
    gate = Gate(2)
    job = started(gate)
    assert job.try_join()
    job._park()  # the helper sleeps out a backoff: its slot goes back...
    assert gate.slots.acquire(blocking=False)  # ...and another job takes it
    woke = threading.Event()

    def helper_wakes() -> None:
        job._unpark()
        woke.set()

    thread = threading.Thread(target=helper_wakes, daemon=True)
    thread.start()
    while not gate.resuming:  # the helper now waits for a slot
        threading.Event().wait(0.001)
    job._park()  # the job's thread parks (a backoff, or waiting for its helper)
    assert woke.wait(10)  # the helper has the slot the job's thread gave back
    assert job.held == 1
    job.leave()
    job.close()
    gate.slots.release()  # the other job's
    assert free_slots(gate) == 2


def test_a_job_timed_out_while_it_waits_for_its_helpers_ends_at_once() -> None:
    """The timeout cancels the job's task while it waits for a helper without a slot: it
    ends there (no slot to wait for), and its helper is cancelled, even while another
    job holds every slot."""

    async def run() -> tuple[bool, list[str]]:
        gate = Gate(2)
        slots = gate.loop_slots()
        await slots.acquire()
        job = Admission(gate, holding=True, loop_slots=slots)
        helper_calls: list[str] = []
        helper_started, other_has_slot, other_may_go = (
            asyncio.Event(),
            asyncio.Event(),
            asyncio.Event(),
        )

        async def call(i: int) -> int:
            if i == 1:  # the helper's call: held until cancelled
                helper_calls.append("start")
                helper_started.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    helper_calls.append("cancelled")
                    raise
            else:  # the job's own call ends at once; then it waits for the helper
                await asyncio.sleep(0)
            return i

        async def other_job() -> None:
            await helper_started.wait()  # the job holds both slots now
            await slots.acquire()  # the slot the job's task gives back to wait for its helper
            other_has_slot.set()
            await other_may_go.wait()
            slots.release()

        other = asyncio.ensure_future(other_job())
        timed_out = False
        with admitted(job):
            task = asyncio.ensure_future(arun_parallel(call, [0, 1], limit=2))
            await other_has_slot.wait()  # every slot is held now, the job's task waits
            assert job.held == 1  # the helper's
            try:
                await asyncio.wait_for(asyncio.shield(task), 0.05)
            except asyncio.TimeoutError:
                task.cancel()  # as the engine's timeout does
                try:
                    await asyncio.wait_for(task, 10)  # ends at once, or fails in 10 s
                except asyncio.CancelledError:
                    timed_out = True
        job.close()
        other_may_go.set()
        await other
        return timed_out, helper_calls

    assert asyncio.run(run()) == (True, ["start", "cancelled"])


def test_a_backoff_hands_its_slot_to_the_jobs_calls_not_started() -> None:
    """Sleeping out a backoff hands the slot to the job's ``starting_siblings`` hook: never
    released (a job not started yet, waiting for one, cannot take it) and the engine is not
    told of a spare slot; the helper's ``leave`` gives it back to the sleeper."""
    gate = Gate(1)
    parks: list[str] = []
    job = Admission(gate, holding=True, on_park=lambda: parks.append("engine"))
    assert gate.slots.acquire(blocking=False)
    seen: list[tuple[int, int, list[str]]] = []

    def helper() -> None:
        """The sibling's call: done once the sleeper waits to wake (its park is over)."""
        deadline = time.monotonic() + 30
        while gate.resuming == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        seen.append((job.held, free_slots(gate), list(parks)))
        job.leave()  # its slot goes to the sleeper, back from its backoff

    def start() -> bool:
        threading.Thread(target=helper).start()
        return True

    with job.starting_siblings(start):
        job.sleep(0)  # wakes once the helper gave the slot back
    assert seen == [(1, 0, [])]  # the helper held it all along; the engine was not told
    assert job.held == 1
    job.close()
    assert free_slots(gate) == 1


def test_a_backoff_with_no_call_to_start_gives_the_slot_to_the_engine() -> None:
    gate = Gate(1)
    parks: list[str] = []
    job = Admission(gate, holding=True, on_park=lambda: parks.append("engine"))
    assert gate.slots.acquire(blocking=False)
    with job.starting_siblings(lambda: False):  # nothing left to start
        job.sleep(0)
    assert parks == ["engine"]  # the engine may start another worker for the slot
    job.close()
    assert free_slots(gate) == 1


def test_a_job_back_from_its_backoff_goes_before_the_siblings() -> None:
    gate = Gate(2)
    job = started(gate)
    calls: list[int] = []
    with gate._turns:
        gate._resuming += 1  # another job, back from its backoff, waits for a slot
    try:
        with job.starting_siblings(lambda: calls.append(1) or True):
            job._park(backoff=True)
            assert calls == []  # not handed: released for the job that waits
            assert (job.held, free_slots(gate)) == (0, 2)
            job._unpark()
    finally:
        with gate._turns:
            gate._resuming -= 1
    job.close()
    assert free_slots(gate) == 2


def test_a_hook_that_raises_gives_the_handed_slot_back_and_ends_the_wait() -> None:
    gate = Gate(1)
    job = started(gate)

    def broken() -> bool:
        raise RuntimeError("can't start new thread")

    with job.starting_siblings(broken), pytest.raises(RuntimeError):
        job.sleep(0)
    assert free_slots(gate) == 1  # nothing kept for a helper that never started
    job.close()
    assert free_slots(gate) == 1


def test_waiting_for_helpers_and_leaving_do_not_offer_the_slot_to_siblings() -> None:
    """Only a backoff does: the job's thread waits for its helpers, or a helper leaves,
    once every call was taken."""
    gate = Gate(2)
    job = started(gate)
    offers: list[int] = []

    def offer() -> bool:
        offers.append(1)
        return False

    done = threading.Event()
    with job.starting_siblings(offer):
        assert job.try_join()
        job.leave()  # a helper done
        threading.Timer(0.01, done.set).start()
        job.wait(done)  # parks until the event, then takes a slot back
    assert offers == []
    job.close()
    assert free_slots(gate) == 2
