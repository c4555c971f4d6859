import math
from collections.abc import Callable
from typing import Any

import pytest

from langchain_ragmetrics import ContextRelevance
from langchain_ragmetrics.metrics import RetryPolicy
from langchain_ragmetrics.metrics._context_relevance import score_context_relevance, split_contexts
from tests._support.judges import keyword_relevance, payload
from tests._support.openai_server import JudgeServer

JudgeFactory = Callable[..., Any]
FAST = RetryPolicy(initial_backoff=0.01, max_backoff=0.02)

CONTEXTS = [
    "Water covers most of the planet. At sea level, water boils at 100 degrees Celsius.",
    "Ice floats on water. Dr. Smith measured it at 3 p.m. on Monday.",
]


def test_split_contexts_numbers_sentences_per_context() -> None:
    sentences = split_contexts(CONTEXTS, "en")
    assert [(s.index, s.context) for s in sentences] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert sentences[3].text == "Dr. Smith measured it at 3 p.m. on Monday."


def test_pure_scorer() -> None:
    sentences = split_contexts(CONTEXTS, "en")
    assert score_context_relevance(sentences, [1]).score == 0.25
    assert score_context_relevance(sentences, [1, 1, 2]).score == 0.5
    assert score_context_relevance(sentences, []).score == 0.0
    assert score_context_relevance([], []).score == 0.0


def test_through_the_chain(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    judge_server.script = keyword_relevance("boils")
    result = ContextRelevance(llm=make_judge()).invoke(
        {"question": "When does water boil?", "contexts": CONTEXTS}
    )
    assert result.score == 0.25
    assert result.details["relevant_sentences"] == [
        "At sea level, water boils at 100 degrees Celsius."
    ]
    assert judge_server.count() == 1
    sent = payload(judge_server.requests[0])
    assert [s["index"] for s in sent["sentences"]] == [0, 1, 2, 3]


def test_japanese_segmentation_end_to_end(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = keyword_relevance("首相")
    contexts = [
        "東京は日本の首都です。人口が多い。",
        "岸田文雄氏は日本の首相です。岸田首相は外交政策に力を入れています。",
    ]
    result = ContextRelevance(llm=make_judge()).invoke(
        {"question": "日本の首相は誰ですか?", "contexts": contexts, "language": "ja"}
    )
    assert (
        payload(judge_server.requests[0])["sentences"][2]["text"] == "岸田文雄氏は日本の首相です。"
    )
    assert result.score == 2 / 4
    assert "Japanese" in judge_server.requests[0].system


def test_nothing_relevant_is_zero(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    judge_server.script = keyword_relevance("nonexistent")
    result = ContextRelevance(llm=make_judge()).invoke({"question": "q", "contexts": CONTEXTS})
    assert result.score == 0.0
    assert result.error is None


def test_no_sentences_needs_no_call(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    result = ContextRelevance(llm=make_judge()).invoke({"question": "q", "contexts": ["", "  "]})
    assert result.score == 0.0
    assert judge_server.count() == 0


def test_out_of_range_indices_are_a_parse_failure(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = lambda req: {"relevant_sentence_indices": [0, 9], "reason": ""}
    result = ContextRelevance(llm=make_judge(), retry=FAST).invoke(
        {"question": "q", "contexts": CONTEXTS}
    )
    assert math.isnan(result.score or 0.0)
    assert "out of range" in (result.error or "")
    assert judge_server.count() == 2


def test_needs_question() -> None:
    with pytest.raises(ValueError, match="ContextRelevance needs `question`"):
        ContextRelevance().invoke({"contexts": CONTEXTS})


def test_reason_explains_the_ratio() -> None:
    sentences = split_contexts(CONTEXTS, "en")
    assert score_context_relevance(sentences, [1, 2]).reason == (
        "2 of 4 context sentences are needed to answer the question, so relevance = 2/4 = 0.50."
    )
    assert score_context_relevance(sentences, []).reason == (
        "None of the 4 context sentences is needed to answer the question, so relevance is 0."
    )
