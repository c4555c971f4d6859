"""Saved runs: what a run was (version, judge, prompts, data) and reading a results file back.

A results file is JSON Lines: a header line ``{"ragmetrics_run": {...}}`` with the run's
metadata, then one object per sample (sample fields, metadata keys, ``results`` per metric).
The dataset loader skips the header, so a results file is still a valid dataset.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticSerializationError

from langchain_ragmetrics._dataset import RUN_HEADER_KEY, json_lines
from langchain_ragmetrics._errors import ResultFileError
from langchain_ragmetrics._schema import MetricResult, RagSample
from langchain_ragmetrics._version import __version__
from langchain_ragmetrics.evaluation._model import (
    FORMAT_VERSION,
    SAMPLE_FIELDS,
    EvaluationRow,
    MetricInfo,
    ResultData,
    RunInfo,
)

if TYPE_CHECKING:
    import os

    from langchain_ragmetrics.metrics import BaseRagMetric

__all__ = [
    "FORMAT_VERSION",
    "SAMPLE_FIELDS",
    "MetricInfo",
    "ResultFileError",
    "RunInfo",
    "dataset_fingerprint",
    "metric_info",
    "read_result",
    "run_info",
    "sample_id",
    "sample_ids",
]

_ROW_KEYS = frozenset({"row", "location", "results"})
_ID_KEYS = ("id", "sample_id")


class _Header(BaseModel):
    """The header line's content."""

    model_config = ConfigDict(extra="ignore")

    metrics: list[str]
    """Metric columns, in order."""
    source: str = "dataset"
    """The dataset's name (``EvaluationResult.source``)."""
    elapsed_s: float = 0.0
    """Wall time of the run, in seconds."""
    interrupted: bool = False
    """True when the run was stopped before every job finished."""
    info: RunInfo | None = None
    """Run metadata, when the run recorded it."""


def _short_hash(text: str) -> str:
    # surrogatepass: a lone surrogate in a sample (a cut emoji) must not fail the run's end
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def dataset_fingerprint(samples: Iterable[RagSample]) -> str:
    """A short hash of the samples' content, in order."""
    digest = hashlib.sha256()
    for sample in samples:
        try:
            text = sample.model_dump_json()
        except PydanticSerializationError:  # metadata holding a live object: its type counts
            text = json.dumps(sample.model_dump(), default=_opaque, ensure_ascii=False)
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def _opaque(value: object) -> str:
    """What the fingerprint keeps of a value JSON cannot hold: its type (stable across runs)."""
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def metric_info(metric: BaseRagMetric) -> MetricInfo:
    """Key, class, judge and prompt hash of a metric."""
    from langchain_core.prompts import ChatPromptTemplate

    from langchain_ragmetrics.metrics._judge import judge_name

    prompts = [
        value.pretty_repr() + json.dumps(value.partial_variables, sort_keys=True, default=str)
        for name in sorted(type(metric).model_fields)
        if isinstance(value := getattr(metric, name, None), ChatPromptTemplate)
    ]
    llm = getattr(metric, "llm", None)
    return MetricInfo(
        key=metric.metric_name,
        class_name=type(metric).__name__,
        judge=judge_name(llm) if llm is not None else None,
        prompt_hash=_short_hash("\n\x00\n".join(prompts)) if prompts else None,
    )


def run_info(
    columns: Sequence[str], metrics: Sequence[BaseRagMetric], samples: Sequence[RagSample]
) -> RunInfo:
    """The metadata of a finished run."""
    return RunInfo(
        package_version=__version__,
        created_at=datetime.now(timezone.utc),
        dataset_fingerprint=dataset_fingerprint(samples),
        metrics={c: metric_info(m) for c, m in zip(columns, metrics, strict=True)},
    )


def sample_id(sample: RagSample) -> str:
    """A stable id of a sample: its ``id`` / ``sample_id``, else a hash of question and reference.

    The retrieved contexts are deliberately left out: comparing two retrievers on the same
    questions is the point of a comparison, and their contexts differ.
    """
    for key in _ID_KEYS:
        value = sample.metadata.get(key)
        if value is not None and str(value):
            return str(value)
    return _short_hash(json.dumps([sample.question, sample.reference], ensure_ascii=False))


def sample_ids(samples: Iterable[RagSample]) -> list[str]:
    """:func:`sample_id` of each sample; repeats get ``#2``, ``#3`` ... in order."""
    seen: Counter[str] = Counter()
    out = []
    for sample in samples:
        base = sample_id(sample)
        seen[base] += 1
        out.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return out


def header_line(result: ResultData) -> str:
    """The header line of ``result``'s results file."""
    header = _Header(
        metrics=result.metrics,
        source=result.source,
        elapsed_s=result.elapsed_s,
        interrupted=result.interrupted,
        info=result.info,
    )
    return json.dumps({RUN_HEADER_KEY: header.model_dump(mode="json")}, ensure_ascii=False)


def _result_from_json(data: Any, metric: str) -> MetricResult | None:
    if not isinstance(data, dict) or data.get("status") == "not_run":
        return None
    fields = {k: v for k, v in data.items() if k != "status"}
    fields.setdefault("metric", metric)
    if data.get("status") == "failed" and fields.get("score") is None:
        fields["score"] = math.nan
    return MetricResult.model_validate(fields)


def _sample_from_record(record: dict[str, Any]) -> RagSample:
    fields: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for key, value in record.items():
        if key in _ROW_KEYS:
            continue
        if key in SAMPLE_FIELDS:
            fields[key] = value
        else:
            metadata[key.removeprefix("metadata.")] = value
    return RagSample.model_validate({**fields, "metadata": metadata})


def read_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a results file written by ``EvaluationResult.to_jsonl``: the result's fields.

    Raises:
        FileNotFoundError: The file does not exist.
        ResultFileError: A line is not valid JSON or not a result row (file and line named).
    """
    source = Path(path)
    text = source.read_text(encoding="utf-8-sig")
    header: _Header | None = None
    rows: list[EvaluationRow] = []
    metrics: list[str] | None = None
    for line_no, line in enumerate(json_lines(text), start=1):
        if not line.strip():
            continue
        where = f"{source}, line {line_no}"
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                msg = "expected a JSON object"
                raise TypeError(msg)
            if RUN_HEADER_KEY in record and not rows and header is None:
                header = _Header.model_validate(record[RUN_HEADER_KEY])
                metrics = list(header.metrics)
                continue
            results = record.get("results")
            if not isinstance(results, dict):
                msg = "no `results` object: not a ragmetrics results file"
                raise TypeError(msg)
            if metrics is None:
                metrics = list(results)
            row_number = record.get("row")
            position = int(row_number) - 1 if isinstance(row_number, int) else len(rows)
            rows.append(
                EvaluationRow(
                    position=position,
                    location=str(record.get("location") or f"{source}, row {position + 1}"),
                    sample=_sample_from_record(record),
                    results={m: _result_from_json(results.get(m), m) for m in metrics},
                )
            )
        except (ValueError, TypeError, ValidationError) as exc:
            msg = f"{where}: cannot read the result: {exc}"
            raise ResultFileError(msg) from exc
    if metrics is None:
        msg = f"{source}: no results in the file"
        raise ResultFileError(msg)
    return {
        "metrics": metrics,
        "rows": rows,
        "source": header.source if header is not None else str(source),
        "elapsed_s": header.elapsed_s if header is not None else 0.0,
        "interrupted": header.interrupted if header is not None else False,
        "info": header.info if header is not None else None,
    }
