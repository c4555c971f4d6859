"""ContextRecall: how much of the reference answer the retrieved contexts support."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from langchain_core.prompts import ChatPromptTemplate
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import override

from langchain_ragmetrics.metrics._base import JudgedMetric, Plan, Verdict
from langchain_ragmetrics.prompts import context_recall as prompts
from langchain_ragmetrics.schema import RagSample
from langchain_ragmetrics.scoring import recall_fraction

__all__ = ["ContextRecall", "RecallStatements", "StatementVerdict", "score_context_recall"]


class StatementVerdict(BaseModel):
    """One statement of the reference and whether the contexts support it."""

    model_config = ConfigDict(extra="ignore")

    statement: str = Field(description="A standalone factual statement from the reference.")
    reason: str = Field(description="Why the statement is or is not supported.")
    attributed: bool = Field(description="True when the passages support the statement.")


class RecallStatements(BaseModel):
    """The judge's answer: the reference split into statements, each attributed or not."""

    model_config = ConfigDict(extra="ignore")

    statements: list[StatementVerdict] = Field(
        description="Every statement of the reference with its verdict."
    )


def score_context_recall(answer: RecallStatements) -> Verdict:
    """Pure scorer: attributed statements / all statements; NaN when there are none."""
    flags = [s.attributed for s in answer.statements]
    score = recall_fraction(flags)
    details = {"statements": [s.model_dump() for s in answer.statements]}
    if not flags:
        return Verdict(score, "The judge found no statements in the reference.", details)
    reason = f"{sum(flags)} of {len(flags)} reference statements are supported by the contexts."
    return Verdict(score, reason, details)


class ContextRecall(JudgedMetric):
    """Share of the reference's statements that the retrieved contexts support.

    One judge call per sample splits the reference into statements and attributes each one.
    """

    key: ClassVar[str] = "context_recall"
    requires: ClassVar[tuple[str, ...]] = ("reference",)
    output_schema: ClassVar[type[BaseModel]] = RecallStatements

    @classmethod
    @override
    def default_prompt(cls) -> ChatPromptTemplate:
        return prompts.build()

    @override
    def plan(self, sample: RagSample) -> Plan | Verdict:
        reference = (sample.reference or "").strip()
        if not reference:
            return Verdict(float("nan"), "The reference is empty: there is nothing to recall.")
        if not sample.contexts:
            return Verdict(0.0, "No contexts were retrieved, so no statement is supported.")
        data = {"question": sample.question or "", "passages": sample.contexts}
        data["reference"] = reference
        return Plan([self.ask(sample, data)])

    @override
    def score(self, plan: Plan, answers: Sequence[Any]) -> Verdict:
        return score_context_recall(answers[0])
