import math

import pytest
from langchain_core.documents import Document
from pydantic import ValidationError

from langchain_ragmetrics import MetricResult, RagSample, Usage
from langchain_ragmetrics._schema import coerce_sample


def test_accepts_strings_and_documents() -> None:
    sample = RagSample(
        question="q",
        contexts=[Document(page_content="a", id="d1"), "b", Document("c", metadata={"doc_id": 7})],
    )
    assert sample.contexts == ["a", "b", "c"]
    assert sample.context_ids == ["d1", None, "7"]


def test_single_string_context_becomes_a_list() -> None:
    assert RagSample(contexts="only one").contexts == ["only one"]


def test_ragas_v01_columns() -> None:
    sample = coerce_sample({"question": "q", "contexts": ["c"], "answer": "a", "ground_truth": "g"})
    assert (sample.question, sample.contexts, sample.answer, sample.reference) == (
        "q",
        ["c"],
        "a",
        "g",
    )


def test_ragas_v01_ground_truths_list_is_joined() -> None:
    sample = coerce_sample({"question": "q", "ground_truths": ["one.", "two."]})
    assert sample.reference == "one.\ntwo."


def test_ragas_v02_columns() -> None:
    sample = coerce_sample(
        {
            "user_input": "q",
            "retrieved_contexts": ["c1", "c2"],
            "response": "a",
            "reference": "r",
            "reference_contexts": ["c1"],
            "retrieved_context_ids": ["1", "2"],
            "reference_context_ids": [1],
        }
    )
    assert sample.question == "q"
    assert sample.contexts == ["c1", "c2"]
    assert sample.answer == "a"
    assert sample.reference == "r"
    assert sample.reference_contexts == ["c1"]
    assert sample.context_ids == ["1", "2"]
    assert sample.reference_context_ids == ["1"]


def test_two_names_of_one_field_must_agree() -> None:
    """A row with ``question`` and ``user_input`` kept the last one silently; now it is
    refused when they differ, and taken when they agree or one is empty."""
    with pytest.raises(ValidationError, match="`question` and `user_input` are two names"):
        coerce_sample({"question": "a", "user_input": "b"})
    with pytest.raises(ValidationError, match="`contexts` and `retrieved_contexts`"):
        coerce_sample({"question": "q", "contexts": ["x"], "retrieved_contexts": ["y"]})
    with pytest.raises(ValidationError, match="`ground_truths` and `reference`"):
        coerce_sample({"ground_truths": ["one.", "two."], "reference": "one."})
    assert coerce_sample({"question": "a", "user_input": "a"}).question == "a"
    assert coerce_sample({"question": None, "user_input": "b"}).question == "b"
    assert coerce_sample({"user_input": "b", "question": None}).question == "b"
    joined = coerce_sample({"ground_truths": ["one.", "two."], "reference": "one.\ntwo."})
    assert joined.reference == "one.\ntwo."


def test_two_names_compare_as_data_not_as_python_objects() -> None:
    """Equal data in other shapes is one value: a NumPy array (pandas), a tuple, Documents
    beside their texts (whose ids are kept), and an empty cell (NaN, "") is no value."""
    import numpy as np
    from langchain_core.documents import Document

    ids = coerce_sample({"context_ids": ["1", "2"], "retrieved_context_ids": np.array(["1", "2"])})
    assert ids.context_ids == ["1", "2"]
    assert coerce_sample({"contexts": ("a",), "retrieved_contexts": ["a"]}).contexts == ["a"]
    for first, second in (("contexts", "retrieved_contexts"), ("retrieved_contexts", "contexts")):
        given = {first: [Document("a", id="d1")], second: ["a"]}
        if first == "retrieved_contexts":
            given = {first: ["a"], second: [Document("a", id="d1")]}
        sample = coerce_sample(given)
        assert (sample.contexts, sample.context_ids) == (["a"], ["d1"])
    assert coerce_sample({"question": float("nan"), "user_input": "q"}).question == "q"
    assert coerce_sample({"question": "", "user_input": "p"}).question == "p"
    with pytest.raises(ValidationError, match="their values differ"):
        coerce_sample({"contexts": ["x"], "retrieved_contexts": np.array(["y"])})


def test_unknown_keys_are_kept_in_metadata() -> None:
    sample = coerce_sample({"question": "q", "trace": "t-1", "metadata": {"user": "u"}})
    assert sample.metadata == {"user": "u", "trace": "t-1"}


def test_bad_context_type_names_the_field() -> None:
    with pytest.raises(ValidationError, match=r"contexts\[1\]"):
        RagSample(contexts=["ok", 3])  # type: ignore[list-item]


def test_bad_language_names_the_field() -> None:
    with pytest.raises(ValidationError, match="`language`"):
        RagSample(language="klingon")


def test_require_names_metric_and_field() -> None:
    sample = coerce_sample({"question": "q", "refrence": "typo"})
    with pytest.raises(ValueError, match=r"ContextRecall needs `reference`.*refrence"):
        sample.require("ContextRecall", "reference")


def test_coerce_rejects_other_types() -> None:
    with pytest.raises(TypeError, match="RagSample or a dict"):
        coerce_sample(["not", "a", "sample"])  # type: ignore[arg-type]


def test_metric_result_to_langsmith() -> None:
    ok = MetricResult(metric="context_recall", score=0.5, reason="2 of 4")
    assert ok.to_langsmith() == {"key": "context_recall", "score": 0.5, "comment": "2 of 4"}
    bad = MetricResult(metric="context_recall", score=math.nan, error="boom")
    assert bad.failed
    assert bad.to_langsmith() == {"key": "context_recall", "score": None, "comment": "error: boom"}
    skipped = MetricResult(metric="context_recall", score=None)
    assert skipped.skipped
    assert not skipped.failed


def test_usage_adds_up() -> None:
    total = Usage(input_tokens=1, output_tokens=2, judge_calls=1) + Usage(
        input_tokens=3, output_tokens=4, judge_calls=2
    )
    assert (total.input_tokens, total.output_tokens, total.judge_calls) == (4, 6, 3)
    assert total.total_tokens == 10


def test_one_definition_of_failed_and_skipped() -> None:
    def result(score: float | None, error: str | None = None) -> MetricResult:
        return MetricResult(metric="m", score=score, error=error)

    # (failed, skipped) for: a score, a judge failure, not assessable (None or bare NaN).
    assert (result(0.5).failed, result(0.5).skipped) == (False, False)
    assert (result(math.nan, "boom").failed, result(math.nan, "boom").skipped) == (True, False)
    assert (result(None).failed, result(None).skipped) == (False, True)
    assert (result(math.nan).failed, result(math.nan).skipped) == (False, True)
    assert result(None, "bad input").failed  # an error always means failed


@pytest.mark.parametrize(
    ("score", "shown"), [(0.25, 0.25), (0.0, 0.0), (math.nan, None), (None, None)]
)
def test_finite_score_is_what_json_and_tables_show(
    score: float | None, shown: float | None
) -> None:
    assert MetricResult(metric="m", score=score).finite_score == shown


def test_usage_total_equals_chained_addition() -> None:
    parts = [
        Usage(input_tokens=i, output_tokens=2 * i, judge_calls=1, cache_hits=i % 2, cache_misses=1)
        for i in range(5)
    ]
    chained = Usage()
    for part in parts:
        chained = chained + part
    assert Usage.total(parts) == chained
    assert Usage.total([]) == Usage()
