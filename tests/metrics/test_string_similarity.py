import pytest

from langchain_ragmetrics import NonLLMContextPrecision, NonLLMContextRecall
from langchain_ragmetrics.metrics._string_similarity import similarity_matrix

RETRIEVED = [
    "Paris is the capital of France.",
    "Bananas are yellow.",
    "The Eiffel Tower is in Paris.",
]
REFERENCE = ["Paris is the capital of France!", "The Eiffel tower is in Paris."]


def test_similarity_matrix_shape_and_range() -> None:
    m = similarity_matrix(RETRIEVED, REFERENCE)
    assert m.shape == (3, 2)
    assert float(m.min()) >= 0.0
    assert float(m.max()) <= 1.0
    assert m[0, 0] > 0.9


def test_recall() -> None:
    result = NonLLMContextRecall().invoke(
        {"contexts": RETRIEVED[:2], "reference_contexts": REFERENCE}
    )
    assert result.score == 0.5
    assert result.details["recalled"] == [True, False]
    assert (
        NonLLMContextRecall().invoke({"contexts": RETRIEVED, "reference_contexts": REFERENCE}).score
        == 1.0
    )


def test_precision_is_average_precision() -> None:
    result = NonLLMContextPrecision().invoke(
        {"contexts": RETRIEVED, "reference_contexts": REFERENCE}
    )
    assert result.details["useful"] == [True, False, True]
    assert result.score == pytest.approx((1 + 2 / 3) / 2)


def test_threshold_and_measure_options() -> None:
    strict = NonLLMContextRecall(threshold=1.0).invoke(
        {"contexts": RETRIEVED, "reference_contexts": REFERENCE}
    )
    assert strict.score == 0.0
    loose = NonLLMContextRecall(similarity="token_set", threshold=0.9).invoke(
        {"contexts": RETRIEVED, "reference_contexts": REFERENCE}
    )
    assert loose.score == 1.0
    with pytest.raises(ValueError, match="threshold"):
        NonLLMContextRecall(threshold=2.0)


def test_edge_cases() -> None:
    assert (
        NonLLMContextRecall().invoke({"contexts": [], "reference_contexts": REFERENCE}).score == 0.0
    )
    nothing_to_recall = NonLLMContextRecall().invoke(
        {"contexts": RETRIEVED, "reference_contexts": []}
    )
    assert nothing_to_recall.score is None
    assert nothing_to_recall.skipped
    assert (
        NonLLMContextPrecision().invoke({"contexts": [], "reference_contexts": REFERENCE}).score
        == 0.0
    )
    with pytest.raises(ValueError, match="NonLLMContextRecall needs `reference_contexts`"):
        NonLLMContextRecall().invoke({"contexts": RETRIEVED})


def test_japanese_and_usage() -> None:
    result = NonLLMContextRecall().invoke(
        {
            "contexts": ["岸田文雄氏は日本の首相です。"],
            "reference_contexts": ["岸田文雄氏は日本の首相です"],
        }
    )
    assert result.score == 1.0
    assert result.usage.judge_calls == 0
    assert result.judge is None


def test_precision_reason_says_why_the_score_is_what_it_is() -> None:
    top = NonLLMContextPrecision().invoke(
        {"contexts": RETRIEVED[:2], "reference_contexts": REFERENCE}
    )
    assert top.score == 1.0
    assert top.reason == (
        "1 of 2 retrieved contexts match a reference context (counted as useful). The only "
        "useful context is at rank 1, so precision@1 = 1/1: 1.00."
    )
    late = NonLLMContextPrecision().invoke({"contexts": RETRIEVED, "reference_contexts": REFERENCE})
    assert late.reason == (
        "2 of 3 retrieved contexts match a reference context (counted as useful). Useful "
        "contexts at ranks 1 and 3, so precision@1 = 1/1 and precision@3 = 2/3, averaged over "
        "2 useful contexts: 0.83."
    )
    none = NonLLMContextPrecision().invoke(
        {"contexts": RETRIEVED[1:2], "reference_contexts": REFERENCE}
    )
    assert none.score == 0.0
    assert none.reason == (
        "None of the 1 retrieved contexts matches a reference context (similarity >= 0.5), "
        "so average precision is 0."
    )
    empty = NonLLMContextPrecision().invoke({"contexts": [], "reference_contexts": REFERENCE})
    assert empty.reason == "No context was retrieved, so average precision is 0."
