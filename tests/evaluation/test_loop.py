import asyncio
import contextvars
import signal
import threading

import pytest

from langchain_ragmetrics.evaluation._loop import BackgroundLoop

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


@pytest.fixture
def background() -> BackgroundLoop:
    loop = BackgroundLoop(name="test-loop")
    yield loop  # type: ignore[misc]
    loop.shutdown()


def test_runs_on_one_long_lived_loop_in_the_callers_context(background: BackgroundLoop) -> None:
    seen: list[tuple[asyncio.AbstractEventLoop, str, str]] = []

    async def work() -> None:
        seen.append((asyncio.get_running_loop(), VAR.get(), threading.current_thread().name))

    token = VAR.set("caller")
    try:
        assert background.run(work) is True
        assert background.run(work) is True
    finally:
        VAR.reset(token)
    assert seen[0][0] is seen[1][0]
    assert seen[0][1:] == ("caller", "test-loop")


def test_errors_propagate_and_the_loop_survives(background: BackgroundLoop) -> None:
    async def broken() -> None:
        raise ValueError("boom")

    async def interrupt() -> None:
        raise KeyboardInterrupt  # escapes run_forever on the loop thread

    async def fine() -> None:
        return None

    with pytest.raises(ValueError, match="boom"):
        background.run(broken)
    with pytest.raises(KeyboardInterrupt):
        background.run(interrupt)
    assert background.running
    assert background.run(fine) is True


def test_shutdown_cancels_and_restarts_on_demand(background: BackgroundLoop) -> None:
    async def fine() -> None:
        return None

    background.run(fine)
    first = background.loop()
    background.shutdown()
    assert not background.running
    assert first.is_closed()
    assert background.run(fine) is True
    assert background.loop() is not first


async def test_usable_from_inside_a_running_loop(background: BackgroundLoop) -> None:
    mine = asyncio.get_running_loop()
    loops: list[asyncio.AbstractEventLoop] = []

    async def work() -> None:
        loops.append(asyncio.get_running_loop())

    assert background.run(work) is True
    assert loops[0] is not mine


def test_ctrl_c_cancels_the_task_and_waits_for_it(background: BackgroundLoop) -> None:
    started = threading.Event()
    unwound: list[str] = []

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # cleanup still runs before run() returns
            unwound.append("cancelled")
            raise

    def press_ctrl_c() -> None:
        started.wait(10)
        signal.raise_signal(signal.SIGINT)

    thread = threading.Thread(target=press_ctrl_c)
    thread.start()
    assert background.run(forever) is False
    thread.join(10)
    assert unwound == ["cancelled"]
