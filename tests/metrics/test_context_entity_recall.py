import math
from collections.abc import Callable
from typing import Any

import pytest

from langchain_ragmetrics import ContextEntityRecall
from langchain_ragmetrics.metrics import RetryPolicy
from langchain_ragmetrics.metrics._context_entity_recall import score_entity_recall
from tests._support.judges import payload
from tests._support.openai_server import JudgeServer, reply_garbage

JudgeFactory = Callable[..., Any]
FAST = RetryPolicy(initial_backoff=0.01, max_backoff=0.02)

REFERENCE = (
    "The Taj Mahal is an ivory-white marble mausoleum on the right bank of the river Yamuna in the "
    "Indian city of Agra. It was commissioned in 1631 by the Mughal emperor Shah Jahan to house "
    "the tomb of his favorite wife, Mumtaz Mahal."
)
HIGH = (
    "The Taj Mahal is a symbol of love and architectural marvel located in Agra, India. It was "
    "built by the Mughal emperor Shah Jahan in memory of his beloved wife, Mumtaz Mahal."
)
LOW = "The Taj Mahal is an iconic monument in India. It is a UNESCO World Heritage Site."
GE = ["Taj Mahal", "Yamuna", "Agra", "1631", "Shah Jahan", "Mumtaz Mahal"]
CE = {
    HIGH: ["Taj Mahal", "Agra", "Shah Jahan", "Mumtaz Mahal", "India"],
    LOW: ["Taj Mahal", "UNESCO", "India"],
}


def _as_entities(names: list[str]) -> list[dict[str, Any]]:
    return [{"name": n, "aliases": []} for n in names]


def _entity_judge(req: Any) -> dict[str, Any]:
    data = payload(req)
    if "text" in data:  # the default: one text per call
        text = data["text"]
        return {"entities": _as_entities(GE if text == REFERENCE else CE[text])}
    return {
        "reference_entities": _as_entities(GE),
        "passage_entities": _as_entities([e for p in data["passages"] for e in CE[p]]),
    }


def test_pure_scorer_seed() -> None:
    high = score_entity_recall(GE, CE[HIGH])
    assert high.score == 4 / 6
    assert high.details["missing"] == ["Yamuna", "1631"]
    assert score_entity_recall(GE, CE[LOW]).score == 1 / 6


@pytest.mark.parametrize(("context", "expected"), [(HIGH, 4 / 6), (LOW, 1 / 6)])
def test_seed_through_the_chain_one_call(
    judge_server: JudgeServer, make_judge: JudgeFactory, context: str, expected: float
) -> None:
    judge_server.script = _entity_judge
    result = ContextEntityRecall(llm=make_judge(), single_call=True).invoke(
        {"contexts": [context], "ground_truth": REFERENCE}
    )
    assert result.score == expected
    assert judge_server.count() == 1
    assert result.usage.judge_calls == 1
    assert judge_server.requests[0].schema_name == "EntityLists"


@pytest.mark.parametrize(("context", "expected"), [(HIGH, 4 / 6), (LOW, 1 / 6)])
def test_seed_default_two_independent_extractions(
    judge_server: JudgeServer, make_judge: JudgeFactory, context: str, expected: float
) -> None:
    judge_server.script = _entity_judge
    result = ContextEntityRecall(llm=make_judge()).invoke(
        {"contexts": [context], "reference": REFERENCE}
    )
    assert result.score == expected
    assert judge_server.count() == 2
    assert result.usage.judge_calls == 2
    sent = sorted((payload(r)["text"] for r in judge_server.requests), key=len)
    # neither call sees the other text: the reference cannot steer the passage extraction
    assert set(sent) == {REFERENCE, context}
    for request in judge_server.requests:
        assert request.schema_name == "EntityList"
        assert "One entry per distinct entity".lower() in " ".join(request.system.split()).lower()


def test_aliases_merge_different_forms_across_the_two_extractions(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    reference = "Mumbai's Gateway of India was finished in 1924."
    context = "The Gateway was completed in Bombay in 1924."

    def judge(req: Any) -> dict[str, Any]:
        if payload(req)["text"] == reference:
            return {
                "entities": [
                    {"name": "Mumbai", "aliases": ["Bombay"]},
                    {"name": "Gateway of India", "aliases": ["Gateway"]},
                    {"name": "1924", "aliases": []},
                ]
            }
        return {
            "entities": [{"name": "Bombay", "aliases": []}, {"name": "Gateway"}, {"name": "1924"}]
        }

    judge_server.script = judge
    result = ContextEntityRecall(llm=make_judge()).invoke(
        {"contexts": [context], "reference": reference}
    )
    assert result.score == 1.0
    assert result.reason == "3 of 3 reference entities appear in the contexts."


def test_reason_names_the_missing_entities() -> None:
    verdict = score_entity_recall(GE, CE[HIGH])
    assert (
        verdict.reason
        == "4 of 6 reference entities appear in the contexts (missing: Yamuna, 1631)."
    )


def test_matching_ignores_case_and_punctuation(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = lambda req: {
        "reference_entities": _as_entities(["Shah Jahan", "Agra"]),
        "passage_entities": _as_entities(["shah-jahan", "AGRA."]),
    }
    result = ContextEntityRecall(llm=make_judge(), single_call=True).invoke(
        {"contexts": ["c"], "reference": "r"}
    )
    assert result.score == 1.0


def test_no_reference_entities_is_nan(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    judge_server.script = lambda req: {"entities": []}
    result = ContextEntityRecall(llm=make_judge()).invoke(
        {"contexts": ["c"], "reference": "it rains"}
    )
    assert math.isnan(result.score or 0.0)
    assert result.error is None


def test_empty_reference_needs_no_call(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    result = ContextEntityRecall(llm=make_judge()).invoke({"contexts": ["c"], "reference": ""})
    assert math.isnan(result.score or 0.0)
    assert judge_server.count() == 0


def test_missing_reference() -> None:
    with pytest.raises(ValueError, match="ContextEntityRecall needs `reference`"):
        ContextEntityRecall().invoke({"contexts": ["c"]})


def test_japanese_entities(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    judge_server.script = lambda req: {
        "reference_entities": _as_entities(["岸田文雄", "日本"]),
        "passage_entities": _as_entities(["岸田 文雄", "2021年10月", "日本"]),
    }
    result = ContextEntityRecall(llm=make_judge(), language="ja", single_call=True).invoke(
        {
            "contexts": ["岸田文雄氏は2021年10月から日本の首相を務めています"],
            "reference": "岸田文雄氏が日本の首相です",
        }
    )
    assert result.score == 1.0
    assert "Japanese" in judge_server.requests[0].system


def test_garbage(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    judge_server.script = lambda req: reply_garbage()
    result = ContextEntityRecall(llm=make_judge(), retry=FAST).invoke(
        {"contexts": ["c"], "reference": "r"}
    )
    assert result.failed
    assert math.isnan(result.score or 0.0)
