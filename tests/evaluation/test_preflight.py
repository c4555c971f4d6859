import asyncio
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import ContextRecall, PreflightError, preflight
from langchain_ragmetrics._cli import ExitCode, main
from langchain_ragmetrics._errors import RagMetricsError
from langchain_ragmetrics.evaluation import aevaluate, evaluate
from tests._support.judges import EINSTEIN_CONTEXT, EINSTEIN_REFERENCE, EINSTEIN_VERDICTS
from tests._support.openai_server import (
    JudgeServer,
    reply_error,
    reply_garbage,
    reply_hold,
    reply_openai_error,
    reply_text,
    router,
    static_script,
)

EINSTEIN = Path(__file__).parent.parent / "data" / "einstein.jsonl"
ROWS = [{"question": "q", "contexts": [EINSTEIN_CONTEXT], "reference": EINSTEIN_REFERENCE}]
HANG_BOUND_S = 20.0  # generous: the check waits 1 s; this only proves it does not hang


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fake_model() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage("hello")]))


def test_a_healthy_judge_passes_with_one_tiny_call(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    judge_server.script = router(PreflightAnswer={"ok": True})
    preflight(make_judge())
    (request,) = judge_server.requests
    assert request.schema_name == "PreflightAnswer"
    assert len(request.text) < 100


def test_a_model_without_tool_calling_is_refused_without_a_call() -> None:
    with pytest.raises(PreflightError) as caught:
        preflight(fake_model())
    message = str(caught.value)
    assert "cannot do tool calling or structured output" in message
    assert "GenericFakeChatModel" in message
    assert "Use a chat model with tool calling, e.g. ChatOpenAI" in message
    assert isinstance(caught.value, RagMetricsError)


def test_evaluate_refuses_such_a_model_up_front_even_without_preflight() -> None:
    # before: every row became NaN with NotImplementedError; now one setup error
    with pytest.raises(PreflightError, match="cannot do tool calling"):
        evaluate(ROWS * 50, [ContextRecall()], llm=fake_model(), show_progress=False)


def test_refused_connection(make_judge: Callable[..., ChatOpenAI]) -> None:
    llm = make_judge(base_url=f"http://127.0.0.1:{closed_port()}/v1")
    with pytest.raises(PreflightError, match=r"at http://127\.0\.0\.1:\d+/v1 failed a one-line"):
        preflight(llm)
    with pytest.raises(PreflightError, match="Is the server running"):
        preflight(llm)


def test_server_error(judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]) -> None:
    judge_server.script = static_script(reply_error(500, "model overloaded"))
    with pytest.raises(PreflightError, match="model overloaded"):
        preflight(make_judge())
    assert judge_server.count() == 1  # no retries on the check


def test_rate_limited(judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]) -> None:
    judge_server.script = static_script(reply_error(429, "slow down"))
    with pytest.raises(PreflightError, match="slow down"):
        preflight(make_judge())


@pytest.mark.parametrize(
    "reply", [reply_garbage(), reply_text("sure, ok!")], ids=["malformed", "plain-text"]
)
def test_no_structured_answer(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI], reply: object
) -> None:
    judge_server.script = lambda _req: reply
    with pytest.raises(PreflightError, match="does not produce valid structured output"):
        preflight(make_judge())


def test_a_hanging_judge_is_bounded(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI], release: threading.Event
) -> None:
    judge_server.script = lambda _req: reply_hold(release, {"ok": True})
    start = time.monotonic()
    with pytest.raises(PreflightError, match=r"did not answer a one-line test request within 1 s"):
        preflight(make_judge(timeout=None), timeout=1.0)
    assert time.monotonic() - start < HANG_BOUND_S


def test_evaluate_with_preflight_stops_before_scoring(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    judge_server.script = router(
        RecallStatements=EINSTEIN_VERDICTS, PreflightAnswer=reply_error(500)
    )
    with pytest.raises(PreflightError):
        evaluate(ROWS * 20, [ContextRecall()], llm=make_judge(), preflight=True)
    assert judge_server.count() == 1  # the check only: no row was sent
    judge_server.script = router(RecallStatements=EINSTEIN_VERDICTS, PreflightAnswer={"ok": True})
    judge_server.reset()
    result = evaluate(ROWS, [ContextRecall()], llm=make_judge(), preflight=True)
    assert result["context_recall"] == [0.5]
    assert [r.schema_name for r in judge_server.requests] == ["PreflightAnswer", "RecallStatements"]
    assert result.usage.judge_calls == 1  # the check is not part of the run's usage


async def test_aevaluate_runs_the_check_off_the_event_loop(
    judge_server: JudgeServer,
    make_judge: Callable[..., ChatOpenAI],
    release: threading.Event,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("langchain_ragmetrics.evaluation._run.DEFAULT_PREFLIGHT_TIMEOUT", 1.0)
    judge_server.script = router(
        RecallStatements=EINSTEIN_VERDICTS, PreflightAnswer=lambda _r: reply_hold(release)
    )
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    try:
        with pytest.raises(PreflightError, match="did not answer"):
            await aevaluate(ROWS, [ContextRecall()], llm=make_judge(timeout=None), preflight=True)
    finally:
        ticker.cancel()
    assert ticks > 5  # the loop kept running while the check waited


# What no retry can heal: named by its cause, one request, exit 8 from the command line.
CAUSES = {
    "insufficient_quota": ("insufficient quota", "add credit"),
    "invalid_api_key": ("authentication failed", "Check OPENAI_API_KEY"),
    "unsupported_region": ("permission denied", "may not use this model"),
    "model_not_found": ("unknown model", "Check the model name"),
}


@pytest.mark.parametrize("body", sorted(CAUSES))
def test_a_cause_no_retry_can_heal_is_named(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI], body: str
) -> None:
    judge_server.script = lambda _req: reply_openai_error(body)
    cause, advice = CAUSES[body]
    with pytest.raises(PreflightError) as caught:
        preflight(make_judge())
    assert caught.value.cause == cause
    assert f"cannot be used: {cause} (" in str(caught.value)
    assert advice in str(caught.value)
    assert judge_server.count() == 1


@pytest.mark.parametrize("body", sorted(CAUSES))
def test_the_command_exits_8_naming_the_cause_before_any_row(
    judge_server: JudgeServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    body: str,
) -> None:
    judge_server.script = lambda _req: reply_openai_error(body)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", judge_server.base_url)
    code = main(["evaluate", str(EINSTEIN), "--metrics", "context_recall,context_precision"])
    out, err = capsys.readouterr()
    assert code == ExitCode.PREFLIGHT_FAILED == 8
    assert out == ""
    assert f"cannot be used: {CAUSES[body][0]}" in err
    assert [r.schema_name for r in judge_server.requests] == ["PreflightAnswer"]
