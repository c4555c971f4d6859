"""Default mapping of a trace's input and output to a question and an answer.

The defaults understand strings, messages, and dicts with conventional keys (LCEL inputs,
``AgentExecutor``-style outputs, LangGraph state with ``messages``). Users with other shapes
pass ``question_from`` / ``answer_from`` callables to the handler. References in run metadata
are read by :mod:`langchain_ragmetrics._retrieval` (re-exported here).
"""

from __future__ import annotations

from typing import Any

from langchain_ragmetrics._extract import ANSWER_KEYS, QUESTION_KEYS, answer_in, question_in
from langchain_ragmetrics._retrieval import REFERENCE_FIELDS, provided_references, references_in

__all__ = [
    "ANSWER_KEYS",
    "QUESTION_KEYS",
    "REFERENCE_FIELDS",
    "default_answer",
    "default_question",
    "provided_references",
    "references_in",
]


def default_question(inputs: Any) -> str | None:
    """The question in a root input: a string, a message, a dict key or the last human turn."""
    return question_in(inputs)


def default_answer(outputs: Any) -> str | None:
    """The answer in a root output: a string, a message, a dict key or the last AI turn."""
    return answer_in(outputs)
