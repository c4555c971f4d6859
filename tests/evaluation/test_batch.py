"""``evaluate(..., batch_api=...)`` against the loopback Batch API, through the real openai client.

The same deterministic judge (``lexical_judge``) answers direct requests and batch lines, so
a batch run must give exactly the direct run's results.
"""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import EvaluationResult, VerdictCache, evaluate
from langchain_ragmetrics._errors import BatchError
from langchain_ragmetrics.evaluation import BatchOptions, BatchReport, aevaluate
from langchain_ragmetrics.evaluation._batch_state import JobState
from tests._support.batch_server import BatchServer
from tests._support.judges import payload
from tests._support.lexical_judge import lexical_judge
from tests._support.openai_server import JudgeRequest, reply_error, reply_invalid

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "cookbook" / "data" / "rag_eval.jsonl"
METRICS = ["context_recall", "context_precision", "context_entity_recall", "context_relevance"]
BODY_MARK = b',"body":'


@pytest.fixture
def server() -> Iterator[BatchServer]:
    with BatchServer(lexical_judge()) as running:
        yield running


def judge(server: BatchServer, **overrides: Any) -> ChatOpenAI:
    options: dict[str, Any] = {
        "model": "judge-model",
        "base_url": server.base_url,
        "api_key": "test",
        "temperature": 0,
        "max_retries": 0,
        "timeout": 10,
        **overrides,
    }
    return ChatOpenAI(**options)


class Reports:
    """Collects the BatchReport of each run."""

    def __init__(self) -> None:
        self.items: list[BatchReport] = []

    @property
    def last(self) -> BatchReport:
        return self.items[-1]


def batch_options(tmp_path: Path, reports: Reports | None = None, **extra: Any) -> BatchOptions:
    return BatchOptions(
        state_dir=tmp_path / "jobs",
        poll_interval=0,
        on_report=None if reports is None else reports.items.append,
        **extra,
    )


def direct_run(server: BatchServer, metrics: list[str] = METRICS) -> EvaluationResult:
    result = evaluate(DATA, metrics, llm=judge(server), show_progress=False)
    server.reset()
    return result


def same_results(left: EvaluationResult, right: EvaluationResult) -> None:
    assert left.metrics == right.metrics
    for metric in left.metrics:
        for a, b in zip(left.results_of(metric), right.results_of(metric), strict=True):
            assert a is not None
            assert b is not None
            both_nan = a.score is not None and b.score is not None and math.isnan(a.score)
            assert both_nan or a.score == b.score, (metric, a, b)
            assert (a.reason, a.details, a.error, a.judge) == (
                b.reason,
                b.details,
                b.error,
                b.judge,
            )
            assert a.usage == b.usage


def uploaded_lines(server: BatchServer) -> list[bytes]:
    return [
        line
        for f in server.files.values()
        if f.purpose == "batch"
        for line in f.content.splitlines()
    ]


# --------------------------------------------------------------------------- same results


def test_batch_gives_the_direct_results_and_sends_only_the_preflight_directly(
    server: BatchServer, tmp_path: Path
) -> None:
    direct = direct_run(server)
    reports = Reports()
    batch = evaluate(DATA, METRICS, llm=judge(server), batch_api=batch_options(tmp_path, reports))
    same_results(direct, batch)
    assert batch.usage == direct.usage
    assert batch.usage.judge_calls == 20  # 4 rows: recall 1, precision 1, entity 2, relevance 1
    assert [r.schema_name for r in server.requests] == ["PreflightAnswer"]
    assert (server.uploads, server.created) == (1, 1)
    assert len(server.line_requests) == 20
    report = reports.last
    assert (report.planned, report.sent, report.answered, report.failed) == (20, 20, 20, 0)
    assert report.input_tokens == direct.usage.input_tokens
    assert report.output_tokens == direct.usage.output_tokens
    assert list(tmp_path.joinpath("jobs").iterdir()) == []  # a finished job leaves no state


def test_every_line_body_is_byte_for_byte_the_direct_request(
    server: BatchServer, tmp_path: Path
) -> None:
    evaluate(DATA, METRICS, llm=judge(server), show_progress=False)
    direct = Counter(server.raw_chat_bodies)
    server.reset()
    evaluate(DATA, METRICS, llm=judge(server), batch_api=batch_options(tmp_path), preflight=False)
    lines = uploaded_lines(server)
    bodies = Counter(line[line.index(BODY_MARK) + len(BODY_MARK) : -1] for line in lines)
    assert sum(bodies.values()) == 20
    assert bodies == direct
    first = json.loads(lines[0])
    assert first["method"] == "POST"
    assert first["url"] == "/v1/chat/completions"
    assert first["body"]["tool_choice"]["type"] == "function"  # the forced tool, as sent directly
    assert len({json.loads(line)["custom_id"] for line in lines}) == 20


def test_saved_batch_run_loads_compares_and_reports(server: BatchServer, tmp_path: Path) -> None:
    direct = direct_run(server)
    batch = evaluate(DATA, METRICS, llm=judge(server), batch_api=batch_options(tmp_path))
    saved = batch.to_jsonl(tmp_path / "batch.jsonl")
    loaded = EvaluationResult.load(saved)
    comparison = loaded.compare(direct)
    assert comparison.matched == 4
    assert all((m.diff, m.worse, m.better) == (0, 0, 0) for m in comparison.metrics.values())
    assert "context_recall" in loaded.to_html()


def test_aevaluate_takes_the_batch_path_too(server: BatchServer, tmp_path: Path) -> None:
    import asyncio

    direct = direct_run(server, ["context_recall"])
    batch = asyncio.run(
        aevaluate(DATA, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path))
    )
    same_results(direct, batch)
    assert server.uploads == 1


def test_a_cancelled_aevaluate_stops_waiting_and_the_next_run_resumes(
    server: BatchServer, tmp_path: Path
) -> None:
    import asyncio

    server.hold_at = "in_progress"
    options = BatchOptions(state_dir=tmp_path / "jobs", poll_interval=0.01)

    async def cancel_while_held() -> None:
        task = asyncio.ensure_future(
            aevaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
        )
        held = await asyncio.to_thread(server.polled.wait, 30)
        assert held, "the batch was never seen in progress"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task  # returns only once the polling thread has ended, batch still held

    asyncio.run(cancel_while_held())
    assert server.cancels == 0
    server.release()
    again = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    assert again["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert (server.uploads, server.created) == (1, 1)


# --------------------------------------------------------------------------- statuses


def test_statuses_are_followed_from_validating_to_completed(
    server: BatchServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.auto_advance = False
    box: dict[str, Any] = {}

    def run() -> None:
        box["result"] = evaluate(
            DATA,
            ["context_recall"],
            llm=judge(server),
            batch_api=BatchOptions(state_dir=tmp_path / "jobs", poll_interval=0.01),
        )

    worker = threading.Thread(target=run)
    worker.start()
    try:
        for status in ("validating", "in_progress", "finalizing"):
            assert server.wait_for_read(status), f"the client never read the batch {status}"
            server.advance()
        worker.join(30)
    finally:
        server.release()
        server.auto_advance = True
    assert not worker.is_alive()
    assert box["result"]["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    progress = [line for line in capsys.readouterr().err.splitlines() if "Batch API:" in line]
    shown = [line.split()[3] for line in progress]
    assert shown == ["validating", "in_progress", "finalizing", "completed"]
    assert progress[-1].endswith("completed 4/4")


# --------------------------------------------------------------------------- what comes back wrong


def test_an_error_line_is_retried_in_a_follow_up_batch(server: BatchServer, tmp_path: Path) -> None:
    direct = direct_run(server)
    server.fail = {"r1-m0-c0": reply_error(500, "overloaded")}
    reports = Reports()
    batch = evaluate(DATA, METRICS, llm=judge(server), batch_api=batch_options(tmp_path, reports))
    assert batch["context_recall"] == direct["context_recall"]
    (_, second, *_) = batch.results_of("context_recall")
    assert second is not None
    assert second.usage.judge_calls == 2  # the failed attempt counts
    assert server.created == 2
    (follow_up,) = [b for b in server.batches.values() if len(b.lines) == 1]
    assert follow_up.lines[0]["custom_id"] == "r1-m0-c0"
    assert (reports.last.retried, reports.last.attempts, reports.last.failed) == (1, 21, 0)
    assert [b.attempt for b in reports.last.batches] == [1, 2]


def refuse_last_question(status: int) -> Any:
    def script(req: JudgeRequest) -> Any:
        data = payload(req) if req.schema_name != "PreflightAnswer" else {}
        if data.get("question") == "What is the capital of France?":
            return reply_error(status, "this one never works")
        return lexical_judge()(req)

    return script


def test_what_keeps_failing_is_a_failed_row_with_its_cause(
    server: BatchServer, tmp_path: Path
) -> None:
    server.script = refuse_last_question(503)
    reports = Reports()
    batch = evaluate(
        DATA,
        ["context_recall"],
        llm=judge(server),
        batch_api=batch_options(tmp_path, reports, max_attempts=2),
    )
    statuses = [r.status("context_recall") for r in batch.rows]
    assert statuses == ["scored", "scored", "scored", "failed"]
    error = batch.rows[3].results["context_recall"].error  # type: ignore[union-attr]
    assert error is not None
    assert "HTTP 503: this one never works (after 2 attempts)" in error
    assert server.created == 2
    assert reports.last.failed == 1


def test_an_error_the_direct_path_would_not_retry_is_not_sent_again(
    server: BatchServer, tmp_path: Path
) -> None:
    server.script = refuse_last_question(400)
    batch = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path))
    error = batch.rows[3].results["context_recall"].error  # type: ignore[union-attr]
    assert error is not None
    assert error.endswith("HTTP 400: this one never works (after 1 attempt)")
    assert server.created == 1


def test_a_batch_the_service_fails_fails_its_rows_with_the_reason(
    server: BatchServer, tmp_path: Path
) -> None:
    server.reject = "Enqueued token limit reached for judge-model."
    batch = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path))
    errors = {r.results["context_recall"].error for r in batch.rows}  # type: ignore[union-attr]
    assert errors == {"batch batch-2 failed: Enqueued token limit reached for judge-model."}
    assert server.created == 1


def test_an_answer_failing_validation_is_retried_then_failed(
    server: BatchServer, tmp_path: Path
) -> None:
    def invalid_for_einstein(req: JudgeRequest) -> Any:
        asked = payload(req) if req.schema_name == "RecallStatements" else {}
        if asked.get("question") == "What can you tell me about Albert Einstein?":
            return reply_invalid()
        return lexical_judge()(req)

    server.script = invalid_for_einstein
    batch = evaluate(
        DATA,
        ["context_recall"],
        llm=judge(server),
        batch_api=batch_options(tmp_path, max_attempts=3),
    )
    first = batch.rows[0].results["context_recall"]
    assert first is not None
    assert first.error is not None
    assert first.error.startswith("batch batch-")
    assert "invalid judge output" in first.error
    assert first.error.endswith("(after 3 attempts)")
    assert first.usage.judge_calls == 3
    assert server.created == 3
    assert batch["context_recall"][1:] == [0.5, 0.0, 1.0]


def test_a_missing_line_is_retried_and_counted(server: BatchServer, tmp_path: Path) -> None:
    server.drop = {"r2-m0-c0"}
    batch = evaluate(
        DATA,
        ["context_recall"],
        llm=judge(server),
        batch_api=batch_options(tmp_path, max_attempts=2),
    )
    third = batch.rows[2].results["context_recall"]
    assert third is not None
    assert third.error is not None
    assert "returned no line for it (after 2 attempts)" in third.error
    assert batch.failures()[0][1] == "context_recall"


def test_follow_ups_through_the_direct_path_when_asked(server: BatchServer, tmp_path: Path) -> None:
    direct = direct_run(server, ["context_recall"])
    server.drop = {"r2-m0-c0"}
    reports = Reports()
    batch = evaluate(
        DATA,
        ["context_recall"],
        llm=judge(server),
        batch_api=batch_options(tmp_path, reports, retry_direct=True),
    )
    assert batch["context_recall"] == direct["context_recall"]
    assert [r.schema_name for r in server.requests] == ["PreflightAnswer", "RecallStatements"]
    assert server.created == 1
    assert reports.last.direct_requests == 1


# --------------------------------------------------------------------------- expiry and cancel


def test_an_expired_batch_reports_what_completed_and_the_rest_is_resubmitted(
    server: BatchServer, tmp_path: Path
) -> None:
    direct = direct_run(server, ["context_recall"])
    server.expire, server.partial = True, 1
    reports = Reports()
    options = batch_options(tmp_path, reports)
    first = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    assert [r.status("context_recall") for r in first.rows] == ["scored"] + ["failed"] * 3
    error = first.rows[1].results["context_recall"].error  # type: ignore[union-attr]
    assert error is not None
    assert "expired before answering it" in error
    assert "run the same evaluation again" in (reports.last.stopped or "")
    assert server.created == 1  # no automatic retry of an expired batch

    server.expire = False
    again = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    assert again["context_recall"] == direct["context_recall"]
    resubmitted = list(server.batches.values())[-1]
    assert [line["custom_id"] for line in resubmitted.lines] == [
        "r1-m0-c0",
        "r2-m0-c0",
        "r3-m0-c0",
    ]
    assert reports.last.resumed
    assert [r.schema_name for r in server.requests] == ["PreflightAnswer"]  # only the first run's
    assert list(tmp_path.joinpath("jobs").iterdir()) == []


def test_cancel_stops_the_running_batch_and_scores_what_completed(
    server: BatchServer, tmp_path: Path
) -> None:
    server.hold_at, server.partial = "in_progress", 2
    options = BatchOptions(state_dir=tmp_path / "jobs", poll_interval=0.01)
    box: dict[str, Any] = {}

    def first_run() -> None:
        box["first"] = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)

    worker = threading.Thread(target=first_run)
    worker.start()
    try:
        assert server.polled.wait(30), "the batch was never seen in progress"
        reports = Reports()
        cancelled = evaluate(
            DATA,
            ["context_recall"],
            llm=judge(server),
            batch_api=batch_options(tmp_path, reports, cancel=True),
        )
    finally:
        server.release()
        worker.join(30)
    assert not worker.is_alive()
    assert server.cancels == 1
    assert [r.status("context_recall") for r in cancelled.rows] == ["scored"] * 2 + ["failed"] * 2
    assert cancelled["context_recall"][:2] == [0.5, 0.5]
    assert reports.last.batches[0].status == "cancelled"
    assert server.uploads == 1
    assert [r.status("context_recall") for r in box["first"].rows] == cancelled_statuses(cancelled)


def cancelled_statuses(result: EvaluationResult) -> list[str]:
    return [r.status("context_recall") for r in result.rows]


def test_cancel_without_a_running_batch_says_so(server: BatchServer, tmp_path: Path) -> None:
    with pytest.raises(BatchError, match="no running batch to cancel"):
        evaluate(
            DATA,
            ["context_recall"],
            llm=judge(server),
            batch_api=batch_options(tmp_path, cancel=True),
        )
    assert server.uploads == server.created == 0
    assert server.count() == 0


# --------------------------------------------------------------------------- limits, cache, faults


def test_requests_are_split_above_the_file_limits(server: BatchServer, tmp_path: Path) -> None:
    direct = direct_run(server)
    batch = evaluate(
        DATA,
        METRICS,
        llm=judge(server),
        batch_api=batch_options(tmp_path, max_requests_per_file=7),
    )
    same_results(direct, batch)
    assert [len(b.lines) for b in server.batches.values()] == [7, 7, 6]
    biggest = max(len(line) + 1 for line in uploaded_lines(server))
    server.reset()
    server.batches.clear()
    again = evaluate(
        DATA,
        METRICS,
        llm=judge(server),
        batch_api=batch_options(tmp_path, max_bytes_per_file=biggest * 3),
    )
    same_results(direct, again)
    sizes = [len(server.files[b.input_file_id].content) for b in server.batches.values()]
    assert len(sizes) > 3
    assert all(size <= biggest * 3 for size in sizes)


def test_only_cache_misses_are_sent_and_a_cached_rerun_sends_nothing(
    server: BatchServer, tmp_path: Path
) -> None:
    cache = VerdictCache(tmp_path / "verdicts.sqlite3")
    evaluate(DATA, ["context_recall"], llm=judge(server), cache=cache, show_progress=False)
    server.reset()
    reports = Reports()
    batch = evaluate(
        DATA,
        METRICS,
        llm=judge(server),
        cache=cache,
        batch_api=batch_options(tmp_path, reports),
    )
    assert len(server.line_requests) == 16  # the 4 recall calls came from the cache
    assert reports.last.cache_hits == 4
    assert batch.usage.cache_hits == 4
    assert batch.usage.cache_misses == 16
    server.reset()
    uploads = server.uploads
    again = evaluate(
        DATA, METRICS, llm=judge(server), cache=cache, batch_api=batch_options(tmp_path)
    )
    assert server.uploads == uploads
    assert server.count() == 0  # no pre-flight either: everything is cached
    assert again.usage.cache_hits == 20
    assert [again[m] for m in METRICS] == [batch[m] for m in METRICS]


def test_the_state_is_written_before_the_upload_and_a_rerun_finds_the_lost_pieces(
    server: BatchServer, tmp_path: Path
) -> None:
    server.faults = {"create": [400]}  # uploaded, then the batch is refused
    options = batch_options(tmp_path)
    with pytest.raises(BatchError, match="failed to create a batch"):
        evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    (state_file,) = (tmp_path / "jobs").iterdir()
    state = JobState.model_validate_json(state_file.read_text())
    (record,) = state.batches
    assert record.file_id is not None
    assert record.batch_id is None
    assert sorted(state.requests) == [f"r{i}-m0-c0" for i in range(4)]
    assert server.uploads == 1

    again = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    assert again["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert (server.uploads, server.created) == (1, 1)


def test_a_refused_upload_leaves_a_state_the_rerun_completes(
    server: BatchServer, tmp_path: Path
) -> None:
    server.faults = {"upload": [400]}
    options = batch_options(tmp_path)
    with pytest.raises(BatchError, match="failed to take the file"):
        evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    (state_file,) = (tmp_path / "jobs").iterdir()
    (record,) = JobState.model_validate_json(state_file.read_text()).batches
    assert record.file_id is None  # the intent was saved before the upload
    again = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    assert again["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert server.uploads == 1


def test_transient_service_errors_are_retried_by_the_sdk(
    server: BatchServer, tmp_path: Path
) -> None:
    server.faults = {"retrieve": [500], "content": [503]}
    batch = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path))
    assert batch["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert server.faults == {"retrieve": [], "content": []}


def test_a_judge_the_batch_api_cannot_serve_is_refused_before_anything_is_sent(
    server: BatchServer, tmp_path: Path
) -> None:
    with pytest.raises(BatchError, match="streaming=False"):
        evaluate(
            DATA,
            ["context_recall"],
            llm=judge(server, streaming=True),
            batch_api=batch_options(tmp_path),
        )
    assert server.count() == server.uploads == 0


def test_a_bad_judge_fails_the_preflight_before_any_upload(
    server: BatchServer, tmp_path: Path
) -> None:
    from langchain_ragmetrics._errors import PreflightError

    server.script = lambda req: reply_error(401, "bad key")
    with pytest.raises(PreflightError):
        evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path))
    assert server.uploads == 0
    assert server.count() == 1


def test_prices_give_the_batch_and_direct_cost(server: BatchServer, tmp_path: Path) -> None:
    reports = Reports()
    evaluate(
        DATA,
        ["context_recall"],
        llm=judge(server),
        batch_api=batch_options(tmp_path, reports, input_price=0.15, output_price=0.6),
    )
    report = reports.last
    expected = (report.input_tokens * 0.15 + report.output_tokens * 0.6) / 1_000_000
    assert report.direct_cost == pytest.approx(expected)
    assert report.batch_cost == pytest.approx(expected / 2)
    assert "through the Batch API" in report.summary()


def test_rows_a_metric_cannot_score_fail_as_in_the_direct_path(
    server: BatchServer, tmp_path: Path
) -> None:
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    rows[2].pop("reference", None)
    rows[2].pop("ground_truth", None)
    direct = evaluate(rows, ["context_recall"], llm=judge(server), show_progress=False)
    server.reset()
    batch = evaluate(rows, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path))
    same_results(direct, batch)
    assert batch.rows[2].status("context_recall") == "failed"
    assert len(server.line_requests) == 3


def test_metrics_without_a_judge_score_as_in_the_direct_path(
    server: BatchServer, tmp_path: Path
) -> None:
    metrics = ["non_llm_context_recall", "context_recall", "id_based_context_recall"]
    direct = direct_run(server, metrics)
    batch = evaluate(DATA, metrics, llm=judge(server), batch_api=batch_options(tmp_path))
    same_results(direct, batch)
    assert len(server.line_requests) == 4  # only the judged metric's calls


def test_a_request_above_the_file_size_limit_fails_alone(
    server: BatchServer, tmp_path: Path
) -> None:
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    rows[0]["retrieved_contexts"] = ["Albert Einstein was a physicist. " * 200]
    batch = evaluate(
        rows,
        ["context_recall"],
        llm=judge(server),
        batch_api=batch_options(tmp_path, max_bytes_per_file=5000),
    )
    error = batch.rows[0].results["context_recall"].error  # type: ignore[union-attr]
    assert error is not None
    assert "above the batch file limit of 5,000 bytes (max_bytes_per_file)" in error
    assert [r.status("context_recall") for r in batch.rows][1:] == ["scored"] * 3
    assert all(len(f.content) <= 5000 for f in server.files.values() if f.purpose == "batch")


def test_workers_with_the_batch_api_is_refused_not_ignored() -> None:
    with pytest.raises(ValueError, match="leave `workers` at 1"):
        evaluate(
            [{"question": "q", "contexts": ["c"], "reference_contexts": ["c"]}],
            ["non_llm_context_precision"],
            batch_api=True,
            workers=2,
        )


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_attempts", True), ("poll_interval", math.inf), ("batch_discount", "0.5")],
)
def test_batch_options_are_numbers_as_given(option: str, value: object) -> None:
    """Before, pydantic's lax mode took True as 1 attempt and "0.5" as a discount, and an
    infinite poll interval never polled again."""
    with pytest.raises(ValueError, match=f"`{option}` must be a finite number"):
        BatchOptions(**{option: value})


@pytest.mark.parametrize("value", ["24", "1d", "24H", "0h", "024h", " 24h", "24h\n", "", 24, None])
def test_a_completion_window_not_in_hours_is_refused_before_any_upload(value: object) -> None:
    """Before, any string was accepted and the service refused the batch after the upload."""
    with pytest.raises(ValueError, match="`completion_window` must be") as info:
        BatchOptions(completion_window=value)  # type: ignore[arg-type]
    assert f"must be a number of hours written like '24h', got {value!r}" in str(info.value)


def test_a_completion_window_in_hours_is_kept() -> None:
    assert BatchOptions().completion_window == "24h"
    assert BatchOptions(completion_window="48h").completion_window == "48h"
    assert BatchOptions(completion_window="1h").completion_window == "1h"


@pytest.mark.parametrize("option", ["cancel", "retry_direct"])
@pytest.mark.parametrize("value", [1, "on", "yes", None])
def test_a_batch_switch_that_is_not_a_bool_is_refused(option: str, value: object) -> None:
    """Before, pydantic's lax mode took 1 or "on" as True: a cancel nobody asked for."""
    with pytest.raises(ValueError, match=option):
        BatchOptions(**{option: value})
    assert getattr(BatchOptions(**{option: True}), option) is True


# --------------------------------------------------------------------------- money at stake


@pytest.fixture
def quick_create_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our retries of an upload or a creation, without their backoff sleeps."""
    from langchain_ragmetrics.evaluation import _batch_service
    from langchain_ragmetrics.metrics import RetryPolicy

    policy = RetryPolicy(max_retries=4, initial_backoff=0, max_backoff=0)
    monkeypatch.setattr(_batch_service, "_CREATE_RETRY", policy)


def test_a_lost_answer_to_an_upload_or_a_create_adopts_it_instead_of_paying_twice(
    server: BatchServer, tmp_path: Path
) -> None:
    """Before, the SDK sent the POST again: a second file and a second paid batch."""
    server.lost = {"upload": [502], "create": [500]}  # made at the service, answer lost
    reports = Reports()
    batch = evaluate(
        DATA, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path, reports)
    )
    assert batch["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert (server.uploads, server.created) == (1, 1)
    assert [b.id for b in reports.last.batches] == list(server.batches)


def test_a_create_that_times_out_after_the_service_made_it_is_adopted(
    server: BatchServer, tmp_path: Path
) -> None:
    """Before, the SDK's retry after the timeout created a second batch nothing tracked."""
    answer = threading.Event()
    server.hold_after = {"create": answer}  # the batch exists; its answer never comes in time
    try:
        batch = evaluate(
            DATA,
            ["context_recall"],
            llm=judge(server),
            batch_api=batch_options(tmp_path, request_timeout=1.0),
        )
    finally:
        answer.set()
    assert batch["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert server.created == 1


@pytest.mark.usefixtures("quick_create_retries")
def test_a_throttled_create_is_retried_by_us_without_a_second_batch(
    server: BatchServer, tmp_path: Path
) -> None:
    server.faults = {"create": [429, 429, 429]}  # refused: nothing was made, ask again
    batch = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path))
    assert batch["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert server.created == 1
    assert server.operations.count("list_batches") == 0  # a 429 made nothing: no look-up


def test_cancel_finds_a_batch_whose_id_was_never_saved(
    server: BatchServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, --cancel said there was nothing to cancel while the batch ran (and billed)."""
    from langchain_ragmetrics.evaluation._batch_service import BatchService

    created = BatchService.create

    def killed_after_create(self: BatchService, *args: Any, **kwargs: Any) -> Any:
        created(self, *args, **kwargs)
        raise KeyboardInterrupt  # the run ends before the batch id is saved

    monkeypatch.setattr(BatchService, "create", killed_after_create)
    first = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path))
    assert first.interrupted
    monkeypatch.undo()
    assert server.created == 1
    reports = Reports()
    cancelled = evaluate(
        DATA,
        ["context_recall"],
        llm=judge(server),
        batch_api=batch_options(tmp_path, reports, cancel=True),
    )
    assert server.cancels == 1
    assert [b.status for b in server.batches.values()] == ["cancelled"]
    assert [b.status for b in reports.last.batches] == ["cancelled"]
    errors = [r.results["context_recall"].error for r in cancelled.rows]  # type: ignore[union-attr]
    assert all("cancelled before answering it" in str(e) for e in errors), errors


def test_a_service_outage_while_polling_is_waited_out(server: BatchServer, tmp_path: Path) -> None:
    """Before, one status check failing after the SDK's retries ended the wait."""
    server.faults = {"retrieve": [503] * 6}  # two status checks fail, SDK retries included
    batch = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path))
    assert batch["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert server.faults == {"retrieve": []}
    assert server.cancels == 0


def test_a_long_outage_ends_the_wait_saying_how_to_resume_or_cancel(
    server: BatchServer, tmp_path: Path
) -> None:
    server.faults = {"retrieve": [503] * 3}
    options = batch_options(tmp_path, max_poll_failures=1)
    with pytest.raises(BatchError) as info:
        evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    message = str(info.value)
    (state_file,) = (tmp_path / "jobs").glob("*.json")
    assert "1 status checks in a row failed: max_poll_failures" in message
    assert "the batches keep running at the service" in message
    assert "Run the same command again to pick them up without paying twice" in message
    assert "--cancel (Python: BatchOptions(cancel=True))" in message
    assert str(state_file) in message
    again = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    assert again["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert (server.uploads, server.created) == (1, 1)


def test_a_refused_second_part_says_the_first_keeps_running(
    server: BatchServer, tmp_path: Path
) -> None:
    """Before, the bare service error said nothing of the paid batch left running."""
    server.faults = {"create": [0, 400]}  # part 1 is created, part 2 refused
    options = batch_options(tmp_path, max_requests_per_file=2)
    with pytest.raises(BatchError, match="failed to create a batch") as info:
        evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    assert "the batches keep running at the service" in str(info.value)
    assert "--cancel" in str(info.value)
    again = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    assert again["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert (server.uploads, server.created) == (2, 2)


def test_a_second_run_of_the_same_job_is_refused_while_the_first_holds_it(
    server: BatchServer, tmp_path: Path
) -> None:
    """Before, a second run started during the first one's upload created a second batch."""
    uploaded = threading.Event()
    server.hold_after = {"upload": uploaded}  # the first run waits for its upload's answer
    options = batch_options(tmp_path)
    box: dict[str, Any] = {}

    def first_run() -> None:
        box["first"] = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)

    worker = threading.Thread(target=first_run)
    worker.start()
    try:
        assert server.holding.wait(30), "the first run never uploaded"
        with pytest.raises(BatchError, match="another run of this evaluation holds") as info:
            evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
        (state_file,) = (tmp_path / "jobs").glob("*.json")
        assert str(state_file) in str(info.value)
    finally:
        uploaded.set()
        worker.join(30)
    assert not worker.is_alive()
    assert box["first"]["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert (server.uploads, server.created) == (1, 1)
    assert list(tmp_path.joinpath("jobs").iterdir()) == []  # no state, no lock file left


def test_direct_follow_ups_are_priced_without_the_batch_discount(
    server: BatchServer, tmp_path: Path
) -> None:
    """Before, the direct follow-ups' tokens were priced at half the price."""
    server.drop = {f"r{i}-m0-c0" for i in range(4)}  # every answer comes back directly
    reports = Reports()
    evaluate(
        DATA,
        ["context_recall"],
        llm=judge(server),
        batch_api=batch_options(
            tmp_path, reports, retry_direct=True, input_price=1.0, output_price=2.0
        ),
    )
    report = reports.last
    assert report.direct_requests == 4
    assert (report.direct_input_tokens, report.direct_output_tokens) == (
        report.input_tokens,
        report.output_tokens,
    )
    full = (report.input_tokens * 1.0 + report.output_tokens * 2.0) / 1_000_000
    assert report.batch_cost == 0
    assert report.followup_cost == pytest.approx(full)
    assert report.total_cost == pytest.approx(full)
    assert report.direct_cost == pytest.approx(full)
    assert "for the direct follow-ups" in report.summary()


def test_direct_and_batch_tokens_are_priced_apart(server: BatchServer, tmp_path: Path) -> None:
    server.drop = {"r2-m0-c0"}
    reports = Reports()
    evaluate(
        DATA,
        ["context_recall"],
        llm=judge(server),
        batch_api=batch_options(
            tmp_path, reports, retry_direct=True, input_price=1.0, output_price=1.0
        ),
    )
    report = reports.last
    direct = (report.direct_input_tokens + report.direct_output_tokens) / 1_000_000
    batched = (report.input_tokens + report.output_tokens) / 1_000_000 - direct
    assert 0 < direct < batched
    assert report.batch_cost == pytest.approx(batched / 2)
    assert report.followup_cost == pytest.approx(direct)
    assert report.total_cost == pytest.approx(batched / 2 + direct)


def test_a_keyboard_interrupt_in_on_result_stops_a_batch_run_like_ctrl_c(
    server: BatchServer, tmp_path: Path
) -> None:
    """Before, the KeyboardInterrupt escaped evaluate() in batch mode."""
    seen: list[int] = []

    def stop_at_first(row: int, metric: str, result: Any) -> None:
        seen.append(row)
        raise KeyboardInterrupt

    options = batch_options(tmp_path)
    try:
        result = evaluate(
            DATA, ["context_recall"], llm=judge(server), batch_api=options, on_result=stop_at_first
        )
    except KeyboardInterrupt:  # caught here: it would end the whole test session
        pytest.fail("the KeyboardInterrupt of on_result escaped evaluate()")
    assert result.interrupted
    assert seen == [0]
    assert [r.status("context_recall") for r in result.rows] == ["scored"] + ["not_run"] * 3
    again = evaluate(DATA, ["context_recall"], llm=judge(server), batch_api=options)
    assert again["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert (server.uploads, server.created) == (1, 1)  # the state was kept: nothing sent again


def test_the_state_is_private_and_names_no_credentials(server: BatchServer, tmp_path: Path) -> None:
    """Before, the state was world-readable and its endpoint kept the URL's password."""
    import os
    import stat

    server.expire, server.partial = True, 1  # the job is left behind for a re-run
    base = server.base_url.replace("http://", "http://user:s3cret@")
    old = os.umask(0o022)
    try:
        evaluate(
            DATA,
            ["context_recall"],
            llm=judge(server, base_url=base),
            batch_api=batch_options(tmp_path),
        )
    finally:
        os.umask(old)
    (state_file,) = (tmp_path / "jobs").glob("*.json")
    assert stat.S_IMODE(state_file.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    text = state_file.read_text()
    assert "s3cret" not in text
    assert json.loads(text)["endpoints"] == [f"judge-model at {server.base_url.rstrip('/')}"]


def test_the_judge_label_drops_credentials_and_query() -> None:
    from langchain_ragmetrics.evaluation._batch_requests import BatchJudge

    llm = ChatOpenAI(model="m", base_url="http://user:pw@127.0.0.1:9/v1?api-key=k2", api_key="test")
    assert BatchJudge(0, llm).label == "m at http://127.0.0.1:9/v1"


def test_ctrl_c_before_anything_was_sent_says_so(
    server: BatchServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before, it said batches kept running at the service when none had been sent."""
    from langchain_ragmetrics.evaluation import _run

    checked = _run.preflight_metrics

    def interrupted_preflight(*args: Any, **kwargs: Any) -> None:
        if kwargs.get("call"):
            raise KeyboardInterrupt
        checked(*args, **kwargs)

    monkeypatch.setattr(_run, "preflight_metrics", interrupted_preflight)
    result = evaluate(
        DATA, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path)
    )
    assert result.interrupted
    err = capsys.readouterr().err
    assert "Interrupted: nothing was sent to the Batch API." in err
    assert "keep running" not in err
    assert server.uploads == server.created == 0


def test_requests_of_an_expired_batch_count_as_sent(server: BatchServer, tmp_path: Path) -> None:
    """Before, only the requests the batch answered counted as sent."""
    server.expire, server.partial = True, 1
    reports = Reports()
    evaluate(
        DATA, ["context_recall"], llm=judge(server), batch_api=batch_options(tmp_path, reports)
    )
    report = reports.last
    assert (report.sent, report.attempts, report.retried) == (4, 4, 0)
    assert (report.answered, report.failed) == (1, 3)


def test_an_azure_judge_is_refused_before_any_request(server: BatchServer, tmp_path: Path) -> None:
    """Before, it passed the check and failed at the upload."""
    from langchain_openai import AzureChatOpenAI

    llm = AzureChatOpenAI(
        azure_endpoint=server.url,
        azure_deployment="judge-model",
        api_version="2024-10-21",
        api_key="test",
        max_retries=0,
        temperature=0,
    )
    with pytest.raises(BatchError, match="does not support Azure OpenAI"):
        evaluate(DATA, ["context_recall"], llm=llm, batch_api=batch_options(tmp_path))
    assert server.operations == []
    assert server.count() == 0


def test_direct_follow_ups_keep_the_direct_paths_concurrency_and_rate_limit(
    server: BatchServer, tmp_path: Path
) -> None:
    """Before, they ran on 8 threads of their own, outside max_concurrency and the rate limit.

    ``evaluate`` hands its engine to the run; here the run gets one directly.
    """
    from langchain_ragmetrics import RagSample
    from langchain_ragmetrics._engine import ScoringEngine
    from langchain_ragmetrics.evaluation._batch_run import BatchRun
    from langchain_ragmetrics.evaluation._run import prepare_metrics
    from tests._support.concurrency import Peak

    class CountingLimiter:
        def __init__(self) -> None:
            self.asked = 0

        def acquire(self, *, blocking: bool = True) -> bool:
            self.asked += 1
            return True

    metrics = prepare_metrics(METRICS, llm=judge(server))
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    samples = [RagSample.model_validate(row) for row in rows]
    server.drop = {f"r{r}-m{m}-c{c}" for r in range(4) for m in range(4) for c in range(2)}
    peak = Peak(2, 20, lexical_judge())
    server.script = peak
    engine = ScoringEngine(max_concurrency=2)
    limiter = CountingLimiter()
    engine.gate.rate_limiter = limiter  # type: ignore[assignment]
    results: dict[tuple[int, int], Any] = {}
    run = BatchRun(
        samples=samples,
        metrics=metrics,
        columns=METRICS,
        options=batch_options(tmp_path, retry_direct=True),
        record=lambda row, col, result: results.__setitem__((row, col), result),
        preflight=None,
        engine=engine,
    )
    assert run.execute()
    assert server.count() == 20
    assert peak.peak == 2, peak.peak
    assert limiter.asked == 20
    assert len(results) == 16
    assert all(not r.failed for r in results.values())


def test_evaluate_hands_its_limits_to_the_direct_follow_ups(
    server: BatchServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``evaluate(max_concurrency=2, batch_api=...)``: the follow-ups sent directly run on
    the run's own engine and stay within 2 at a time (before, an engine of the batch run's
    own, 16 at a time)."""
    from langchain_ragmetrics.evaluation._batch_run import BatchRun
    from tests._support.concurrency import Peak

    engines: list[Any] = []
    built = BatchRun.__init__

    def spy(run: BatchRun, **options: Any) -> None:
        engines.append(options.get("engine"))
        built(run, **options)

    monkeypatch.setattr(BatchRun, "__init__", spy)
    server.drop = {f"r{r}-m{m}-c{c}" for r in range(4) for m in range(4) for c in range(2)}
    peak = Peak(2, 20, lexical_judge())
    server.script = peak
    options = batch_options(tmp_path, retry_direct=True)
    result = evaluate(
        DATA, METRICS, llm=judge(server), batch_api=options, max_concurrency=2, preflight=False
    )
    (engine,) = engines
    assert engine is not None
    assert engine.max_concurrency == 2
    assert server.count() == 20
    assert peak.peak == 2
    assert not any(r is None or r.failed for m in METRICS for r in result.results_of(m))
