"""Self-tests for the loopback OpenAI judge server and LangSmith stub, using the real clients."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import math
import threading
import time
import uuid
from typing import TYPE_CHECKING

import httpx
import langsmith
import openai
import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tracers import LangChainTracer
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from tests._support.fixtures import judge_server, langsmith_client, langsmith_stub, make_judge  # noqa: F401
from tests._support.langsmith_stub import (
    LangSmithStub,
    decode_body,
    parse_multipart,
    project_id_for,
)
from tests._support.openai_server import (
    JudgeRequest,
    JudgeServer,
    Reply,
    reply_delay,
    reply_error,
    reply_garbage,
    reply_hold,
    reply_invalid,
    reply_raw_body,
    router,
    sequence,
    text_script,
)

if TYPE_CHECKING:
    from collections.abc import Callable


class Verdict(BaseModel):
    """Structured judge answer used throughout these tests."""

    score: float
    reason: str


VERDICT = {"score": 0.75, "reason": "grounded"}


# --------------------------------------------------------------------------- #
# JudgeServer: structured answers
# --------------------------------------------------------------------------- #


def test_function_calling_parses_and_reports_usage(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """A dict reply becomes a tool call that ChatOpenAI parses, with usage attached."""
    judge_server.script = router(Verdict=VERDICT)
    llm = make_judge().with_structured_output(Verdict, method="function_calling", include_raw=True)

    out = llm.invoke([SystemMessage("You are a judge."), HumanMessage("Rate this answer.")])

    assert out["parsed"] == Verdict(**VERDICT)
    assert out["parsing_error"] is None
    usage = out["raw"].usage_metadata
    assert usage is not None
    prompt_chars = len("You are a judge.\nRate this answer.")
    assert usage["input_tokens"] == math.ceil(prompt_chars / 4)
    assert usage["output_tokens"] == math.ceil(len(json.dumps(VERDICT)) / 4)
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    req = judge_server.requests[-1]
    assert (req.mode, req.schema_name, req.model) == ("tools", "Verdict", "judge-model")
    assert (req.system, req.user) == ("You are a judge.", "Rate this answer.")
    assert req.schema is not None
    assert set(req.schema["properties"]) == {"score", "reason"}


@pytest.mark.asyncio
async def test_function_calling_async(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """The async path parses the same tool call."""
    judge_server.script = lambda _req: VERDICT
    llm = make_judge().with_structured_output(Verdict, method="function_calling")
    assert await llm.ainvoke("rate") == Verdict(**VERDICT)


def test_json_schema_sync_and_async(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """``method="json_schema"`` gets the object back as JSON content."""
    judge_server.script = router(Verdict=VERDICT)
    llm = make_judge().with_structured_output(Verdict, method="json_schema")
    assert llm.invoke("rate") == Verdict(**VERDICT)
    assert asyncio.run(llm.ainvoke("rate")) == Verdict(**VERDICT)
    assert {r.mode for r in judge_server.requests} == {"json_schema"}
    assert judge_server.count("Verdict") == 2


def test_garbage_arguments_become_invalid_tool_calls(
    judge_server: JudgeServer,
    make_judge: Callable[..., ChatOpenAI],
) -> None:
    """Malformed arguments: langchain-openai 1.x files them under invalid_tool_calls."""
    judge_server.script = lambda _req: reply_garbage()
    out = (
        make_judge()
        .with_structured_output(Verdict, method="function_calling", include_raw=True)
        .invoke("rate")
    )
    assert out["parsed"] is None
    assert out["raw"].invalid_tool_calls
    assert out["raw"].invalid_tool_calls[0]["name"] == "Verdict"


def test_schema_violation_sets_parsing_error(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """Well-formed JSON that misses the schema surfaces as ``parsing_error``."""
    judge_server.script = lambda _req: reply_invalid({"score": "high"})
    out = (
        make_judge()
        .with_structured_output(Verdict, method="function_calling", include_raw=True)
        .invoke("rate")
    )
    assert out["parsed"] is None
    assert out["parsing_error"] is not None


def test_text_reply_in_tools_mode(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """A string reply stays plain content even when a tool was requested."""
    judge_server.script = lambda _req: "I refuse to use tools."
    out = (
        make_judge()
        .with_structured_output(Verdict, method="function_calling", include_raw=True)
        .invoke("rate")
    )
    assert out["parsed"] is None
    assert out["raw"].content == "I refuse to use tools."
    assert out["raw"].tool_calls == []


# --------------------------------------------------------------------------- #
# JudgeServer: plain text and streaming
# --------------------------------------------------------------------------- #


def test_plain_text_invoke_and_stream(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """Text answers work for invoke and stream; streaming can report usage."""
    answer = "Paris is the capital of France."
    judge_server.script = text_script(answer)
    llm = make_judge()

    assert llm.invoke("capital?").content == answer
    chunks = list(llm.stream("capital?"))
    assert len(chunks) > 2
    assert "".join(str(c.content) for c in chunks) == answer
    usage = [
        c.usage_metadata for c in llm.stream("capital?", stream_usage=True) if c.usage_metadata
    ]
    assert usage[-1]["output_tokens"] == math.ceil(len(answer) / 4)
    assert [r.stream for r in judge_server.requests] == [False, True, True]


@pytest.mark.asyncio
async def test_plain_text_ainvoke_and_astream(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """Async text answers and async streaming reassemble correctly."""
    judge_server.script = text_script("streamed answer text")
    llm = make_judge()
    assert (await llm.ainvoke("q")).content == "streamed answer text"
    pieces = [str(c.content) async for c in llm.astream("q")]
    assert "".join(pieces) == "streamed answer text"


def test_structured_stream(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """Tool-call arguments stream in pieces and still parse."""
    judge_server.script = lambda _req: VERDICT
    parts = list(
        make_judge().with_structured_output(Verdict, method="function_calling").stream("rate")
    )
    assert parts[-1] == Verdict(**VERDICT)


# --------------------------------------------------------------------------- #
# JudgeServer: errors, delays, holds
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_error_statuses(
    judge_server: JudgeServer,
    make_judge: Callable[..., ChatOpenAI],
    status: int,
    error: type[Exception],
) -> None:
    """Scripted statuses raise the matching openai exceptions."""
    judge_server.script = lambda _req: reply_error(status, "boom")
    with pytest.raises(error, match="boom"):
        make_judge().invoke("x")
    assert judge_server.stats.errors == 1


@pytest.mark.asyncio
async def test_error_status_async(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """Errors surface on the async path too."""
    judge_server.script = lambda _req: reply_error(429)
    with pytest.raises(openai.RateLimitError):
        await make_judge().ainvoke("x")


def test_rate_limit_retry_is_fast(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """A 429 carries ``retry-after-ms: 1``, so the SDK's own retry does not sleep for long."""
    import httpx

    judge_server.script = sequence(reply_error(429), reply_error(429), "recovered")
    response = httpx.post(
        f"{judge_server.base_url}/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    )
    assert response.status_code == 429
    assert response.headers["retry-after-ms"] == "1"
    assert make_judge(max_retries=2).invoke("x").content == "recovered"
    assert judge_server.count() == 3


def test_delay_beyond_timeout(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """A delay longer than the client timeout raises APITimeoutError."""
    judge_server.script = lambda _req: reply_delay(3.0, text="late")
    with pytest.raises(openai.APITimeoutError):
        make_judge(timeout=0.3).invoke("x")


def test_hold_releases_on_event_and_on_stop() -> None:
    """Held requests answer when their event fires, and stop() frees the rest quickly."""
    gate = threading.Event()
    with JudgeServer(lambda _req: reply_hold(gate, text="released")) as server:
        llm = ChatOpenAI(
            model="m", base_url=server.base_url, api_key="test", max_retries=0, timeout=5
        )
        # Held means no answer at all: a client that waits 0.5 s gets none (a hold that
        # answered early would fail this every time, not only when it is fast enough).
        impatient = ChatOpenAI(
            model="m", base_url=server.base_url, api_key="test", max_retries=0, timeout=0.5
        )
        with pytest.raises(openai.APITimeoutError):
            impatient.invoke("x")
        results: list[str] = []
        worker = threading.Thread(target=lambda: results.append(str(llm.invoke("x").content)))
        worker.start()
        assert _eventually(lambda: server.count() == 2)
        gate.set()
        worker.join(timeout=5)
        assert results == ["released"]

        server.script = lambda _req: reply_hold(threading.Event(), text="never")
        stuck = threading.Thread(target=lambda: _swallow(lambda: llm.invoke("x")), daemon=True)
        stuck.start()
        assert _eventually(lambda: server.count() == 3)
    stuck.join(timeout=5)  # stop() released the held request (the hold itself is 30 s)
    assert not stuck.is_alive()


def test_raw_body_breaks_the_client(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """A non-JSON 200 body fails on the client side."""
    judge_server.script = lambda _req: reply_raw_body("<html>upstream exploded</html>")
    with pytest.raises(ValueError):  # noqa: PT011 - json.JSONDecodeError, whatever its wording
        make_judge().invoke("x")


def test_latency_applies_to_every_answer(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """The server-wide latency delays each answer."""
    judge_server.script = text_script("ok")
    judge_server.latency = 0.2
    started = time.monotonic()
    make_judge().invoke("x")
    assert time.monotonic() - started >= 0.2


# --------------------------------------------------------------------------- #
# JudgeServer: scripts, recording, routes
# --------------------------------------------------------------------------- #


def test_router_default_and_missing_handler(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """router() dispatches on the schema name and falls back to ``default``."""
    judge_server.script = router(Other={"x": 1}, default="fallback text")
    assert make_judge().invoke("x").content == "fallback text"
    judge_server.script = router(Other={"x": 1})
    with pytest.raises(openai.InternalServerError, match="no handler"):
        make_judge().with_structured_output(Verdict, method="function_calling").invoke("x")


def test_default_script_and_script_errors(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """No script, or a script that raises, answers 500 with an explanation."""
    with pytest.raises(openai.InternalServerError, match="no script"):
        make_judge().invoke("x")

    def broken(_req: JudgeRequest) -> str:
        msg = "script bug"
        raise RuntimeError(msg)

    judge_server.script = broken
    with pytest.raises(openai.InternalServerError, match="script bug"):
        make_judge().invoke("x")
    assert isinstance(judge_server.script_errors[0], RuntimeError)


def test_recording_counts_stats_and_reset(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """Requests, per-schema counts and character/token totals are recorded."""
    judge_server.script = router(
        Verdict=Reply(obj=VERDICT, usage={"prompt_tokens": 100}), default="hi"
    )
    make_judge().invoke("abcd" * 10)
    make_judge().with_structured_output(Verdict, method="function_calling").invoke("efgh")

    assert judge_server.count() == 2
    assert judge_server.count("Verdict") == 1
    stats = judge_server.stats
    assert stats.requests == 2
    assert stats.prompt_chars == 44
    assert stats.completion_chars == len("hi") + len(json.dumps(VERDICT))
    assert stats.prompt_tokens == 10 + 100
    assert stats.total_tokens == stats.prompt_tokens + stats.completion_tokens
    assert stats.by_schema == {"Verdict": 1}
    assert judge_server.requests[0].headers["authorization"] == "Bearer test"

    judge_server.reset()
    assert judge_server.count() == 0
    assert judge_server.stats.requests == 0


def test_concurrent_requests_are_all_recorded(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI]
) -> None:
    """Parallel calls are served concurrently and each is recorded once."""
    gate = threading.Event()  # opened only once all 8 requests are in: they are concurrent
    judge_server.script = lambda req: reply_hold(gate, text=req.user.upper())
    all_in: list[bool] = []

    def opener_body() -> None:
        try:
            all_in.append(_eventually(lambda: judge_server.count() == 8, timeout=60))
        finally:
            gate.set()  # (one at a time, they would each wait out the hold instead)

    opener = threading.Thread(target=opener_body)
    opener.start()
    llm = make_judge(timeout=90)
    outs = llm.batch([f"q{i}" for i in range(8)], config={"max_concurrency": 8})
    opener.join(timeout=90)
    assert all_in == [True]  # all 8 were held at once
    assert [o.content for o in outs] == [f"Q{i}" for i in range(8)]
    assert judge_server.count() == 8


def test_models_and_unknown_routes(judge_server: JudgeServer) -> None:
    """``GET /v1/models`` lists a model; anything unknown is a JSON 404."""
    client = openai.OpenAI(base_url=judge_server.base_url, api_key="test", max_retries=0)
    assert [m.id for m in client.models.list()] == ["judge-model"]
    response = httpx.get(f"{judge_server.base_url}/nope")
    assert response.status_code == 404
    assert "error" in response.json()


# --------------------------------------------------------------------------- #
# LangSmithStub
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("zstd", [True, False], ids=["zstd", "plain"])
def test_feedback_with_trace_id_goes_multipart(zstd: bool) -> None:
    """Feedback with a trace_id is batched through /runs/multipart (compressed or not)."""
    with LangSmithStub(zstd=zstd) as stub:
        client = langsmith.Client(api_url=stub.url, api_key="test")
        if zstd:
            # The SDK switches compression on from its background thread after
            # GET /info; operations queued before that go out uncompressed.
            stub.wait_for(lambda: client.compressed_traces is not None, timeout=5)
        run_id, trace_id, session_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        client.create_feedback(
            run_id,
            key="k",
            score=0.5,
            trace_id=trace_id,
            session_id=session_id,
            comment="c",
            feedback_source_type="model",
            source_info={"judge": "faithfulness"},
        )
        client.flush()
        (payload,) = stub.feedback()
        client.close(timeout=5)

    assert payload["run_id"] == str(run_id)
    assert payload["trace_id"] == str(trace_id)
    assert (payload["key"], payload["score"], payload["comment"]) == ("k", 0.5, "c")
    assert payload["feedback_source"]["type"] == "model"
    assert payload["feedback_source"]["metadata"] == {"judge": "faithfulness"}
    assert stub.feedback_records()[0][0] == "multipart"
    (ingest,) = stub.requests_to("POST", "/runs/multipart")
    assert ingest.headers.get("content-encoding") == ("zstd" if zstd else None)
    assert [p.name for p in ingest.parts] == [f"feedback.{payload['id']}"]


def test_feedback_without_trace_id_posts_json(
    langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client
) -> None:
    """Without a trace_id the SDK posts straight to /feedback; list_feedback reads it back."""
    langsmith_stub.feedback_needs_run = False
    run_id = uuid.uuid4()
    langsmith_client.create_feedback(
        run_id, key="relevance", score=1, session_id=uuid.uuid4(), comment="fine"
    )
    (payload,) = langsmith_stub.feedback(key="relevance")
    assert payload["run_id"] == str(run_id)
    assert langsmith_stub.feedback_records()[0][0] == "POST /feedback"
    assert [f.key for f in langsmith_client.list_feedback(run_ids=[run_id])] == ["relevance"]


def test_traced_chain_and_llm_runs(
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    judge_server: JudgeServer,
    make_judge: Callable[..., ChatOpenAI],
) -> None:
    """LangChainTracer runs reach the stub merged by id, under a stable project id."""
    judge_server.script = text_script("traced answer")
    tracer = LangChainTracer(client=langsmith_client, project_name="p")

    def formatter(question: str) -> str:
        return f"Q: {question}"

    chain = RunnableLambda(formatter) | make_judge()
    assert chain.invoke("hello", config={"callbacks": [tracer]}).content == "traced answer"
    langsmith_client.flush()

    runs = langsmith_stub.wait_for_runs(3)
    by_type = {r["run_type"]: r for r in runs}
    assert by_type["llm"]["outputs"]["generations"][0][0]["text"] == "traced answer"
    assert by_type["llm"]["end_time"] is not None
    assert {r["session_id"] for r in runs} == {project_id_for("p")}
    assert langsmith_client.read_project(project_name="p").id == uuid.UUID(project_id_for("p"))
    stored = langsmith_stub.run(by_type["llm"]["id"])
    assert stored is not None
    assert stored["name"] == "ChatOpenAI"


def test_stub_failures_and_helpers(langsmith_stub: LangSmithStub) -> None:
    """Scripted failures, JSON 404s and the polling helper behave as documented."""
    langsmith_stub.fail("POST /feedback", 503)
    first = httpx.post(f"{langsmith_stub.url}/feedback", json={"key": "a"})
    second = httpx.post(f"{langsmith_stub.url}/feedback", json={"key": "a"})
    assert (first.status_code, second.status_code) == (503, 200)
    assert httpx.get(f"{langsmith_stub.url}/nowhere").status_code == 404
    with pytest.raises(TimeoutError):
        langsmith_stub.wait_for(lambda: False, timeout=0.1)


def test_multipart_and_encoding_helpers() -> None:
    """The multipart parser and decoder handle what requests_toolbelt produces."""
    body = (
        b"--xyz\r\n"
        b'Content-Disposition: form-data; name="post.1"\r\n'
        b"Content-Type: application/json\r\n\r\n"
        b'{"a": 1}\r\n'
        b"--xyz--\r\n"
    )
    (part,) = parse_multipart(
        decode_body(gzip.compress(body), "gzip"), 'multipart/form-data; boundary="xyz"'
    )
    assert (part.name, part.json(), part.content_type) == ("post.1", {"a": 1}, "application/json")


def _eventually(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``check`` until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def _swallow(call: Callable[[], object]) -> None:
    """Run ``call`` and ignore any exception (used for requests cut by stop)."""
    with contextlib.suppress(Exception):
        call()


def test_langsmith_stub_answers_as_langsmith_does(
    langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client
) -> None:
    """409 for a feedback id it holds, 404 for feedback on a run it does not hold, not found
    for an unknown project: the answers the real service gives (see the stub's docstring)."""
    with pytest.raises(langsmith.utils.LangSmithNotFoundError):
        langsmith_client.read_project(project_name="nope")
    project = uuid.UUID(langsmith_stub.create_project("p"))
    assert langsmith_client.read_project(project_name="p").id == project
    run_id = uuid.uuid4()
    with pytest.raises(langsmith.utils.LangSmithNotFoundError):  # not ingested (yet)
        langsmith_client.create_feedback(
            run_id, key="k", score=1, session_id=project, stop_after_attempt=1
        )
    with langsmith_stub._lock:
        langsmith_stub._runs[str(run_id)] = {"id": str(run_id), "session_id": str(project)}
    feedback_id = uuid.uuid4()
    for score in (1, 0):
        with contextlib.suppress(langsmith.utils.LangSmithConflictError):
            langsmith_client.create_feedback(
                run_id, key="k", score=score, session_id=project, feedback_id=feedback_id
            )
    assert [r.status for r in langsmith_stub.requests_to("POST", "/feedback")] == [404, 200, 409]
    (held,) = langsmith_stub.held_feedback()
    assert held["score"] == 1  # the first is kept
    langsmith_client.delete_feedback(feedback_id)
    assert langsmith_stub.held_feedback() == []


def test_langsmith_stub_hides_a_run_for_whole_queries_and_holds_only_the_next_requests(
    langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client
) -> None:
    project = langsmith_stub.create_project("p")
    with langsmith_stub._lock:
        for i in range(3):
            langsmith_stub._store_run(
                "post", {"id": str(uuid.UUID(int=i + 1)), "session_id": project}
            )
    langsmith_stub.page_size = 1
    langsmith_stub.hide_run(uuid.UUID(int=1), queries=1)

    def listed() -> list[str]:
        return sorted(str(r.id) for r in langsmith_client.list_runs(project_id=project))

    assert listed() == [str(uuid.UUID(int=2)), str(uuid.UUID(int=3))]  # across 2 pages
    assert listed() == [str(uuid.UUID(int=i)) for i in (1, 2, 3)]
    langsmith_stub.hang("GET /sessions", times=1)
    worker = threading.Thread(target=lambda: langsmith_client.read_project(project_id=project))
    worker.start()
    langsmith_stub.wait_for(lambda: langsmith_stub.hung == 1)
    assert langsmith_client.read_project(project_name="p").id == uuid.UUID(project)  # answered
    langsmith_stub.release_hangs()
    worker.join(10)
    assert not worker.is_alive()


def test_langsmith_stub_keeps_a_runs_end_when_its_post_lands_after_its_patch(
    langsmith_stub: LangSmithStub,
) -> None:
    """The client sends batches on several threads: a post may come after its patch."""
    run = str(uuid.UUID(int=7))
    ended = {"id": run, "end_time": "2026-11-28T00:00:01", "outputs": {"documents": ["d"]}}
    with langsmith_stub._lock:
        langsmith_stub._store_run("patch", ended)
        langsmith_stub._store_run(
            "post", {"id": run, "name": "r", "outputs": {}, "end_time": None, "inputs": {"q": 1}}
        )
    stored = langsmith_stub.run(run)
    assert stored is not None
    assert stored["outputs"] == {"documents": ["d"]}
    assert stored["end_time"] == "2026-11-28T00:00:01"
    assert (stored["name"], stored["inputs"]) == ("r", {"q": 1})  # what only the post had
