"""ContextRelevance on long contexts: a cap on what is segmented and judged, noted in details."""

import re
import threading
from collections.abc import Callable
from typing import Any

import pytest

from langchain_ragmetrics import ContextPrecision, ContextRelevance, RagSample
from langchain_ragmetrics._engine import Job, ScoringEngine
from langchain_ragmetrics.metrics._base import Plan
from langchain_ragmetrics.metrics._context_relevance import (
    DEFAULT_MAX_CONTEXT_CHARS,
    DEFAULT_MAX_SAMPLE_CHARS,
)
from tests._support.judges import keyword_precision, keyword_relevance, payload
from tests._support.openai_server import JudgeServer, reply_hold

JudgeFactory = Callable[..., Any]
SENTENCE = "Paris is the capital of France and its largest city by population. "


def long_text(chars: int, sentence: str = SENTENCE) -> str:
    return (sentence * (chars // len(sentence) + 1))[:chars]


def sent_text(server: JudgeServer) -> str:
    """The sentences the judge received, joined, without whitespace."""
    return re.sub(r"\s", "", "".join(s["text"] for s in payload(server.requests[0])["sentences"]))


def sent_chars(server: JudgeServer) -> int:
    return sum(len(s["text"]) for s in payload(server.requests[0])["sentences"])


@pytest.fixture
def segmented(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text ContextRelevance hands to sentence segmentation."""
    from langchain_ragmetrics.metrics import _context_relevance

    lengths: list[int] = []
    original = _context_relevance.segment

    def spy(text: str, *args: Any, **kwargs: Any) -> Any:
        lengths.append(len(text))
        return original(text, *args, **kwargs)

    monkeypatch.setattr(_context_relevance, "segment", spy)
    return lengths


def test_a_100_kb_context_is_capped_and_the_cut_is_in_details(
    judge_server: JudgeServer, make_judge: JudgeFactory, segmented: list[int]
) -> None:
    judge_server.script = keyword_relevance("capital")
    metric = ContextRelevance(llm=make_judge())
    result = metric.invoke({"question": "What is the capital?", "contexts": [long_text(100_000)]})
    assert 0 < sum(segmented) <= DEFAULT_MAX_CONTEXT_CHARS  # only the kept text is segmented
    assert result.error is None
    assert result.score == 1.0
    assert result.details["truncated"] == [
        {"index": 0, "chars": 100_000, "kept": DEFAULT_MAX_CONTEXT_CHARS}
    ]
    assert sent_text(judge_server) == re.sub(r"\s", "", long_text(DEFAULT_MAX_CONTEXT_CHARS))


def test_the_sample_budget_cuts_later_contexts_first(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = keyword_relevance("capital")
    metric = ContextRelevance(llm=make_judge(), max_context_chars=1_000, max_sample_chars=1_500)
    contexts = ["Short one. Only two sentences.", long_text(3_000), long_text(3_000), "Tail."]
    result = metric.invoke({"question": "q", "contexts": contexts})
    assert result.details["truncated"] == [
        {"index": 1, "chars": 3_000, "kept": 1_000},
        {"index": 2, "chars": 3_000, "kept": 1_500 - 1_000 - len(contexts[0])},
        {"index": 3, "chars": 5, "kept": 0},
    ]
    assert sent_chars(judge_server) <= 1_500


def test_short_contexts_are_sent_whole_and_details_say_nothing(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = keyword_relevance("capital")
    result = ContextRelevance(llm=make_judge()).invoke(
        {"question": "q", "contexts": ["Paris is the capital. It is large."]}
    )
    assert "truncated" not in result.details
    assert result.score == 0.5


def test_caps_can_be_lifted(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    judge_server.script = keyword_relevance("capital")
    metric = ContextRelevance(llm=make_judge(), max_context_chars=None, max_sample_chars=None)
    result = metric.invoke({"question": "q", "contexts": [long_text(30_000)]})
    assert "truncated" not in result.details
    assert sent_chars(judge_server) > 29_000


@pytest.mark.parametrize("field", ["max_context_chars", "max_sample_chars"])
def test_caps_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ContextRelevance(**{field: 0})


def test_planning_a_huge_sample_segments_only_the_capped_text(segmented: list[int]) -> None:
    # Ten 1 MB contexts: only the capped text is ever segmented, so the CPU a job can spend
    # before its judge call (and after a timeout abandons it) is bounded (its time is
    # measured by bench/bench_long_context.py, not here).
    sample = RagSample(question="q", contexts=[long_text(1_000_000)] * 10)
    metric = ContextRelevance()
    capped, truncated = metric.capped(sample)  # what _evaluate does before planning
    plan = metric.plan(capped)
    assert 0 < sum(segmented) <= DEFAULT_MAX_SAMPLE_CHARS
    assert isinstance(plan, Plan)
    assert sum(len(s.text) for s in plan.state) <= DEFAULT_MAX_SAMPLE_CHARS
    assert len(truncated) == 10


async def test_a_timed_out_long_context_job_ends(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    release = threading.Event()
    judge_server.script = lambda req: reply_hold(release)  # accepts, answers only when released
    engine = ScoringEngine(timeout=0.5)
    sample = RagSample(question="q", contexts=[long_text(1_000_000)])
    try:
        (result,) = await engine.arun([Job(sample, ContextRelevance(llm=make_judge()))])
    finally:
        release.set()
    assert result.error == "timed out after 0.5s"
    assert engine.stats.timed_out == 1


def test_every_judged_metric_sends_capped_contexts(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    # The caps live on JudgedMetric: precision (and recall, entity recall) send no more of a
    # huge context to the judge than relevance does, and say what they cut.
    judge_server.script = keyword_precision("capital")
    metric = ContextPrecision(llm=make_judge(), max_context_chars=500, max_sample_chars=800)
    result = metric.invoke(
        {
            "question": "What is the capital?",
            "contexts": [long_text(100_000), long_text(100_000), "The capital is Paris."],
            "reference": "Paris is the capital.",
        }
    )
    assert result.error is None
    passages = payload(judge_server.requests[0])["passages"]
    assert [len(p["text"]) for p in passages] == [500, 300, 0]
    assert result.details["truncated"] == [
        {"index": 0, "chars": 100_000, "kept": 500},
        {"index": 1, "chars": 100_000, "kept": 300},
        {"index": 2, "chars": 21, "kept": 0},
    ]
