import math
from collections.abc import Callable
from typing import Any

import pytest

from langchain_ragmetrics import ContextPrecision
from langchain_ragmetrics.metrics import RetryPolicy
from langchain_ragmetrics.metrics._context_precision import (
    ContextVerdicts,
    SingleContextVerdict,
    check_verdict_indices,
    score_context_precision,
)
from tests._support.judges import keyword_precision, payload
from tests._support.openai_server import JudgeServer, reply_garbage

FAST = RetryPolicy(initial_backoff=0.01, max_backoff=0.02)
JudgeFactory = Callable[..., Any]

# The Japanese worked examples of seed 002.
JA_SATO = {
    "question": "佐藤はどの部署のメンバーですか?",
    "contexts": ["ニュートンは万有引力を発見した", "佐藤は研究開発部のエンジニアである"],
    "reference": "佐藤は研究開発部のメンバーです",
    "language": "ja",
}
JA_PM = {
    "question": "日本の首相は誰ですか?",
    "contexts": [
        "東京は日本の首都です",
        "岸田文雄氏は2021年10月から日本の首相を務めています",
        "岸田首相は外交政策に力を入れています",
    ],
    "reference": "岸田文雄氏が現在の日本の首相です",
    "language": "ja",
}


def _verdicts(*flags: int) -> list[SingleContextVerdict]:
    return [SingleContextVerdict(reason="r", useful=bool(f)) for f in flags]


def test_pure_scorer_seeds() -> None:
    assert score_context_precision(_verdicts(0, 1), mode="reference").score == 0.5
    assert score_context_precision(_verdicts(0, 1, 1), mode="reference").score == 7 / 12
    assert score_context_precision(_verdicts(0, 0), mode="reference").score == 0.0


def test_index_check() -> None:
    ok = ContextVerdicts.model_validate(
        {
            "verdicts": [
                {"index": 1, "reason": "", "useful": 1},
                {"index": 0, "reason": "", "useful": 0},
            ]
        }
    )
    check_verdict_indices(ok, 2)
    with pytest.raises(ValueError, match=r"missing \[2\]"):
        check_verdict_indices(ok, 3)
    short = ContextVerdicts.model_validate({"verdicts": [{"index": 0, "reason": "", "useful": 1}]})
    with pytest.raises(ValueError, match=r"missing \[1\]"):
        check_verdict_indices(short, 2)
    dup = ContextVerdicts.model_validate(
        {
            "verdicts": [
                {"index": 0, "reason": "", "useful": 1},
                {"index": 0, "reason": "", "useful": 1},
            ]
        }
    )
    with pytest.raises(ValueError, match=r"duplicated \[0\]"):
        check_verdict_indices(dup, 2)


JA_SEEDS = [(JA_SATO, "佐藤", 0.5), (JA_PM, "岸田", 7 / 12)]
"""Japanese seeds: the sample, the keyword the judge finds useful, the expected precision."""


@pytest.fixture(params=JA_SEEDS, ids=["sato", "pm"])
def ja_seed(request: pytest.FixtureRequest, judge_server: JudgeServer) -> tuple[Any, str, float]:
    """A Japanese seed, the judge scripted to find its keyword's passages useful."""
    sample, keyword, expected = request.param
    judge_server.script = keyword_precision(keyword)
    return sample, keyword, expected


def test_japanese_seeds_through_the_chain(
    judge_server: JudgeServer, make_judge: JudgeFactory, ja_seed: tuple[Any, str, float]
) -> None:
    sample, _, expected = ja_seed
    result = ContextPrecision(llm=make_judge()).invoke(sample)
    assert result.score == expected
    assert result.details["mode"] == "reference"
    assert judge_server.count() == 1
    request = judge_server.requests[0]
    assert "Japanese" in request.system
    assert payload(request)["target"] == sample["reference"]


def test_per_context_mode_matches_and_calls_once_per_context(
    judge_server: JudgeServer, make_judge: JudgeFactory, ja_seed: tuple[Any, str, float]
) -> None:
    sample, keyword, expected = ja_seed
    metric = ContextPrecision(llm=make_judge(), per_context=True)
    result = metric.invoke(sample)
    assert result.score == expected
    assert result.usage.judge_calls == len(sample["contexts"])
    assert judge_server.count() == len(sample["contexts"])
    assert [v["useful"] for v in result.details["verdicts"]] == [
        keyword in c for c in sample["contexts"]
    ]


async def test_per_context_async(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    judge_server.script = keyword_precision("岸田")
    result = await ContextPrecision(llm=make_judge(), per_context=True).ainvoke(JA_PM)
    assert result.score == 7 / 12
    assert judge_server.count() == 3


def test_without_reference_judges_against_the_answer(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = keyword_precision("Paris")
    sample = {
        "question": "Capital of France?",
        "contexts": ["Lyon is big.", "Paris is the capital."],
        "answer": "Paris",
    }
    result = ContextPrecision(llm=make_judge()).invoke(sample)
    assert result.score == 0.5
    assert result.details["mode"] == "answer"
    sent = payload(judge_server.requests[0])
    assert sent["target_kind"] == "answer"
    assert sent["target"] == "Paris"


def test_needs_reference_or_answer() -> None:
    with pytest.raises(ValueError, match="ContextPrecision needs `reference`"):
        ContextPrecision().invoke({"question": "q", "contexts": ["c"]})


def test_verdicts_follow_index_not_answer_order(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = lambda req: {
        "verdicts": [
            {"index": 2, "reason": "", "useful": True},
            {"index": 0, "reason": "", "useful": False},
            {"index": 1, "reason": "", "useful": True},
        ]
    }
    result = ContextPrecision(llm=make_judge()).invoke(JA_PM)
    assert result.score == 7 / 12


def test_wrong_number_of_verdicts_is_a_parse_failure(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = lambda req: {"verdicts": [{"index": 0, "reason": "", "useful": True}]}
    result = ContextPrecision(llm=make_judge(), retry=FAST).invoke(JA_PM)
    assert math.isnan(result.score or 0.0)
    assert "expected one verdict for each of 3 contexts" in (result.error or "")
    assert judge_server.count() == 2  # retried once


def test_extra_index_is_a_parse_failure(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = lambda req: {
        "verdicts": [{"index": i, "reason": "", "useful": True} for i in range(4)]
    }
    result = ContextPrecision(llm=make_judge(), retry=FAST).invoke(JA_PM)
    assert "unexpected [3]" in (result.error or "")


def test_garbage_json(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    judge_server.script = lambda req: reply_garbage()
    result = ContextPrecision(llm=make_judge(), retry=FAST).invoke(JA_PM)
    assert math.isnan(result.score or 0.0)
    assert result.failed


def test_single_context_and_empty_contexts(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = keyword_precision("Paris")
    metric = ContextPrecision(llm=make_judge())
    assert (
        metric.invoke({"question": "q", "contexts": ["Paris"], "reference": "Paris"}).score == 1.0
    )
    empty = metric.invoke({"question": "q", "contexts": [], "reference": "Paris"})
    assert empty.score == 0.0
    assert judge_server.count() == 1


def test_hundred_contexts_in_one_call(judge_server: JudgeServer, make_judge: JudgeFactory) -> None:
    judge_server.script = keyword_precision("needle")
    contexts = [f"hay {i}" for i in range(100)]
    contexts[0] = "needle first"
    contexts[99] = "needle last"
    result = ContextPrecision(llm=make_judge()).invoke(
        {"question": "q", "contexts": contexts, "reference": "r"}
    )
    assert result.score == pytest.approx((1 + 2 / 100) / 2)
    assert judge_server.count() == 1
    assert len(payload(judge_server.requests[0])["passages"]) == 100


def test_duplicate_contexts_are_judged_each(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = keyword_precision("Paris")
    sample = {"question": "q", "contexts": ["Rome", "Paris", "Paris"], "reference": "Paris"}
    result = ContextPrecision(llm=make_judge()).invoke(sample)
    assert result.score == 7 / 12


def test_reason_explains_average_precision_in_words(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = keyword_precision("岸田")
    result = ContextPrecision(llm=make_judge()).invoke(JA_PM)
    assert result.reason == (
        "Useful passages at ranks 2 and 3, so precision@2 = 1/2 and precision@3 = 2/3, "
        "averaged over 2 useful passages: 0.58."
    )


def test_reason_single_and_no_useful_passage() -> None:
    assert score_context_precision(_verdicts(0, 1), mode="reference").reason == (
        "The only useful passage is at rank 2, so precision@2 = 1/2: 0.50."
    )
    assert score_context_precision(_verdicts(0, 0), mode="reference").reason == (
        "None of the 2 passages is useful, so average precision is 0."
    )


def test_prompts_say_each_passage_is_judged_on_its_own(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    judge_server.script = keyword_precision("岸田")
    ContextPrecision(llm=make_judge()).invoke(JA_PM)
    ContextPrecision(llm=make_judge(), per_context=True).invoke(JA_PM)
    for request in judge_server.requests:
        system = " ".join(request.system.split())
        assert "Judge every passage on its own" in system
        assert "a repeat or near-repeat of a useful passage is useful too" in system


# A judge following the prompt: a passage is useful when it states the answer, in any
# wording; whether an earlier passage already said it does not matter.
PARIS = {
    "question": "What is the capital of France?",
    "reference": "Paris is the capital of France.",
}


@pytest.mark.parametrize(
    ("contexts", "flags", "expected"),
    [
        # exact duplicate of a useful passage, behind a distractor
        (
            ["Lyon is in France.", "Paris is France's capital.", "Paris is France's capital."],
            [0, 1, 1],
            7 / 12,
        ),
        # near-duplicate (paraphrase) of a useful passage
        (
            ["Paris is France's capital.", "France's capital city is Paris.", "Lyon is big."],
            [1, 1, 0],
            1.0,
        ),
        # duplicated distractor around the answer
        (
            ["Lyon is in France.", "Lyon is in France.", "The capital of France is Paris."],
            [0, 0, 1],
            1 / 3,
        ),
    ],
)
@pytest.mark.parametrize("per_context", [False, True])
def test_duplicated_and_near_duplicated_passages_are_judged_each(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    contexts: list[str],
    flags: list[int],
    expected: float,
    per_context: bool,
) -> None:
    judge_server.script = keyword_precision("Paris")
    metric = ContextPrecision(llm=make_judge(), per_context=per_context)
    result = metric.invoke({**PARIS, "contexts": contexts})
    assert result.score == expected
    assert [v["useful"] for v in result.details["verdicts"]] == [bool(f) for f in flags]
    if not per_context:
        sent = [p["text"] for p in payload(judge_server.requests[0])["passages"]]
        assert sent == contexts  # duplicates are sent as they are, each with its own index


def test_duplicated_index_alone_is_a_parse_failure(
    judge_server: JudgeServer, make_judge: JudgeFactory
) -> None:
    """Indices 0, 1, 1 for two passages: nothing missing or extra, only a repeat."""
    dup = {
        "verdicts": [
            {"index": 0, "reason": "", "useful": False},
            {"index": 1, "reason": "", "useful": True},
            {"index": 1, "reason": "", "useful": True},
        ]
    }
    judge_server.script = lambda req: dup
    sample = {**PARIS, "contexts": ["Lyon is in France.", "Paris is the capital."]}
    result = ContextPrecision(llm=make_judge(), retry=FAST).invoke(sample)
    assert math.isnan(result.score or 0.0)
    assert result.error is not None
    assert "duplicated [1]" in result.error
    assert "missing []" in result.error
    assert "unexpected []" in result.error
    assert judge_server.count() == 2  # retried once
