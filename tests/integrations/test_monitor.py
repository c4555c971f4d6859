"""LangSmithMonitor against the loopback LangSmith stub holding real traces of a RAG chain."""

from __future__ import annotations

import asyncio
import gc
import inspect
import re
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

import langsmith
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_openai import ChatOpenAI
from typing_extensions import override

from langchain_ragmetrics import (
    CheckpointError,
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    _loops,
)
from langchain_ragmetrics._ids import feedback_id
from langchain_ragmetrics._langsmith_feedback import error_feedback_id
from langchain_ragmetrics.callbacks._sampling import is_sampled
from langchain_ragmetrics.integrations.monitor import (
    LangSmithMonitor,
    MonitorSummary,
    _RunReader,
    _SdkLoop,
    parse_shard,
    parse_since,
    shard_of,
)
from tests._support.clock import HandClock
from tests._support.concurrency import wait_until
from tests._support.langsmith_stub import V2_VERSION, LangSmithStub, project_id_for, v2_filters
from tests._support.openai_server import JudgeServer
from tests._support.rag import FAST, RagApp, items_in, rag_app
from tests._support.traces import trace_questions

JudgeFactory = Callable[..., ChatOpenAI]
PROJECT = "rag-prod"
CEILING_S = 15.0
"""Generous bound for 'did not hang' where LangSmith never answers."""
RETRY_BACKOFF_S = 0.01
"""First retry round's delay in these tests (production waits 1 s, 2 s, 4 s)."""


@pytest.fixture(params=["list_runs", "runs.query"])
def langsmith_stub(request: pytest.FixtureRequest) -> Iterator[LangSmithStub]:
    """The stub as a backend before 0.16 (the monitor lists runs with ``Client.list_runs``)
    and as one serving v2 (``Client.runs.query``): each test here runs against both."""
    version = V2_VERSION if request.param == "runs.query" else LangSmithStub().version
    with LangSmithStub(version=version) as stub:
        yield stub


def make_client(stub: LangSmithStub, **options: Any) -> langsmith.Client:
    """A real client of ``stub`` for the monitor, ``/info`` (its version) read while it is up.

    Without its background tracing thread, which the monitor never uses (it reads runs and
    posts feedback itself): built with a client, that thread reads ``/info`` on its own
    schedule, and after a short test it did so once the stub had stopped, which printed
    "Failed to get info" at exit. A failed read of ``/info`` fails here, loudly.
    """
    options.setdefault("auto_batch_tracing", False)
    client = langsmith.Client(api_url=stub.url, api_key="test", **options)
    assert client.info.version == stub.version
    return client


@pytest.fixture
def langsmith_client(langsmith_stub: LangSmithStub) -> Iterator[langsmith.Client]:
    """A real client of the stub, ``/info`` read (see :func:`make_client`); closed after."""
    client = make_client(langsmith_stub)
    yield client
    client.close(timeout=5)


@pytest.fixture
def app(judge_server: JudgeServer, make_judge: JudgeFactory) -> RagApp:
    return rag_app(judge_server, make_judge, max_retries=2)


@pytest.fixture
def quick_client(langsmith_stub: LangSmithStub) -> Iterator[langsmith.Client]:
    """A client retrying a 5xx as often as the default one, but without its 1 s, 2 s backoff."""
    from langsmith.client import _default_retry_config

    retry = _default_retry_config().new(backoff_factor=0.001)
    client = make_client(langsmith_stub, retry_config=retry)
    yield client
    client.close(timeout=5)


def listing(stub: LangSmithStub) -> str:
    """``"METHOD /path"`` of the run query the monitor sends to this backend."""
    return "POST /api/v2/runs/query" if stub.serves_v2 else "POST /runs/query"


def run_queries(stub: LangSmithStub) -> list[dict[str, Any]]:
    """The run queries the stub got, as v1 filters (``run_type``, ``id`` ...) and ``cursor``
    (an offset), asserting they all went to the endpoint of its backend's version."""
    v1 = [r.body for r in stub.requests_to("POST", "/runs/query")]
    v2 = [r.body for r in stub.requests_to("POST", "/api/v2/runs/query")]
    if not stub.serves_v2:
        assert v2 == []
        return v1
    assert v1 == []
    return [
        {**v2_filters(body), "cursor": (body.get("cursor") or "").removeprefix("page-") or None}
        for body in v2
    ]


def make_monitor(
    app: RagApp, client: langsmith.Client, tmp_path: Path, **options: Any
) -> LangSmithMonitor:
    settings: dict[str, Any] = {
        "client": client,
        "metrics": [ContextRelevance(llm=app.llm, retry=FAST)],
        "checkpoint": tmp_path / "monitor.sqlite",
        "request_timeout": 5.0,
        "retry_backoff": RETRY_BACKOFF_S,
        **options,
    }
    return LangSmithMonitor(PROJECT, **settings)


def expected_relevance(run: dict[str, Any]) -> float:
    """The rag_app judge's relevance: share of retrieved facts about the asked item."""
    asked = items_in(run["inputs"]["query"])
    docs = run["outputs"]["documents"]
    return sum(1 for d in docs if items_in(str(d)) & asked) / len(docs)


def stored(stub: LangSmithStub, key: str = "context_relevance") -> dict[str, dict[str, Any]]:
    """Feedback the stub holds, by run id (asserting one per run)."""
    found = stub.feedback(key=key)
    by_run = {item["run_id"]: item for item in found}
    assert len(by_run) == len(found), "two feedback on one run"
    return by_run


def test_the_monitors_own_loops_keep_a_stale_clients_close_quiet(
    app: RagApp,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run()'s loop and the SDK loop of the client both get the handler; arun() on the
    user's own loop leaves that loop's handler alone."""
    from langchain_ragmetrics.integrations import monitor as monitor_module

    quieted: list[asyncio.AbstractEventLoop] = []
    quiet = monitor_module.quiet_stale_closes

    def spy(loop: asyncio.AbstractEventLoop) -> None:
        quieted.append(loop)
        quiet(loop)

    monkeypatch.setattr(monitor_module, "quiet_stale_closes", spy)
    trace_questions(langsmith_stub, app.chain, PROJECT, range(1))
    assert make_monitor(app, langsmith_client, tmp_path).run().runs_scored == 1
    assert len(quieted) == 1
    assert quieted[0].get_exception_handler() is _loops._handle
    assert _SdkLoop.of(langsmith_client).get_exception_handler() is _loops._handle

    async def users_own() -> object:
        await make_monitor(app, langsmith_client, tmp_path).arun()
        return asyncio.get_running_loop().get_exception_handler()

    assert asyncio.run(users_own()) is None
    assert len(quieted) == 1


def test_scores_every_retriever_run_once_with_stable_feedback_ids(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(6))
    summary = make_monitor(app, langsmith_client, tmp_path).run()
    assert summary.runs_seen == summary.runs_scored == summary.results_scored == 6
    assert summary.feedback_sent == 6
    assert summary.errors == []
    feedback = stored(langsmith_stub)
    assert set(feedback) == {r["id"] for r in runs}
    for run in runs:
        item = feedback[run["id"]]
        assert item["id"] == str(feedback_id(run["id"], "context_relevance"))
        assert item["score"] == expected_relevance(run)
        assert item["feedback_source"]["type"] == "model"
    # the question came from the retriever query and the answer from the root run
    judged = [r for r in app.server.requests if r.schema_name == "RelevantSentences"]
    assert len(judged) == 6
    # a second run finds everything settled and sends nothing
    again = make_monitor(app, langsmith_client, tmp_path).run()
    assert again.runs_already_scored == 6
    assert again.feedback_sent == again.runs_scored == 0
    assert len(langsmith_stub.requests_to("POST", "/feedback")) == 6


def test_three_shards_cover_every_run_exactly_once_across_pages(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    """Trace ids chosen five per shard: with random ones, a shard got no trace in about one
    run in 150 (3 x (2/3)^15), and the test failed on that draw, not on the monitor."""
    ids = (uuid5(NAMESPACE_URL, f"ragmetrics-test/shards/{k}") for k in range(1000))
    by_shard: dict[int, list[UUID]] = {0: [], 1: [], 2: []}
    for trace_id in ids:
        if len(by_shard[shard_of(trace_id, 3)]) < 5:
            by_shard[shard_of(trace_id, 3)].append(trace_id)
    chosen = [trace_id for shard in by_shard.values() for trace_id in shard]
    assert len(chosen) == 15
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(15), trace_ids=chosen)
    langsmith_stub.page_size = 4
    summaries = [
        make_monitor(
            app, langsmith_client, tmp_path, shard=f"{i}/3", checkpoint=tmp_path / f"s{i}.db"
        ).run()
        for i in range(3)
    ]
    assert [s.runs_listed for s in summaries] == [15, 15, 15]
    assert [s.runs_seen for s in summaries] == [5, 5, 5]
    posted = Counter(f["run_id"] for f in langsmith_stub.feedback())
    assert set(posted) == {r["id"] for r in runs}
    assert set(posted.values()) == {1}
    for summary in summaries:
        assert summary.feedback_sent == summary.runs_seen
    cursors = [
        q.get("cursor") for q in run_queries(langsmith_stub) if q.get("run_type") == "retriever"
    ]
    # one listing per worker, four pages each (a query sent twice would be one more)
    assert cursors == [None, "4", "8", "12"] * 3
    for summary, index in zip(summaries, range(3), strict=True):
        assert summary.shard == (index, 3)


def test_sampling_matches_the_online_handlers_hash(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    # Trace ids picked so that half are sampled: random ones were all in (or all out) one
    # run in 2,048.
    candidates = [uuid5(NAMESPACE_URL, f"trace-{i}") for i in range(100)]
    kept = [t for t in candidates if is_sampled(t, 0.5)][:6]
    left = [t for t in candidates if not is_sampled(t, 0.5)][:6]
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(12), trace_ids=[*kept, *left])
    summary = make_monitor(app, langsmith_client, tmp_path, sample_rate=0.5).run()
    chosen = {r["id"] for r in runs if is_sampled(UUID(r["trace_id"]), 0.5)}
    assert {UUID(r["trace_id"]) for r in runs} == {*kept, *left}
    assert len(chosen) == 6
    assert set(stored(langsmith_stub)) == chosen
    assert summary.runs_sampled_out == 12 - len(chosen)


def test_follow_picks_up_runs_that_arrive_later(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    first = trace_questions(langsmith_stub, app.chain, PROJECT, range(3))
    worker = make_monitor(app, langsmith_client, tmp_path, follow=True, poll_interval=0.05)
    result: list[MonitorSummary] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), daemon=True)
    thread.start()
    try:
        langsmith_stub.wait_for_feedback(3, timeout=30)
        later = trace_questions(langsmith_stub, app.chain, PROJECT, range(3, 7))
        langsmith_stub.wait_for_feedback(7, timeout=30)
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    (summary,) = result
    assert summary.polls >= 2
    assert set(stored(langsmith_stub)) == {r["id"] for r in first + later}
    assert len(langsmith_stub.requests_to("POST", "/feedback")) == 7


def test_max_polls_bounds_following(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    summary = make_monitor(
        app, langsmith_client, tmp_path, follow=True, poll_interval=0.01, max_polls=3
    ).run()
    assert summary.polls == 3
    assert summary.feedback_sent == 2
    assert summary.runs_already_scored == 4  # polls 2 and 3 found both settled


def test_references_from_run_metadata_and_skips(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    trace_questions(
        langsmith_stub, app.chain, PROJECT, range(2), metadata={"reference_context_ids": ["x"]}
    )
    metrics = [ContextRecall(llm=app.llm, retry=FAST), ContextPrecision(llm=app.llm, retry=FAST)]
    summary = make_monitor(app, langsmith_client, tmp_path, metrics=metrics).run()
    # no reference text: recall is skipped (not sent); precision judges against the answer
    assert summary.results_skipped == 2
    assert summary.results_scored == 2
    assert stored(langsmith_stub, "context_recall") == {}
    assert len(stored(langsmith_stub, "context_precision")) == 2
    again = make_monitor(app, langsmith_client, tmp_path, metrics=metrics).run()
    assert again.runs_already_scored == 2  # skipped pairs are settled too


def test_unfinished_traces_wait_for_a_later_poll(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    root_id = runs[0]["trace_id"]
    with langsmith_stub._lock:  # the root has not finished yet (still streaming, say)
        langsmith_stub._runs[root_id]["end_time"] = None
    summary = make_monitor(app, langsmith_client, tmp_path).run()
    assert summary.runs_waiting == 1
    assert summary.feedback_sent == 1
    with langsmith_stub._lock:
        langsmith_stub._runs[root_id]["end_time"] = "2030-01-01T00:00:00+00:00"
    later = make_monitor(app, langsmith_client, tmp_path).run()
    assert later.feedback_sent == 1
    assert set(stored(langsmith_stub)) == {r["id"] for r in runs}


def test_judge_failures_are_retried_then_reported(
    app: RagApp,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
) -> None:
    from tests._support.openai_server import reply_error
    from tests._support.rag import rag_router

    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    judge_server.script = rag_router(RelevantSentences=reply_error(500))
    # The metric's own retries (FAST) run; the SDK's (0.5 s, 1 s backoff) are not the point.
    metrics = [ContextRelevance(llm=make_judge(), retry=FAST)]
    first = make_monitor(app, langsmith_client, tmp_path, max_attempts=2, metrics=metrics).run()
    assert first.results_failed == 2
    assert first.feedback_sent == 0  # kept for a retry on the next run, not this one's rounds
    assert (first.runs_unsent, first.retry_rounds, first.complete) == (2, 0, False)
    # The next run's window no longer covers the runs (a cron run): read again by id.
    later = datetime.now(timezone.utc) + timedelta(seconds=1)
    second = make_monitor(
        app, langsmith_client, tmp_path, max_attempts=2, metrics=metrics, since=later
    ).run()
    assert second.results_failed == 2
    assert second.feedback_sent == 2  # the failure itself, after max_attempts
    assert second.complete
    errors = langsmith_stub.feedback(key="context_relevance")
    assert {f["id"] for f in errors} == {
        str(error_feedback_id(r["id"], "context_relevance")) for r in runs
    }  # an id of their own: a later score is never taken for a duplicate of them
    assert all(f.get("score") is None and f["comment"].startswith("error:") for f in errors)
    judge_server.script = rag_router()
    third = make_monitor(app, langsmith_client, tmp_path, max_attempts=2).run()
    assert (third.runs_already_failed, third.runs_already_scored) == (2, 0)  # not "scored"
    # A later success (another worker, a fresh checkpoint) replaces the errors.
    fresh = make_monitor(app, langsmith_client, tmp_path, checkpoint=tmp_path / "fresh.db").run()
    assert fresh.feedback_sent == 2
    held = {f["run_id"]: f for f in langsmith_stub.held_feedback("context_relevance")}
    assert len(held) == len(langsmith_stub.held_feedback()) == 2  # one per run: the score
    assert set(held) == {r["id"] for r in runs}
    assert all(held[r["id"]]["score"] == expected_relevance(r) for r in runs)
    assert not any(f.get("error") for f in held.values())
    # A worker whose judge fails where a score exists already sends nothing ("superseded")
    # and settles the pairs as scored, not as failed.
    judge_server.script = rag_router(RelevantSentences=reply_error(500))
    late = tmp_path / "late.db"
    superseded = make_monitor(
        app, langsmith_client, tmp_path, checkpoint=late, max_attempts=1, metrics=metrics
    ).run()
    assert (superseded.results_failed, superseded.feedback_sent) == (2, 0)
    after = make_monitor(app, langsmith_client, tmp_path, checkpoint=late).run()
    assert (after.runs_already_scored, after.runs_already_failed) == (2, 0)


def test_langsmith_500_on_listing_is_reported_not_raised(
    app: RagApp, langsmith_stub: LangSmithStub, quick_client: langsmith.Client, tmp_path: Path
) -> None:
    trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    langsmith_stub.fail(listing(langsmith_stub), 500, times=None)
    summary = make_monitor(app, quick_client, tmp_path).run()
    assert summary.runs_listed == 0
    assert summary.errors
    assert "500" in summary.errors[0]
    run_queries(langsmith_stub)  # the listing went to this backend's endpoint


def test_langsmith_429_on_listing_is_reported_then_listed_next_time(
    app: RagApp, langsmith_stub: LangSmithStub, quick_client: langsmith.Client, tmp_path: Path
) -> None:
    """The SDK gives up on a 429 (after the retries of its own): the poll
    reports it, lists nothing, and the next run lists it all."""
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    langsmith_stub.fail(listing(langsmith_stub), 429, times=None)
    started = time.monotonic()
    summary = make_monitor(app, quick_client, tmp_path).run()
    assert time.monotonic() - started < CEILING_S
    assert (summary.runs_listed, summary.feedback_sent) == (0, 0)
    assert len(summary.errors) == 1
    assert "429" in summary.errors[0]
    assert run_queries(langsmith_stub)  # to this backend's endpoint only
    with langsmith_stub._lock:
        langsmith_stub._fail_rules.clear()
    again = make_monitor(app, quick_client, tmp_path).run()
    assert again.feedback_sent == 2
    assert set(stored(langsmith_stub)) == {r["id"] for r in runs}


def test_feedback_500_leaves_pairs_for_the_next_run(
    app: RagApp, langsmith_stub: LangSmithStub, quick_client: langsmith.Client, tmp_path: Path
) -> None:
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(3))
    langsmith_stub.fail("POST /feedback", 500, times=None)
    summary = make_monitor(app, quick_client, tmp_path).run()
    assert summary.feedback_failed == 3
    assert summary.feedback_sent == 0
    assert summary.usage.judge_calls == 3
    with langsmith_stub._lock:
        langsmith_stub._fail_rules.clear()
    judged = judge_calls(app)
    # The next run's window no longer covers the runs: they are read again by id.
    later = datetime.now(timezone.utc) + timedelta(seconds=1)
    again = make_monitor(app, quick_client, tmp_path, since=later).run()
    assert again.complete
    assert again.feedback_sent == again.results_resent == 3
    assert again.usage.judge_calls == 0
    assert judge_calls(app) == judged  # the kept results were sent, the judge not asked again
    feedback = stored(langsmith_stub)
    assert set(feedback) == {r["id"] for r in runs}
    for run in runs:
        assert feedback[run["id"]]["score"] == expected_relevance(run)


def judge_calls(app: RagApp) -> int:
    return sum(r.schema_name == "RelevantSentences" for r in app.server.requests)


def test_a_run_deleted_before_its_feedback_was_accepted_is_settled_as_gone(
    app: RagApp, langsmith_stub: LangSmithStub, quick_client: langsmith.Client, tmp_path: Path
) -> None:
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    langsmith_stub.fail("POST /feedback", 500, times=None)
    assert make_monitor(app, quick_client, tmp_path, retry_rounds=0).run().runs_unsent == 2
    with langsmith_stub._lock:
        langsmith_stub._fail_rules.clear()
        del langsmith_stub._runs[runs[0]["id"]]  # retention deleted it meanwhile
    later = datetime.now(timezone.utc) + timedelta(seconds=1)
    again = make_monitor(app, quick_client, tmp_path, since=later).run()
    assert again.complete
    assert (again.runs_gone, again.results_resent, again.feedback_sent) == (1, 1, 1)
    assert any("no longer in LangSmith" in e for e in again.errors)
    assert set(stored(langsmith_stub)) == {runs[1]["id"]}
    third = make_monitor(app, quick_client, tmp_path, since=later).run()
    assert (third.runs_gone, third.runs_unsent) == (0, 0)  # settled: not read again


def test_an_unreadable_kept_result_is_judged_again(
    app: RagApp, langsmith_stub: LangSmithStub, quick_client: langsmith.Client, tmp_path: Path
) -> None:
    import sqlite3

    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(1))
    langsmith_stub.fail("POST /feedback", 500, times=None)
    make_monitor(app, quick_client, tmp_path, retry_rounds=0).run()
    db = sqlite3.connect(tmp_path / "monitor.sqlite")
    with db:
        assert db.execute("UPDATE kept SET result = '{\"not\": 1}'").rowcount == 1
    db.close()
    with langsmith_stub._lock:
        langsmith_stub._fail_rules.clear()
    again = make_monitor(app, quick_client, tmp_path).run()
    assert again.complete
    assert (again.results_resent, again.usage.judge_calls, again.feedback_sent) == (0, 1, 1)
    assert any("kept result unreadable" in e for e in again.errors)
    assert set(stored(langsmith_stub)) == {runs[0]["id"]}


def test_langsmith_never_answering_hangs_nothing(
    app: RagApp, langsmith_stub: LangSmithStub, tmp_path: Path
) -> None:
    trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    client = make_client(langsmith_stub, timeout_ms=60_000)
    langsmith_stub.latency = 60.0  # every request is held (released when the stub stops)
    started = time.monotonic()
    summary = make_monitor(app, client, tmp_path, request_timeout=0.5).run()
    assert time.monotonic() - started < CEILING_S
    assert summary.errors
    assert "within 0.5s" in summary.errors[0]
    client.close(timeout=0)


def test_a_listing_never_answered_hangs_nothing(
    app: RagApp, langsmith_stub: LangSmithStub, tmp_path: Path
) -> None:
    """The run query alone never answers (the project is read): the poll gives up on it.

    5 s per request: the project's read, answered at once, must fit in it on a loaded
    machine too (a second error would change the summary below)."""
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    client = make_client(langsmith_stub, timeout_ms=60_000)
    langsmith_stub.hang(listing(langsmith_stub))
    started = time.monotonic()
    try:
        summary = make_monitor(app, client, tmp_path, request_timeout=5.0).run()
        assert time.monotonic() - started < CEILING_S
        assert langsmith_stub.hung == 1  # the one query, still held
    finally:
        langsmith_stub.release_hangs()
        langsmith_stub.wait_for(lambda: langsmith_stub.hung == 0)
    assert summary.errors == ["TimeoutError: listing runs: no answer from LangSmith within 5s"]
    assert (summary.runs_listed, summary.feedback_sent) == (0, 0)
    again = make_monitor(app, client, tmp_path, request_timeout=5.0).run()  # and it recovers
    assert set(stored(langsmith_stub)) == {r["id"] for r in runs}
    assert again.errors == []
    client.close(timeout=5)


def test_checkpoint_of_another_project_is_refused(
    app: RagApp, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    from langchain_ragmetrics.integrations._monitor_checkpoint import Checkpoint

    Checkpoint(tmp_path / "monitor.sqlite", project="other").close()
    with pytest.raises(CheckpointError, match="belongs to project 'other'"):
        make_monitor(app, langsmith_client, tmp_path).run()
    with pytest.raises(CheckpointError, match="does not exist"):
        Checkpoint(tmp_path / "missing" / "x.sqlite", project=PROJECT)


_HOLD_CHECKPOINT = """
import sys
from langchain_ragmetrics.integrations._monitor_checkpoint import Checkpoint
checkpoint = Checkpoint(sys.argv[1], project=sys.argv[2])
print("held", flush=True)
sys.stdin.read()  # until the test kills this process
"""


def test_a_checkpoint_in_use_by_another_run_is_refused_until_that_run_is_gone(
    app: RagApp, langsmith_client: langsmith.Client, langsmith_stub: LangSmithStub, tmp_path: Path
) -> None:
    # An overlapping run (a cron job started before the last one ended) would judge the
    # same runs again: it fails at once, before listing anything. A holder killed with
    # SIGKILL leaves its lock file behind; the kernel released the lock, so the next run
    # takes the file over.
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    path = tmp_path / "monitor.sqlite"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_CHECKPOINT, str(path), PROJECT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        monitor = make_monitor(app, langsmith_client, tmp_path)
        with pytest.raises(CheckpointError, match="in use by another monitor run") as caught:
            monitor.run()
        assert f"{path}.lock" in str(caught.value)
        assert monitor.summary.runs_listed == 0
        assert stored(langsmith_stub) == {}
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert Path(f"{path}.lock").exists()  # left behind by the killed holder
    summary = make_monitor(app, langsmith_client, tmp_path).run()
    assert summary.feedback_sent == 2
    assert set(stored(langsmith_stub)) == {r["id"] for r in runs}
    assert not Path(f"{path}.lock").exists()  # released with the checkpoint


@pytest.mark.parametrize("text", ["3/3", "1", "a/b", "-1/2", "0/0"])
def test_bad_shards_name_the_form(text: str) -> None:
    with pytest.raises(ValueError, match="I/N"):
        parse_shard(text)


def test_shards_and_since() -> None:
    assert parse_shard("2/5") == (2, 5)
    ids = [UUID(int=i * 7919 + 1) for i in range(300)]
    counts = Counter(shard_of(i, 3) for i in ids)
    assert set(counts) == {0, 1, 2}
    assert min(counts.values()) > 60
    # independent of sampling: the sampled traces still spread over every shard
    sampled = [i for i in ids if is_sampled(i, 0.2)]
    assert {shard_of(i, 3) for i in sampled} == {0, 1, 2}
    delta = parse_since("2h")
    assert timedelta(hours=1.9) < (parse_since("0s") - delta) < timedelta(hours=2.1)
    with pytest.raises(ValueError, match="30m, 24h or 7d"):
        parse_since("yesterday")


def test_feedback_sent_before_a_kill_is_found_not_resent(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    import sqlite3

    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(4))
    make_monitor(app, langsmith_client, tmp_path).run()
    assert len(langsmith_stub.requests_to("POST", "/feedback")) == 4
    # as if the worker died after sending two feedback but before recording them
    db = sqlite3.connect(tmp_path / "monitor.sqlite")
    with db:
        for run in runs[:2]:
            db.execute("DELETE FROM settled WHERE run_id = ?", (run["id"],))
            db.execute("INSERT INTO intents VALUES (?, 'context_relevance')", (run["id"],))
        db.execute("DELETE FROM settled WHERE run_id = ?", (runs[2]["id"],))  # never sent
        db.execute("INSERT INTO intents VALUES (?, 'context_relevance')", (runs[2]["id"],))
    db.close()
    with langsmith_stub._lock:
        langsmith_stub._feedback.pop(str(feedback_id(runs[2]["id"], "context_relevance")))
    summary = make_monitor(app, langsmith_client, tmp_path).run()
    assert summary.runs_already_scored == 3  # two found in LangSmith, one settled
    assert summary.feedback_sent == 1
    assert len(langsmith_stub.requests_to("POST", "/feedback")) == 5
    assert len(langsmith_stub.requests_to("GET", "/feedback/")) == 3


def test_extra_sinks_receive_settled_results(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from langchain_ragmetrics import InMemorySink, OpenTelemetrySink

    trace_questions(langsmith_stub, app.chain, PROJECT, range(3))
    reader = InMemoryMetricReader()
    memory = InMemorySink()
    otel = OpenTelemetrySink(meter_provider=MeterProvider(metric_readers=[reader]), events="span")
    metrics = [ContextRelevance(llm=app.llm, retry=FAST), ContextRecall(llm=app.llm, retry=FAST)]
    summary = make_monitor(
        app, langsmith_client, tmp_path, metrics=metrics, sinks=[memory, otel]
    ).run()
    assert summary.results_scored == summary.results_skipped == 3
    assert (
        sorted(r.metric for r in memory.results)
        == ["context_recall"] * 3 + ["context_relevance"] * 3
    )
    data = reader.get_metrics_data()
    assert data is not None
    (histogram,) = [
        p
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "ragmetrics.evaluation.score"
        for p in m.data.data_points
    ]
    assert histogram.count == 3
    assert histogram.sum == pytest.approx(
        sum(r.score or 0 for r in memory.results if r.metric == "context_relevance")
    )


class _JudgeRuns(BaseCallbackHandler):
    """Records the name, tags and metadata of every chain run it sees (judge runs here)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str | None, list[str], dict[str, Any]]] = []
        self._lock = threading.Lock()

    @override
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            self.runs.append((kwargs.get("name"), list(tags or []), dict(metadata or {})))


def test_results_and_judge_runs_are_the_handlers(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    """The monitor builds its results and its judge runs as the online handler does."""
    from langchain_ragmetrics import InMemorySink

    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    memory = InMemorySink()
    worker = make_monitor(app, langsmith_client, tmp_path, sinks=[memory])
    judge_runs = _JudgeRuns()  # a callback on every judge run, as ``trace_judge`` gives one
    worker.engine.config = {"callbacks": [judge_runs]}
    summary = worker.run()
    assert summary.feedback_sent == 2
    by_id = {r["id"]: r for r in runs}
    assert {str(r.run_id) for r in memory.results} == set(by_id)
    for result in memory.results:
        run = by_id[str(result.run_id)]
        assert result.query == run["inputs"]["query"]  # the retriever's query
        assert str(result.trace_id) == str(result.root_run_id) == run["trace_id"]
        assert result.retriever == run["name"]
        assert result.sample.answer  # the root run's output
    named = [r for r in judge_runs.runs if r[0] == "ragmetrics:context_relevance"]
    assert sorted(metadata["ragmetrics_run_id"] for _, _, metadata in named) == sorted(by_id)
    for _, tags, metadata in named:
        assert "ragmetrics" in tags
        assert metadata["ragmetrics_trace_id"] == by_id[metadata["ragmetrics_run_id"]]["trace_id"]


def test_shared_options_are_checked_as_the_handlers(tmp_path: Path) -> None:
    for options, field in (
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"sample_rate": 1.5}, "sample_rate"),
        ({"question_from": "answer"}, "question_from"),
        ({"timeout": -1.0}, "timeout"),
        ({"rate_limit_per_minute": 0.0}, "rate_limit_per_minute"),
    ):
        with pytest.raises(ValueError, match=field):
            LangSmithMonitor(PROJECT, checkpoint=tmp_path / "m.sqlite", **options)
    with pytest.raises(TypeError, match=r"sinks\[0\]"):
        LangSmithMonitor(PROJECT, sinks=[print])  # type: ignore[list-item]


def test_a_failing_question_hook_fails_every_metric_of_that_run(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    def broken(root_input: Any) -> str:
        raise KeyError("question")

    trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    summary = make_monitor(
        app, langsmith_client, tmp_path, question_from=broken, max_attempts=1
    ).run()
    assert summary.results_failed == 2
    judged = [r for r in app.server.requests if r.schema_name == "RelevantSentences"]
    assert judged == []  # no judge call for a run without a question
    errors = stored(langsmith_stub)
    assert len(errors) == 2
    for item in errors.values():
        assert "question_from raised KeyError" in str(item.get("comment"))


def test_a_trace_not_yet_ingested_is_waited_for_then_scored(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(3))
    langsmith_stub.hide_run(runs[0]["trace_id"], queries=1)  # its root shows up a moment later
    summary = make_monitor(app, langsmith_client, tmp_path).run()
    assert summary.complete
    assert summary.retry_rounds == 1
    assert (summary.runs_seen, summary.runs_scored, summary.feedback_sent) == (3, 3, 3)
    assert set(stored(langsmith_stub)) == {r["id"] for r in runs}


def test_a_run_never_complete_is_counted_unsent(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    langsmith_stub.hide_run(runs[0]["trace_id"], queries=100)
    summary = make_monitor(app, langsmith_client, tmp_path, retry_rounds=1).run()
    assert (summary.runs_unsent, summary.runs_waiting, summary.complete) == (1, 1, False)
    assert summary.feedback_sent == 1


def test_a_run_incomplete_for_longer_than_max_wait_is_given_up_and_counted(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    """A trace that never completes (a stream never closed, a root lost to retention): before,
    it was waited for on every poll and every run, without a bound."""
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    langsmith_stub.hide_run(runs[0]["trace_id"], queries=100)
    summary = make_monitor(app, langsmith_client, tmp_path, max_wait="0s").run()
    assert (summary.runs_incomplete, summary.runs_unsent, summary.complete) == (1, 0, True)
    assert any("stayed incomplete" in e for e in summary.errors)
    assert summary.feedback_sent == 1
    again = make_monitor(app, langsmith_client, tmp_path, max_wait="0s").run()
    assert (again.runs_already_scored, again.runs_incomplete) == (2, 0)  # settled for good


def test_a_root_that_could_not_be_read_is_not_taken_for_an_incomplete_trace(
    app: RagApp,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failed read of the roots is LangSmith failing, not a trace still running: it must
    not count toward ``max_wait`` (the pairs would be dropped for a passing 500)."""
    from langsmith.utils import LangSmithAPIError

    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    by_id = _RunReader.by_id

    async def roots_fail(self: Any, project: Any, run_ids: list[str], what: str) -> Any:
        if what == "reading root runs":
            raise LangSmithAPIError("500 on the root read")
        return await by_id(self, project, run_ids, what)

    monkeypatch.setattr(_RunReader, "by_id", roots_fail)
    first = make_monitor(app, langsmith_client, tmp_path, max_wait="0s", retry_rounds=0).run()
    assert (first.runs_incomplete, first.runs_unsent, first.feedback_sent) == (0, 2, 0)
    monkeypatch.setattr(_RunReader, "by_id", by_id)
    again = make_monitor(app, langsmith_client, tmp_path, max_wait="0s").run()
    assert again.complete
    assert set(stored(langsmith_stub)) == {r["id"] for r in runs}


def fail_listing_after_page_one(monkeypatch: pytest.MonkeyPatch, *, times: int) -> None:
    """The first ``times`` listings fail (a 500, after the client's own retry) once their
    first page is in hand; reads by id are untouched."""
    from langsmith.utils import LangSmithAPIError

    from langchain_ragmetrics.integrations import monitor as monitor_module

    monkeypatch.setattr(monitor_module, "_PAGE", 2)  # two runs a page, both backends
    pages = _RunReader.pages
    failures = [times]

    async def first_page_then_fail(self: Any, *args: Any) -> Any:
        async for page in pages(self, *args):
            yield page
            if failures[0] > 0:
                failures[0] -= 1
                raise LangSmithAPIError("Server error: 500 on the next page")

    monkeypatch.setattr(_RunReader, "pages", first_page_then_fail)


def test_a_listing_that_fails_after_its_first_page_is_not_complete(
    app: RagApp,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs past a failed page were never read: the run says so and is not complete (the
    CLI exits 12), where it used to count as complete with them unscored."""
    langsmith_stub.page_size = 2
    trace_questions(langsmith_stub, app.chain, PROJECT, range(5))
    fail_listing_after_page_one(monkeypatch, times=99)
    summary = make_monitor(app, langsmith_client, tmp_path, retry_rounds=0).run()
    assert summary.runs_scored == 2  # the first page only
    assert summary.listing_failed
    assert not summary.complete
    assert summary.runs_unsent == 0  # nothing it saw is unsent: the rest was never seen
    assert "the listing of runs failed partway" in summary.render()


def test_the_next_poll_after_a_failed_page_lists_it_all_again(
    app: RagApp,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Following: the poll after a failed listing covers its window again, and is complete."""
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(5))
    fail_listing_after_page_one(monkeypatch, times=1)
    monitor = make_monitor(
        app, langsmith_client, tmp_path, follow=True, max_polls=2, poll_interval=0.01
    )
    summary = monitor.run()
    assert (summary.polls, summary.runs_scored) == (2, 5)
    assert not summary.listing_failed
    assert summary.complete
    assert set(stored(langsmith_stub)) == {r["id"] for r in runs}


def test_a_second_run_of_one_monitor_retries_and_polls_as_the_first(
    app: RagApp,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
) -> None:
    """The end of a run stopped its retries for good, and a stop() stayed set: a second
    run() gave up a send at its first 404 (run not ingested yet), and after a stop() every
    later run polled nothing. A stop() now ends the run it comes in (or the next one)."""
    monitor = make_monitor(app, langsmith_client, tmp_path)
    trace_questions(langsmith_stub, app.chain, PROJECT, range(1))
    assert monitor.run().feedback_sent == 1
    trace_questions(langsmith_stub, app.chain, PROJECT, range(1, 2))
    langsmith_stub.fail("POST /feedback", 404, times=1)  # not ingested yet: retried
    summary = monitor.run()
    assert summary.feedback_sent == 2  # the summary counts over the monitor's runs
    assert summary.complete, summary.errors
    monitor.stop()
    assert monitor.run().polls == 2  # stopped before its first poll
    trace_questions(langsmith_stub, app.chain, PROJECT, range(2, 3))
    summary = monitor.run()
    assert (summary.polls, summary.feedback_sent) == (3, 3)
    assert len(stored(langsmith_stub)) == 3


def test_retry_rounds_back_off_one_two_four_seconds_by_default(
    app: RagApp,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(1))
    langsmith_stub.hide_run(runs[0]["trace_id"], queries=100)
    monitor = make_monitor(app, langsmith_client, tmp_path, retry_backoff=1.0)
    assert inspect.signature(LangSmithMonitor).parameters["retry_backoff"].default == 1.0
    waits: list[float] = []

    async def record(seconds: float) -> None:  # the schedule, without waiting it out
        waits.append(seconds)

    monkeypatch.setattr(monitor, "_sleep", record)
    summary = monitor.run()
    assert waits == [1.0, 2.0, 4.0]
    assert (summary.retry_rounds, summary.runs_unsent) == (3, 1)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("retry_backoff", -1, "`retry_backoff` must be a number above 0, got -1"),
        ("poll_interval", "1", "`poll_interval` must be a number above 0, got '1'"),
        ("max_polls", 0, "`max_polls` must be a whole number of at least 1, got 0"),
        ("retry_rounds", -1, "`retry_rounds` must be a whole number of at least 0, got -1"),
        ("max_attempts", 2.5, "`max_attempts` must be a whole number of at least 1, got 2.5"),
    ],
)
def test_bad_options_are_refused_by_name(
    langsmith_client: langsmith.Client, option: str, value: object, message: str
) -> None:
    """Before, ``max_polls=0`` was taken as no bound and a string raised a comparison error."""
    with pytest.raises(ValueError, match=message):
        LangSmithMonitor(PROJECT, client=langsmith_client, **{option: value})


def test_follow_retries_unsent_pairs_whatever_their_age(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    from urllib3.util.retry import Retry

    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    langsmith_stub.fail("POST /feedback", 500, times=4)  # both tries of both pairs
    # no retries inside the SDK: the monitor's own are the ones under test
    client = make_client(langsmith_stub, retry_config=Retry(total=0))
    worker = make_monitor(
        app, client, tmp_path, follow=True, poll_interval=0.05, lookback=timedelta(0)
    )
    result: list[MonitorSummary] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), daemon=True)
    thread.start()
    try:
        langsmith_stub.wait_for(lambda: len(langsmith_stub.held_feedback()) == 2, timeout=30)
    finally:
        worker.stop()
        thread.join(30)
    (summary,) = result
    assert summary.complete
    assert summary.feedback_failed == 2
    # each pair judged once: the later polls sent the kept results again
    assert summary.usage.judge_calls == judge_calls(app) == 2
    assert summary.results_resent == 2
    # later polls' windows start after both runs: they were read again by id
    by_id = [q for q in run_queries(langsmith_stub) if q.get("id")]
    assert {rid for q in by_id for rid in q["id"]} >= {r["id"] for r in runs}
    assert set(stored(langsmith_stub)) == {r["id"] for r in runs}
    client.close(timeout=5)


@pytest.mark.parametrize("held", ["POST /feedback", "DELETE /feedback/", "GET /feedback/"])
def test_a_request_slower_than_its_timeout_leaves_no_gap_and_no_duplicate(
    held: str, app: RagApp, langsmith_stub: LangSmithStub, tmp_path: Path
) -> None:
    import sqlite3

    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(3))
    # 5 s: a held request runs it out once; every other request, answered in milliseconds,
    # stays far inside it on a loaded machine too (a retry would change the counts below).
    client = make_client(langsmith_stub, timeout_ms=(5000, 5000))
    if held == "GET /feedback/":  # reads happen for pairs a killed worker meant to send
        make_monitor(app, client, tmp_path).run()
        db = sqlite3.connect(tmp_path / "monitor.sqlite")
        with db:
            for run in runs:
                db.execute("DELETE FROM settled WHERE run_id = ?", (run["id"],))
                db.execute("INSERT INTO intents VALUES (?, 'context_relevance')", (run["id"],))
        db.close()
    posts_before = len(langsmith_stub.requests_to("POST", "/feedback"))
    langsmith_stub.hang(held, times=1)  # held until released, long past the 5 s timeout
    try:
        summary = make_monitor(app, client, tmp_path, request_timeout=5.0).run()
    finally:
        langsmith_stub.release_hangs()
        langsmith_stub.wait_for(lambda: langsmith_stub.hung == 0)
    client.close(timeout=5)
    assert summary.complete, summary.render()
    held_now = langsmith_stub.held_feedback("context_relevance")
    assert sorted(f["run_id"] for f in held_now) == sorted(r["id"] for r in runs)
    posts = len(langsmith_stub.requests_to("POST", "/feedback")) - posts_before
    stored_posts = [r for r in langsmith_stub.requests_to("POST", "/feedback") if r.status == 200]
    assert len(stored_posts) == 3  # each pair stored once, whatever was retried
    # a held POST is tried again (409 when the held one is let through); a held clean-up
    # or read is retried on its own; nothing is posted for a pair found in LangSmith
    assert posts == {"POST /feedback": 4, "DELETE /feedback/": 3, "GET /feedback/": 0}[held]


@pytest.mark.parametrize(
    ("option", "value", "error", "message"),
    [
        ("follow", "no", TypeError, "`follow` must be True or False, got 'no'"),
        ("follow", None, TypeError, "`follow` must be True or False, got None"),
        ("lookback", 600, TypeError, "`lookback` must be a duration such as '24h'"),
        ("lookback", timedelta(-1), ValueError, "`lookback` must look back"),
        ("lookback", "-5m", ValueError, "`lookback` must be a duration such as 30m"),
        ("max_wait", "forever", ValueError, "`max_wait` must be a duration such as 30m"),
        ("since", 3600, TypeError, "`since` must be a duration such as '24h'"),
        ("since", timedelta(days=-1), ValueError, "`since` must look back"),
    ],
)
def test_options_of_the_wrong_kind_are_refused_when_built(
    langsmith_client: langsmith.Client, option: str, value: object, error: type, message: str
) -> None:
    """Before, ``follow="no"`` polled (and paid) forever, ``lookback=600`` crashed at the
    second poll, and a negative ``since`` looked at a window in the future."""
    with pytest.raises(error, match=re.escape(message)):
        LangSmithMonitor(PROJECT, client=langsmith_client, **{option: value})


def test_follow_read_from_pandas_is_taken_as_a_plain_bool(
    langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    """A NumPy bool is no ``bool`` subclass, yet it is the switch a pandas frame gives."""
    import numpy as np

    monitor = LangSmithMonitor(
        PROJECT,
        client=langsmith_client,
        follow=np.bool_(False),  # type: ignore[arg-type]
        checkpoint=tmp_path / "c.db",
    )
    assert (monitor.follow, type(monitor.follow)) == (False, bool)


def test_the_default_client_starts_no_tracing_thread(
    langsmith_stub: LangSmithStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client the monitor builds has no tracing queue or thread (it traces nothing):
    such a thread read ``/info`` on its own schedule, after the server was gone too."""
    monkeypatch.setenv("LANGSMITH_ENDPOINT", langsmith_stub.url)
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    before = {t.ident for t in threading.enumerate()}
    client = LangSmithMonitor(PROJECT).client
    assert client.tracing_queue is None
    assert [t.name for t in threading.enumerate() if t.ident not in before] == []
    client.close(timeout=5)


def test_a_checkpoint_under_home_is_the_users_home(
    langsmith_client: langsmith.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint looked for in a folder named "~" would score every run again."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monitor = LangSmithMonitor(PROJECT, client=langsmith_client, checkpoint="~/c.sqlite")
    assert monitor.checkpoint_path == tmp_path / "c.sqlite"


_READ_FIELDS = (
    "id",
    "name",
    "run_type",
    "trace_id",
    "parent_run_id",
    "session_id",
    "start_time",
    "end_time",
    "inputs",
    "outputs",
    "error",
    "tags",
    "extra",
)
"""The fields of a run the monitor reads (and the ones ``langsmith.schemas.Run`` requires)."""


def test_runs_query_gives_the_runs_list_runs_gives(app: RagApp, tmp_path: Path) -> None:
    """On a v2 backend (which still answers list_runs), the monitor's reads through
    ``runs.query``, paged and by id, give what ``list_runs`` gives, field for field."""
    from langchain_ragmetrics._retrieval import Retrieval

    with LangSmithStub(version=V2_VERSION) as stub:
        runs = trace_questions(
            stub, app.chain, PROJECT, range(5), metadata={"reference_context_ids": ["x"]}
        )
        stub.page_size = 2
        client = make_client(stub)
        project = UUID(project_id_for(PROJECT))
        since = datetime.now(timezone.utc) - timedelta(hours=1)
        roots = sorted({r["trace_id"] for r in runs})

        async def thread(fn: Callable[[], Any], what: str) -> Any:
            return await asyncio.to_thread(fn)

        reader = _RunReader(lambda: client, thread, 5.0)

        async def read() -> tuple[list[Any], dict[str, Any]]:
            assert await reader.uses_v2()
            listed = [run async for page in reader.pages(project, since) for run in page]
            return listed, await reader.by_id(project, roots, "reading root runs")

        listed, by_id = asyncio.run(read())
        v2 = stub.requests_to("POST", "/api/v2/runs/query")
        assert stub.requests_to("POST", "/runs/query") == []
        assert [r.body.get("cursor") for r in v2] == [None, "page-2", "page-4"] * 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old = {
                str(r.id): r
                for r in client.list_runs(
                    project_id=project, run_type="retriever", start_time=since
                )
            }
            old_roots = {str(r.id): r for r in client.list_runs(project_id=project, run_ids=roots)}
        client.close(timeout=5)
    assert sorted(str(r.id) for r in listed) == sorted(old) == sorted(r["id"] for r in runs)
    assert sorted(by_id) == sorted(old_roots) == roots
    for new, was in [(r, old[str(r.id)]) for r in listed] + [
        (by_id[i], old_roots[i]) for i in roots
    ]:
        assert {f: getattr(new, f) for f in _READ_FIELDS} == {
            f: getattr(was, f) for f in _READ_FIELDS
        }
        assert new.metadata == was.metadata == {**was.metadata, "reference_context_ids": ["x"]}
    for run in listed:  # what the monitor scores, the same whichever way it was read
        root, old_root = by_id[str(run.trace_id)], old_roots[str(run.trace_id)]
        assert Retrieval.from_langsmith_run(run, root) == Retrieval.from_langsmith_run(
            old[str(run.id)], old_root
        )


def _list_v2(client: langsmith.Client) -> list[Any]:
    """The project's runs, listed once through ``runs.query`` (on the client's SDK loop)."""

    async def thread(fn: Callable[[], Any], what: str) -> Any:
        return await asyncio.to_thread(fn)

    reader = _RunReader(lambda: client, thread, 5.0)
    since = datetime.now(timezone.utc) - timedelta(hours=1)

    async def read() -> list[Any]:
        assert await reader.uses_v2()
        project = UUID(project_id_for(PROJECT))
        return [run async for page in reader.pages(project, since) for run in page]

    return asyncio.run(read())


def test_the_sdk_loop_is_its_clients_and_ends_with_it() -> None:
    """v2 calls run on one loop per client (its async pool belongs to it); when the client
    is garbage collected the loop stops and its thread ends: nothing outlives the client."""
    with LangSmithStub(version=V2_VERSION) as stub:
        client, other = make_client(stub), make_client(stub)
        assert _list_v2(client) == []  # a real query, on the client's loop
        assert len(stub.requests_to("POST", "/api/v2/runs/query")) == 1
        held = _SdkLoop._loops[client]
        assert _SdkLoop.of(client) is held.loop  # the same client: the same loop
        assert _SdkLoop.of(other) is not held.loop  # another client: its own
        other_held = _SdkLoop._loops[other]
        client.close(timeout=5)
        del client
        wait_until(lambda: ended_once_collected(held), "the dropped client's loop to end", 30)
        assert held.loop.is_closed()
        assert other_held.thread.is_alive()  # the other client's loop is untouched
        other.close(timeout=5)
        del other
        wait_until(lambda: ended_once_collected(other_held), "the other loop to end", 30)


def ended_once_collected(held: Any) -> bool:
    """Collect garbage, then whether ``held``'s loop thread has ended.

    A client sits in reference cycles, and for a moment after its last call its loop's own
    callbacks still hold it: one collection right after ``del`` missed it about one run in
    ten (the thread then outlived a 10 s join), so collect until it is gone."""
    gc.collect()
    held.thread.join(0.05)
    return not held.thread.is_alive()


def test_traces_older_than_a_day_are_read_whole(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    """v2 looks at the last day unless told otherwise: the roots (read by id) of traces that
    started two days ago are found all the same."""
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    begun = (datetime.now(timezone.utc) - timedelta(days=2)).isoformat()
    with langsmith_stub._lock:
        for run in langsmith_stub._runs.values():
            run["start_time"] = begun
    summary = make_monitor(app, langsmith_client, tmp_path, since="3d").run()
    assert summary.complete, summary.render()
    assert summary.feedback_sent == 2
    assert set(stored(langsmith_stub)) == {r["id"] for r in runs}
    reads = [q for q in run_queries(langsmith_stub) if q.get("id")]
    assert {i for q in reads for i in q["id"]} == {r["trace_id"] for r in runs}


def test_an_empty_v2_page_with_a_cursor_does_not_end_the_listing(
    app: RagApp, tmp_path: Path
) -> None:
    """v2 may answer a page with no run and a cursor to more (the SDK's ``has_next_page()``
    is False then): the listing follows the cursor and every run is scored."""
    with LangSmithStub(version=V2_VERSION) as stub:
        runs = trace_questions(stub, app.chain, PROJECT, range(3))
        stub.empty_v2_pages = 2
        client = make_client(stub)
        summary = make_monitor(app, client, tmp_path).run()
        client.close(timeout=5)
        assert summary.errors == []
        assert summary.feedback_sent == 3
        assert set(stored(stub)) == {r["id"] for r in runs}
        listings = [
            r.body.get("cursor")
            for r in stub.requests_to("POST", "/api/v2/runs/query")
            if r.body.get("run_type") == "RETRIEVER"
        ]
        assert listings == [None, "page-0-1", "page-0-0"]


def _client_of_an_unreadable_info(stub: LangSmithStub) -> langsmith.Client:
    """A client of ``stub``, whose ``/info`` answers 500 from now on (retried fast).

    No tracing thread reads ``/info`` before the monitor does: its read is the first.
    """
    from langsmith.client import _default_retry_config

    stub.fail("GET /info", 500, times=None)
    retry = _default_retry_config().new(backoff_factor=0.001)
    return langsmith.Client(
        api_url=stub.url, api_key="test", retry_config=retry, auto_batch_tracing=False
    )


def test_a_v2_backend_whose_info_cannot_be_read_is_listed_with_list_runs(
    app: RagApp, tmp_path: Path
) -> None:
    """Without a version to go by, the monitor takes list_runs, which every backend that
    answers it (all before SmithDB) serves."""
    with LangSmithStub(version=V2_VERSION) as stub:
        runs = trace_questions(stub, app.chain, PROJECT, range(2))
        client = _client_of_an_unreadable_info(stub)
        summary = make_monitor(app, client, tmp_path).run()
        assert client.info.version == ""  # the SDK keeps the failed read
        client.close(timeout=5)
        assert stub.requests_to("GET", "/info")
        assert stub.requests_to("POST", "/api/v2/runs/query") == []
        assert stub.requests_to("POST", "/runs/query")
    assert summary.complete
    assert summary.feedback_sent == 2
    assert set(stored(stub)) == {r["id"] for r in runs}


def test_an_unreadable_info_is_read_again_and_the_monitor_moves_to_v2(
    app: RagApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK keeps a failed ``/info`` read for the client's life; the monitor reads it
    again (at most every minute, here at once), so once LangSmith answers it a backend
    serving v2 is listed with ``runs.query``, not with ``list_runs`` for good."""
    from langchain_ragmetrics.integrations import monitor as monitor_module

    monkeypatch.setattr(monitor_module, "_INFO_RETRY_SECONDS", 0.0)
    with LangSmithStub(version=V2_VERSION) as stub:
        runs = trace_questions(stub, app.chain, PROJECT, range(2))
        client = _client_of_an_unreadable_info(stub)
        monitor = make_monitor(app, client, tmp_path)
        first = monitor.run()
        assert stub.requests_to("POST", "/runs/query")  # version unknown: list_runs
        assert stub.requests_to("POST", "/api/v2/runs/query") == []
        stub.stop_failing("GET /info")
        listed_before = len(stub.requests_to("POST", "/runs/query"))
        second = monitor.run()
        assert client.info.version == ""  # the SDK still holds its failed read
        assert [r.status for r in stub.requests_to("GET", "/info")][-1] == 200
        assert stub.requests_to("POST", "/api/v2/runs/query")  # read again: v2
        assert len(stub.requests_to("POST", "/runs/query")) == listed_before
        client.close(timeout=5)
    assert first.complete, first.render()
    assert second.complete, second.render()
    assert first.feedback_sent == 2
    assert second.runs_already_scored == 2
    assert set(stored(stub)) == {r["id"] for r in runs}


async def _io_within_2s(fn: Callable[[], Any], what: str) -> Any:
    """The monitor's I/O call in small: a thread, 2 s, the built-in TimeoutError (3.10 too)."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(fn), 2.0)
    except asyncio.TimeoutError:
        raise TimeoutError(what) from None


def test_info_is_read_again_at_most_once_a_window_and_a_slow_read_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the version is unknown, /info is read again once per window (set before the
    read starts, so a hung read is not started again meanwhile), and a read that outlasts
    the request timeout leaves the reader on list_runs instead of failing the listing."""
    from langchain_ragmetrics.integrations import monitor as monitor_module

    clock = HandClock()
    monkeypatch.setattr(monitor_module, "time", clock)
    with LangSmithStub(version=V2_VERSION) as stub:
        client = _client_of_an_unreadable_info(stub)

        reader = _RunReader(lambda: client, _io_within_2s, 2.0)

        def reads() -> int:
            return len(stub.requests_to("GET", "/info"))

        async def steps() -> None:
            assert await reader.uses_v2() is False  # the SDK's read failed: unknown
            first = reads()
            clock.now += monitor_module._INFO_RETRY_SECONDS - 1
            assert await reader.uses_v2() is False  # inside the window: no read
            assert reads() == first
            stub.stop_failing("GET /info")
            stub.hang("GET /info")
            clock.now += 1
            assert await reader.uses_v2() is False  # read again, hung: timed out, unknown
            stub.wait_for(lambda: stub.hung == 1)
            assert await reader.uses_v2() is False  # the window was set before that read
            assert reads() == first + 1
            stub.release_hangs()
            clock.now += monitor_module._INFO_RETRY_SECONDS
            assert await reader.uses_v2() is True  # answered: v2, kept
            clock.now += 1
            assert await reader.uses_v2() is True
            assert reads() == first + 2

        asyncio.run(steps())
        client.close(timeout=5)


def test_a_first_info_read_that_hangs_lists_with_list_runs_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The very first /info read held past the request timeout: the listing goes on with
    list_runs (no error), that read is not started again inside its window, and once it is
    answered the reader moves to v2."""
    from langchain_ragmetrics.integrations import monitor as monitor_module

    clock = HandClock()
    monkeypatch.setattr(monitor_module, "time", clock)
    with LangSmithStub(version=V2_VERSION) as stub:
        stub.hang("GET /info")
        client = langsmith.Client(api_url=stub.url, api_key="test", auto_batch_tracing=False)

        reader = _RunReader(lambda: client, _io_within_2s, 2.0)

        async def steps() -> None:
            assert await reader.uses_v2() is False  # held: timed out, unknown, no error
            clock.now += 1
            assert await reader.uses_v2() is False  # inside the window: not read again
            assert len(stub.requests_to("GET", "/info")) == 1
            stub.release_hangs()  # the held read is answered: the SDK keeps the version
            stub.wait_for(lambda: stub.requests_to("GET", "/info")[0].status == 200)
            clock.now += monitor_module._INFO_RETRY_SECONDS
            assert await reader.uses_v2() is True

        asyncio.run(steps())
        client.close(timeout=5)


def test_the_summary_keeps_the_last_errors_and_counts_them_all() -> None:
    """A long --follow run through an outage adds errors on every poll: their texts are
    bounded (the count is not)."""
    from langchain_ragmetrics.integrations.monitor import MAX_ERRORS_KEPT

    summary = MonitorSummary(project=PROJECT)
    for i in range(MAX_ERRORS_KEPT + 250):
        summary.add_error(f"error {i}")
    assert summary.errors_total == MAX_ERRORS_KEPT + 250
    assert len(summary.errors) == MAX_ERRORS_KEPT
    assert summary.errors[0] == "error 250"
    assert summary.errors[-1] == f"error {MAX_ERRORS_KEPT + 249}"
    rendered = summary.render().splitlines()
    assert f"  {MAX_ERRORS_KEPT + 250} errors, the last 5:" in rendered
    assert rendered[-1] == f"  error: error {MAX_ERRORS_KEPT + 249}"


# ---------------------------------------------------------------- retention of the checkpoint

DAY_S = 86_400.0
CR, CP = "context_relevance", "context_precision"


def fake_run(name: str) -> str:
    """The id of a run LangSmith does not hold (one no window lists any more)."""
    return str(uuid5(NAMESPACE_URL, f"ragmetrics-test/{name}"))


def settle_aged(path: Path, ages: dict[tuple[str, str], float]) -> None:
    """Settle ``(run id, metric)`` pairs in the checkpoint at ``path``, each ``age`` s ago."""
    import sqlite3

    from langchain_ragmetrics.integrations._monitor_checkpoint import Checkpoint

    Checkpoint(path, project=PROJECT).close()  # the file, its schema and its project
    db = sqlite3.connect(path)
    with db:
        for (run_id, metric), age in ages.items():
            db.execute(
                "INSERT OR REPLACE INTO settled VALUES (?, ?, 'scored', ?)",
                (run_id, metric, time.time() - age),
            )
    db.close()


def checkpoint_sql(path: Path, *statements: tuple[Any, ...]) -> None:
    """Run ``(sql, *values)`` statements on the checkpoint at ``path``, in one transaction."""
    import sqlite3

    db = sqlite3.connect(path)
    with db:
        for sql, *values in statements:
            db.execute(sql, values)
    db.close()


def checkpoint_rows(path: Path, table: str) -> set[tuple[str, str]]:
    """The ``(run id, metric)`` rows of a checkpoint table."""
    import sqlite3

    db = sqlite3.connect(path)
    try:
        return {(r, m) for r, m in db.execute(f"SELECT run_id, metric FROM {table}")}
    finally:
        db.close()


def test_retention_prunes_old_settled_pairs_at_open_and_keeps_owed_work(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    """Before, every pair ever settled stayed in the file. Only settled pairs older than the
    retention go (with a failure count left beside one); a run with work still owed to
    LangSmith (an intent and its kept result, a judge failure waiting) keeps all its pairs,
    however old: it is read again by id."""
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    owed, retrying = runs[0]["id"], runs[1]["id"]
    old, recent = fake_run("old"), fake_run("recent")
    path = tmp_path / "monitor.sqlite"
    month = 30 * DAY_S
    ages = {(old, CR): month + 60, (recent, CR): month - 60}
    settle_aged(path, {**ages, (owed, CR): 2 * month, (retrying, CR): 2 * month})
    checkpoint_sql(
        path,
        ("INSERT INTO attempts VALUES (?, ?, 1)", old, CR),  # stale, beside a settled pair
        ("INSERT INTO intents VALUES (?, ?)", owed, CP),
        ("INSERT INTO kept VALUES (?, ?, '{}')", owed, CP),
        ("INSERT INTO attempts VALUES (?, ?, 1)", retrying, CP),  # unsettled: owed
    )
    summary = make_monitor(app, langsmith_client, tmp_path, retention="30d").run()
    assert summary.pairs_pruned == 1
    assert "settled pairs pruned 1" in summary.render()
    assert checkpoint_rows(path, "settled") == {(recent, CR), (owed, CR), (retrying, CR)}
    assert checkpoint_rows(path, "attempts") == {(retrying, CP)}
    assert checkpoint_rows(path, "intents") == checkpoint_rows(path, "kept") == {(owed, CP)}
    assert summary.runs_already_scored == 2  # nothing judged again
    assert summary.usage.judge_calls == judge_calls(app) == 0


@pytest.mark.parametrize("retention", ["7d", timedelta(days=7)], ids=["text", "timedelta"])
def test_a_pair_settled_just_inside_the_retention_is_kept(
    retention: str | timedelta,
    app: RagApp,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
) -> None:
    langsmith_stub.create_project(PROJECT)
    inside, outside = fake_run("inside"), fake_run("outside")
    path = tmp_path / "monitor.sqlite"
    settle_aged(path, {(inside, CR): 7 * DAY_S - 60, (outside, CR): 7 * DAY_S + 60})
    summary = make_monitor(app, langsmith_client, tmp_path, retention=retention).run()
    assert summary.pairs_pruned == 1
    assert checkpoint_rows(path, "settled") == {(inside, CR)}


def test_pairs_settled_near_the_listing_windows_start_are_spared(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    """With ``since`` as long as the retention, a pair settled within an hour before the
    window's start is kept: its run's start (the application's clock) may be inside it."""
    langsmith_stub.create_project(PROJECT)
    near, far = fake_run("near"), fake_run("far")
    path = tmp_path / "monitor.sqlite"
    settle_aged(path, {(near, CR): 30 * DAY_S + 1800, (far, CR): 30 * DAY_S + 7200})
    worker = make_monitor(app, langsmith_client, tmp_path, since="30d", retention="30d")
    assert worker.run().pairs_pruned == 1
    assert checkpoint_rows(path, "settled") == {(near, CR)}


def test_a_polling_run_prunes_at_most_once_an_hour(
    app: RagApp,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pair that grows old during a ``follow`` run goes at the first poll an hour after the
    last prune (the one at the opening), not at every poll."""
    from langchain_ragmetrics.integrations import monitor as monitor_module

    clock = HandClock()
    monkeypatch.setattr(monitor_module, "time", clock)
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(1))
    path = tmp_path / "monitor.sqlite"
    stale = [fake_run(f"stale-{i}") for i in range(3)]
    moves = [1800.0, 1799.0, 1.0]  # the prune at the opening, then 3600 s later
    present: list[set[str]] = []
    poll = LangSmithMonitor._poll

    async def poll_then_age(self: LangSmithMonitor, checkpoint: Any) -> None:
        await poll(self, checkpoint)
        present.append({run_id for run_id, _ in checkpoint_rows(path, "settled")} & set(stale))
        if self.summary.polls <= len(stale):  # a pair of a run no window lists, 40 days old
            insert = "INSERT INTO settled VALUES (?, ?, 'scored', ?)"
            aged = (insert, stale[self.summary.polls - 1], CR, time.time() - 40 * DAY_S)
            checkpoint_sql(path, aged)
            clock.now += moves[self.summary.polls - 1]

    monkeypatch.setattr(LangSmithMonitor, "_poll", poll_then_age)
    worker = make_monitor(
        app, langsmith_client, tmp_path, follow=True, max_polls=4, poll_interval=0.01
    )
    summary = worker.run()
    assert present == [set(), {stale[0]}, {stale[0], stale[1]}, set()]
    assert summary.pairs_pruned == 3
    assert checkpoint_rows(path, "settled") == {(runs[0]["id"], CR)}
    assert summary.usage.judge_calls == judge_calls(app) == 1


def test_retention_none_never_prunes(
    app: RagApp,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langchain_ragmetrics.integrations import monitor as monitor_module

    clock = HandClock()
    monkeypatch.setattr(monitor_module, "time", clock)
    langsmith_stub.create_project(PROJECT)
    ancient = fake_run("ancient")
    path = tmp_path / "monitor.sqlite"
    settle_aged(path, {(ancient, CR): 400 * DAY_S})
    poll = LangSmithMonitor._poll

    async def poll_then_wait_hours(self: LangSmithMonitor, checkpoint: Any) -> None:
        await poll(self, checkpoint)
        clock.now += 7200.0

    monkeypatch.setattr(LangSmithMonitor, "_poll", poll_then_wait_hours)
    worker = make_monitor(
        app,
        langsmith_client,
        tmp_path,
        retention=None,
        since="400d",
        follow=True,
        max_polls=3,
        poll_interval=0.01,
    )
    summary = worker.run()
    assert (summary.polls, summary.pairs_pruned) == (3, 0)
    assert checkpoint_rows(path, "settled") == {(ancient, CR)}


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        (
            {"since": "60d", "retention": "30d"},
            "`since` ('60d') reaches further back than `retention` ('30d')",
        ),
        ({"since": "31d"}, "`since` ('31d') reaches further back than `retention` ('30d')"),
        (
            {"since": timedelta(days=8), "retention": timedelta(days=7)},
            "`since` (datetime.timedelta(days=8)) reaches further back than `retention` "
            "(datetime.timedelta(days=7))",
        ),
        (
            {"since": datetime(2020, 1, 1, tzinfo=timezone.utc), "retention": "90d"},
            "reaches further back than `retention` ('90d')",
        ),
    ],
)
def test_a_since_longer_than_the_retention_is_refused_naming_both(
    langsmith_client: langsmith.Client, options: dict[str, Any], shown: str
) -> None:
    """Before, no retention: nothing to refuse. A pruned pair's run would be listed, judged
    and paid for again if ``since`` reached back past the retention."""
    with pytest.raises(ValueError, match=re.escape(shown)) as caught:
        LangSmithMonitor(PROJECT, client=langsmith_client, **options)
    assert "use a shorter `since`, a longer `retention`, or `retention=None`" in str(caught.value)


def test_retention_defaults_to_30_days_and_bounds_since(langsmith_client: langsmith.Client) -> None:
    assert LangSmithMonitor(PROJECT, client=langsmith_client).retention == timedelta(days=30)
    for options in (
        {"since": "30d"},
        {"since": "7d", "retention": "1w"},
        {"since": "400d", "retention": None},
        {"since": datetime.now(timezone.utc) + timedelta(hours=1), "retention": "0s"},
    ):
        LangSmithMonitor(PROJECT, client=langsmith_client, **options)
    with pytest.raises(ValueError, match="`retention` must be a duration such as 30m"):
        LangSmithMonitor(PROJECT, client=langsmith_client, retention="forever")


def test_a_since_past_what_an_earlier_run_pruned_is_refused(
    app: RagApp, langsmith_stub: LangSmithStub, langsmith_client: langsmith.Client, tmp_path: Path
) -> None:
    """A later run with a longer ``since`` (and a longer or no retention) would list the
    runs whose pairs an earlier run pruned: it fails before listing anything."""
    langsmith_stub.create_project(PROJECT)
    path = tmp_path / "monitor.sqlite"
    settle_aged(path, {(fake_run("old"), CR): 40 * DAY_S})
    assert make_monitor(app, langsmith_client, tmp_path).run().pairs_pruned == 1
    listings = len(run_queries(langsmith_stub))
    for retention in (None, "60d"):
        worker = make_monitor(app, langsmith_client, tmp_path, since="35d", retention=retention)
        with pytest.raises(CheckpointError, match="no longer holds the pairs settled before"):
            worker.run()
    assert len(run_queries(langsmith_stub)) == listings  # nothing listed
    assert make_monitor(app, langsmith_client, tmp_path, since="29d").run().complete


def test_checkpoint_prune_spares_the_runs_it_is_told(tmp_path: Path) -> None:
    from langchain_ragmetrics.integrations._monitor_checkpoint import Checkpoint

    path = tmp_path / "monitor.sqlite"
    unsent, done = fake_run("unsent"), fake_run("done")
    settle_aged(path, {(unsent, CR): 40 * DAY_S, (done, CR): 40 * DAY_S})
    checkpoint = Checkpoint(path, project=PROJECT)
    try:
        assert checkpoint.pruned_before() is None
        cutoff = time.time() - 30 * DAY_S
        assert checkpoint.prune(cutoff, spare=[unsent]) == 1
        assert checkpoint.pruned_before() == cutoff
        assert checkpoint.settled([unsent, done]) == {unsent: {CR}}
        assert checkpoint.prune(cutoff - DAY_S) == 1  # no longer spared
        assert checkpoint.pruned_before() == cutoff  # the latest cutoff that deleted
        assert checkpoint.prune(cutoff + DAY_S) == 0
        assert checkpoint.pruned_before() == cutoff  # nothing deleted: nothing forgotten
    finally:
        checkpoint.close()


# ---------------------------------------------------------------- a checkpoint that stops working


def test_a_full_disk_is_a_checkpoint_error_naming_the_file(tmp_path: Path) -> None:
    """Before, a full disk came out of the checkpoint as a bare ``sqlite3.OperationalError``
    (no file named); now every method raises ``CheckpointError`` with the file and the cause,
    a failed transaction leaves nothing half written, and what is there can still be read."""
    from langchain_ragmetrics.integrations._monitor_checkpoint import Checkpoint

    path = tmp_path / "monitor.sqlite"
    checkpoint = Checkpoint(path, project=PROJECT)
    try:
        done, owed = fake_run("done"), fake_run("owed")
        checkpoint.settle(done, CR, "scored")
        (pages,) = checkpoint._db.execute("PRAGMA page_count").fetchone()
        checkpoint._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full now
        big = "x" * 20_000  # a kept result needing new pages
        full = re.escape(f"checkpoint {path} cannot be read or written (OperationalError: ")
        with pytest.raises(CheckpointError, match=full + "database or disk is full"):
            checkpoint.intend(owed, CR, big)
        assert checkpoint.intended(owed) == set()  # the intent went with the kept result
        assert checkpoint.settled([done, owed]) == {done: {CR}}

        def settle_200() -> None:  # settled rows fill the last page's free room, then fail
            for i in range(200):
                checkpoint.settle(fake_run(f"more-{i}"), CR, "scored")

        with pytest.raises(CheckpointError, match="database or disk is full"):
            settle_200()
    finally:
        checkpoint.close()


def read_only_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints that open (and read), then refuse every write, as a file system remounted
    read-only after a disk error does."""
    from langchain_ragmetrics.integrations._monitor_checkpoint import Checkpoint

    opened = Checkpoint._open

    def open_read_only(self: Checkpoint, project: str) -> None:
        opened(self, project)
        self._db.execute("PRAGMA query_only = ON")

    monkeypatch.setattr(Checkpoint, "_open", open_read_only)


def test_a_checkpoint_that_stops_taking_writes_stops_the_monitor(
    app: RagApp,
    judge_server: JudgeServer,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, the write error was one run's error: the monitor judged (and paid for) every
    run of every poll, recorded none and sent no feedback, and ended as if LangSmith had
    failed. Now it stops at the first failed write, names the file, and its summary says what
    it did until then."""
    trace_questions(langsmith_stub, app.chain, PROJECT, range(8))
    read_only_checkpoints(monkeypatch)
    judged = len(judge_server.requests)
    worker = make_monitor(app, langsmith_client, tmp_path, max_concurrency=1, retention=None)
    with pytest.raises(CheckpointError, match=r"monitor\.sqlite cannot be read or written \("):
        worker.run()
    # The first run's write failed; at most the next one had begun judging by then.
    assert 1 <= len(judge_server.requests) - judged <= 2
    assert worker.summary.polls == 1
    assert worker.summary.feedback_sent == 0
    assert langsmith_stub.feedback(key="context_relevance") == []


# ---------------------------------------------------------------- stop() while listing


def stop_after_page_one(monkeypatch: pytest.MonkeyPatch, stop: Callable[[], None]) -> None:
    """Pages of two runs (both backends); ``stop`` is called once the first is in hand."""
    from langchain_ragmetrics.integrations import monitor as monitor_module

    monkeypatch.setattr(monitor_module, "_PAGE", 2)
    pages = _RunReader.pages

    async def first_page_then_stop(self: Any, *args: Any) -> Any:
        async for page in pages(self, *args):
            yield page
            stop()

    monkeypatch.setattr(_RunReader, "pages", first_page_then_stop)


def test_a_stop_while_listing_finishes_the_runs_in_hand_and_reads_no_further(
    app: RagApp,
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, stop() (SIGTERM) waited for the whole poll: every page left to list and judge,
    on a large project past a pod's grace period. Now the runs in hand are finished, no
    further page is read, the summary says so, and the next run scores the rest, once."""
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(6))
    worker = make_monitor(app, langsmith_client, tmp_path)
    stop_after_page_one(monkeypatch, worker.stop)
    summary = worker.run()
    assert summary.listing_stopped
    assert not summary.complete
    assert (summary.runs_listed, summary.runs_scored, summary.feedback_sent) == (2, 2, 2)
    assert judge_calls(app) == 2
    assert "stopped while listing runs: the runs in hand were finished" in summary.render()
    monkeypatch.undo()  # the next run lists every page
    rest = make_monitor(app, langsmith_client, tmp_path).run()
    assert rest.complete
    assert (rest.runs_already_scored, rest.feedback_sent) == (2, 4)
    assert set(stored(langsmith_stub)) == {r["id"] for r in runs}  # each once
    assert judge_calls(app) == 6
