from typing import Any

import pytest
from langchain_core.load import dumpd
from langchain_core.messages import AIMessage, HumanMessage

from langchain_ragmetrics._extract import answer_in, question_in


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        # what LangSmith hands back: messages serialised, or dumped as plain dicts
        ({"output": dumpd(AIMessage(content="serialised"))}, "serialised"),
        ({"output": AIMessage(content="dumped").model_dump()}, "dumped"),
        ({"output": {"type": "ai", "content": [{"type": "text", "text": "blocks"}]}}, "blocks"),
        ({"messages": [dumpd(HumanMessage(content="q")), dumpd(AIMessage(content="a"))]}, "a"),
        ({"answer": None, "output": "second key"}, "second key"),
    ],
)
def test_answer_in_serialised_shapes(outputs: Any, expected: str) -> None:
    assert answer_in(outputs) == expected


def test_sole_string_fallback_is_opt_in() -> None:
    assert question_in({"topic": "tides", "n": 3}) is None
    assert question_in({"topic": "tides", "n": 3}, sole_string=True) == "tides"
    assert question_in({"a": "x", "b": "y"}, sole_string=True) is None
    assert answer_in({"question": "q"}) is None  # an echoed question is not an answer


def test_custom_keys() -> None:
    assert question_in({"ask": "custom?", "question": "default?"}, ("ask",)) == "custom?"
    assert question_in({"messages": [("user", "from history")]}, ("ask",)) == "from history"
