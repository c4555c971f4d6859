"""Default mapping of a trace's input and output to a question and an answer, and references.

The defaults understand strings, messages, and dicts with conventional keys (LCEL inputs,
``AgentExecutor``-style outputs, LangGraph state with ``messages``). Users with other shapes
pass ``question_from`` / ``answer_from`` callables to the handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_ragmetrics._extract import ANSWER_KEYS, QUESTION_KEYS, answer_in, question_in

__all__ = [
    "ANSWER_KEYS",
    "QUESTION_KEYS",
    "REFERENCE_FIELDS",
    "default_answer",
    "default_question",
    "provided_references",
    "references_in",
]

REFERENCE_FIELDS = ("reference", "reference_contexts", "reference_context_ids")
"""Run-metadata keys (and ``reference_provider`` dict keys) that carry references."""


def default_question(inputs: Any) -> str | None:
    """The question in a root input: a string, a message, a dict key or the last human turn."""
    return question_in(inputs)


def default_answer(outputs: Any) -> str | None:
    """The answer in a root output: a string, a message, a dict key or the last AI turn."""
    return answer_in(outputs)


def references_in(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The reference fields present (not None) in run metadata."""
    return {k: metadata[k] for k in REFERENCE_FIELDS if metadata.get(k) is not None}


def provided_references(value: Any) -> dict[str, Any]:
    """Normalise what a ``reference_provider`` returned: a string, a dict or None.

    Raises:
        ValueError: If a dict has keys other than the reference fields.
        TypeError: If the value is neither.
    """
    if value is None:
        return {}
    if isinstance(value, str):
        return {"reference": value}
    if isinstance(value, Mapping):
        unknown = sorted(str(k) for k in value if k not in REFERENCE_FIELDS)
        if unknown:
            msg = (
                f"reference_provider returned unknown keys {unknown}; "
                f"expected some of {list(REFERENCE_FIELDS)}"
            )
            raise ValueError(msg)
        return {k: v for k, v in value.items() if v is not None}
    msg = f"reference_provider must return a str, a dict or None, got {type(value).__name__}"
    raise TypeError(msg)
