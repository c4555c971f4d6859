import csv
import json
import math
import sys
from pathlib import Path

import pytest

from langchain_ragmetrics import MetricResult, RagSample, Usage
from langchain_ragmetrics._dataset import load_dataset
from langchain_ragmetrics.evaluation import EvaluationResult, EvaluationRow
from langchain_ragmetrics.evaluation._result import column_names

NAN = math.nan


def make_result(*, interrupted: bool = False) -> EvaluationResult:
    def recall(score: float | None, **kw: object) -> MetricResult:
        return MetricResult(metric="context_recall", score=score, **kw)  # type: ignore[arg-type]

    def precision(score: float | None, **kw: object) -> MetricResult:
        return MetricResult(metric="context_precision", score=score, **kw)  # type: ignore[arg-type]

    samples = [
        RagSample(question="q1", contexts=["a", "b"], reference="r1", metadata={"topic": "x"}),
        RagSample(question="q2", contexts=["c"], metadata={"context_recall": "clash"}),
        RagSample(question="q3", contexts=[], reference_context_ids=["d1"]),
    ]
    results: list[dict[str, MetricResult | None]] = [
        {
            "context_recall": recall(
                0.5,
                reason="1 of 2",
                details={"statements": [{"attributed": True}]},
                usage=Usage(input_tokens=100, output_tokens=20, judge_calls=1),
                judge="judge-model",
            ),
            "context_precision": precision(
                1.0, usage=Usage(input_tokens=50, output_tokens=10, judge_calls=2)
            ),
        },
        {
            "context_recall": recall(NAN, error="TimeoutError: slow judge"),
            "context_precision": precision(None, reason="no reference"),
        },
        {"context_recall": None, "context_precision": precision(0.0, reason="none useful")},
    ]
    rows = [
        EvaluationRow(position=i, location=f"data.jsonl, row {i + 1}", sample=s, results=r)
        for i, (s, r) in enumerate(zip(samples, results, strict=True))
    ]
    return EvaluationResult(
        metrics=["context_recall", "context_precision"],
        rows=rows,
        source="data.jsonl",
        elapsed_s=1.5,
        interrupted=interrupted,
    )


def test_indexing_length_and_full_results() -> None:
    result = make_result()
    assert len(result) == 3
    scores = result["context_recall"]
    assert scores[0] == 0.5
    assert math.isnan(scores[1] or 0.0)
    assert scores[2] is None
    assert result["context_precision"] == [1.0, None, 0.0]
    assert [r.status("context_recall") for r in result.rows] == ["scored", "failed", "not_run"]
    assert result.results_of("context_precision")[1] is not None
    with pytest.raises(KeyError, match="it has context_recall, context_precision"):
        result["faithfulness"]


def test_aggregates_are_nan_aware() -> None:
    aggregates = make_result().aggregates
    recall = aggregates["context_recall"]
    assert (recall.mean, recall.min, recall.max) == (0.5, 0.5, 0.5)
    assert math.isnan(recall.std)  # one score: no sample deviation
    assert (recall.count, recall.failed, recall.skipped, recall.not_run) == (1, 1, 0, 1)
    assert recall.usage == Usage(input_tokens=100, output_tokens=20, judge_calls=1)
    assert recall.judge == "judge-model"
    precision = aggregates["context_precision"]
    assert precision.mean == 0.5
    assert precision.std == pytest.approx(math.sqrt(0.5))  # ddof=1, as pandas
    assert (precision.count, precision.failed, precision.skipped) == (2, 0, 1)


def test_usage_totals_and_failures() -> None:
    result = make_result()
    assert result.usage == Usage(input_tokens=150, output_tokens=30, judge_calls=3)
    assert result.judge_calls == 3
    assert result.failures() == [
        ("data.jsonl, row 2", "context_recall", "TimeoutError: slow judge")
    ]


def test_summary_table() -> None:
    text = str(make_result(interrupted=True))
    lines = text.splitlines()
    assert lines[0] == "Evaluation of data.jsonl: 3 samples x 2 metrics = 6 jobs in 1.50 s"
    assert lines[1].split() == [
        "metric", "mean", "std", "min", "max", "scored", "failed", "skipped", "not", "run"
    ]  # fmt: skip
    assert lines[3].split() == [
        "context_recall", "0.5000", "n/a", "0.5000", "0.5000", "1", "1", "0", "1"
    ]  # fmt: skip
    assert lines[4].split() == [
        "context_precision", "0.5000", "0.7071", "0.0000", "1.0000", "2", "0", "1", "0"
    ]  # fmt: skip
    assert lines[5] == "Judge calls: 3 (judge-model); tokens: 150 in + 30 out"
    assert "  - data.jsonl, row 2 [context_recall]: TimeoutError: slow judge" in lines
    assert lines[-1] == "Interrupted: 5 of 6 jobs finished; 1 did not run."
    assert repr(make_result()) == make_result().summary()


def test_to_pandas_columns() -> None:
    frame = make_result().to_pandas()
    assert list(frame.columns[:10]) == [
        "row",
        "question",
        "contexts",
        "context_ids",
        "answer",
        "reference",
        "reference_contexts",
        "reference_context_ids",
        "language",
        "topic",
    ]
    assert "metadata.context_recall" in frame.columns  # a metadata key never hides a score
    assert str(frame["context_recall"].dtype) == "float64"
    assert frame["context_recall"].isna().tolist() == [False, True, True]
    errors = frame["context_recall_error"]
    assert errors.isna().tolist() == [True, False, False]
    assert errors.tolist()[1:] == [
        "TimeoutError: slow judge",
        "not run: the evaluation was interrupted",
    ]
    assert frame.loc[0, "context_recall_details"] == {"statements": [{"attributed": True}]}
    assert frame["context_precision"].mean() == 0.5


def test_to_pandas_without_pandas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="pip install pandas"):
        make_result().to_pandas()


def test_to_jsonl_keeps_everything_and_loads_back(tmp_path: Path) -> None:
    path = make_result().to_jsonl(tmp_path / "out.jsonl")
    header, *records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert header["ragmetrics_run"]["metrics"] == ["context_recall", "context_precision"]
    assert [r["question"] for r in records] == ["q1", "q2", "q3"]
    assert records[0]["location"] == "data.jsonl, row 1"
    first = records[0]["results"]["context_recall"]
    assert first["status"] == "scored"
    assert first["score"] == 0.5
    assert first["usage"] == {
        "input_tokens": 100,
        "output_tokens": 20,
        "judge_calls": 1,
        "cache_hits": 0,
        "cache_misses": 0,
    }
    failed = records[1]["results"]["context_recall"]
    assert (failed["status"], failed["score"], failed["error"]) == (
        "failed",
        None,
        "TimeoutError: slow judge",
    )
    assert records[1]["results"]["context_precision"]["status"] == "skipped"
    assert records[2]["results"]["context_recall"]["status"] == "not_run"
    samples = load_dataset(path)  # a result file is a valid dataset again
    assert samples[2].reference_context_ids == ["d1"]
    assert samples[0].metadata["results"]["context_precision"]["score"] == 1.0


def test_to_csv_round_trips_through_the_loader(tmp_path: Path) -> None:
    path = make_result().to_csv(tmp_path / "out.csv")
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["contexts"] == '["a", "b"]'
    assert rows[0]["context_recall"] == "0.5"
    assert rows[1]["context_recall"] == "nan"
    assert rows[1]["context_precision"] == ""
    assert rows[2]["context_recall_error"] == "not run: the evaluation was interrupted"
    assert json.loads(rows[0]["context_recall_details"]) == {"statements": [{"attributed": True}]}
    samples = load_dataset(path)
    assert samples[0].contexts == ["a", "b"]
    assert samples[0].metadata["topic"] == "x"
    assert samples[2].reference_context_ids == ["d1"]


def test_column_names_are_unique() -> None:
    assert column_names(["a", "b", "a", "a_2", "a"]) == ["a", "b", "a_2", "a_2_2", "a_3"]
