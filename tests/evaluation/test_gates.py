import pytest

from langchain_ragmetrics._errors import RagMetricsError
from langchain_ragmetrics.evaluation import QualityGateError
from langchain_ragmetrics.evaluation._gates import gate_problems, parse_thresholds
from tests._support.results import FAILED, build_result

RESULT = build_result(
    {
        "context_recall": [1.0, 0.5, 0.6, FAILED],  # mean of scored rows 0.7
        "context_precision": [0.5, 0.5, 0.8, 0.6],  # mean 0.6
    }
)


def test_check_passes_and_returns_the_result() -> None:
    assert RESULT.check(fail_under={"context_recall": 0.7, "context_precision": 0.6}) is RESULT
    assert RESULT.check(max_failed_rate=0.125) is RESULT


def test_check_names_every_missed_gate() -> None:
    with pytest.raises(QualityGateError) as caught:
        RESULT.check(
            fail_under={"context_recall": 0.75, "context_precision": 0.65}, max_failed_rate=0.1
        )
    error = caught.value
    assert isinstance(error, AssertionError)  # pytest shows it as a failed assertion
    assert isinstance(error, RagMetricsError)
    assert error.problems == [
        "context_recall: mean 0.7000 is below 0.75",
        "context_precision: mean 0.6000 is below 0.65",
        "1 of 8 jobs failed (12.5%), more than the allowed 10.0%",
    ]
    assert str(error).startswith("quality gate failed:\n  - context_recall: mean 0.7000")


def test_failed_rows_do_not_pull_the_mean_but_count_as_failures() -> None:
    # the mean is over scored rows: the failed row is left out of 0.7
    assert gate_problems(RESULT, fail_under={"context_recall": 0.7}) == []
    assert gate_problems(RESULT, max_failed_rate=0.0) == [
        "1 of 8 jobs failed (12.5%), more than the allowed 0.0%"
    ]


def test_every_job_failed_never_passes() -> None:
    broken = build_result({"context_recall": [FAILED, FAILED]})
    with pytest.raises(QualityGateError, match=r"every job failed \(2 of 2\); first error: "):
        broken.check()
    problems = gate_problems(broken, fail_under={"context_recall": 0.1})
    assert problems[0] == "context_recall: no row was scored (threshold 0.1)"


def test_unknown_metric_and_bad_rate() -> None:
    with pytest.raises(KeyError, match="did not score; it has context_recall, context_precision"):
        RESULT.check(fail_under={"faithfulness": 0.5})
    with pytest.raises(ValueError, match="between 0 and 1"):
        RESULT.check(max_failed_rate=2)


def test_parse_thresholds() -> None:
    assert parse_thresholds("context_recall=0.7, Context_Precision=0.6,") == {
        "context_recall": 0.7,
        "context_precision": 0.6,
    }
    for bad, message in [
        ("context_recall", "expected metric=threshold"),
        ("context_recall=high", "must be a number"),
        ("context_recall=1.5", "between 0 and 1"),
        (" , ", "no threshold given"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_thresholds(bad)


@pytest.mark.parametrize("threshold", [float("nan"), -1, 1.5, "0.7", True])
def test_a_threshold_that_is_not_a_fraction_is_refused_by_name(threshold: object) -> None:
    """Before, a NaN threshold passed every gate (``mean < nan`` is False), -1 passed, and
    "0.7" raised a raw comparison error."""
    with pytest.raises(ValueError, match=r"`fail_under\['context_recall'\]` must be a number"):
        RESULT.check(fail_under={"context_recall": threshold})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="`max_failed_rate` must be a number between 0 and 1"):
        RESULT.check(max_failed_rate=threshold)  # type: ignore[arg-type]


def test_an_interrupted_run_never_passes() -> None:
    """Before, its rates counted jobs that never ran and its means covered only a few rows."""
    result = build_result({"context_recall": [0.9, None, None, None]}, interrupted=True)
    assert gate_problems(result, fail_under={"context_recall": 0.5}) == [
        "the run was interrupted: 3 of 4 jobs never ran"
    ]


def test_a_metric_given_two_thresholds_is_refused() -> None:
    """Before, the last one silently won (a typo in CI could lower the bar)."""
    with pytest.raises(ValueError, match=r"context_recall is given two thresholds, 0\.9 and 0\.1"):
        parse_thresholds("context_recall=0.9,context_recall=0.1")
    assert parse_thresholds("context_recall=0.9,context_recall=0.9") == {"context_recall": 0.9}
