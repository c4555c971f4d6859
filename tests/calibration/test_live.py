"""The calibration set against a real judge: ``pytest -m live`` or ``--run-live`` (paid).

Deselected by default, even with OPENAI_API_KEY set (see ``tests/conftest.py``).
"""

from typing import Any

import pytest

from langchain_ragmetrics.calibration import DEFAULT_VARIANTS, check_judge


@pytest.mark.live
@pytest.mark.timeout(1800)
def test_real_judge_agrees_with_the_labels(live_judge: Any) -> None:
    report = check_judge(live_judge, metrics=[*DEFAULT_VARIANTS, "context_entity_recall:one-call"])
    print(report.table())
    assert [m.metric for m in report.metrics] == [
        *DEFAULT_VARIANTS,
        "context_entity_recall:one-call",
    ]
    for row in report.metrics:
        assert row.answered_rate >= 0.9, row
        assert row.accuracy is not None
        assert row.accuracy >= 0.7, row
