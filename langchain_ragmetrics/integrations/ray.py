"""Score a ``ray.data.Dataset`` of samples on a Ray cluster (extra ``[ray]``).

:func:`evaluate_ray` runs the same scoring as :func:`~langchain_ragmetrics.evaluate` inside a
fixed pool of Ray actors (``map_batches``): each actor builds one judge per distinct recipe
and one scoring engine, once, from a picklable
:class:`~langchain_ragmetrics.evaluation._recipe.ScoringRecipe` (model, endpoint, options:
never a live client), then scores every batch it is given with ``max_concurrency`` jobs at
work. A batch never raises: a row that cannot be read or a job that fails becomes a result
row with its error, so every input row comes out exactly once.

The global rate limit is divided among the actors (each meters ``rate / num_actors`` judge
requests, retries included): the pool has a fixed size, so the sum never exceeds the limit,
and no request pays a round trip to a shared limiter actor (which would also be one more
thing to fail). The cost: near the end of a run, an idle actor's share goes unused.

If an actor dies, Ray Data restarts it and re-runs the batch it held (its actors have
unlimited ``max_restarts`` / ``max_task_retries`` by default); a batch's rows are output only
when the whole batch returns, so a retried batch is not counted twice in the results (the
judge does see its requests again: Ray runs a lost task at least once).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._errors import DatasetError
from langchain_ragmetrics._options import number_above_zero, number_at_least_zero, whole_number
from langchain_ragmetrics._schema import MetricResult, RagSample
from langchain_ragmetrics.evaluation._recipe import JudgeRecipe, ScoringRecipe
from langchain_ragmetrics.evaluation._result import EvaluationResult, EvaluationRow, column_names
from langchain_ragmetrics.evaluation._run import prepare_metrics
from langchain_ragmetrics.metrics import BaseRagMetric
from langchain_ragmetrics.metrics._judge import DEFAULT_JUDGE_MODEL, DEFAULT_JUDGE_TIMEOUT

if TYPE_CHECKING:
    import os

    import pyarrow as pa
    import ray.data

__all__ = ["RECORD_COLUMN", "ROW_COLUMN", "evaluate_ray", "result_from_rows"]

RECORD_COLUMN = "record"
"""Output column holding the line :meth:`EvaluationResult.to_jsonl` writes, as JSON text."""
ROW_COLUMN = "row"
"""Input column (optional) with the row's number, carried to the output's ``row``."""


def _import_ray() -> Any:
    try:
        import ray.data
    except ImportError as exc:
        msg = (
            "evaluate_ray needs Ray Data: pip install 'langchain-ragmetrics[ray]' "
            f"({type(exc).__name__}: {exc})"
        )
        raise ImportError(msg) from exc
    return ray


def _failed_row(row: dict[str, Any], columns: Sequence[str], error: str) -> dict[str, Any]:
    """The output record of a row that could not be scored at all."""
    record = {key: value for key, value in row.items() if key != ROW_COLUMN}
    record[ROW_COLUMN] = row.get(ROW_COLUMN)
    record["location"] = _location(row)
    record["results"] = {
        name: {"status": "failed", "metric": name, "score": None, "error": error}
        for name in columns
    }
    return record


def _location(row: dict[str, Any]) -> str:
    number = row.get(ROW_COLUMN)
    return "ray dataset" if number is None else f"ray dataset, row {number}"


class _Scorer:
    """A Ray actor's callable: one judge set and one engine, built here, for every batch."""

    def __init__(self, recipe: ScoringRecipe) -> None:
        self.metrics = recipe.build_metrics()
        self.engine = recipe.build_engine()
        self.columns = column_names([m.metric_name for m in self.metrics])

    def __call__(self, batch: pa.Table) -> dict[str, list[Any]]:
        from langchain_ragmetrics._dataset import read_dataset
        from langchain_ragmetrics._engine import Job

        rows = [{k: v for k, v in r.items() if v is not None} for r in batch.to_pylist()]
        records: list[dict[str, Any] | None] = [None] * len(rows)
        scored: list[tuple[int, RagSample]] = []
        for index, row in enumerate(rows):
            fields = {k: v for k, v in row.items() if k != ROW_COLUMN}
            try:
                scored.append((index, read_dataset([fields]).samples[0]))
            except (DatasetError, ValueError) as exc:
                records[index] = _failed_row(row, self.columns, f"invalid row: {exc}")
        jobs = [Job(sample, metric, (i, col)) for i, sample in scored for col, metric in
                enumerate(self.metrics)]  # fmt: skip
        start = time.perf_counter()
        try:
            results: list[MetricResult | None] = self.engine.run(jobs)
        except Exception as exc:  # a bug must not fail the whole dataset: its rows say so
            results = [None] * len(jobs)
            for i, _ in scored:
                records[i] = _failed_row(rows[i], self.columns, f"{type(exc).__name__}: {exc}")
        by_row: dict[int, dict[str, MetricResult | None]] = {i: {} for i, _ in scored}
        for job, result in zip(jobs, results, strict=True):
            i, col = job.tag
            by_row[i][self.columns[col]] = result
        evaluation = EvaluationResult(
            metrics=self.columns,
            rows=[
                EvaluationRow(
                    position=i, location=_location(rows[i]), sample=sample, results=by_row[i]
                )
                for i, sample in scored
                if records[i] is None
            ],
            source="ray",
            elapsed_s=time.perf_counter() - start,
        )
        kept = [i for i, _ in scored if records[i] is None]
        for i, record in zip(kept, evaluation.jsonl_records(), strict=True):
            record[ROW_COLUMN] = rows[i].get(ROW_COLUMN)
            records[i] = record
        return _columns(records, self.columns)


def _columns(records: Sequence[dict[str, Any] | None], metrics: Sequence[str]) -> dict[str, Any]:
    """The batch's output: the JSON record, the row number, and per metric score and status."""
    out: dict[str, list[Any]] = {RECORD_COLUMN: [], ROW_COLUMN: []}
    for name in metrics:
        out[name] = []
        out[f"{name}_status"] = []
    for record in records:
        assert record is not None  # every row got a record above
        out[RECORD_COLUMN].append(json.dumps(record, ensure_ascii=False, default=str))
        out[ROW_COLUMN].append(record.get(ROW_COLUMN))
        for name in metrics:
            result = record["results"][name]
            score = result.get("score")
            out[name].append(math.nan if score is None else float(score))
            out[f"{name}_status"].append(result["status"])
    return out


def evaluate_ray(
    ds: ray.data.Dataset,
    metrics: Sequence[BaseRagMetric | str],
    *,
    model: str = DEFAULT_JUDGE_MODEL,
    base_url: str | None = None,
    api_key: str | None = None,
    judge_timeout: float = DEFAULT_JUDGE_TIMEOUT,
    language: str | None = None,
    num_actors: int = 2,
    max_concurrency: int = 16,
    rate_limit_per_minute: float | None = None,
    timeout: float | None = None,
    batch_size: int = 64,
    cache: str | os.PathLike[str] | None = None,
    num_cpus: float = 1,
) -> ray.data.Dataset:
    """Score a Ray dataset of samples; returns a (lazy) dataset with one result row per input row.

    Args:
        ds: Rows with the columns :func:`~langchain_ragmetrics.evaluate` reads (RAGAS names
            accepted); an optional ``row`` column is carried to the output.
        metrics: Metric names (``"context_recall"``) or metric objects (a metric's own judge
            must be LangChain-serializable, e.g. ``ChatOpenAI``: it is rebuilt in each actor).
        model: Judge model for the LLM-judged metrics that have no judge.
        base_url: OpenAI-compatible endpoint of that judge (default ``$OPENAI_BASE_URL`` on
            the actors).
        api_key: Its key (default ``$OPENAI_API_KEY`` on the actors).
        judge_timeout: Seconds per judge HTTP request.
        language: Default language of rows that do not set one.
        num_actors: Size of the actor pool (fixed: the rate limit is shared among them).
        max_concurrency: Judge calls at work at once in each actor.
        rate_limit_per_minute: Judge requests per minute for the whole pool, retries included.
        timeout: Seconds before one job is abandoned (it becomes a failed result).
        batch_size: Rows per batch handed to an actor.
        cache: Path of a verdict cache file every actor can reach (same machine or a shared
            file system); None for none.
        num_cpus: CPUs Ray reserves for each actor.

    Returns:
        A dataset with the columns ``record`` (the line ``EvaluationResult.to_jsonl`` writes
        for the row, as JSON text: sample fields, ``location`` and ``results`` per metric),
        ``row``, and per metric ``<metric>`` (the score, NaN when failed or skipped) and
        ``<metric>_status`` (scored, failed or skipped). :func:`result_from_rows` turns it into
        an :class:`~langchain_ragmetrics.EvaluationResult`.
    """
    for name, value in (
        ("num_actors", num_actors),
        ("max_concurrency", max_concurrency),
        ("batch_size", batch_size),
    ):
        whole_number(name, value)
    for name, number in (
        ("judge_timeout", judge_timeout),
        ("timeout", timeout),
        ("rate_limit_per_minute", rate_limit_per_minute),
    ):
        if number is not None:
            number_above_zero(name, number)
    number_at_least_zero("num_cpus", num_cpus)
    prepared = prepare_metrics(metrics, language=language, cache=cache)
    judge = JudgeRecipe(model=model, base_url=base_url, api_key=api_key, timeout=judge_timeout)
    recipe = ScoringRecipe(
        prepared,
        max_concurrency=max_concurrency,
        timeout=timeout,
        rate_limit_per_minute=None
        if rate_limit_per_minute is None
        else rate_limit_per_minute / num_actors,
        default_judge=judge,
    )
    ray = _import_ray()
    return ds.map_batches(
        _Scorer,
        fn_constructor_kwargs={"recipe": recipe},
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=num_actors),
        num_cpus=num_cpus,
    )


def _sample_of(record: dict[str, Any]) -> RagSample:
    """The sample of an output record; a row that could not be read keeps its fields as text."""
    from langchain_ragmetrics.evaluation._saved import _sample_from_record

    try:
        return _sample_from_record(record)
    except ValueError:
        text = json.dumps(record, ensure_ascii=False, default=str)
        return RagSample(question=str(record.get("question") or ""), metadata={"row": text})


def result_from_rows(
    rows: Sequence[dict[str, Any]], metrics: Sequence[str], *, source: str = "ray"
) -> EvaluationResult:
    """An :class:`EvaluationResult` from the rows :func:`evaluate_ray` produced.

    Rows are sorted by ``row`` when it is set; the result has the usual summary, gates and
    exports.
    """
    from langchain_ragmetrics.evaluation._saved import _result_from_json

    ordered = sorted(rows, key=lambda r: (r.get(ROW_COLUMN) is None, r.get(ROW_COLUMN) or 0))
    out = []
    for position, row in enumerate(ordered):
        record = json.loads(row[RECORD_COLUMN])
        results = record.pop("results")
        location = record.pop("location", None) or f"{source}, row {position + 1}"
        record.pop(ROW_COLUMN, None)
        out.append(
            EvaluationRow(
                position=position,
                location=location,
                sample=_sample_of(record),
                results={name: _result_from_json(results.get(name), name) for name in metrics},
            )
        )
    return EvaluationResult(metrics=list(metrics), rows=out, source=source)
