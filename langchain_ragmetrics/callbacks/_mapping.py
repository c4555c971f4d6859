"""Default mapping of a trace's input and output to a question and an answer, and references.

The defaults understand strings, messages, and dicts with conventional keys (LCEL inputs,
``AgentExecutor``-style outputs, LangGraph state with ``messages``). Users with other shapes
pass ``question_from`` / ``answer_from`` callables to the handler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage

__all__ = [
    "ANSWER_KEYS",
    "QUESTION_KEYS",
    "REFERENCE_FIELDS",
    "default_answer",
    "default_question",
    "provided_references",
    "references_in",
]

QUESTION_KEYS = ("question", "input", "query", "user_input", "prompt")
"""Dict keys read, in order, for the question."""
ANSWER_KEYS = ("answer", "output", "result", "response", "generation", "text", "content")
"""Dict keys read, in order, for the answer."""
REFERENCE_FIELDS = ("reference", "reference_contexts", "reference_context_ids")
"""Run-metadata keys (and ``reference_provider`` dict keys) that carry references."""

_HUMAN_ROLES = frozenset({"human", "user"})
_AI_ROLES = frozenset({"ai", "assistant"})


def _message_role_and_text(item: Any) -> tuple[str, str] | None:
    """Role and text of a message given as a BaseMessage, a (role, text) pair or a dict."""
    if isinstance(item, BaseMessage):
        return item.type, str(item.text)
    if isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
        return item[0], item[1]
    if isinstance(item, Mapping) and isinstance(item.get("content"), str):
        return str(item.get("role") or item.get("type") or ""), str(item["content"])
    return None


def _last_message(messages: Sequence[Any], roles: frozenset[str]) -> str | None:
    for item in reversed(messages):
        found = _message_role_and_text(item)
        if found is not None and found[0] in roles:
            return found[1]
    return None


def _extract(value: Any, keys: Sequence[str], roles: frozenset[str], depth: int = 0) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseMessage):
        return str(value.text)
    if isinstance(value, Document):
        return value.page_content
    if depth > 2:
        return None
    if isinstance(value, Mapping):
        for key in keys:
            if key in value:
                found = _extract(value[key], keys, roles, depth + 1)
                if found is not None:
                    return found
        messages = value.get("messages")
        if isinstance(messages, Sequence) and not isinstance(messages, str):
            return _last_message(messages, roles)
        return None
    if isinstance(value, Sequence) and value:
        return _last_message(value, roles)
    return None


def default_question(inputs: Any) -> str | None:
    """The question in a root input: a string, a message, a dict key or the last human turn."""
    return _extract(inputs, QUESTION_KEYS, _HUMAN_ROLES)


def default_answer(outputs: Any) -> str | None:
    """The answer in a root output: a string, a message, a dict key or the last AI turn."""
    return _extract(outputs, ANSWER_KEYS, _AI_ROLES)


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
