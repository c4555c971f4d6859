from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_ragmetrics.callbacks._mapping import (
    default_answer,
    default_question,
    provided_references,
    references_in,
)


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ("plain?", "plain?"),
        (HumanMessage(content="msg?"), "msg?"),
        ({"question": "q?", "chat_history": []}, "q?"),
        ({"input": "i?"}, "i?"),
        ({"query": "x?"}, "x?"),
        ({"user_input": "u?"}, "u?"),
        ({"question": {"text": "nested?"}}, None),
        ({"question": HumanMessage(content="as message")}, "as message"),
        (
            {
                "messages": [
                    SystemMessage(content="s"),
                    HumanMessage(content="first"),
                    AIMessage(content="a"),
                    HumanMessage(content="last?"),
                ]
            },
            "last?",
        ),
        ({"messages": [("system", "s"), ("user", "tuple?")]}, "tuple?"),
        ({"messages": [{"role": "user", "content": "dict?"}]}, "dict?"),
        ([HumanMessage(content="list?")], "list?"),
        ({"other": 1}, None),
        (42, None),
        (None, None),
    ],
)
def test_default_question(inputs: Any, expected: str | None) -> None:
    assert default_question(inputs) == expected


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        ("text", "text"),
        (AIMessage(content="ai"), "ai"),
        (AIMessage(content=[{"type": "text", "text": "blocks"}]), "blocks"),
        ({"answer": "a", "context": [Document(page_content="c")]}, "a"),
        ({"output": "o"}, "o"),
        ({"result": "r", "source_documents": []}, "r"),
        (
            {"question": "q", "messages": [HumanMessage(content="q"), AIMessage(content="last")]},
            "last",
        ),
        ({"question": "q"}, None),
        ([AIMessage(content="x"), HumanMessage(content="y")], "x"),
        (Document(page_content="doc"), "doc"),
        (3.5, None),
    ],
)
def test_default_answer(outputs: Any, expected: str | None) -> None:
    assert default_answer(outputs) == expected


def test_references_in_metadata_skip_missing_and_none() -> None:
    metadata = {
        "reference": "r",
        "reference_contexts": None,
        "reference_context_ids": ["1"],
        "other": 1,
    }
    assert references_in(metadata) == {"reference": "r", "reference_context_ids": ["1"]}


def test_provided_references_shapes() -> None:
    assert provided_references(None) == {}
    assert provided_references("gt") == {"reference": "gt"}
    assert provided_references({"reference_context_ids": ["a"], "reference": None}) == {
        "reference_context_ids": ["a"]
    }


def test_provided_references_name_bad_keys_and_types() -> None:
    with pytest.raises(ValueError, match=r"unknown keys \['answer'\]"):
        provided_references({"answer": "x"})
    with pytest.raises(TypeError, match="got int"):
        provided_references(3)
