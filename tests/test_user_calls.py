"""A user's sync function on the judge threads: its timeout, and the threads late calls hold."""

import asyncio
import contextvars
import threading
from collections.abc import Iterator

import pytest

from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics._user_calls import UserCalls, held_limit
from tests._support.concurrency import wait_until

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


@pytest.fixture
def pool() -> Iterator[DaemonThreadPool]:
    threads = DaemonThreadPool(name="user-calls-test", size=2)
    threads.start()
    yield threads
    threads.stop(0)


def test_a_quarter_of_the_judge_threads_may_be_held_at_least_one() -> None:
    assert [held_limit(n) for n in (1, 2, 4, 7, 8, 16, 64)] == [1, 1, 1, 1, 2, 4, 16]


async def test_a_call_in_time_returns_its_value_in_the_callers_context(
    pool: DaemonThreadPool,
) -> None:
    calls = UserCalls(pool, timeout=5, limit=1)
    WHO.set("the caller")
    ran_on: list[threading.Thread] = []

    def read(suffix: str) -> str:
        ran_on.append(threading.current_thread())
        return f"{WHO.get()}{suffix}"

    assert await calls.run(read, "!", what="question_from") == "the caller!"
    assert ran_on[0] in pool.threads  # a judge thread, not the loop's
    assert calls.held == 0


async def test_what_the_function_raises_raises(pool: DaemonThreadPool) -> None:
    def broken() -> str:
        raise LookupError("no such user")

    with pytest.raises(LookupError, match="no such user"):
        await UserCalls(pool, timeout=5, limit=1).run(broken, what="question_from")


async def test_a_late_call_fails_and_holds_its_thread_until_it_returns(
    pool: DaemonThreadPool, release: threading.Event
) -> None:
    returned = threading.Event()

    def held() -> str:
        release.wait()
        returned.set()
        return "late"

    calls = UserCalls(pool, timeout=0.05, limit=1)
    with pytest.raises(TimeoutError) as caught:
        await calls.run(held, what="reference_provider")
    assert str(caught.value) == "reference_provider did not return within 0.05s"
    assert calls.held == 1
    release.set()
    assert returned.wait(10)
    wait_until(lambda: calls.held == 0, "the late call's thread counted free once it returned")
    assert await calls.run(lambda: "next", what="reference_provider") == "next"


async def test_past_the_limit_a_call_fails_at_once_without_running(
    pool: DaemonThreadPool, release: threading.Event
) -> None:
    """Before, every late call took a judge thread for as long as it hung: a function that
    always hangs took them all, and no judge call could run."""
    entered: list[str] = []

    def hangs(name: str) -> str:
        entered.append(name)
        release.wait()
        return name

    calls = UserCalls(pool, timeout=0.05, limit=1)
    with pytest.raises(TimeoutError, match=r"did not return within 0\.05s"):
        await calls.run(hangs, "first", what="answer_from")
    with pytest.raises(TimeoutError) as caught:
        await calls.run(hangs, "second", what="answer_from")
    assert str(caught.value) == (
        "answer_from was not called: 1 earlier calls have not returned yet, "
        "and none is made until one does"
    )
    assert entered == ["first"]
    # The pool's other thread is free: work that is not the user's still runs on it.
    assert await asyncio.wrap_future(pool.submit(lambda: "judge call")) == "judge call"
    release.set()
    wait_until(lambda: calls.held == 0, "the held call to return")
    assert await calls.run(hangs, "third", what="answer_from") == "third"
    assert entered == ["first", "third"]


async def test_a_call_still_queued_at_its_timeout_never_runs_and_holds_nothing(
    release: threading.Event,
) -> None:
    one = DaemonThreadPool(name="user-calls-one", size=1)
    one.start()
    busy = one.submit(release.wait)  # the only thread is taken by other work
    ran: list[str] = []
    calls = UserCalls(one, timeout=0.05, limit=1)
    try:
        with pytest.raises(TimeoutError, match=r"did not return within 0\.05s"):
            await calls.run(ran.append, "queued", what="question_from")
        assert calls.held == 0
    finally:
        release.set()
        assert busy.result(10) is True
        one.stop(10)
    assert ran == []


async def test_a_cancelled_wait_counts_its_running_call_as_held(
    pool: DaemonThreadPool, release: threading.Event
) -> None:
    """The reference provider's own wait can end first (its timeout, or a cancelled task):
    the call it leaves running still counts toward the limit."""
    entered = threading.Event()

    def held() -> None:
        entered.set()
        release.wait()

    calls = UserCalls(pool, timeout=None, limit=1)
    task = asyncio.ensure_future(calls.run(held, what="reference_provider"))
    assert await asyncio.to_thread(entered.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls.held == 1
    with pytest.raises(TimeoutError, match="was not called: 1 earlier calls"):
        await calls.run(held, what="reference_provider")
    release.set()
    wait_until(lambda: calls.held == 0, "the held call to return")
