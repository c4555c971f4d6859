import uuid

import pytest

from langchain_ragmetrics._ids import feedback_id


def test_feedback_id_is_stable_and_distinct() -> None:
    run = uuid.UUID("0f6a9c1e-0000-4000-8000-000000000001")
    first = feedback_id(run, "context_recall")
    assert first == feedback_id(str(run), "context_recall")
    assert first.version == 5
    assert first != feedback_id(run, "context_precision")
    assert first != feedback_id(uuid.UUID("0f6a9c1e-0000-4000-8000-000000000002"), "context_recall")
    # Pinned: a change of namespace or format would duplicate feedback already sent.
    assert str(first) == "d3deee7c-ce48-5f5c-8a26-90367c57eb92"


def test_feedback_id_rejects_a_run_id_that_is_not_a_uuid() -> None:
    with pytest.raises(ValueError, match="badly formed"):
        feedback_id("not-a-uuid", "context_recall")
