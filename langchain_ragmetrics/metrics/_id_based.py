"""IDBasedContextRecall / IDBasedContextPrecision: compare retrieved and reference doc ids."""

from __future__ import annotations

from typing import ClassVar

from langchain_core.runnables import RunnableConfig
from typing_extensions import override

from langchain_ragmetrics._schema import MetricInput, MetricResult, RagSample
from langchain_ragmetrics.metrics._base import BaseRagMetric, Verdict

__all__ = ["IDBasedContextPrecision", "IDBasedContextRecall", "id_precision", "id_recall"]


def _unique(ids: list[str | None]) -> list[str]:
    return list(dict.fromkeys(i for i in ids if i is not None))


def id_recall(retrieved: list[str | None], reference: list[str]) -> Verdict:
    """Share of distinct reference ids that were retrieved; None (skipped) without any."""
    ref = _unique(list(reference))
    if not ref:
        return Verdict(None, "skipped: there are no reference context ids.")
    got = set(_unique(retrieved))
    found = [i for i in ref if i in got]
    details = {"found": found, "missing": [i for i in ref if i not in got]}
    return Verdict(
        len(found) / len(ref), f"{len(found)} of {len(ref)} reference ids were retrieved.", details
    )


def id_precision(retrieved: list[str | None], reference: list[str]) -> Verdict:
    """Share of distinct retrieved ids that are reference ids; 0 when nothing was retrieved."""
    got = _unique(retrieved)
    if not got:
        return Verdict(0.0, "No retrieved context has an id.")
    ref = set(reference)
    hits = [i for i in got if i in ref]
    details = {"relevant": hits, "irrelevant": [i for i in got if i not in ref]}
    return Verdict(
        len(hits) / len(got), f"{len(hits)} of {len(got)} retrieved ids are relevant.", details
    )


class _IdMetric(BaseRagMetric):
    requires: ClassVar[tuple[str, ...]] = ("context_ids", "reference_context_ids")

    @override
    def validate_sample(self, value: MetricInput) -> RagSample:
        try:
            return super().validate_sample(value)
        except ValueError as exc:
            if "`context_ids`" in str(exc):
                msg = (
                    f"{type(self).__name__} needs `retrieved_context_ids` (or Documents with an "
                    "`id` or an `id` / `doc_id` metadata key as contexts)"
                )
                raise ValueError(msg) from exc
            raise


class IDBasedContextRecall(_IdMetric):
    """Share of the reference document ids found among the retrieved documents."""

    key: ClassVar[str] = "id_based_context_recall"

    @override
    def _evaluate(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        return self._result(id_recall(sample.context_ids or [], sample.reference_context_ids or []))


class IDBasedContextPrecision(_IdMetric):
    """Share of the retrieved document ids that are reference ids."""

    key: ClassVar[str] = "id_based_context_precision"

    @override
    def _evaluate(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        return self._result(
            id_precision(sample.context_ids or [], sample.reference_context_ids or [])
        )
