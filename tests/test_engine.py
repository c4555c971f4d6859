"""The scoring engine: order, error capture, slots, backoffs without slots, rate, timeouts."""

import asyncio
import contextvars
import logging
import math
import queue
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.rate_limiters import InMemoryRateLimiter

from langchain_ragmetrics import (
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    IDBasedContextRecall,
    InMemorySink,
    NonLLMContextRecall,
    RagSample,
)
from langchain_ragmetrics._engine import (
    Job,
    JobFeed,
    ScoringEngine,
    failure_report,
    make_rate_limiter,
)
from langchain_ragmetrics._gate import Admission, LoopSlots
from langchain_ragmetrics._schema import MetricResult
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics.metrics import RetryPolicy
from langchain_ragmetrics.metrics._judge import cause_of
from tests._support.concurrency import Peak
from tests._support.judges import (
    EINSTEIN_CONTEXT,
    EINSTEIN_REFERENCE,
    EINSTEIN_VERDICTS,
    keyword_precision,
    payload,
)
from tests._support.openai_server import (
    JudgeRequest,
    JudgeServer,
    reply_error,
    reply_hold,
    reply_openai_error,
)
from tests._support.rag import FAST, online_handler, ours, question, rag_app, rag_router

SAMPLE = RagSample(question="q", contexts=[EINSTEIN_CONTEXT], reference=EINSTEIN_REFERENCE)
MODES = ["threads", "asyncio"]
MARK: contextvars.ContextVar[str] = contextvars.ContextVar("MARK", default="unset")


def sample(name: str) -> RagSample:
    return RagSample(question=name, contexts=[EINSTEIN_CONTEXT], reference=EINSTEIN_REFERENCE)


def run_jobs(
    engine: ScoringEngine, jobs: list[Job], mode: str, **options: Any
) -> list[MetricResult | None]:
    """Score jobs through ``engine.run`` (threads) or ``engine.arun`` (a fresh loop)."""
    if mode == "threads":
        return engine.run(jobs, **options)
    return list(asyncio.run(engine.arun(jobs, **options)))


def hold_the_stuck_one(release: threading.Event) -> Callable[[JudgeRequest], Any]:
    """Hold the request of the sample named "stuck" until ``release``; answer the others."""

    def script(req: JudgeRequest) -> Any:
        if payload(req)["question"] == "stuck":
            return reply_hold(release, EINSTEIN_VERDICTS)
        return EINSTEIN_VERDICTS

    return script


@pytest.mark.parametrize("mode", MODES)
def test_runs_jobs_in_order_and_captures_errors(
    judge_server: JudgeServer, make_judge: Callable[..., Any], mode: str
) -> None:
    judge_server.script = lambda req: EINSTEIN_VERDICTS
    engine = ScoringEngine(max_concurrency=4)
    recall = ContextRecall(llm=make_judge())
    bad = RagSample(question="q", contexts=["c"])  # no reference: invalid input
    jobs = [Job(SAMPLE, recall, 0), Job(bad, recall, 1), Job(SAMPLE, recall, 2)]
    seen: list[Any] = []
    results = run_jobs(engine, jobs, mode, on_result=lambda job, r: seen.append(job.tag))
    assert [r.score for r in results if r is not None][0::2] == [0.5, 0.5]
    assert results[1] is not None
    assert math.isnan(results[1].score or 0.0)
    assert "ContextRecall needs `reference`" in (results[1].error or "")
    assert sorted(seen) == [0, 1, 2]
    assert (engine.stats.started, engine.stats.finished, engine.stats.failed) == (3, 3, 1)
    assert engine.stats.usage.judge_calls == 2


@pytest.mark.parametrize("mode", MODES)
def test_concurrency_is_bounded_and_used(
    judge_server: JudgeServer, make_judge: Callable[..., Any], mode: str
) -> None:
    peak = Peak(width=3, total=8, answer=lambda req: EINSTEIN_VERDICTS)
    judge_server.script = peak
    engine = ScoringEngine(max_concurrency=3)
    recall = ContextRecall(llm=make_judge())
    results = run_jobs(engine, [Job(sample(f"#{i}"), recall) for i in range(8)], mode)
    assert [r.score for r in results if r is not None] == [0.5] * 8
    assert peak.peak == 3


@pytest.mark.parametrize("mode", MODES)
def test_a_backoff_gives_the_slot_to_the_next_job(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = threading.Event()
    b_sent = threading.Event()

    def script(req: JudgeRequest) -> Any:
        if payload(req)["question"] == "B":
            b_sent.set()
        if payload(req)["question"] == "A" and not first.is_set():
            first.set()  # A's first attempt fails; the server asks for a pause
            return reply_error(503, "busy", headers={"Retry-After": "0.5"})
        return EINSTEIN_VERDICTS

    # A's backoff lasts until B was sent (60 s at most), not 0.5 s: B's start cannot lose
    # a race against the clock. Without its slot given back, B is never sent in the pause.
    def sleep(self: Admission, seconds: float) -> None:
        self._park()
        try:
            b_sent.wait(60)
        finally:
            self._unpark()

    async def asleep(self: Admission, seconds: float) -> None:
        self._park()
        try:
            await asyncio.to_thread(b_sent.wait, 60)
        finally:
            await self._aunpark()

    monkeypatch.setattr(Admission, "sleep", sleep)
    monkeypatch.setattr(Admission, "asleep", asleep)
    judge_server.script = script
    engine = ScoringEngine(max_concurrency=1)  # one slot: B can only run in A's backoff
    recall = ContextRecall(llm=make_judge(), retry=RetryPolicy(max_retries=1))
    results = run_jobs(engine, [Job(sample("A"), recall), Job(sample("B"), recall)], mode)
    assert [r.score for r in results if r is not None] == [0.5, 0.5]
    order = [payload(r)["question"] for r in judge_server.requests]
    assert order == ["A", "B", "A"]  # B was sent while A waited; A retried after it


@pytest.mark.parametrize("mode", MODES)
def test_the_rate_limiter_meters_every_request_retries_included(
    judge_server: JudgeServer, make_judge: Callable[..., Any], mode: str
) -> None:
    judge_server.script = lambda req: (
        reply_error(500) if len(judge_server.requests) % 2 else EINSTEIN_VERDICTS
    )
    engine = ScoringEngine(max_concurrency=2, rate_limit_per_minute=60_000)
    spent: list[bool] = []
    limiter = engine.gate.rate_limiter
    assert isinstance(limiter, InMemoryRateLimiter)
    original = limiter.acquire if mode == "threads" else limiter.aacquire

    if mode == "threads":

        def acquire(*, blocking: bool = True) -> bool:
            spent.append(True)
            return original(blocking=blocking)  # type: ignore[no-any-return]

        limiter.acquire = acquire  # type: ignore[method-assign]
    else:

        async def aacquire(*, blocking: bool = True) -> bool:
            spent.append(True)
            return await original(blocking=blocking)  # type: ignore[no-any-return,misc]

        limiter.aacquire = aacquire  # type: ignore[method-assign]
    recall = ContextRecall(llm=make_judge(), retry=RetryPolicy(initial_backoff=0))
    results = run_jobs(engine, [Job(sample(f"#{i}"), recall) for i in range(3)], mode)
    assert [r.score for r in results if r is not None] == [0.5] * 3
    assert judge_server.count() == 6  # each job: one 500, one answer
    assert len(spent) == judge_server.count()


def test_rate_limiter_settings() -> None:
    limiter = make_rate_limiter(120)
    assert isinstance(limiter, InMemoryRateLimiter)
    assert limiter.requests_per_second == 2.0
    assert limiter.available_tokens == limiter.max_bucket_size == 2.0  # starts without a wait
    assert make_rate_limiter(None) is None
    with pytest.raises(ValueError, match="rate_limit_per_minute"):
        make_rate_limiter(0)
    assert ScoringEngine(rate_limit_per_minute=30).limiter.requests_per_second == 0.5


STUCK_TIMEOUT = 0.3
"""The timeout the stuck job runs out: only the stuck job runs under it."""
AFTER_TIMEOUT = 60.0
"""The timeout of the job after it: a ceiling, never reached when the slot was freed (a
slot never freed makes that job time out, so the test fails every time the code is wrong)."""
STEPS = ["judge call", "deaf step"]


def run_in_turn(
    engine: ScoringEngine, first: Job, then: Job, mode: str
) -> tuple[MetricResult | None, MetricResult | None]:
    """Run ``first`` under the engine's timeout, then ``then`` under ``AFTER_TIMEOUT``, on
    one engine (and, for ``arun``, one loop: each loop has its own slots)."""
    if mode == "threads":
        (done,) = engine.run([first])
        engine.timeout = AFTER_TIMEOUT
        (after,) = engine.run([then])
        return done, after

    async def both() -> tuple[MetricResult | None, MetricResult | None]:
        (done,) = await engine.arun([first])
        engine.timeout = AFTER_TIMEOUT
        (after,) = await engine.arun([then])
        return done, after

    return asyncio.run(both())


def held_metric(release: threading.Event) -> IDBasedContextRecall:
    """A metric whose job for the sample "stuck" blocks until ``release``, deaf to any
    deadline (no HTTP timeout can end it; on a loop, only its cancellation): only the engine
    can give its slot to the next job.
    """

    class Held(IDBasedContextRecall):
        def _evaluate(self, sample: RagSample, config: Any) -> MetricResult:
            if sample.question == "stuck":
                release.wait()
            return super()._evaluate(sample, config)

        async def _aevaluate(self, sample: RagSample, config: Any) -> MetricResult:
            if sample.question == "stuck":
                await asyncio.Event().wait()  # never set: only cancelling it ends it
            return super()._evaluate(sample, config)

    return Held()


def id_sample(name: str) -> RagSample:
    return RagSample(question=name, contexts=["c"], context_ids=["a"], reference_context_ids=["a"])


def stuck_then_next(
    step: str, release: threading.Event, make_judge: Callable[..., Any]
) -> tuple[Job, Job, float]:
    """A job stuck in a judge call the server holds, or in a step deaf to its deadline;
    the job after it; and the score that job gets."""
    if step == "judge call":
        recall = ContextRecall(llm=make_judge())
        return Job(sample("stuck"), recall), Job(sample("next"), recall), 0.5
    held = held_metric(release)  # only the engine can take its slot back
    return Job(id_sample("stuck"), held), Job(id_sample("next"), held), 1.0


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("mode", MODES)
def test_timeout_becomes_nan_and_frees_the_slot(
    judge_server: JudgeServer, make_judge: Callable[..., Any], mode: str, step: str
) -> None:
    release = threading.Event()
    judge_server.script = hold_the_stuck_one(release)
    engine = ScoringEngine(max_concurrency=1, timeout=STUCK_TIMEOUT)
    stuck_job, next_job, score = stuck_then_next(step, release, make_judge)
    try:
        stuck, after = run_in_turn(engine, stuck_job, next_job, mode)
    finally:
        release.set()
    assert stuck is not None
    assert math.isnan(stuck.score or 0.0)
    assert stuck.error == f"timed out after {STUCK_TIMEOUT:g}s"
    assert after is not None
    assert after.score == score  # the only slot went on to the next job
    assert engine.stats.timed_out == 1


@pytest.mark.parametrize("mode", MODES)
def test_no_retry_sleeps_past_the_job_deadline(
    judge_server: JudgeServer, make_judge: Callable[..., Any], mode: str
) -> None:
    judge_server.script = lambda req: reply_error(503, "busy", headers={"Retry-After": "20"})
    engine = ScoringEngine(timeout=10)
    recall = ContextRecall(llm=make_judge(), retry=RetryPolicy(max_backoff=60))
    (result,) = run_jobs(engine, [Job(SAMPLE, recall)], mode)
    assert result is not None
    assert "busy" in (result.error or "")  # given up at once: 20 s would pass the deadline
    assert judge_server.count() == 1


@pytest.mark.parametrize("mode", MODES)
def test_raise_exceptions(mode: str) -> None:
    engine = ScoringEngine(raise_exceptions=True)
    with pytest.raises(ValueError, match="needs `reference_contexts`"):
        run_jobs(engine, [Job(RagSample(contexts=["c"]), NonLLMContextRecall())], mode)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("max_concurrency", 0, "`max_concurrency` must be a whole number of at least 1, got 0"),
        ("max_concurrency", 1.5, "`max_concurrency` must be a whole number of at least 1"),
        ("max_concurrency", "x", "`max_concurrency` must be a whole number of at least 1"),
        ("max_concurrency", True, "`max_concurrency` must be a whole number of at least 1"),
        ("timeout", "5", "`timeout` must be a number above 0, got '5'"),
        ("timeout", 0, "`timeout` must be a number above 0, got 0"),
        ("timeout", -1, "`timeout` must be a number above 0, got -1"),
        ("timeout", math.nan, "`timeout` must be a number above 0, got nan"),
        ("rate_limit_per_minute", "x", "`rate_limit_per_minute` must be a number above 0"),
        ("rate_limit_per_minute", 0, "`rate_limit_per_minute` must be a number above 0"),
    ],
)
def test_bad_options_are_refused_by_name(option: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ScoringEngine(**{option: value})  # type: ignore[arg-type]


def test_evaluate_refuses_a_bad_timeout_before_scoring() -> None:
    from langchain_ragmetrics import evaluate

    rows = [{"question": "q", "contexts": ["c"], "reference_contexts": ["c"]}]
    for workers in (1, 2):
        with pytest.raises(ValueError, match="`timeout` must be a number above 0, got '5'"):
            evaluate(rows, ["non_llm_context_recall"], timeout="5", workers=workers)  # type: ignore[arg-type]


def test_run_works_in_the_callers_context_and_calls_back_on_its_thread(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = lambda req: EINSTEIN_VERDICTS
    marks: list[str] = []
    callers: list[threading.Thread] = []

    class Marked(ContextRecall):
        def _evaluate(self, sample: RagSample, config: Any) -> MetricResult:
            marks.append(MARK.get())
            return super()._evaluate(sample, config)

    token = MARK.set("caller")
    try:
        ScoringEngine(max_concurrency=2).run(
            [Job(sample(f"#{i}"), Marked(llm=make_judge())) for i in range(3)],
            on_result=lambda job, r: callers.append(threading.current_thread()),
        )
    finally:
        MARK.reset(token)
    assert marks == ["caller"] * 3
    assert callers == [threading.current_thread()] * 3


def test_stop_ends_the_run_and_keeps_what_finished(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    release = threading.Event()
    judge_server.script = lambda req: (
        EINSTEIN_VERDICTS if payload(req)["question"] == "#0" else reply_hold(release, {})
    )
    stop = threading.Event()
    recall = ContextRecall(llm=make_judge())
    try:
        results = ScoringEngine(max_concurrency=1).run(
            [Job(sample(f"#{i}"), recall) for i in range(4)],
            on_result=lambda job, r: stop.set(),
            stop=stop,
        )
    finally:
        release.set()
    assert [r.score if r else None for r in results] == [0.5, None, None, None]


def test_keyboard_interrupt_from_a_callback_propagates_after_stopping(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    release = threading.Event()

    def script(req: JudgeRequest) -> Any:  # #1 holds the one slot until the test ends
        if payload(req)["question"] == "#1":
            return reply_hold(release, EINSTEIN_VERDICTS)
        return EINSTEIN_VERDICTS

    judge_server.script = script
    calls: list[Job] = []

    def interrupt(job: Job, result: MetricResult) -> None:
        calls.append(job)
        raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            ScoringEngine(max_concurrency=1).run(
                [Job(sample(f"#{i}"), ContextRecall(llm=make_judge())) for i in range(5)],
                on_result=interrupt,
            )
        # Stopped while #1 held the one slot (#1 may or may not have been sent by then):
        # nothing after it started, whatever the threads' pace.
        assert judge_server.count() <= 2
    finally:
        release.set()
    assert len(calls) == 1  # a callback that asked to stop is not called again


def patch_outbox(monkeypatch: pytest.MonkeyPatch, queued: int, then: Callable[[], Any]) -> None:
    """The next runs' result queue: its first ``get`` waits (up to 60 s) until ``queued``
    results wait in it, then returns ``then()`` (which may raise, as Ctrl-C would).

    The window the tests need (finished results not yet taken by the caller's thread) is
    thus held open on purpose, whatever the threads' timing.
    """
    from langchain_ragmetrics import _engine

    class HeldOpen(queue.SimpleQueue):  # type: ignore[type-arg]
        opened = False

        def get(self, block: bool = True, timeout: float | None = None) -> Any:
            if not self.opened:
                self.opened = True
                deadline = time.monotonic() + 60
                while self.qsize() < queued and time.monotonic() < deadline:
                    time.sleep(0.005)
                assert self.qsize() >= queued, "the results never arrived"
                return then()
            return super().get(block, timeout)

    original = _engine._Batch.__init__

    def init(batch: Any, jobs: Any) -> None:
        original(batch, jobs)
        batch.outbox = HeldOpen()

    monkeypatch.setattr(_engine._Batch, "__init__", init)


def ctrl_c() -> Any:
    raise KeyboardInterrupt


@pytest.mark.parametrize("raise_exceptions", [False, True])
def test_ctrl_c_while_finished_results_wait_delivers_them_then_propagates(
    monkeypatch: pytest.MonkeyPatch, raise_exceptions: bool
) -> None:
    """Ctrl-C can land after jobs finished and before the caller's thread took their
    results: those are delivered, then the interrupt propagates (partial results keep them).
    With ``raise_exceptions``, a failed job among them is skipped: the interrupt still wins."""
    patch_outbox(monkeypatch, queued=2, then=ctrl_c)
    release = threading.Event()
    metric = held_metric(release)
    failing = RagSample(question="bad", contexts=["c"], context_ids=["a"])  # no reference ids
    jobs = [Job(id_sample("done"), metric), Job(failing, metric), Job(id_sample("stuck"), metric)]
    delivered: list[tuple[str | None, bool]] = []  # (question, failed)

    def record(job: Job, result: MetricResult) -> None:
        delivered.append((job.sample.question, result.failed))

    engine = ScoringEngine(
        max_concurrency=3, timeout=AFTER_TIMEOUT, raise_exceptions=raise_exceptions
    )
    try:
        with pytest.raises(KeyboardInterrupt):
            engine.run(jobs, on_result=record)
    finally:
        release.set()
    if raise_exceptions:
        assert delivered == [("done", False)]
    else:
        assert sorted(delivered) == [("bad", True), ("done", False)]  # each once


def test_a_callback_that_asked_to_stop_is_not_called_again_when_the_run_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop = threading.Event()

    def stop_the_run() -> Any:
        stop.set()
        return (-1, None)  # a wake-up call: the run sees ``stop`` and hands over what waits

    patch_outbox(monkeypatch, queued=2, then=stop_the_run)
    calls: list[str | None] = []

    def interrupt(job: Job, result: MetricResult) -> None:
        calls.append(job.sample.question)
        raise KeyboardInterrupt

    metric = held_metric(threading.Event())
    with pytest.raises(KeyboardInterrupt):
        ScoringEngine(max_concurrency=2).run(
            [Job(id_sample("a"), metric), Job(id_sample("b"), metric)],
            on_result=interrupt,
            stop=stop,
        )
    assert len(calls) == 1  # the second waiting result is not handed to it


@pytest.mark.parametrize("step", STEPS)
async def test_ascore_on_an_executor_frees_the_slot_of_a_timed_out_call(
    judge_server: JudgeServer, make_judge: Callable[..., Any], step: str
) -> None:
    release = threading.Event()
    judge_server.script = hold_the_stuck_one(release)
    pool = DaemonThreadPool(name="test-judges", size=2)
    pool.start()
    engine = ScoringEngine(max_concurrency=1, timeout=STUCK_TIMEOUT, executor=pool)
    stuck_job, next_job, score = stuck_then_next(step, release, make_judge)
    try:
        stuck = await engine.ascore(stuck_job)
        engine.timeout = AFTER_TIMEOUT  # a ceiling: without a free slot it times out
        after = await engine.ascore(next_job)
    finally:
        release.set()
        pool.stop(10)
    assert stuck.error == f"timed out after {STUCK_TIMEOUT:g}s"
    assert after.score == score


@pytest.mark.parametrize("mode", MODES)
def test_listeners_see_the_metric_runs(
    judge_server: JudgeServer, make_judge: Callable[..., Any], mode: str
) -> None:
    judge_server.script = lambda req: EINSTEIN_VERDICTS

    class Runs(BaseCallbackHandler):
        def __init__(self) -> None:
            self.chains: list[str] = []
            self.models = 0

        def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
            self.chains.append(kwargs.get("name") or "")

        def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
            self.models += 1

    engine_wide, per_job = Runs(), Runs()
    engine = ScoringEngine(config={"callbacks": [engine_wide]})
    quiet = ScoringEngine()  # nobody listens: the metric's own run is skipped, same result
    recall = ContextRecall(llm=make_judge())
    jobs = [Job(SAMPLE, recall), Job(SAMPLE, recall, config={"callbacks": [per_job]})]
    if mode == "threads":
        engine.run(jobs[:1])
        results = quiet.run(jobs)
    else:  # one loop: langchain-openai's async HTTP client is shared and bound to it

        async def both() -> list[MetricResult]:
            await engine.arun(jobs[:1])
            return await quiet.arun(jobs)

        results = list(asyncio.run(both()))
    assert engine_wide.chains == per_job.chains == ["ContextRecall"]
    assert engine_wide.models == per_job.models == 1
    assert [r.score for r in results if r is not None] == [0.5, 0.5]


# --------------------------------------------------------------------------- what cannot heal


@pytest.mark.parametrize("mode", MODES)
def test_a_judge_out_of_quota_costs_one_request_per_call_not_a_retry_storm(
    judge_server: JudgeServer, make_judge: Callable[..., Any], mode: str
) -> None:
    judge_server.script = lambda req: reply_openai_error("insufficient_quota")
    metric = ContextRecall(llm=make_judge(), retry=RetryPolicy(max_retries=5, initial_backoff=0))
    engine = ScoringEngine(max_concurrency=4)
    results = run_jobs(engine, [Job(sample(f"q{i}"), metric) for i in range(12)], mode)
    assert judge_server.count() == 12  # one attempt per call, however many retries allowed
    assert all(cause_of(r.error) == "insufficient quota" for r in results if r is not None)
    assert engine.stats.failed == 12
    assert engine.stats.usage.judge_calls == 12


def test_failure_report_is_one_kind_per_cause_whatever_the_metric() -> None:
    def failed(metric: str, error: str) -> MetricResult:
        return MetricResult(metric=metric, score=math.nan, error=error)

    quota = "insufficient quota: OpenAIRateLimitError: Error code: 429 - quota"
    recall_kind, message = failure_report(failed("context_recall", quota))
    precision_kind, _ = failure_report(failed("context_precision", quota))
    assert recall_kind == precision_kind == "judge:insufficient quota"
    assert "insufficient quota" in message
    assert "add credit" in message
    assert failure_report(failed("context_recall", "OpenAIAPIError: down")) == (
        "metric:context_recall:OpenAIAPIError",
        "context_recall failed: OpenAIAPIError: down",
    )


def test_online_a_judge_out_of_quota_warns_once_and_fails_results_with_the_cause(
    judge_server: JudgeServer, make_judge: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    app = rag_app(judge_server, make_judge)
    refused = lambda req: reply_openai_error("insufficient_quota")  # noqa: E731
    judge_server.script = rag_router(RelevantSentences=refused, ContextVerdicts=refused)
    judge = make_judge()
    metrics = [ContextRelevance(llm=judge, retry=FAST), ContextPrecision(llm=judge, retry=FAST)]
    config: Any = {"metadata": {"reference": "The answer."}}
    with online_handler(app.llm, metrics=metrics) as handler:
        with caplog.at_level(logging.WARNING, logger="langchain_ragmetrics"):
            for i in range(3):
                app.chain.invoke(question(i), config={**config, "callbacks": [handler]})
            assert handler.flush(30)
        stats = handler.stats
        sink = handler.sinks[0]
        assert isinstance(sink, InMemorySink)
        items = list(sink.results)
    assert (stats.failed, stats.scored, stats.processed) == (6, 0, 3)
    assert len(items) == 6
    assert all(cause_of(item.result.error) == "insufficient quota" for item in items)
    judged = judge_server.count("RelevantSentences") + judge_server.count("ContextVerdicts")
    assert judged == 6  # one attempt per result: FAST allows 3 retries, none was used
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and ours(r)]
    # The worker's loop is ours: an unread task error there would show as asyncio's ERROR.
    assert not [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "insufficient quota" in warnings[0].getMessage()


def test_a_job_back_from_its_backoff_goes_before_new_jobs(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    """The retry of #0 takes the next free slot, ahead of #2 (issue 18: faults)."""
    release = threading.Event()
    failed: list[str] = []

    def script(req: JudgeRequest) -> Any:
        name = payload(req)["question"]
        if name == "#0" and not failed:
            failed.append(name)
            return reply_error(500, "injected")
        if name == "#1":
            return reply_hold(release, EINSTEIN_VERDICTS)  # holds the only slot
        return EINSTEIN_VERDICTS

    judge_server.script = script
    engine = ScoringEngine(max_concurrency=1)
    recall = ContextRecall(llm=make_judge(), retry=RetryPolicy(initial_backoff=0))
    jobs = [Job(sample(f"#{i}"), recall) for i in range(3)]
    resume = engine.gate.acquire_resumed

    def resume_once_1_holds_the_slot(timeout: float | None) -> bool:
        limit = time.monotonic() + 30
        while judge_server.count() < 2:  # #1 took the slot #0 gave back, and is held
            assert time.monotonic() < limit, "#1 never started"
            time.sleep(0.01)
        return resume(timeout)

    engine.gate.acquire_resumed = resume_once_1_holds_the_slot  # type: ignore[method-assign]
    results: list[MetricResult | None] = []
    runner = threading.Thread(target=lambda: results.extend(engine.run(jobs)))
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while engine.gate.resuming == 0:  # #0 is back from its backoff, waiting for the slot
            assert time.monotonic() < deadline, "the retry never waited for a slot"
            time.sleep(0.01)
    finally:
        release.set()
        runner.join(30)
    assert [r.score for r in results if r is not None] == [0.5] * 3
    order = [payload(r)["question"] for r in judge_server.requests]
    assert order == ["#0", "#1", "#0", "#2"]


def test_a_thread_waiting_for_the_feed_holds_no_slot(
    judge_server: JudgeServer, make_judge: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feed that has run dry (a worker process waiting for the parent's answer, the parent
    waiting for its workers' last jobs) is waited for without a slot: a job back from its
    backoff takes the slot meanwhile. Before, the thread that found the feed dry waited in
    ``refill`` on its slot, and with one slot the retry waited for the feed (issue 18: retries
    sent seconds late at the end of a run with worker processes)."""
    asked = threading.Event()  # a thread waits in refill(True) for the feed's answer
    answer_feed = threading.Event()
    retried = threading.Event()
    seen: list[str] = []

    def script(req: JudgeRequest) -> Any:
        seen.append(payload(req)["question"])
        if len(seen) == 1:
            return reply_error(500, "injected")  # A backs off and gives its slot back
        retried.set()
        return EINSTEIN_VERDICTS

    def refill(block: bool) -> bool:
        if block:  # waits for an answer, as the parent does for its workers' last jobs
            asked.set()
            answer_feed.wait(30)
            feed.close()
            return True
        return False  # nothing at hand: a thread holding a slot must not wait here

    # A's backoff lasts until a thread waits for the feed: then A needs the slot back.
    def sleep(self: Admission, seconds: float) -> None:
        self._park()
        try:
            asked.wait(30)
        finally:
            self._unpark()

    monkeypatch.setattr(Admission, "sleep", sleep)
    judge_server.script = script
    engine = ScoringEngine(max_concurrency=1)
    recall = ContextRecall(llm=make_judge(), retry=RetryPolicy(max_retries=1))
    feed = JobFeed(refill)
    feed.add([Job(sample("A"), recall)])
    results: list[MetricResult] = []
    runner = threading.Thread(
        target=engine.run_feed, args=(feed,), kwargs={"on_result": lambda j, r: results.append(r)}
    )
    runner.start()
    try:
        assert asked.wait(10), "no thread waited for the feed"
        assert retried.wait(10), "the retry waited for the feed's answer"
    finally:
        answer_feed.set()
        runner.join(30)
    assert not runner.is_alive()
    assert seen == ["A", "A"]
    assert [r.score for r in results] == [0.5]


def test_on_the_event_loop_too_a_job_back_from_its_backoff_goes_before_new_jobs(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    """``arun`` starts every job at once: the retry of #0 must not queue behind #2.

    (Behind every job not started yet, a retry of a long async run would pass its timeout.)
    """
    release = threading.Event()
    failed: list[str] = []

    def script(req: JudgeRequest) -> Any:
        name = payload(req)["question"]
        if name == "#0" and not failed:
            failed.append(name)
            return reply_error(500, "injected")
        if name == "#1":
            return reply_hold(release, EINSTEIN_VERDICTS)  # holds the only slot
        return EINSTEIN_VERDICTS

    judge_server.script = script
    engine = ScoringEngine(max_concurrency=1)
    recall = ContextRecall(llm=make_judge(), retry=RetryPolicy(initial_backoff=0))
    jobs = [Job(sample(f"#{i}"), recall) for i in range(3)]

    async def main() -> list[MetricResult]:
        run = asyncio.ensure_future(engine.arun(jobs))
        slots = engine.gate.loop_slots()
        try:
            deadline = time.monotonic() + 30
            while slots.resuming == 0:  # #0 is back from its backoff, waiting for the slot
                assert not run.done(), "the run ended before the retry waited for a slot"
                assert time.monotonic() < deadline, "the retry never waited for a slot"
                await asyncio.sleep(0.01)
            while judge_server.count() < 2:  # #1 took the slot; its request may be on its way
                assert time.monotonic() < deadline, "#1 never reached the judge"
                await asyncio.sleep(0.01)
            # #1 holds the only slot until released: nothing else can have been sent.
            assert judge_server.count() == 2  # #0's first attempt and #1 (held) only
        finally:
            release.set()
        return await run

    results = asyncio.run(main())
    assert [r.score for r in results] == [0.5] * 3
    order = [payload(r)["question"] for r in judge_server.requests]
    assert order == ["#0", "#1", "#0", "#2"]


def test_loop_slots_hand_a_cancelled_waiters_slot_on() -> None:
    """A waiter cancelled while waiting takes no slot; one cancelled after it was handed a
    slot gives it to the next waiter, so no slot is lost."""

    async def main() -> None:
        slots = LoopSlots(1)
        await slots.acquire()
        gone = asyncio.ensure_future(slots.acquire())
        handed = asyncio.ensure_future(slots.acquire(resumed=True))
        last = asyncio.ensure_future(slots.acquire())
        await asyncio.sleep(0)  # all three wait
        assert slots.resuming == 1
        gone.cancel()
        await asyncio.sleep(0)
        slots.release()  # to the resumed waiter first ...
        handed.cancel()  # ... which is cancelled before it runs: the slot goes on
        await asyncio.sleep(0)
        await asyncio.wait_for(last, 5)
        assert gone.cancelled()
        assert handed.cancelled()
        slots.release()
        await asyncio.wait_for(slots.acquire(), 5)  # the one slot is free again

    asyncio.run(main())


# Per-context precision on seed 002's Japanese example: three calls a job, 7/12.
JA_PM = RagSample(
    question="日本の首相は誰ですか?",
    contexts=[
        "東京は日本の首都です",
        "岸田文雄氏は2021年10月から日本の首相を務めています",
        "岸田首相は外交政策に力を入れています",
    ],
    reference="岸田文雄氏が現在の日本の首相です",
    language="ja",
)


def run_and_count_free_slots(
    engine: ScoringEngine, jobs: list[Job], mode: str
) -> tuple[list[MetricResult | None], int]:
    """Run the jobs; then how many of the engine's slots are free (all, if none leaked)."""
    if mode == "threads":
        results = engine.run(jobs)
        taken = 0
        while engine.gate.slots.acquire(blocking=False):
            taken += 1
        return results, taken

    async def run() -> tuple[list[MetricResult | None], int]:
        results = await engine.arun(jobs)
        slots = engine.gate.loop_slots()
        return list(results), sum(slots.try_acquire() for _ in range(engine.max_concurrency + 1))

    return asyncio.run(run())


@pytest.mark.parametrize("mode", MODES)
def test_the_calls_a_job_sends_at_once_count_against_max_concurrency(
    judge_server: JudgeServer, make_judge: Callable[..., Any], mode: str
) -> None:
    """Three jobs of three calls each, two slots: never more than two requests at once
    (a job's extra calls run at once only on free slots), and both slots used."""
    peak = Peak(width=2, total=9, answer=keyword_precision("岸田"))
    judge_server.script = peak
    engine = ScoringEngine(max_concurrency=2)
    precision = ContextPrecision(llm=make_judge(), per_context=True)
    results, free = run_and_count_free_slots(
        engine, [Job(JA_PM, precision) for _ in range(3)], mode
    )
    assert [r.score for r in results if r is not None] == [7 / 12] * 3
    assert peak.peak == 2
    assert judge_server.count() == 9
    assert free == 2  # every slot came back


@pytest.mark.parametrize("mode", MODES)
def test_a_jobs_calls_that_back_off_at_once_give_their_slots_back_and_finish(
    judge_server: JudgeServer, make_judge: Callable[..., Any], mode: str
) -> None:
    """Each of a job's three calls first meets a 429: all three sleep without a slot, wake
    with one, and the job's thread waits for them without its own; nothing waits for ever
    and no slot is lost or given back twice (a BoundedSemaphore would raise)."""
    refused: set[str] = set()
    lock = threading.Lock()
    judge = keyword_precision("岸田")

    def answer(req: JudgeRequest) -> Any:
        passage = payload(req)["passage"]
        with lock:
            first = passage not in refused
            refused.add(passage)
        if first:
            return reply_error(429, "slow down", headers={"Retry-After": "0.01"})
        return judge(req)

    peak = Peak(width=1, total=12, answer=answer)
    judge_server.script = peak
    engine = ScoringEngine(max_concurrency=3)
    precision = ContextPrecision(llm=make_judge(), per_context=True, retry=FAST)
    jobs = [Job(JA_PM, precision), Job(JA_PM.model_copy(update={"question": "首相?"}), precision)]
    results, free = run_and_count_free_slots(engine, jobs, mode)
    assert [r.score for r in results if r is not None] == [7 / 12, 7 / 12]
    assert judge_server.count() == 9  # three refusals, then six answers
    assert peak.peak <= 3
    assert free == 3


@pytest.mark.parametrize("mode", MODES)
def test_a_call_backing_off_lets_the_jobs_next_calls_go_first(
    judge_server: JudgeServer, make_judge: Callable[..., Any], mode: str
) -> None:
    """One slot, a job of three calls, and a job waiting: the first call meets a 429. While
    it sleeps out the backoff its slot goes to the job's calls not started yet (they do not
    wait for its retry, and the waiting job does not pass them), and the retry comes once
    they are done: the slot is never idle meanwhile. Before: 0, 0, 1, 2, then the next job
    (threads); 0, the next job's calls, then 0, 1, 2 (asyncio)."""
    order: list[str] = []
    lock = threading.Lock()
    judge = keyword_precision("岸田")
    first_passage = JA_PM.contexts[0]

    def answer(req: JudgeRequest) -> Any:
        passage = payload(req)["passage"]
        with lock:
            order.append(passage)
            refuse = order.count(passage) == 1 and passage == first_passage
        if refuse:
            return reply_error(429, "slow down", headers={"Retry-After": "0.01"})
        return judge(req)

    judge_server.script = answer
    engine = ScoringEngine(max_concurrency=1)
    precision = ContextPrecision(llm=make_judge(), per_context=True, retry=FAST)
    later = JA_PM.model_copy(update={"contexts": ["別の文書です", "もう一つの文書です"]})
    jobs = [Job(JA_PM, precision), Job(later, precision)]  # the second waits for the slot
    results, free = run_and_count_free_slots(engine, jobs, mode)
    assert [r.score for r in results if r is not None] == [7 / 12, 0.0]
    # The slot is handed to the job's next calls, not to the job waiting (which asyncio's
    # arun starts at once); then the retry and that job's calls (in an order that depends
    # on whether the retry's short backoff ended before the helper's calls did).
    assert order[:3] == [first_passage, *JA_PM.contexts[1:]]
    assert sorted(order[3:]) == sorted([first_passage, *later.contexts])
    assert free == 1


@pytest.mark.parametrize("mode", MODES)
def test_with_one_slot_a_jobs_calls_run_one_after_another(
    judge_server: JudgeServer, make_judge: Callable[..., Any], mode: str
) -> None:
    peak = Peak(width=1, total=3, answer=keyword_precision("岸田"))
    judge_server.script = peak
    engine = ScoringEngine(max_concurrency=1)
    precision = ContextPrecision(llm=make_judge(), per_context=True)
    results, free = run_and_count_free_slots(engine, [Job(JA_PM, precision)], mode)
    assert [r.score for r in results if r is not None] == [7 / 12]
    assert peak.peak == 1
    assert free == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_job_that_times_out_has_its_latency_on_threads_as_on_the_loop(mode: str) -> None:
    """check_judge's latency percentiles read it: without it they left out the slowest."""
    release = threading.Event()

    class Stuck:
        metric_name = "stuck"

        def score_unobserved(self, sample: object, config: object) -> MetricResult:
            release.wait(30)
            raise AssertionError("abandoned at its timeout")

        async def ascore_unobserved(self, sample: object, config: object) -> MetricResult:
            await asyncio.Event().wait()  # cancelled at its timeout
            raise AssertionError("abandoned at its timeout")

    engine = ScoringEngine(max_concurrency=1, timeout=0.05)
    try:
        (result,) = run_jobs(engine, [Job(sample("A"), Stuck())], mode)  # type: ignore[arg-type]
    finally:
        release.set()
    assert result is not None
    assert result.error == "timed out after 0.05s"
    assert result.latency_s is not None
    assert result.latency_s >= 0.05


def test_a_failed_jobs_latency_ends_when_it_failed_not_when_it_is_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On threads the caller delivers results one by one: a failure that waits behind a
    slow ``on_result`` is timed to its end, not to its delivery (a hand-moved clock)."""
    from types import SimpleNamespace

    from langchain_ragmetrics import _engine

    now = [0.0]
    monkeypatch.setattr(
        _engine, "time", SimpleNamespace(perf_counter=lambda: now[0], monotonic=time.monotonic)
    )
    delivering, failed_settled = threading.Event(), threading.Event()
    settle = _engine._Batch.settle

    def settle_and_tell(self: Any, index: int, outcome: Any) -> bool:
        settled = settle(self, index, outcome)
        if index == 1:
            failed_settled.set()
        return settled

    monkeypatch.setattr(_engine._Batch, "settle", settle_and_tell)

    class Quick:
        metric_name = "quick"

        def __init__(self, fail: bool) -> None:
            self.fail = fail

        def score_unobserved(self, sample: object, config: object) -> MetricResult:
            if self.fail:
                delivering.wait(30)  # fails while the first result is being delivered
                raise RuntimeError("boom")
            return MetricResult(metric="quick", score=1.0, latency_s=0.0)

    def slow_delivery(job: Job, result: MetricResult) -> None:
        if result.score == 1.0:
            delivering.set()
            assert failed_settled.wait(30)
            now[0] += 10.0  # the caller takes 10 s over this result

    engine = ScoringEngine(max_concurrency=2)
    jobs = [Job(sample("A"), Quick(False)), Job(sample("B"), Quick(True))]  # type: ignore[arg-type]
    results = engine.run(jobs, on_result=slow_delivery)
    assert results[1] is not None
    assert results[1].error == "RuntimeError: boom"
    assert results[1].latency_s == 0.0  # not 10 s: it failed before that delivery
