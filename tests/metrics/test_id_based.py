import pytest
from langchain_core.documents import Document

from langchain_ragmetrics import IDBasedContextPrecision, IDBasedContextRecall


def test_ids_from_documents_and_metadata() -> None:
    docs = [Document("a", id="1"), Document("b", metadata={"doc_id": "2"}), Document("c", id="9")]
    sample = {"contexts": docs, "reference_context_ids": ["1", "2", "3"]}
    recall = IDBasedContextRecall().invoke(sample)
    assert recall.score == 2 / 3
    assert recall.details["missing"] == ["3"]
    precision = IDBasedContextPrecision().invoke(sample)
    assert precision.score == 2 / 3


def test_ragas_column_names_and_duplicates() -> None:
    sample = {"retrieved_context_ids": ["a", "a", "b"], "reference_context_ids": ["a"]}
    assert IDBasedContextRecall().invoke(sample).score == 1.0
    assert IDBasedContextPrecision().invoke(sample).score == 0.5


def test_edge_cases() -> None:
    nothing_to_recall = IDBasedContextRecall().invoke(
        {"retrieved_context_ids": ["a"], "reference_context_ids": []}
    )
    assert nothing_to_recall.score is None  # a skip (nothing to assess), not a failure
    assert nothing_to_recall.skipped
    assert not nothing_to_recall.failed
    assert nothing_to_recall.reason == "skipped: there are no reference context ids."
    assert (
        IDBasedContextPrecision()
        .invoke({"retrieved_context_ids": [], "reference_context_ids": ["a"]})
        .score
        == 0.0
    )


def test_missing_ids_error_explains_where_ids_come_from() -> None:
    with pytest.raises(ValueError, match="IDBasedContextRecall needs `retrieved_context_ids`"):
        IDBasedContextRecall().invoke({"contexts": ["no ids"], "reference_context_ids": ["a"]})
    with pytest.raises(ValueError, match="IDBasedContextPrecision needs `reference_context_ids`"):
        IDBasedContextPrecision().invoke({"retrieved_context_ids": ["a"]})
