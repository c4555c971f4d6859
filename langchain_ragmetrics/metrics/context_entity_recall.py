"""ContextEntityRecall: share of the reference's named entities found in the contexts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from langchain_core.prompts import ChatPromptTemplate
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import override

from langchain_ragmetrics.metrics._base import JudgedMetric, Plan, Verdict
from langchain_ragmetrics.prompts import context_entity_recall as prompts
from langchain_ragmetrics.schema import RagSample
from langchain_ragmetrics.scoring import entity_overlap

__all__ = ["ContextEntityRecall", "EntityList", "EntityLists", "score_entity_recall"]


class EntityLists(BaseModel):
    """The judge's answer in one-call mode: entities of the reference and of the passages."""

    model_config = ConfigDict(extra="ignore")

    reference_entities: list[str] = Field(description="Named entities of the reference.")
    passage_entities: list[str] = Field(description="Named entities of all passages.")


class EntityList(BaseModel):
    """The judge's answer for one text (``single_call=False``)."""

    model_config = ConfigDict(extra="ignore")

    entities: list[str] = Field(description="Named entities of the text.")


def score_entity_recall(
    reference_entities: Sequence[str], context_entities: Sequence[str]
) -> Verdict:
    """Pure scorer: |CE ∩ GE| / |GE|, matching without case, punctuation or spacing."""
    found, missing = entity_overlap(reference_entities, context_entities)
    total = len(found) + len(missing)
    details = {
        "reference_entities": list(reference_entities),
        "context_entities": list(context_entities),
        "found": found,
        "missing": missing,
    }
    if not total:
        return Verdict(float("nan"), "The reference has no named entities.", details)
    reason = f"{len(found)} of {total} reference entities appear in the contexts."
    if missing:
        reason += f" Missing: {', '.join(missing)}."
    return Verdict(len(found) / total, reason, details)


class ContextEntityRecall(JudgedMetric):
    """Recall of the reference's named entities (people, places, dates ...) in the contexts.

    One judge call per sample lists the entities of both sides; ``single_call=False`` uses a
    separate call for the reference and for the contexts.
    """

    key: ClassVar[str] = "context_entity_recall"
    requires: ClassVar[tuple[str, ...]] = ("reference",)
    output_schema: ClassVar[type[BaseModel]] = EntityLists
    single_output_schema: ClassVar[type[BaseModel]] = EntityList

    single_call: bool = True
    """Extract both entity lists in one judge call."""
    single_prompt: ChatPromptTemplate = Field(default_factory=prompts.build_single)
    """The prompt for one text, used when ``single_call=False``."""

    @classmethod
    @override
    def default_prompt(cls) -> ChatPromptTemplate:
        return prompts.build()

    @override
    def plan(self, sample: RagSample) -> Plan | Verdict:
        reference = (sample.reference or "").strip()
        if not reference:
            return score_entity_recall([], [])
        if self.single_call:
            return Plan([self.ask(sample, {"reference": reference, "passages": sample.contexts})])
        prompt, schema = self.single_prompt, self.single_output_schema
        texts = [reference, "\n\n".join(sample.contexts)]
        calls = [self.ask(sample, {"text": t}, prompt=prompt, schema=schema) for t in texts if t]
        return Plan(calls)

    @override
    def score(self, plan: Plan, answers: Sequence[Any]) -> Verdict:
        if self.single_call:
            return score_entity_recall(answers[0].reference_entities, answers[0].passage_entities)
        context_entities = answers[1].entities if len(answers) > 1 else []
        return score_entity_recall(answers[0].entities, context_entities)
