import asyncio
import itertools
import json
import math
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from langchain_core.callbacks import BaseCallbackHandler

from langchain_ragmetrics import (
    ContextPrecision,
    ContextRecall,
    IDBasedContextRecall,
    MetricResult,
    NonLLMContextRecall,
    RagSample,
)
from langchain_ragmetrics.evaluation import (
    DatasetError,
    JudgeSetupError,
    MissingFieldError,
    UnknownMetricError,
    aevaluate,
    evaluate,
)
from tests._support.concurrency import Peak, wait_until
from tests._support.judges import (
    EINSTEIN_CONTEXT,
    EINSTEIN_REFERENCE,
    EINSTEIN_VERDICTS,
    keyword_precision,
    payload,
)
from tests._support.openai_server import JudgeRequest, JudgeServer, reply_error, reply_hold, router

EINSTEIN = {
    "question": "What can you tell me about Albert Einstein?",
    "contexts": [EINSTEIN_CONTEXT, "Paris is the capital of France."],
    "reference": EINSTEIN_REFERENCE,
}
ROWS = [{**EINSTEIN, "question": f"{EINSTEIN['question']} #{i}"} for i in range(3)]


def einstein_router(**extra: Any) -> Callable[[JudgeRequest], Any]:
    return router(
        RecallStatements=EINSTEIN_VERDICTS, ContextVerdicts=keyword_precision("Einstein"), **extra
    )


def test_einstein_dataset_file_scores_usage_and_rows(
    tmp_path: Path, judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = einstein_router()
    path = tmp_path / "einstein.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS), encoding="utf-8")
    result = evaluate(
        path, [ContextRecall(), ContextPrecision()], llm=make_judge(), show_progress=False
    )
    assert result.metrics == ["context_recall", "context_precision"]
    assert result["context_recall"] == [0.5, 0.5, 0.5]
    assert result["context_precision"] == [1.0, 1.0, 1.0]  # the useful context ranks first
    assert result.source == str(path)
    assert result.rows[1].location == f"{path}, row 2 (line 2)"
    assert result.rows[1].sample.question == ROWS[1]["question"]
    detail = result.rows[0].results["context_recall"]
    assert detail is not None
    assert detail.reason == "2 of 4 reference sentences can be attributed to the contexts."
    assert len(detail.details["statements"]) == 4
    summary = result.aggregates["context_recall"]
    assert (summary.mean, summary.count, summary.failed) == (0.5, 3, 0)
    assert summary.judge == "judge-model"
    assert result.judge_calls == judge_server.count() == 6
    stats = judge_server.stats
    assert result.usage.input_tokens == stats.prompt_tokens
    assert result.usage.output_tokens == stats.completion_tokens
    assert not result.interrupted


def test_llm_fills_only_metrics_without_a_judge_and_nothing_is_mutated(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = einstein_router()
    bare = ContextRecall()
    own = ContextPrecision(llm=make_judge(model="own-judge"))
    result = evaluate(ROWS[:1], [bare, own], llm=make_judge(model="given"), show_progress=False)
    assert result.aggregates["context_recall"].judge == "given"
    assert result.aggregates["context_precision"].judge == "own-judge"
    assert bare.llm is None
    assert bare.language is None
    assert sorted(r.model or "" for r in judge_server.requests) == ["given", "own-judge"]


def test_language_applies_to_metrics_without_one(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = keyword_precision("岸田")
    # The Japanese precision seed: verdicts [0, 1, 1] -> (0 + 1/2 + 2/3) / 2.
    sample = {
        "question": "日本の首相は誰ですか?",
        "contexts": [
            "東京は日本の首都です",
            "岸田文雄氏は2021年10月から日本の首相を務めています",
            "岸田首相は外交政策に力を入れています",
        ],
        "reference": "岸田文雄氏が現在の日本の首相です",
    }
    metric = ContextPrecision(llm=make_judge())
    result = evaluate([sample], [metric], language="ja", show_progress=False)
    assert result["context_precision"][0] == pytest.approx(0.5833, abs=1e-4)
    assert "Japanese" in judge_server.requests[0].system
    assert metric.language is None


def test_all_jobs_share_one_concurrency_limit(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    answers = einstein_router()
    peak = Peak(width=4, total=6, answer=answers)
    judge_server.script = peak
    result = evaluate(
        ROWS,
        [ContextRecall(), ContextPrecision()],
        llm=make_judge(),
        max_concurrency=4,
        show_progress=False,
    )
    assert peak.peak == 4  # 6 jobs, 4 in flight at most and at once: both metrics, several rows
    assert {r.schema_name for r in judge_server.requests} == {"RecallStatements", "ContextVerdicts"}
    assert result["context_recall"] == [0.5, 0.5, 0.5]


def test_a_failed_job_is_nan_with_its_error_and_the_run_goes_on(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    def script(req: JudgeRequest) -> Any:
        if payload(req)["question"].endswith("#1"):
            return reply_error(400, "the judge refused")
        return EINSTEIN_VERDICTS

    judge_server.script = script
    result = evaluate(ROWS, [ContextRecall(llm=make_judge())], show_progress=False)
    scores = result["context_recall"]
    assert scores[0] == scores[2] == 0.5
    assert math.isnan(scores[1] or 0.0)
    failed = result.rows[1].results["context_recall"]
    assert failed is not None
    assert "the judge refused" in (failed.error or "")
    assert result.aggregates["context_recall"].failed == 1
    assert result.aggregates["context_recall"].mean == 0.5
    assert "the judge refused" in str(result)


def test_raise_exceptions_stops_at_the_first_error() -> None:
    rows = [{"question": "q", "contexts": ["c"], "reference_contexts": ["c"]}, {"contexts": ["x"]}]
    with pytest.raises(ValueError, match="needs `reference_contexts`"):
        evaluate(rows, [NonLLMContextRecall()], raise_exceptions=True, show_progress=False)


def test_field_missing_in_every_row_fails_before_any_judge_call(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    rows = [{"question": "q", "contexts": ["c"]}, {"question": "q2", "contexts": ["d"]}]
    with pytest.raises(MissingFieldError) as info:
        evaluate(rows, [ContextRecall(), IDBasedContextRecall()], llm=make_judge())
    message = str(info.value)
    assert message.startswith("dataset: none of the 2 rows has what these metrics need:")
    assert "context_recall: ContextRecall needs `reference`" in message
    assert "`ground_truth`" in message  # RAGAS names are suggested
    assert "id_based_context_recall: IDBasedContextRecall needs `retrieved_context_ids`" in message
    assert judge_server.count() == 0


def test_field_missing_in_some_rows_fails_those_rows_only() -> None:
    rows = [
        {"question": "q1", "contexts": ["a"], "reference_contexts": ["a"]},
        {"question": "q2", "contexts": ["b"]},
    ]
    result = evaluate(rows, ["non_llm_context_recall"], show_progress=False)
    assert result["non_llm_context_recall"][0] == 1.0
    assert result.failures() == [
        (
            "dataset, row 2 (index 1)",
            "non_llm_context_recall",
            "ValueError: NonLLMContextRecall needs `reference_contexts`",
        )
    ]


def test_a_numpy_preflight_comes_back_as_a_plain_bool() -> None:
    """With the Batch API the pre-flight is skipped only for ``preflight is False``: a NumPy
    False (from a pandas frame) must come back as Python's False, not be taken as "on"."""
    import numpy as np

    from langchain_ragmetrics.evaluation import BatchOptions
    from langchain_ragmetrics.evaluation._run import _run_mode

    options, preflight = _run_mode(True, np.bool_(False))
    assert isinstance(options, BatchOptions)
    assert preflight is False
    assert _run_mode(False, np.bool_(True)) == (None, True)
    assert _run_mode(False, None) == (None, None)
    with pytest.raises(TypeError, match=r"^`preflight` must be True, False or None, got 1$"):
        _run_mode(False, 1)


@pytest.mark.parametrize("option", ["show_progress", "raise_exceptions"])
@pytest.mark.parametrize("value", ["no", 0, None])
def test_a_switch_of_evaluate_that_is_not_a_bool_is_refused(option: str, value: object) -> None:
    """Before, ``raise_exceptions="no"`` was truthy and made a failed judge call raise."""
    with pytest.raises(TypeError, match=rf"^`{option}` must be True or False, got {value!r}$"):
        evaluate([{"contexts": ["c"]}], ["non_llm_context_recall"], **{option: value})


def test_bad_rows_and_unknown_metrics_raise_before_scoring() -> None:
    with pytest.raises(UnknownMetricError, match="known metrics: context_entity_recall, "):
        evaluate([{"question": "q"}], ["context_recal"])
    with pytest.raises(DatasetError, match=r"row 2 \(index 1\), field `contexts`"):
        evaluate([{"contexts": ["a"]}, {"contexts": 5}], ["non_llm_context_recall"])
    with pytest.raises(ValueError, match="pass at least one metric"):
        evaluate([{"contexts": ["a"]}], [])
    with pytest.raises(ValueError, match="unsupported language 'klingon'"):
        evaluate([{"contexts": ["a"]}], ["non_llm_context_recall"], language="klingon")
    for off in (None, 0, "no"):  # before, anything but False turned on the Batch API
        with pytest.raises(TypeError, match=r"`batch_api` must be True, False or BatchOptions"):
            evaluate([{"contexts": ["a"]}], ["non_llm_context_recall"], batch_api=off)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"`batch_api` must be True, False or BatchOptions"):
            asyncio.run(aevaluate([{"contexts": ["a"]}], ["non_llm_context_recall"], batch_api=off))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`preflight` must be True, False or None, got 'no'"):
        evaluate([{"contexts": ["a"]}], ["non_llm_context_recall"], preflight="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"`on_result` must be a function .*, got int"):
        evaluate([{"contexts": ["a"]}], ["non_llm_context_recall"], on_result=5)  # type: ignore[arg-type]


def test_no_judge_and_no_key_says_how_to_configure_one() -> None:
    with pytest.raises(JudgeSetupError) as info:
        evaluate(ROWS, ["context_recall"], show_progress=False)
    message = str(info.value)
    assert "OPENAI_API_KEY" in message
    assert "http://localhost:11434/v1" in message
    assert "vLLM" in message


def test_dataframe_input_and_metric_names(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = einstein_router()
    frame = pd.DataFrame(
        {
            "user_input": [r["question"] for r in ROWS],
            "retrieved_contexts": [r["contexts"] for r in ROWS],
            "reference": [r["reference"] for r in ROWS],
        }
    )
    result = evaluate(frame, ["context_recall"], llm=make_judge(), show_progress=False)
    assert result["context_recall"] == [0.5, 0.5, 0.5]
    assert result.rows[2].location == "DataFrame, row 3 (index 2)"


def test_repeated_calls_with_the_same_judge(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    # langchain-openai shares one async HTTP client per base URL; evaluate() must keep working
    # from one call to the next.
    judge_server.script = einstein_router()
    judge = make_judge()
    for _ in range(3):
        result = evaluate(ROWS[:1], ["context_recall"], llm=judge, show_progress=False)
        assert result["context_recall"] == [0.5]


async def test_evaluate_inside_a_running_event_loop(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = einstein_router()
    asyncio.get_running_loop()  # as in Jupyter: a loop is running in this thread
    result = evaluate(ROWS, ["context_recall"], llm=make_judge(), show_progress=False)
    assert result["context_recall"] == [0.5, 0.5, 0.5]


async def test_aevaluate(judge_server: JudgeServer, make_judge: Callable[..., Any]) -> None:
    judge_server.script = einstein_router()
    result = await aevaluate(
        ROWS, [ContextRecall(), ContextPrecision()], llm=make_judge(), show_progress=False
    )
    assert result["context_recall"] == [0.5, 0.5, 0.5]
    assert result.judge_calls == 6


def test_ctrl_c_from_a_callback_returns_what_was_scored(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    answer, asked, release = einstein_router(), itertools.count(), threading.Event()

    def script(req: JudgeRequest) -> Any:
        # From the third request on, held until the run has returned: a job started while
        # on_result ran cannot finish before the interrupt, whatever the machine's load.
        reply = answer(req)
        return reply if next(asked) < 2 else reply_hold(release, reply)

    judge_server.script = script
    seen: list[tuple[int, str]] = []

    def on_result(row: int, metric: str, result: MetricResult) -> None:
        seen.append((row, metric))
        if len(seen) == 2:
            raise KeyboardInterrupt

    rows = ROWS * 4
    try:
        result = evaluate(
            rows, ["context_recall"], llm=make_judge(), max_concurrency=1, on_result=on_result
        )
    finally:
        release.set()
    assert result.interrupted
    scores = result["context_recall"]
    assert scores[:2] == [0.5, 0.5]
    assert scores[2:] == [None] * (len(rows) - 2)
    summary = result.aggregates["context_recall"]
    assert (summary.count, summary.not_run, summary.failed) == (2, len(rows) - 2, 0)
    assert f"Interrupted: 2 of {len(rows)} jobs finished" in str(result)
    assert [r.status("context_recall") for r in result.rows[1:3]] == ["scored", "not_run"]


async def test_ctrl_c_from_a_callback_in_aevaluate(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = einstein_router()

    def on_result(row: int, metric: str, result: MetricResult) -> None:
        raise KeyboardInterrupt

    result = await aevaluate(
        ROWS, ["context_recall"], llm=make_judge(), max_concurrency=1, on_result=on_result
    )
    assert result.interrupted
    assert result["context_recall"] == [0.5, None, None]


def test_sigint_while_waiting_returns_partial_results(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    release = threading.Event()

    def script(req: JudgeRequest) -> Any:
        if payload(req)["question"].endswith("#0"):
            return EINSTEIN_VERDICTS
        return reply_hold(release, EINSTEIN_VERDICTS)

    judge_server.script = script

    def interrupt() -> None:
        wait_until(lambda: judge_server.count() >= 3, "row 0 done, rows 1 and 2 held")
        signal.raise_signal(signal.SIGINT)  # Ctrl-C, delivered to the waiting main thread

    thread = threading.Thread(target=interrupt)
    thread.start()
    try:
        result = evaluate(
            ROWS * 2, ["context_recall"], llm=make_judge(), max_concurrency=2, show_progress=False
        )
    finally:
        release.set()
        thread.join(10)
    assert result.interrupted
    assert result["context_recall"] == [0.5, None, None, None, None, None]


def test_config_reaches_the_judge_runs(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = einstein_router()

    class Counter(BaseCallbackHandler):
        def __init__(self) -> None:
            self.starts = 0
            self.tags: list[str] = []

        def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
            self.starts += 1
            self.tags.extend(kwargs.get("tags") or [])

    counter = Counter()
    evaluate(
        ROWS,
        ["context_recall"],
        llm=make_judge(),
        config={"callbacks": [counter], "tags": ["offline-eval"]},
        show_progress=False,
    )
    assert counter.starts == 3
    assert "offline-eval" in counter.tags


def test_evaluate_can_be_called_from_its_own_callback() -> None:
    rows = [{"contexts": ["a"], "reference_contexts": ["a"]}]
    inner: list[float | None] = []

    def on_result(row: int, metric: str, result: MetricResult) -> None:
        # Callbacks run on the caller's thread and the run has no event loop: nesting is fine.
        nested = evaluate(rows, ["non_llm_context_recall"], show_progress=False)
        inner.extend(nested["non_llm_context_recall"])

    outer = evaluate(rows, ["non_llm_context_recall"], on_result=on_result, show_progress=False)
    assert outer["non_llm_context_recall"] == inner == [1.0]


def test_samples_are_kept_as_given() -> None:
    sample = RagSample(
        question="q", contexts=["a", "b"], reference_contexts=["a"], metadata={"id": 7}
    )
    result = evaluate([sample], [NonLLMContextRecall()], show_progress=False)
    assert result.rows[0].sample == sample
    assert result.judge_calls == 0
