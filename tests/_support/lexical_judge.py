"""A deterministic judge for end-to-end tests: every verdict follows from word overlap.

It answers every structured request the metrics send (``RecallStatements``,
``DecomposedStatements``, ``ContextVerdicts``, ``SingleContextVerdict``, ``EntityLists``,
``EntityList``, ``RelevantSentences``, the pre-flight ``PreflightAnswer``) and plain-text
requests (an answering model), so whole programs (the CLI, the demo, the cookbook) can run
against a ``JudgeServer`` with realistic, predictable scores. English is tokenised into
words, other scripts into character bigrams.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests._support.openai_server import JudgeRequest

__all__ = ["SUPPORT", "entities", "lexical_judge", "overlap", "sentences", "tokens"]

SUPPORT = 0.5
"""Share of a statement's tokens a passage must contain to support it."""

_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s*")
_ENTITY = re.compile(r"\b(?:[A-Z][\w-]*(?:\s+[A-Z][\w-]*)*|\d{3,4})\b")
_CJK_ENTITY = re.compile(r"[\u30a0-\u30ff\u4e00-\u9fff]{2,}")
_STOP_WORDS = (
    "the a an of in on at to is was were are be by for and or with as it its his her he she "
    "they this that what who which when where how did does do from has have had"
)
_STOP = frozenset(_STOP_WORDS.split())


def tokens(text: str) -> set[str]:
    """Content words (ASCII) and character bigrams (other scripts) of ``text``."""
    out: set[str] = set()
    for word in _WORD.findall(text.casefold()):
        if word.isascii():
            if word not in _STOP and len(word) > 1:
                out.add(word)
        elif len(word) == 1:
            out.add(word)
        else:
            out.update(word[i : i + 2] for i in range(len(word) - 1))
    return out


def overlap(part: str, whole: str) -> float:
    """Share of the tokens of ``part`` that also occur in ``whole`` (0 when ``part`` has none)."""
    mine = tokens(part)
    return len(mine & tokens(whole)) / len(mine) if mine else 0.0


def sentences(text: str) -> list[str]:
    """Naive sentence split on end punctuation (Latin and Japanese)."""
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def entities(text: str) -> list[str]:
    """Capitalised phrases, years and CJK runs, in order, without repeats."""
    found = [m.group(0) for m in _ENTITY.finditer(text)]
    found += _CJK_ENTITY.findall(text)
    skip = {"The", "It", "He", "She", "They", "In", "A", "An"}
    return list(dict.fromkeys(e for e in found if e not in skip))


def _payload(req: JudgeRequest) -> dict[str, Any]:
    data = json.loads(req.messages[-1]["content"])
    assert isinstance(data, dict)
    return data


def _named(names: list[str]) -> list[dict[str, Any]]:
    return [{"name": n, "aliases": []} for n in names]


def _passage_text(data: dict[str, Any]) -> str:
    passages = data.get("passages") or []
    return "\n".join(p["text"] if isinstance(p, dict) else str(p) for p in passages)


def _answer_text(req: JudgeRequest, answer: str | None) -> str:
    if answer is not None:
        return answer
    # An extractive "answering model": the first sentence of the prompt's context block.
    for line in req.user.splitlines() + req.system.splitlines():
        if line.strip() and not line.rstrip().endswith(":") and "?" not in line:
            first = sentences(line)
            if first:
                return first[0]
    return "I do not know."


def lexical_judge(answer: str | None = None) -> Any:
    """Build a script answering every metric schema by word overlap.

    Args:
        answer: Fixed text for plain (non-structured) requests; by default the first
            sentence of the prompt, like a lazy extractive answering model.
    """

    def script(req: JudgeRequest) -> Any:
        name = req.schema_name
        if name is None:
            return _answer_text(req, answer)
        if name == "PreflightAnswer":  # the one-line check evaluate / the CLI send first
            return {"ok": True}
        data = _payload(req)
        if name == "RecallStatements":
            context = _passage_text(data)
            return {
                "statements": [
                    {
                        "index": s["index"],
                        "reason": "word overlap",
                        "attributed": overlap(s["text"], context) >= SUPPORT,
                    }
                    for s in data["reference_sentences"]
                ]
            }
        if name == "DecomposedStatements":
            context = _passage_text(data)
            return {
                "statements": [
                    {
                        "statement": s,
                        "reason": "word overlap",
                        "attributed": overlap(s, context) >= SUPPORT,
                    }
                    for s in sentences(data["reference"])
                ]
            }
        if name == "ContextVerdicts":
            return {
                "verdicts": [
                    {
                        "index": p["index"],
                        "reason": "word overlap",
                        "useful": overlap(data["target"], p["text"]) >= SUPPORT,
                    }
                    for p in data["passages"]
                ]
            }
        if name == "SingleContextVerdict":
            useful = overlap(data["target"], data["passage"]) >= SUPPORT
            return {"reason": "word overlap", "useful": useful}
        if name == "EntityLists":
            return {
                "reference_entities": _named(entities(data["reference"])),
                "passage_entities": _named(entities(_passage_text(data))),
            }
        if name == "EntityList":
            return {"entities": _named(entities(data["text"]))}
        if name == "RelevantSentences":
            picked = [
                s["index"]
                for s in data["sentences"]
                if overlap(data["question"], s["text"]) >= SUPPORT / 2
            ]
            return {"relevant_sentence_indices": picked, "reason": "word overlap"}
        msg = f"lexical_judge does not know the schema {name!r}"
        raise ValueError(msg)

    return script
