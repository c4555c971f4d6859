"""The unobserved judge call: straight to the model's ``_generate``, same answers and errors.

When nothing listens (``score_unobserved``, as the scoring engine uses it), a judge call skips
LangChain's run machinery; whenever anything observes (a handler on the run, on the job or
on the model) or the model has a cache of its own, the call goes through ``invoke`` as before.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.globals import set_llm_cache
from langchain_openai import ChatOpenAI
from pydantic import PrivateAttr

from langchain_ragmetrics import ContextEntityRecall, ContextPrecision, ContextRecall
from langchain_ragmetrics._engine import Job, ScoringEngine
from langchain_ragmetrics._gate import Admission, Gate, admitted
from langchain_ragmetrics._schema import MetricResult, coerce_sample
from langchain_ragmetrics.metrics import JudgedMetric, RetryPolicy
from langchain_ragmetrics.metrics import _base as base_module
from langchain_ragmetrics.metrics._base import (
    arun_parallel,
    retire_idle_call_threads,
    run_parallel,
)
from tests._support.judges import EINSTEIN_REFERENCE, EINSTEIN_VERDICTS, keyword_precision
from tests._support.openai_server import (
    JudgeServer,
    Reply,
    reply_error,
    reply_garbage,
    reply_invalid,
    reply_text,
    router,
    sequence,
)

FAST = RetryPolicy(max_retries=2, initial_backoff=0)
SIMPLE = {"question": "q", "contexts": ["c"], "reference": EINSTEIN_REFERENCE}
ENTITIES = {
    "question": "Who?",
    "contexts": ["Einstein lived in Bern.", "Nothing here."],
    "reference": "Einstein lived in Bern.",
}


class RecordingJudge(ChatOpenAI):
    """A real ``ChatOpenAI`` that notes whether each ``_generate`` ran inside a model run."""

    _runs: list[bool] = PrivateAttr(default_factory=list)

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        self._runs.append(run_manager is not None)
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)

    async def _agenerate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        self._runs.append(run_manager is not None)
        return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kw)


class ChatRuns(BaseCallbackHandler):
    """Counts the chat-model runs a handler sees start and end."""

    def __init__(self) -> None:
        self.starts = 0
        self.ends = 0

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.starts += 1

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self.ends += 1


def recording_judge(server: JudgeServer, **options: Any) -> RecordingJudge:
    return RecordingJudge(
        model="judge-model",
        base_url=server.base_url,
        api_key="test",
        temperature=0,
        max_retries=0,
        timeout=10,
        **options,
    )


def smart(server: JudgeServer) -> None:
    server.script = router(
        RecallStatements=EINSTEIN_VERDICTS,
        ContextVerdicts=keyword_precision("Bern"),
        EntityList=lambda req: {"entities": [{"name": "Einstein"}, {"name": "Bern"}]},
    )


def engine_scores(metric: JudgedMetric, sample: dict[str, Any], **engine: Any) -> MetricResult:
    (result,) = ScoringEngine(**engine).run([Job(coerce_sample(sample), metric)])
    assert result is not None
    return result


def same(a: MetricResult, b: MetricResult) -> None:
    assert (a.score, a.reason, a.details, a.usage, a.error, a.judge) == (
        b.score,
        b.reason,
        b.details,
        b.usage,
        b.error,
        b.judge,
    )


@pytest.mark.parametrize(
    ("metric_cls", "sample"),
    [(ContextRecall, SIMPLE), (ContextPrecision, ENTITIES), (ContextEntityRecall, ENTITIES)],
)
def test_the_engine_skips_the_model_run_when_nothing_listens(
    judge_server: JudgeServer, metric_cls: type[JudgedMetric], sample: dict[str, Any]
) -> None:
    smart(judge_server)
    llm = recording_judge(judge_server)
    metric = metric_cls(llm=llm, retry=FAST)
    direct = engine_scores(metric, sample)
    assert llm._runs
    assert not any(llm._runs)
    llm._runs.clear()
    invoked = metric.invoke(sample)  # a Runnable run of its own: the model runs as before
    assert llm._runs
    assert all(llm._runs)
    assert not direct.failed
    same(direct, invoked)


async def test_the_async_engine_skips_the_model_run_too(judge_server: JudgeServer) -> None:
    smart(judge_server)
    llm = recording_judge(judge_server)
    metric = ContextEntityRecall(llm=llm, retry=FAST)
    (direct,) = await ScoringEngine().arun([Job(coerce_sample(ENTITIES), metric)])
    assert len(llm._runs) == 2
    assert not any(llm._runs)
    llm._runs.clear()
    invoked = await metric.ainvoke(ENTITIES)
    assert len(llm._runs) == 2
    assert all(llm._runs)
    same(direct, invoked)


def test_a_handler_on_the_engine_sees_every_chat_model_run(judge_server: JudgeServer) -> None:
    smart(judge_server)
    handler = ChatRuns()
    llm = recording_judge(judge_server)
    metric = ContextEntityRecall(llm=llm, retry=FAST)
    result = engine_scores(metric, ENTITIES, config={"callbacks": [handler]})
    assert not result.failed
    assert handler.starts == handler.ends == judge_server.count() == 2
    assert all(llm._runs)


def test_a_handler_on_the_job_sees_every_chat_model_run(judge_server: JudgeServer) -> None:
    smart(judge_server)
    handler = ChatRuns()
    metric = ContextEntityRecall(llm=recording_judge(judge_server), retry=FAST)
    job = Job(coerce_sample(ENTITIES), metric, config={"callbacks": [handler]})
    (result,) = ScoringEngine().run([job])
    assert result is not None
    assert not result.failed
    assert handler.starts == handler.ends == 2


def test_a_handler_on_the_model_sees_every_chat_model_run(judge_server: JudgeServer) -> None:
    smart(judge_server)
    handler = ChatRuns()
    llm = recording_judge(judge_server, callbacks=[handler])
    result = engine_scores(ContextEntityRecall(llm=llm, retry=FAST), ENTITIES)
    assert not result.failed
    assert handler.starts == handler.ends == 2
    assert all(llm._runs)


def test_a_cache_on_the_model_is_still_used(judge_server: JudgeServer) -> None:
    smart(judge_server)
    llm = recording_judge(judge_server, cache=InMemoryCache())
    metric = ContextRecall(llm=llm, retry=FAST)
    first = engine_scores(metric, SIMPLE)
    second = engine_scores(metric, SIMPLE)
    assert judge_server.count() == 1  # the second answer came from the model's cache
    assert first.score == second.score == 0.5


def test_langchains_global_cache_is_still_used(judge_server: JudgeServer) -> None:
    smart(judge_server)
    metric = ContextRecall(llm=recording_judge(judge_server), retry=FAST)
    set_llm_cache(InMemoryCache())
    try:
        first = engine_scores(metric, SIMPLE)
        second = engine_scores(metric, SIMPLE)
    finally:
        set_llm_cache(None)
    assert judge_server.count() == 1
    assert first.score == second.score == 0.5


# Every way an answer can fail to parse, then (for the retry) what comes after it.
FAULTS: dict[str, Callable[[], Any]] = {
    "malformed JSON": reply_garbage,
    "missing fields": reply_invalid,
    "wrong field types": lambda: reply_invalid({"statements": [{"index": "x", "attributed": 3}]}),
    "another tool": lambda: Reply(obj=EINSTEIN_VERDICTS, tool_name="SomethingElse"),
    "text, no tool call": lambda: reply_text("I think it is 0.5."),
    "no statements": lambda: reply_invalid({"statements": []}),
}


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("then_valid", [False, True])
def test_bad_answers_fail_and_retry_alike_on_both_paths(
    judge_server: JudgeServer, fault: str, then_valid: bool
) -> None:
    llm = recording_judge(judge_server)
    metric = ContextRecall(llm=llm, retry=FAST)
    results = []
    for score in (metric.invoke, lambda s: engine_scores(metric, s)):
        judge_server.reset()
        bad = FAULTS[fault]()
        judge_server.script = sequence(bad, EINSTEIN_VERDICTS if then_valid else bad)
        results.append(score(SIMPLE))
        assert judge_server.count() == 1 + FAST.parse_retries
    invoked, direct = results
    calls = 1 + FAST.parse_retries
    assert llm._runs == [True] * calls + [False] * calls  # invoke ran the model, the engine not
    same(direct, invoked)
    if then_valid:
        assert direct.score == 0.5
    else:
        assert direct.failed
        assert (direct.error or "").startswith("invalid judge output: ")


@pytest.mark.parametrize("status", [500, 429, 400])
def test_http_errors_fail_and_retry_alike_on_both_paths(
    judge_server: JudgeServer, status: int
) -> None:
    metric = ContextRecall(llm=recording_judge(judge_server), retry=FAST)
    judge_server.script = lambda req: reply_error(status, "scripted failure")
    invoked = metric.invoke(SIMPLE)
    sent = judge_server.count()
    judge_server.reset()
    direct = metric.score_unobserved(SIMPLE)
    assert judge_server.count() == sent == (1 if status == 400 else 1 + FAST.max_retries)
    same(direct, invoked)
    assert "scripted failure" in (direct.error or "")


async def test_async_bad_answers_fail_alike_on_both_paths(judge_server: JudgeServer) -> None:
    metric = ContextRecall(llm=recording_judge(judge_server), retry=FAST)
    judge_server.script = lambda req: reply_garbage()
    invoked = await metric.ainvoke(SIMPLE)
    direct = await metric.ascore_unobserved(SIMPLE)
    same(direct, invoked)
    assert "malformed tool call" in (direct.error or "")


def test_run_parallel_keeps_order_and_runs_up_to_limit_at_once() -> None:
    both = threading.Barrier(2, timeout=30)  # the first two calls wait for each other
    lock = threading.Lock()
    active = peak = 0

    def call(x: int) -> int:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        if x < 2:
            both.wait()
        with lock:
            active -= 1
        return x * 10

    assert run_parallel(call, list(range(7)), limit=2) == [0, 10, 20, 30, 40, 50, 60]
    assert peak == 2
    assert run_parallel(call, [], limit=3) == []


def test_idle_helper_threads_end_when_retired_and_come_back_when_needed() -> None:
    """What ``evaluate(workers=...)`` does before it forks: no helper thread stays alive."""
    all_three = threading.Barrier(3, timeout=30)  # the caller and two helper threads at once
    assert run_parallel(lambda x: (all_three.wait(), x)[1], [1, 2, 3], limit=3) == [1, 2, 3]
    helpers = [t for t in threading.enumerate() if t.name == "ragmetrics-call"]
    assert len(helpers) >= 2
    retire_idle_call_threads()
    for thread in helpers:
        thread.join(30)  # an upper bound, never reached: each ends at once
    assert not [t for t in threading.enumerate() if t.name == "ragmetrics-call"]
    assert run_parallel(lambda x: x * 2, [1, 2, 3], limit=3) == [2, 4, 6]


def test_run_parallel_runs_every_call_and_raises_the_first_error_in_order() -> None:
    ran: list[int] = []
    lock = threading.Lock()

    def call(x: int) -> int:
        with lock:
            ran.append(x)
        if x in (2, 4):
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 2"):
        run_parallel(call, list(range(6)), limit=3)
    assert sorted(ran) == list(range(6))


def test_run_parallel_calls_see_the_callers_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller's")
    seen = run_parallel(lambda _: var.get(), list(range(5)), limit=5)
    assert seen == ["caller's"] * 5


def test_under_the_engine_run_parallel_starts_a_helper_per_free_slot_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The helpers are decided before the caller's own call starts: with one slot free of
    two, one helper (not ``limit - 1``), and the slots all come back."""
    gate = Gate(2)
    assert gate.slots.acquire(blocking=False)  # the job's own slot, as the engine takes it
    admission = Admission(gate, holding=True)
    submitted: list[object] = []
    threads = base_module._CALL_THREADS
    submit = threads.submit
    monkeypatch.setattr(threads, "submit", lambda task: (submitted.append(task), submit(task)))
    first_two = threading.Barrier(2, timeout=30)  # the helper cannot finish (and free its
    # slot for a second helper) before the caller has started its own call

    def call(x: int) -> int:
        if x < 2:
            first_two.wait()
        return x * 2

    with admitted(admission):
        assert run_parallel(call, [0, 1, 2], limit=8) == [0, 2, 4]
    assert len(submitted) == 1
    admission.close()
    assert [gate.slots.acquire(blocking=False) for _ in range(3)] == [True, True, False]


def test_under_the_engine_arun_parallel_keeps_to_the_free_slots() -> None:
    """On a loop the helper tasks start at the caller's first await: with two slots of
    three free, three calls at once (the caller and two helpers), never four."""

    async def run() -> tuple[list[int], int, int]:
        gate = Gate(3)
        slots = gate.loop_slots()
        await slots.acquire()
        admission = Admission(gate, holding=True, loop_slots=slots)
        running = peak = 0

        async def call(x: int) -> int:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            for _ in range(3):
                await asyncio.sleep(0)  # every task started so far gets to run meanwhile
            running -= 1
            return x * 2

        with admitted(admission):
            out = await arun_parallel(call, list(range(6)), limit=8)
        admission.close()
        return out, peak, sum(slots.try_acquire() for _ in range(4))

    assert asyncio.run(run()) == ([0, 2, 4, 6, 8, 10], 3, 3)
