"""Our own event loops: a stale client's failed close is quiet, every other error is not;
stopped tasks have ended when ``cancel_and_wait`` returns."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable
from typing import Any

import openai
import pytest

from langchain_ragmetrics._loops import cancel_and_wait, new_event_loop
from tests._support.openai_server import JudgeServer, text_script


def _client_with_a_connection_of_an_ended_loop(server: JudgeServer) -> openai.AsyncOpenAI:
    """An SDK client that made one call on a loop which has ended since: its pool keeps the
    connection, and closing that connection needs the ended loop."""
    server.script = text_script("hello")
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)

    async def call() -> None:
        await client.chat.completions.create(
            model="judge-model", messages=[{"role": "user", "content": "hi"}]
        )

    asyncio.run(call())
    return client


def _run_and_collect(loop: asyncio.AbstractEventLoop, main: Callable[[], Any]) -> None:
    """Run ``main()`` on ``loop``, close it, and collect: a finished task whose error nobody
    read reports it when collected."""
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    gc.collect()


def _drop_on(loop: asyncio.AbstractEventLoop, holder: list[Any]) -> None:
    """Drop the last reference to the client while ``loop`` runs, as a collection on its
    thread would, then let the close task the SDK starts run."""

    async def drop() -> None:
        holder.clear()
        gc.collect()  # the SDK's __del__ starts aclose() on this running loop
        for _ in range(5):
            await asyncio.sleep(0)

    _run_and_collect(loop, drop)


def _asyncio_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "asyncio" and r.levelno >= 40]


@pytest.mark.parametrize(
    ("make_loop", "logged"),
    [(new_event_loop, False), (asyncio.new_event_loop, True)],
    ids=["ours", "plain asyncio (the noise this avoids)"],
)
def test_a_collected_client_whose_connections_belong_to_an_ended_loop_closes_quietly(
    judge_server: JudgeServer,
    caplog: pytest.LogCaptureFixture,
    make_loop: Callable[[], asyncio.AbstractEventLoop],
    logged: bool,
) -> None:
    holder: list[Any] = [_client_with_a_connection_of_an_ended_loop(judge_server)]
    caplog.set_level(logging.DEBUG)
    _drop_on(make_loop(), holder)
    errors = _asyncio_errors(caplog)
    assert bool(errors) is logged, errors
    if logged:
        assert "Event loop is closed" in caplog.text
    else:
        assert any(
            r.name == "langchain_ragmetrics._loops" and r.levelno == logging.DEBUG
            for r in caplog.records
        )


def test_any_other_unread_task_error_on_our_loop_is_still_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Pool:
        async def aclose(self) -> None:  # a close, another error: not the harmless case
            raise RuntimeError("the pool is broken")

    class Ours:
        async def aclose(self) -> None:  # the same error, but not httpx's close
            raise RuntimeError("Event loop is closed")

    async def fail() -> None:
        raise RuntimeError("Event loop is closed")  # the same error, not a close

    loop = new_event_loop()

    async def start() -> None:
        for coro in (Pool().aclose(), Ours().aclose(), fail()):
            loop.create_task(coro)
        for _ in range(3):
            await asyncio.sleep(0)

    _run_and_collect(loop, start)
    errors = _asyncio_errors(caplog)
    assert len(errors) == 3, errors
    for name in ("Pool.aclose()", "Ours.aclose()", "fail()"):
        assert f"<locals>.{name}" in caplog.text


def test_cancel_and_wait_returns_once_every_task_has_ended_and_drops_their_errors() -> None:
    """A task whose cleanup takes several steps has finished it when the call returns; a task
    that failed, one that ended, and the done callbacks that shrink the set passed in do not
    disturb the wait."""
    cleaned: list[str] = []

    async def slow_cleanup() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            for _ in range(3):  # cleanup that itself awaits
                await asyncio.sleep(0)
            cleaned.append("slow")

    async def fails() -> None:
        raise ValueError("not ours to report")

    async def main() -> None:
        tasks: set[asyncio.Task[None]] = set()
        for make in (slow_cleanup, fails, slow_cleanup):
            task = asyncio.ensure_future(make())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        finished = asyncio.ensure_future(asyncio.sleep(0))
        await finished
        await asyncio.sleep(0)  # the failing task runs and fails
        await cancel_and_wait([*tasks, finished])
        assert cleaned == ["slow", "slow"]
        assert not tasks  # every task ended (the done callbacks ran)

    asyncio.run(main())


def test_cancel_and_wait_with_nothing_to_stop_returns_at_once() -> None:
    async def main() -> None:
        await asyncio.wait_for(cancel_and_wait(()), timeout=5)

    asyncio.run(main())
