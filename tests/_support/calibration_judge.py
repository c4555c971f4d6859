"""A loopback judge that answers from the calibration set's labels (optionally flipping some).

``label_judge()`` answers every schema the LLM-judged metrics send with the verdicts a careful
human gave, so ``check_judge`` must report perfect agreement. ``flip=`` names the items whose
FIRST verdict (first reference sentence, first passage, first context sentence, first
reference entity) is answered the other way round, so the figures a check prints follow from
the flips exactly.

``fixed_judge(answer)`` is the judge that does not read: it gives the same verdict to every
sentence, passage and entity, so it agrees with the labels only as often as chance does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import Any

from langchain_ragmetrics._text import normalize_for_match
from langchain_ragmetrics.calibration import CalibrationItem, load_calibration_set
from tests._support.openai_server import JudgeRequest, Script

__all__ = ["fixed_judge", "label_judge"]


def _payload(req: JudgeRequest) -> dict[str, Any]:
    data = json.loads(req.messages[-1]["content"])
    assert isinstance(data, dict)
    return data


def _flip_first(flags: list[bool], flip: bool) -> list[bool]:
    return [not f if flip and i == 0 else f for i, f in enumerate(flags)]


def _entity(name: str, aliases: list[str]) -> dict[str, Any]:
    return {"name": name, "aliases": aliases}


def label_judge(flip: Collection[str] = ()) -> Script:
    """Build a script answering from the labels; items whose id is in ``flip`` get one flip."""
    items = load_calibration_set()
    by_question = {item.question: item for item in items}
    by_reference = {item.reference: item for item in items}
    by_passages = {"\n\n".join(item.contexts): item for item in items}

    def reference_entities(item: CalibrationItem) -> list[dict[str, Any]]:
        return [
            _entity(e.name, e.aliases) for e in item.labels.context_entity_recall.reference_entities
        ]

    def context_entities(item: CalibrationItem) -> list[dict[str, Any]]:
        labels = item.labels.context_entity_recall
        out = [_entity(e.name, e.aliases) for e in labels.context_entities]
        if item.id in flip and labels.reference_entities:
            first = labels.reference_entities[0]
            if first.found:  # drop every passage entity naming it
                keys = {normalize_for_match(f) for f in first.forms()}
                out = [
                    e
                    for e in out
                    if not keys & {normalize_for_match(f) for f in [e["name"], *e["aliases"]]}
                ]
            else:  # claim the passages name it
                out.append(_entity(first.name, []))
        return out

    def recall(data: dict[str, Any]) -> dict[str, Any]:
        item = by_question[data["question"]]
        flags = _flip_first(list(item.labels.context_recall.attributed), item.id in flip)
        indices = [s["index"] for s in data["reference_sentences"]]
        return {
            "statements": [
                {"index": i, "reason": "labelled", "attributed": flags[i]} for i in indices
            ]
        }

    def statements(data: dict[str, Any]) -> dict[str, Any]:
        item = by_question[data["question"]]
        label = item.labels.context_recall
        flags = _flip_first(list(label.attributed), item.id in flip)
        return {
            "statements": [
                {"statement": s, "reason": "labelled", "attributed": f}
                for s, f in zip(label.sentences, flags, strict=True)
            ]
        }

    def precision(data: dict[str, Any]) -> dict[str, Any]:
        item = by_question[data["question"]]
        flags = _flip_first(list(item.labels.context_precision.useful), item.id in flip)
        return {
            "verdicts": [
                {"index": p["index"], "reason": "labelled", "useful": flags[p["index"]]}
                for p in data["passages"]
            ]
        }

    def single_precision(data: dict[str, Any]) -> dict[str, Any]:
        item = by_question[data["question"]]
        flags = _flip_first(list(item.labels.context_precision.useful), item.id in flip)
        return {"reason": "labelled", "useful": flags[item.contexts.index(data["passage"])]}

    def relevance(data: dict[str, Any]) -> dict[str, Any]:
        item = by_question[data["question"]]
        label = item.labels.context_relevance
        flags = _flip_first(
            [i in label.relevant for i in range(len(label.sentences))], item.id in flip
        )
        return {
            "relevant_sentence_indices": [i for i, f in enumerate(flags) if f],
            "reason": "labelled",
        }

    def entity_list(data: dict[str, Any]) -> dict[str, Any]:
        text = data["text"]
        if text in by_reference:
            return {"entities": reference_entities(by_reference[text])}
        return {"entities": context_entities(by_passages[text])}

    def entity_lists(data: dict[str, Any]) -> dict[str, Any]:
        item = by_reference[data["reference"]]
        return {
            "reference_entities": reference_entities(item),
            "passage_entities": context_entities(item),
        }

    table: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "RecallStatements": recall,
        "DecomposedStatements": statements,
        "ContextVerdicts": precision,
        "SingleContextVerdict": single_precision,
        "RelevantSentences": relevance,
        "EntityList": entity_list,
        "EntityLists": entity_lists,
    }

    def script(req: JudgeRequest) -> Any:
        return table[str(req.schema_name)](_payload(req))

    return script


def fixed_judge(answer: bool) -> Script:
    """Build a script answering ``answer`` to every verdict (entity lists read correctly)."""
    items = load_calibration_set()
    by_question = {item.question: item for item in items}
    by_reference = {item.reference: item for item in items}

    def reference_entities(reference: str) -> list[dict[str, Any]]:
        labels = by_reference[reference].labels.context_entity_recall
        return [_entity(e.name, e.aliases) for e in labels.reference_entities]

    def passage_entities(item: CalibrationItem) -> list[dict[str, Any]]:
        # "yes": every reference entity is in the passages; "no": the passages name nothing
        return reference_entities(item.reference) if answer else []

    def entity_list(data: dict[str, Any]) -> dict[str, Any]:
        text = data["text"]
        if text in by_reference:
            return {"entities": reference_entities(text)}
        item = next(i for i in items if "\n\n".join(i.contexts) == text)
        return {"entities": passage_entities(item)}

    def relevance(data: dict[str, Any]) -> dict[str, Any]:
        count = len(by_question[data["question"]].labels.context_relevance.sentences)
        return {"relevant_sentence_indices": list(range(count)) if answer else [], "reason": "-"}

    table: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "RecallStatements": lambda data: {
            "statements": [
                {"index": s["index"], "reason": "-", "attributed": answer}
                for s in data["reference_sentences"]
            ]
        },
        "ContextVerdicts": lambda data: {
            "verdicts": [
                {"index": p["index"], "reason": "-", "useful": answer} for p in data["passages"]
            ]
        },
        "RelevantSentences": relevance,
        "EntityList": entity_list,
        "EntityLists": lambda data: {
            "reference_entities": reference_entities(data["reference"]),
            "passage_entities": passage_entities(by_reference[data["reference"]]),
        },
    }

    def script(req: JudgeRequest) -> Any:
        return table[str(req.schema_name)](_payload(req))

    return script
