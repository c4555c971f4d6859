"""Scripted judge behaviours shared by the metric tests (functions of the request).

``EINSTEIN_VERDICTS`` is seed 001's classification as ContextRecall's judge returns it: one
verdict per reference sentence index (the ``statement`` texts are informative only).
"""

from __future__ import annotations

import json
from typing import Any

from tests._support.openai_server import JudgeRequest

EINSTEIN_CONTEXT = (
    "Albert Einstein (14 March 1879 - 18 April 1955) was a German-born theoretical physicist, "
    "widely held to be one of the greatest and most influential scientists of all time. Best "
    "known for developing the theory of relativity, he also made important contributions to "
    "quantum mechanics. He received the 1921 Nobel Prize in Physics 'for his services to "
    "theoretical physics, and especially for his discovery of the law of the photoelectric "
    "effect'."
)
EINSTEIN_REFERENCE = (
    "Albert Einstein born in 14 March 1879 was German-born theoretical physicist, widely held to "
    "be one of the greatest and most influential scientists of all time. He received the 1921 "
    "Nobel Prize in Physics for his services to theoretical physics. He published 4 papers in "
    "1905. Einstein moved to Switzerland in 1895"
)
EINSTEIN_VERDICTS: dict[str, Any] = {
    "statements": [
        {
            "index": 0,
            "statement": "Albert Einstein, born on 14 March 1879, was a German-born theoretical "
            "physicist.",
            "reason": "The birth date and profession are in the context.",
            "attributed": 1,
        },
        {
            "index": 1,
            "statement": "He received the 1921 Nobel Prize in Physics.",
            "reason": "The context states it.",
            "attributed": 1,
        },
        {
            "index": 2,
            "statement": "He published 4 papers in 1905.",
            "reason": "The context says nothing about papers.",
            "attributed": 0,
        },
        {
            "index": 3,
            "statement": "Einstein moved to Switzerland in 1895.",
            "reason": "No supporting evidence.",
            "attributed": 0,
        },
    ]
}


def payload(req: JudgeRequest) -> dict[str, Any]:
    """The JSON data the metric sent as the human message."""
    data = json.loads(req.messages[-1]["content"])
    assert isinstance(data, dict)
    return data


def keyword_precision(*keywords: str) -> Any:
    """A precision judge: a passage is useful when it contains one of the keywords."""

    def script(req: JudgeRequest) -> dict[str, Any]:
        data = payload(req)
        if "passage" in data:  # per_context mode
            useful = any(k in data["passage"] for k in keywords)
            return {"reason": "keyword" if useful else "no keyword", "useful": useful}
        return {
            "verdicts": [
                {
                    "index": p["index"],
                    "reason": "scripted",
                    "useful": any(k in p["text"] for k in keywords),
                }
                for p in data["passages"]
            ]
        }

    return script


def keyword_relevance(*keywords: str) -> Any:
    """A relevance judge: picks the sentences that contain one of the keywords."""

    def script(req: JudgeRequest) -> dict[str, Any]:
        sentences = payload(req)["sentences"]
        picked = [s["index"] for s in sentences if any(k in s["text"] for k in keywords)]
        return {"relevant_sentence_indices": picked, "reason": "scripted"}

    return script


def keyword_recall(*keywords: str) -> Any:
    """A recall judge: a reference sentence is attributed when it contains one of the keywords."""

    def script(req: JudgeRequest) -> dict[str, Any]:
        return {
            "statements": [
                {
                    "index": s["index"],
                    "reason": "scripted",
                    "attributed": any(k in s["text"] for k in keywords),
                }
                for s in payload(req)["reference_sentences"]
            ]
        }

    return script
