"""Find the question and the answer in a run's inputs and outputs, whatever their shape.

Shared by the online callback (live objects) and the LangSmith evaluators (runs and examples
read back from LangSmith, where messages may be serialised dicts). Understands strings,
messages, Documents, dicts with conventional keys and LangGraph-style ``messages`` state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage

__all__ = ["ANSWER_KEYS", "QUESTION_KEYS", "answer_in", "question_in"]

QUESTION_KEYS = ("question", "input", "query", "user_input", "q", "prompt")
"""Dict keys read, in order, for the question."""
ANSWER_KEYS = ("answer", "output", "result", "response", "generation", "text", "content")
"""Dict keys read, in order, for the answer."""

_HUMAN_ROLES = frozenset({"human", "user"})
_AI_ROLES = frozenset({"ai", "assistant"})
_MAX_DEPTH = 3


def _content_text(content: Any) -> str | None:
    """Text of message content: a string, or a list of strings / ``{"text": ...}`` blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p if isinstance(p, str) else str(p.get("text", ""))
            for p in content
            if isinstance(p, (str, Mapping))
        )
    return None


def _unwrap(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """The fields of an lc-serialised object (``{"lc": 1, "kwargs": {...}}``), else the dict."""
    kwargs = value.get("kwargs")
    return kwargs if value.get("lc") and isinstance(kwargs, Mapping) else value


def _as_message(item: Any) -> tuple[str, str] | None:
    """Role and text of a BaseMessage, a ``(role, text)`` pair or a (serialised) message dict."""
    if isinstance(item, BaseMessage):
        return item.type, str(item.text)
    if isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
        return item[0], item[1]
    if isinstance(item, Mapping):
        data = _unwrap(item)
        role = data.get("role") or data.get("type")
        text = _content_text(data.get("content"))
        if isinstance(role, str) and text is not None:
            return role, text
    return None


def _last_message(messages: Sequence[Any], roles: frozenset[str]) -> str | None:
    for item in reversed(messages):
        found = _as_message(item)
        if found is not None and found[0] in roles:
            return found[1]
    return None


def _find(
    value: Any, keys: Sequence[str], roles: frozenset[str], sole_string: bool, depth: int = 0
) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Document):
        return value.page_content
    message = _as_message(value)
    if message is not None and not isinstance(value, tuple):
        return message[1]
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        data = _unwrap(value)
        for key in keys:
            if data.get(key) is not None:
                found = _find(data[key], keys, roles, sole_string=False, depth=depth + 1)
                if found is not None:
                    return found
        messages = data.get("messages")
        if isinstance(messages, Sequence) and not isinstance(messages, str):
            return _last_message(messages, roles)
        if sole_string:
            strings = [v for v in data.values() if isinstance(v, str)]
            return strings[0] if len(strings) == 1 else None
        return None
    if isinstance(value, Sequence) and value:
        return _last_message(value, roles)
    return None


def question_in(
    value: Any, keys: Sequence[str] = QUESTION_KEYS, *, sole_string: bool = False
) -> str | None:
    """The question: a string, a message, the first of ``keys`` found, or the last human turn.

    Args:
        value: A run's inputs (live or read back from LangSmith).
        keys: Dict keys to try, in order.
        sole_string: When no key matches, take the dict's only string value (dataset inputs
            often use their own names, e.g. ``{"topic": ...}``).
    """
    return _find(value, keys, _HUMAN_ROLES, sole_string)


def answer_in(
    value: Any, keys: Sequence[str] = ANSWER_KEYS, *, sole_string: bool = False
) -> str | None:
    """The answer: a string, a message, the first of ``keys`` found, or the last AI turn.

    Args:
        value: A run's outputs (live or read back from LangSmith).
        keys: Dict keys to try, in order.
        sole_string: When no key matches, take the dict's only string value.
    """
    return _find(value, keys, _AI_ROLES, sole_string)
