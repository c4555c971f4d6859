"""ContextPrecision: are the useful contexts ranked first? (average precision of verdicts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from langchain_core.prompts import ChatPromptTemplate
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import override

from langchain_ragmetrics._prompts import context_precision as prompts
from langchain_ragmetrics._schema import RagSample
from langchain_ragmetrics.metrics._base import JudgedMetric, Plan, Verdict
from langchain_ragmetrics.metrics._indices import check_index_cover
from langchain_ragmetrics.scoring import average_precision, explain_average_precision

__all__ = [
    "ContextPrecision",
    "ContextVerdict",
    "ContextVerdicts",
    "SingleContextVerdict",
    "check_verdict_indices",
    "score_context_precision",
]


class SingleContextVerdict(BaseModel):
    """The judge's verdict on one context."""

    model_config = ConfigDict(extra="ignore")

    reason: str = Field(description="Why the passage was or was not useful.")
    useful: bool = Field(description="True when the passage helped reach the target.")


class ContextVerdict(SingleContextVerdict):
    """A verdict keyed by the context's index."""

    index: int = Field(description="Index of the passage this verdict is about.")


class ContextVerdicts(BaseModel):
    """The judge's answer: one verdict per retrieved context, keyed by index."""

    model_config = ConfigDict(extra="ignore")

    verdicts: list[ContextVerdict] = Field(description="Exactly one verdict per passage index.")


def check_verdict_indices(answer: ContextVerdicts, count: int) -> None:
    """Raise ValueError unless the verdicts cover indices 0..count-1 exactly once."""
    check_index_cover((v.index for v in answer.verdicts), count, items="contexts")


def score_context_precision(verdicts: Sequence[SingleContextVerdict], *, mode: str) -> Verdict:
    """Pure scorer: average precision over the verdicts in rank order (0 when none useful)."""
    flags = [v.useful for v in verdicts]
    score = average_precision(flags)
    details: dict[str, Any] = {
        "mode": mode,
        "verdicts": [
            {"index": i, "useful": v.useful, "reason": v.reason} for i, v in enumerate(verdicts)
        ],
    }
    return Verdict(score, explain_average_precision(flags, unit="passage"), details)


class ContextPrecision(JudgedMetric):
    """Whether the contexts useful for the reference (or the answer) are ranked at the top.

    All contexts are judged in one call by default; ``per_context=True`` sends one call per
    context, concurrently. Without a reference the verdicts are judged against the answer.
    """

    key: ClassVar[str] = "context_precision"
    output_schema: ClassVar[type[BaseModel]] = ContextVerdicts
    single_output_schema: ClassVar[type[BaseModel]] = SingleContextVerdict

    per_context: bool = False
    """One judge call per context (RAGAS style) instead of one per sample."""
    single_prompt: ChatPromptTemplate = Field(default_factory=prompts.build_single)
    """The prompt used when ``per_context=True`` (variables ``payload``, ``language``)."""

    @classmethod
    @override
    def default_prompt(cls) -> ChatPromptTemplate:
        return prompts.build()

    @override
    def validate_sample(self, value: Any) -> RagSample:
        sample = super().validate_sample(value)
        if sample.reference is None and sample.answer is None:
            msg = f"{type(self).__name__} needs `reference` (or `answer` when there is none)"
            raise ValueError(msg)
        return sample

    @override
    def plan(self, sample: RagSample) -> Plan | Verdict:
        if sample.reference is not None:
            mode, kind, target = "reference", "reference answer", sample.reference
        else:
            mode, kind, target = "answer", "answer", sample.answer or ""
        if not sample.contexts:
            return Verdict(0.0, "No contexts were retrieved.", {"mode": mode, "verdicts": []})
        base = {"question": sample.question or "", "target_kind": kind, "target": target}
        if self.per_context:
            prompt, schema = self.single_prompt, self.single_output_schema
            calls = [
                self.ask(sample, {**base, "passage": c}, prompt=prompt, schema=schema)
                for c in sample.contexts
            ]
            return Plan(calls, mode)
        count = len(sample.contexts)
        passages = [{"index": i, "text": text} for i, text in enumerate(sample.contexts)]
        call = self.ask(
            sample,
            {**base, "passages": passages},
            check=lambda answer: check_verdict_indices(answer, count),
        )
        return Plan([call], mode)

    @override
    def score(self, plan: Plan, answers: Sequence[Any]) -> Verdict:
        if self.per_context:
            return score_context_precision(answers, mode=plan.state)
        ordered = sorted(answers[0].verdicts, key=lambda v: v.index)
        return score_context_precision(ordered, mode=plan.state)
