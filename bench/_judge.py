"""A plausible, deterministic judge for the benchmarks: one script answers both libraries.

``BenchJudge`` is a ``JudgeServer`` script (see ``tests/_support/openai_server.py``). It reads
what each request asks for and answers it the way a careful model would, using word (and, for
Japanese, character-bigram) overlap instead of understanding (the helpers of
``tests/_support/lexical_judge.py``):

* our metrics ask for structured output by tool calling; the tool name is the schema
  (``RecallStatements``, ``ContextVerdicts``, ``SingleContextVerdict``, ``EntityLists``,
  ``EntityList``, ``RelevantSentences``) and the human message is a JSON payload;
* RAGAS 0.4.3's ``PydanticPrompt`` puts a JSON Schema and a JSON ``input:`` block in one plain
  text prompt and parses JSON out of the text answer (``ContextRecallClassifications``,
  ``Verification``, ``EntitiesList``, ``StringIO`` for its fix-the-output retry);
* RAGAS's ``ContextRelevance`` (the NVIDIA-style one in ``ragas.metrics``) asks twice for a
  bare rating "0", "1" or "2" in text.

Any other schema gets a generic answer filled in from the schema itself, so an unexpected
prompt still gets a valid reply instead of a 500. The judge also tallies calls and characters
per (side, metric), read from the ``x-bench-side`` / ``x-bench-metric`` headers each benchmark
client sets, so the figures do not depend on guessing which prompt belongs to which metric.
It counts every character the judge receives: the messages and the tool / response-format
schema beside them (ours sends its schema as a tool definition, RAGAS inside the prompt text).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import _common  # noqa: F401 - puts the repository root on sys.path for tests._support

from tests._support.lexical_judge import entities as lexical_entities
from tests._support.lexical_judge import overlap, sentences
from tests._support.openai_server import JudgeRequest, _content_text

__all__ = ["BenchJudge", "Tally", "fill_schema", "message_chars", "schema_chars"]

_SCHEMA_MARK = "as specified in JSON Schema:\n"
_INPUT_MARK = "\ninput: "
_RATING_MARK = "score is"
_MAX_ENTITIES = 40

Answer = dict[str, Any]


def entities(text: str, limit: int = _MAX_ENTITIES) -> list[str]:
    """The shared lexical judge's entities, capped (a model lists a bounded number)."""
    return lexical_entities(text)[:limit]


# --------------------------------------------------------------------------- generic answers


def fill_schema(schema: dict[str, Any] | None, root: dict[str, Any] | None = None) -> Any:
    """A valid instance of a JSON Schema with neutral values (used for unknown schemas)."""
    if not schema:
        return {}
    root = root or schema
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return fill_schema((root.get("$defs") or root.get("definitions") or {}).get(name), root)
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return fill_schema(schema[key][0], root)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if kind == "object":
        return {k: fill_schema(v, root) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [fill_schema(schema.get("items"), root) for _ in range(2)]
    return {"string": "n/a", "integer": 1, "number": 0.5, "boolean": True}.get(str(kind))


# --------------------------------------------------------------------------- our metrics


def _statements(reference: str, passages: str) -> list[dict[str, Any]]:
    out = []
    for sentence in sentences(reference):
        supported = overlap(sentence, passages) >= 0.6
        reason = "The passages state this." if supported else "No passage states this."
        out.append({"statement": sentence, "reason": reason, "attributed": supported})
    return out


def _useful(passage: str, target: str) -> tuple[bool, str]:
    useful = overlap(target, passage) >= 0.3
    return useful, "Shares the key facts of the target." if useful else "Unrelated to the target."


def _ours_recall(data: dict[str, Any]) -> Answer:
    passages = " ".join(data["passages"])
    verdicts = []
    for sentence in data["reference_sentences"]:
        supported = overlap(sentence["text"], passages) >= 0.6
        reason = "The passages state this." if supported else "No passage states this."
        verdicts.append({"index": sentence["index"], "reason": reason, "attributed": supported})
    return {"statements": verdicts}


def _ours_verdicts(data: dict[str, Any]) -> Answer:
    verdicts = []
    for passage in data["passages"]:
        useful, reason = _useful(passage["text"], data["target"])
        verdicts.append({"index": passage["index"], "reason": reason, "useful": useful})
    return {"verdicts": verdicts}


def _ours_single_verdict(data: dict[str, Any]) -> Answer:
    useful, reason = _useful(data["passage"], data["target"])
    return {"reason": reason, "useful": useful}


def _named(names: list[str]) -> list[dict[str, Any]]:
    return [{"name": name, "aliases": []} for name in names]


def _ours_entity_lists(data: dict[str, Any]) -> Answer:
    return {
        "reference_entities": _named(entities(data["reference"])),
        "passage_entities": _named(entities(" ".join(data["passages"]))),
    }


def _ours_entity_list(data: dict[str, Any]) -> Answer:
    return {"entities": _named(entities(data["text"]))}


def _ours_relevant(data: dict[str, Any]) -> Answer:
    question = data["question"]
    picked = [s["index"] for s in data["sentences"] if overlap(question, s["text"]) >= 0.3]
    return {"relevant_sentence_indices": picked, "reason": "Picked the sentences on the topic."}


OURS: dict[str, Callable[[dict[str, Any]], Answer]] = {
    "RecallStatements": _ours_recall,
    "ContextVerdicts": _ours_verdicts,
    "SingleContextVerdict": _ours_single_verdict,
    "EntityLists": _ours_entity_lists,
    "EntityList": _ours_entity_list,
    "RelevantSentences": _ours_relevant,
}


# --------------------------------------------------------------------------- RAGAS prompts


def _ragas_recall(data: dict[str, Any]) -> Answer:
    rows = _statements(data["answer"], data["context"])
    return {"classifications": [{**r, "attributed": int(r["attributed"])} for r in rows]}


def _ragas_verification(data: dict[str, Any]) -> Answer:
    useful, reason = _useful(data["context"], data["answer"])
    return {"reason": reason, "verdict": int(useful)}


def _ragas_entities(data: dict[str, Any]) -> Answer:
    return {"entities": entities(data["text"])}


def _ragas_fix(data: dict[str, Any]) -> Answer:
    return {"text": data.get("output_string", "")}


RAGAS: dict[str, Callable[[dict[str, Any]], Answer]] = {
    "ContextRecallClassifications": _ragas_recall,
    "Verification": _ragas_verification,
    "EntitiesList": _ragas_entities,
    "StringIO": _ragas_fix,
}


def _decode_after(text: str, mark: str, *, last: bool = False) -> dict[str, Any] | None:
    """Decode the JSON object that follows ``mark`` in ``text`` (None when there is none)."""
    at = text.rfind(mark) if last else text.find(mark)
    if at < 0:
        return None
    start = text.find("{", at + len(mark))
    if start < 0:
        return None
    try:
        value, _end = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _rating(text: str) -> str:
    """Answer RAGAS's 0/1/2 relevance prompts from the question/context overlap."""
    match = re.search(r"### Question: (.*?)\n\n### Context: (.*?)\n\n", text, re.S)
    if match is None:
        return "1"
    share = overlap(match.group(1), match.group(2))
    return "2" if share >= 0.5 else "1" if share >= 0.2 else "0"


# --------------------------------------------------------------------------- the script


@dataclass
class Tally:
    """Calls and characters for one (side, metric).

    ``message_chars`` is the text of every message (system, user, assistant); ``schema_chars``
    the tool / function / response-format definitions and the tool choice sent beside them,
    which a provider bills as input too; ``input_chars`` is their sum, what the judge receives.
    """

    calls: int = 0
    message_chars: int = 0
    schema_chars: int = 0
    input_chars: int = 0
    completion_chars: int = 0


_SCHEMA_KEYS = ("tools", "tool_choice", "functions", "function_call", "response_format")


def message_chars(body: dict[str, Any]) -> int:
    """Characters of every message's text (string or text parts) in a request body."""
    return sum(
        len(_content_text(m.get("content")))
        for m in body.get("messages") or []
        if isinstance(m, dict)
    )


def schema_chars(body: dict[str, Any]) -> int:
    """Characters of the tool / response-format definitions sent next to the messages.

    Compact JSON, as the client serialises it: the bench counts RAGAS's in-prompt JSON Schema
    as message text and our tool schemas here, so both sides pay for their schema.
    """
    extra = {k: body[k] for k in _SCHEMA_KEYS if body.get(k)}
    return len(json.dumps(extra, separators=(",", ":"), ensure_ascii=False)) if extra else 0


class BenchJudge:
    """The benchmark's judge script: plausible answers plus a per-(side, metric) tally."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tally: dict[tuple[str, str], Tally] = {}
        self.unknown: dict[str, int] = {}

    def reset(self) -> None:
        """Forget the tally."""
        with self._lock:
            self._tally.clear()
            self.unknown.clear()

    def tally(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{side: {metric: {calls, message_chars, schema_chars, input_chars, ...}}}``."""
        with self._lock:
            out: dict[str, dict[str, dict[str, int]]] = {}
            for (side, metric), t in sorted(self._tally.items()):
                out.setdefault(side, {})[metric] = asdict(t)
            return out

    def answer(self, req: JudgeRequest) -> Answer | str:
        """Work out the reply for one request."""
        if req.mode != "text":
            handler = OURS.get(req.schema_name or "")
            data = (
                _decode_after(req.messages[-1].get("content") or "", "") if req.messages else None
            )
            if handler is not None and data is not None:
                return handler(data)
            return self._unknown(req.schema_name, fill_schema(req.schema))
        schema = _decode_after(req.text, _SCHEMA_MARK)
        if schema is not None:
            data = _decode_after(req.text, _INPUT_MARK, last=True)
            handler = RAGAS.get(str(schema.get("title")))
            if handler is not None and data is not None:
                return handler(data)
            return self._unknown(schema.get("title"), fill_schema(schema))
        if _RATING_MARK in req.text:
            return _rating(req.text)
        return "OK"

    def _unknown(self, name: object, value: Any) -> Any:
        with self._lock:
            key = str(name)
            self.unknown[key] = self.unknown.get(key, 0) + 1
        return value

    def __call__(self, req: JudgeRequest) -> Answer | str:
        reply = self.answer(req)
        completion = reply if isinstance(reply, str) else json.dumps(reply)
        key = (req.headers.get("x-bench-side", "?"), req.headers.get("x-bench-metric", "?"))
        with self._lock:
            t = self._tally.setdefault(key, Tally())
            t.calls += 1
            t.message_chars += message_chars(req.body)
            t.schema_chars += schema_chars(req.body)
            t.input_chars = t.message_chars + t.schema_chars
            t.completion_chars += len(completion)
        return reply
