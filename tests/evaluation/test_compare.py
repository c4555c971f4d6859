import math

import numpy as np
import pytest

from langchain_ragmetrics.evaluation import ComparisonError
from langchain_ragmetrics.evaluation._compare import bootstrap_ci
from tests._support.results import FAILED, build_result

BASE = build_result(
    {"context_recall": [1.0, 0.8, 0.6, 0.9, 0.7], "context_precision": [0.5, 0.5, 0.5, 0.5, 0.5]},
    ids=["a", "b", "c", "d", "e"],
    source="base.jsonl",
)
NEW = build_result(
    # rows arrive in another order; "e" is gone and "f" is new; "b" failed this time
    {"context_recall": [0.2, FAILED, 0.6, 1.0, 0.4], "context_precision": [0.5] * 5},
    ids=["a", "b", "c", "d", "f"],
    source="new.jsonl",
)


def test_per_metric_means_paired_change_and_interval() -> None:
    comparison = NEW.compare(BASE)
    assert (comparison.matched, comparison.only_base, comparison.only_new) == (4, 1, 1)
    recall = comparison.metrics["context_recall"]
    assert recall.base_mean == pytest.approx(0.8)
    assert recall.new_mean == pytest.approx(0.55)
    # paired over a, c, d (b failed in the new run): -0.8, 0, +0.1
    assert recall.pairs == 3
    assert recall.diff == pytest.approx(-0.7 / 3)
    assert recall.ci_low <= recall.diff <= recall.ci_high
    assert recall.ci_low == pytest.approx(-0.8)  # the bootstrap cannot go below the worst pair
    assert (recall.worse, recall.better) == (1, 1)
    precision = comparison.metrics["context_precision"]
    assert (precision.diff, precision.ci_low, precision.ci_high) == (0.0, 0.0, 0.0)


def test_worst_rows_come_with_both_reasons() -> None:
    worst = NEW.compare(BASE).worst
    assert [(w.sample_id, w.metric) for w in worst] == [("a", "context_recall")]
    change = worst[0]
    assert (change.base_score, change.new_score) == (1.0, 0.2)
    assert change.delta == pytest.approx(-0.8)
    assert change.base_reason == "context_recall reason 0"
    assert change.new_reason == "context_recall reason 0"
    assert change.details["verdicts"][0]["useful"] is False  # type: ignore[index]
    assert change.location == "new.jsonl, row 1"


def test_regressions_use_max_drop() -> None:
    comparison = NEW.compare(BASE)
    assert comparison.regressions(0.5) == []
    (line,) = comparison.regressions(0.05)
    assert line.startswith("context_recall: dropped by 0.2333 (95% CI of the change [")
    assert "3 rows), more than 0.05" in line
    assert NEW.compare(NEW).regressions(0.0) == []


def test_the_text_view() -> None:
    text = NEW.compare(BASE).summary()
    assert text.startswith(
        "Comparison: new.jsonl against base.jsonl: 4 samples matched, 1 only in base, 1 only in new"
    )
    recall_line = next(line for line in text.splitlines() if line.startswith("context_recall "))
    assert recall_line.split()[:4] == ["context_recall", "0.8000", "0.5500", "-0.2333"]
    assert "  - [context_recall] 1.00 -> 0.20 new.jsonl, row 1: question 0" in text
    assert "      now:    context_recall reason 0" in text


def test_bootstrap_is_seeded_and_sane() -> None:
    diffs = np.random.default_rng(1).normal(-0.1, 0.05, size=400)
    first = bootstrap_ci(diffs, seed=7)
    assert bootstrap_ci(diffs, seed=7) == first  # reproducible
    assert bootstrap_ci(diffs, seed=8) != first
    low, high = first
    assert low < diffs.mean() < high
    assert high - low == pytest.approx(2 * 1.96 * diffs.std() / math.sqrt(400), rel=0.25)
    assert bootstrap_ci(np.asarray([0.3])) == (0.3, 0.3)
    assert all(math.isnan(v) for v in bootstrap_ci(np.asarray([])))


def test_rows_without_ids_match_by_question_and_reference() -> None:
    base = build_result({"m": [0.9, 0.1]}, questions=["q1", "q2"])
    new = build_result({"m": [0.1, 0.9]}, questions=["q2", "q1"])  # same rows, other order
    comparison = new.compare(base)
    assert comparison.matched == 2
    assert comparison.metrics["m"].diff == pytest.approx(0.0)


def test_runs_that_cannot_be_compared() -> None:
    with pytest.raises(ComparisonError, match="share no metric"):
        build_result({"a": [1.0]}).compare(build_result({"b": [1.0]}))
    with pytest.raises(ComparisonError, match="share no sample"):
        build_result({"a": [1.0]}, ids=["x"]).compare(build_result({"a": [1.0]}, ids=["y"]))


def _binomial_quantile(n: int, p: float, q: float) -> int:
    """The smallest k with P(Binomial(n, p) <= k) >= q (exact, from math.comb)."""
    total = 0.0
    for k in range(n + 1):
        total += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        if total >= q:
            return k
    return n


def test_the_last_pair_alone_can_decide_the_interval() -> None:
    # Only the last of ten pairs changed: a resample's mean is k/10 * 0.5 where k, the number of
    # times the last pair was drawn, is Binomial(10, 1/10). The interval's ends are that
    # distribution's 2.5 % and 97.5 % quantiles; a bootstrap that never draws the last pair
    # gives (0, 0).
    n, delta = 10, 0.5
    base = build_result({"context_recall": [0.5] * n}, ids=[f"s{i}" for i in range(n)])
    new = build_result(
        {"context_recall": [0.5] * (n - 1) + [0.5 + delta]}, ids=[f"s{i}" for i in range(n)]
    )
    recall = new.compare(base).metrics["context_recall"]
    assert recall.pairs == n
    assert recall.diff == pytest.approx(delta / n)
    low = _binomial_quantile(n, 1 / n, 0.025) * delta / n
    high = _binomial_quantile(n, 1 / n, 0.975) * delta / n
    assert (low, high) == (0.0, pytest.approx(0.15))
    assert (recall.ci_low, recall.ci_high) == (pytest.approx(low), pytest.approx(high))
    assert recall.better == 1


@pytest.mark.parametrize("max_drop", [float("nan"), -0.1, "0.05"])
def test_a_max_drop_that_is_not_a_fraction_is_refused(max_drop: object) -> None:
    """Before, ``regressions(nan)`` returned [] whatever had dropped."""
    with pytest.raises(ValueError, match="`max_drop` must be a number between 0 and 1"):
        NEW.compare(BASE).regressions(max_drop)  # type: ignore[arg-type]


def test_a_new_run_that_scored_nothing_or_lacks_the_metric_is_a_regression() -> None:
    """Before, both passed --max-drop: nothing paired meant nothing compared."""
    ids = ["a", "b", "c"]
    base = build_result(
        {"context_recall": [0.9, 0.8, 0.7], "context_precision": [1.0] * 3}, ids=ids
    )
    all_failed = build_result(
        {"context_recall": [FAILED] * 3, "context_precision": [1.0] * 3}, ids=ids
    )
    (line,) = all_failed.compare(base).regressions(0.5)
    assert line.startswith("context_recall: no row scored in the base run has a score")
    lacking = build_result({"context_precision": [1.0] * 3}, ids=ids)
    comparison = lacking.compare(base)
    assert comparison.missing == ["context_recall"]
    assert comparison.regressions(0.5) == ["context_recall: the new run does not have this metric"]
