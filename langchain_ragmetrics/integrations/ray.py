"""Score a ``ray.data.Dataset`` of samples on a Ray cluster (extra ``[ray]``).

:func:`evaluate_ray` runs the same scoring as :func:`~langchain_ragmetrics.evaluate` inside a
fixed pool of Ray actors (``map_batches``): each actor builds one judge per distinct recipe
and one scoring engine, once, from a picklable
:class:`~langchain_ragmetrics.evaluation._recipe.ScoringRecipe` (model, endpoint, options:
never a live client, and no key unless ``send_api_key=True``), then scores every batch it is
given with ``max_concurrency`` jobs at work. A batch never raises (only an actor that could
not build its judge does, a ``JudgeSetupError`` naming the cause): a row that cannot be read,
a job that fails, or anything else that goes wrong with one row becomes a result row with its
error, named by the row, so every input row comes out once.

Rows are read as :func:`~langchain_ragmetrics.evaluate` reads a CSV file or a DataFrame (one
definition, ``_dataset._cells_to_record``): a list column may hold JSON text, blank cells are
missing, ``metadata`` may be JSON text. A text field (question, answer, reference, the items
of a context list, under any name ``evaluate()`` accepts) that Arrow typed as a number, a
boolean, a date or a time, as ``ray.data.read_csv`` does with a column of years, is text
again: a number as the file wrote it (but for its form: ``1.50`` reads as ``1.5``), a
boolean as ``True`` / ``False``. A None under a key of a mapping cell (``metadata``) is left
out: Arrow fills a struct's missing keys with None, so it cannot be told from a missing key.

The global rate limit is one token bucket in a small limiter actor: every judge request
reserves its turn there (one round trip, no polling), so the limit holds across the pool from
the first request, also when an actor is restarted. Ray restarts the limiter if it dies; it
starts full, so one request may go early after its restart.

If an actor dies, Ray restarts it and re-runs the batch it held; a batch's rows are output
only when the whole batch returns, so a retried batch is not counted twice. A small ledger
actor (:class:`_Ledger`) knows which batches and rows were at work when their actor died: a
batch whose actor died is re-run one row at a time, and a row whose actor died
``max_retries`` times while it was scored alone comes back as a failed row, so a row that
kills its process (a crash, out of memory) fails alone instead of being retried forever.
Batches of the same content scored at the same time by two actors are not taken for such a
retry. The ledger is restarted if it dies; should it still not answer, an actor scores its
batches without its protection (a WARNING says so) rather than fail them.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import logging
import math
import os
import pickle
import threading
import time
import uuid
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.rate_limiters import BaseRateLimiter

from langchain_ragmetrics._dataset import _cells_to_record, _to_sample
from langchain_ragmetrics._errors import JudgeSetupError, RowProblem, RowRef
from langchain_ragmetrics._options import number_above_zero, number_at_least_zero, whole_number
from langchain_ragmetrics._plain import plain_json, text_of
from langchain_ragmetrics._schema import _ALIASES, MetricResult, RagSample
from langchain_ragmetrics.evaluation._model import SAMPLE_FIELDS, RunInfo, json_text
from langchain_ragmetrics.evaluation._recipe import JudgeRecipe, ScoringRecipe, _RecipeError
from langchain_ragmetrics.evaluation._result import EvaluationResult, EvaluationRow, column_names
from langchain_ragmetrics.evaluation._run import prepare_metrics
from langchain_ragmetrics.evaluation._saved import run_info
from langchain_ragmetrics.metrics import BaseRagMetric, JudgedMetric
from langchain_ragmetrics.metrics._judge import DEFAULT_JUDGE_MODEL, DEFAULT_JUDGE_TIMEOUT

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data

__all__ = ["RECORD_COLUMN", "ROW_COLUMN", "evaluate_ray", "result_from_rows"]

logger = logging.getLogger(__name__)

RECORD_COLUMN = "record"
"""Output column holding the line :meth:`EvaluationResult.to_jsonl` writes, as JSON text."""
ROW_COLUMN = "row"
"""Input column (optional) with the row's number: named in errors, carried to the output's
``row``, and the order :func:`result_from_rows` puts the rows in."""
SOURCE = "ray dataset"
"""How locations and errors name the input."""
_REF = RowRef(1)
"""Placeholder reference for the cell clean-up: problems are named by :func:`_location`."""
_TEXT_COLUMNS = frozenset(SAMPLE_FIELDS) | frozenset(
    alias for alias, field in _ALIASES.items() if field in SAMPLE_FIELDS
)
"""Input columns ``evaluate()`` reads as text (a list column: its items): the sample's fields
but ``metadata``, under their own names and their RAGAS names."""
ACTOR_CPUS = 0.25
"""CPUs each scoring actor reserves by default (``evaluate_ray``'s ``num_cpus``): judge calls
wait on the network, so four actors share a core."""
LEDGER_TIMEOUT_S = 60.0
"""Seconds an actor waits for the ledger before it scores a batch without it."""
RESERVE_WAIT_S = 1.0
"""Seconds one rate-limiter call waits for the bucket's answer (then the engine checks the
job's deadline and calls again)."""
TURN_GRACE_S = 1.0
"""Seconds after its turn a reserved turn is still taken: an owner waiting for it asks every
50 ms, so one older was given up, and taking it would let a request out of turn."""


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


# --------------------------------------------------------------------------- cells


def _location(row: Mapping[str, Any]) -> str:
    """Where a row came from: its ``row`` number, else its question (Ray has no row index)."""
    number = row.get(ROW_COLUMN)
    if number is not None:
        return f"{SOURCE}, row {text_of(number)}"
    question = row.get("question")
    if question is None or (isinstance(question, str) and not question):
        question = row.get("user_input")
    text = "" if question is None else text_of(question)
    short = text if len(text) <= 60 else text[:57] + "..."
    return f"{SOURCE}, row with question {short!r}"


def _as_text(value: Any) -> Any:
    """A cell Arrow typed from a CSV's text (number, boolean, date, time) as text again.

    ``evaluate(path)`` reads every CSV cell as text; ``ray.data.read_csv`` infers each
    column's type, so a reference column of years arrives as integers. A number is written
    back as the file most likely had it (``1910``; ``1.50`` comes back as ``1.5``, ``007`` as
    ``7``), a date or time as ISO text, a boolean as ``True`` / ``False`` (the file's case is
    lost). NaN, a missing cell, stays missing; any other value is left as it is.
    """
    if isinstance(value, (bool, int, decimal.Decimal, datetime.date, datetime.time)):
        return str(value)  # datetime.datetime is a date: "2024-05-01 10:00:00"
    if isinstance(value, float) and not math.isnan(value):
        return repr(value).removesuffix(".0")
    return value


def _typed_as_text(column: str, value: Any) -> Any:
    """The cell of a text column (or the items of a text list column) as text."""
    if column not in _TEXT_COLUMNS:
        return value
    if isinstance(value, list):
        return [_as_text(item) for item in value]
    return _as_text(value)


def _cells(row: Mapping[str, Any]) -> tuple[dict[str, Any], list[RowProblem]]:
    """A Ray row's cells cleaned as a CSV or DataFrame row's are (one definition)."""
    cells = ((k, _typed_as_text(k, v)) for k, v in row.items() if k != ROW_COLUMN)
    return _cells_to_record(SOURCE, _REF, cells)


def _without_nulls(value: Any, within: frozenset[int] = frozenset()) -> Any:
    """``value`` with every None under a mapping's key left out, at any depth.

    Arrow gives a row every column of the dataset and a struct (``metadata``) every key of
    its column, missing ones as None, so a None there cannot be told from a missing key.
    Items of a list are kept (``[None, "x"]`` is an invalid list, named as such); a value
    with nothing to leave out is returned as it is (a list that holds itself too).
    """
    if id(value) in within or not isinstance(value, (dict, list)):
        return value
    inner = within | {id(value)}
    if isinstance(value, list):
        items = [_without_nulls(item, inner) for item in value]
        same = all(new is old for new, old in zip(items, value, strict=True))
        return value if same else items
    cleaned = {k: _without_nulls(v, inner) for k, v in value.items() if v is not None}
    same = len(cleaned) == len(value) and all(cleaned[k] is value[k] for k in cleaned)
    return value if same else cleaned


def _read_row(row: Mapping[str, Any]) -> RagSample:
    """A sample from a Ray row, cleaned as a CSV or DataFrame row is.

    Raises:
        ValueError: The row is invalid; the message names the row (:func:`_location`) and
            each bad field.
    """
    record, problems = _cells(row)
    sample = None
    if not problems:
        sample, problems = _to_sample(record, SOURCE, _REF)
    if sample is None:
        details = "; ".join(
            (f"field `{p.field}`: " if p.field else "") + p.message for p in problems
        )
        raise ValueError(f"{_location(row)}: {details}")
    return sample


# --------------------------------------------------------------------------- records


def _fingerprint(value: Any) -> str:
    """An object's stable stand-in in the ledger key: a hash of its pickle, else its text.

    Text alone would not do: an object's default text holds its address, which differs when
    a restarted actor unpickles the batch again, and the retry would go unrecognised.
    """
    try:
        digest = hashlib.sha256(pickle.dumps(value)).hexdigest()
    except Exception:  # an object pickle refuses (Ray pickled it, so rare): its text
        return text_of(value)
    return f"{type(value).__qualname__}:{digest}"


def _content_key(rows: Sequence[Mapping[str, Any]]) -> str:
    """The ledger's key of a batch: a hash of its rows' content, whatever they hold.

    A retried batch has the same rows, so the same key, in whichever process it is re-run.
    Never raises: a batch that could not be keyed gets a key of its own, and a death while
    it is scored goes unnoticed (Ray re-runs it whole).
    """
    try:
        text = json.dumps(plain_json(rows, leaf=_fingerprint), sort_keys=True, ensure_ascii=False)
    except Exception:  # not expected: plain_json's output is plain JSON data
        logger.warning("a batch could not be keyed for the ledger", exc_info=True)
        text = uuid.uuid4().hex
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _record_of(
    columns: Sequence[str],
    row: Mapping[str, Any],
    sample: RagSample,
    results: dict[str, MetricResult | None],
) -> dict[str, Any]:
    """The line ``EvaluationResult.to_jsonl`` writes for the row (one definition)."""
    result = EvaluationResult(
        metrics=list(columns),
        rows=[EvaluationRow(position=0, location=_location(row), sample=sample, results=results)],
        source="ray",
    )
    (record,) = result.jsonl_records()
    record[ROW_COLUMN] = row.get(ROW_COLUMN)
    return record


def _failed_row(row: Mapping[str, Any], columns: Sequence[str], error: str) -> dict[str, Any]:
    """The output record of a row that could not be scored at all; never raises.

    It has the fields ``to_jsonl`` writes for any row, the input mapped to them as a sample
    maps it (RAGAS names, unknown columns as metadata; cells cleaned as for scoring when
    they can be), and every metric failed with ``error``.
    """
    try:
        cells, problems = _cells(row)
    except Exception:  # the row as given, then
        problems = [RowProblem(SOURCE, _REF, None, "unreadable")]
    if problems:
        cells = {k: v for k, v in row.items() if k != ROW_COLUMN}
    fields: dict[str, Any] = {}
    given = cells.get("metadata")
    metadata = {text_of(k): v for k, v in given.items()} if isinstance(given, Mapping) else {}
    for key, value in cells.items():
        target = _ALIASES.get(key, key)
        if target in SAMPLE_FIELDS and target not in fields:
            fields[target] = value
        elif key != "metadata" or not isinstance(value, Mapping):
            metadata.setdefault(key, value)
    results: dict[str, MetricResult | None] = {
        name: MetricResult(metric=name, score=math.nan, error=error) for name in columns
    }
    try:
        # The sample as given, unchecked: it failed validation (or was never read).
        sample = RagSample.model_construct(**fields, metadata=metadata)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydantic: fields of unexpected types
            return _record_of(columns, row, sample, results)
    except Exception:  # the bare minimum, whatever the cells hold
        logger.debug("a failed row's fields could not be written", exc_info=True)
        return {
            ROW_COLUMN: row.get(ROW_COLUMN),
            "location": _location(row),
            "results": {
                name: EvaluationResult._result_json(result) for name, result in results.items()
            },
        }


def _record_text(record: Mapping[str, Any]) -> str:
    """A record as ``to_jsonl`` writes it, else with its values made plain JSON.

    ``to_jsonl``'s form fails on a key that is not text or on a cycle
    (:func:`~langchain_ragmetrics._plain.plain_json`).
    """
    try:
        return json_text(record)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(plain_json(record), ensure_ascii=False)


def _columns(records: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> dict[str, Any]:
    """The batch's output: the JSON record, the row number, and per metric score and status."""
    out: dict[str, list[Any]] = {RECORD_COLUMN: [], ROW_COLUMN: []}
    for name in metrics:
        out[name] = []
        out[f"{name}_status"] = []
    for record in records:
        out[RECORD_COLUMN].append(_record_text(record))
        out[ROW_COLUMN].append(record.get(ROW_COLUMN))
        for name in metrics:
            result = record["results"][name]
            score = result.get("score")
            out[name].append(math.nan if score is None else float(score))
            out[f"{name}_status"].append(result["status"])
    return out


# --------------------------------------------------------------------------- actors


class _Ledger:
    """Ray actor: the open attempts at each batch (and row), to tell a retry after a death.

    Each attempt registers under the content key of its batch or row
    (:func:`_content_key`), with an id of its own and the process that runs it: the actor's
    id and a token the actor drew when it started. Ray restarts a dead actor under the same
    id, in a new process that draws a new token, and re-runs there the batch it held. So an
    earlier attempt still open counts as a death exactly when its actor has since begun an
    attempt under a newer token. Any other open attempt is at work, not dead: another actor
    (or this one) scoring a batch of the same content at this moment. An actor that Ray
    does not bring back under its id is never known dead: its batch, re-run elsewhere, is
    scored whole once more, and only a death of that re-run counts.

    Ray restarts the ledger itself if it dies, without its state: a death then in flight
    goes unnoticed once (its batch is scored whole again).
    """

    def __init__(self) -> None:
        self.open: dict[str, dict[str, tuple[str, str]]] = {}
        """Per key, its open attempts: attempt id -> (actor id, token)."""
        self.tokens: dict[str, str] = {}
        """Per actor id, the token of its latest process."""

    def begin(self, key: str, attempt: str, actor: str, token: str) -> int:
        """Open an attempt at ``key``; returns how many earlier attempts at it died."""
        self.tokens[actor] = token
        attempts = self.open.setdefault(key, {})
        deaths = sum(1 for a, t in attempts.values() if self.tokens.get(a) != t)
        attempts[attempt] = (actor, token)
        return deaths

    def finish(self, key: str, attempt: str) -> None:
        """Close one attempt; the others at the key, at work or dead, stay."""
        attempts = self.open.get(key)
        if attempts is not None:
            attempts.pop(attempt, None)
            if not attempts:
                del self.open[key]


class _SharedBucket:
    """Ray actor: one token bucket for the whole pool; callers reserve their turn.

    Holds one token, as the local engine's bucket does (``make_rate_limiter``), so the first
    request goes at once and each next one ``60 / per_minute`` seconds after the one before.
    Turns are kept on the monotonic clock (one process holds them all), so a step of the wall
    clock delays no request.
    """

    def __init__(self, per_minute: float) -> None:
        self.interval = 60.0 / per_minute
        self.next_free = 0.0

    def reserve(self) -> float:
        """Seconds the caller waits before its request (its turn is taken now)."""
        now = time.monotonic()
        turn = max(now, self.next_free)
        self.next_free = turn + self.interval
        return turn - now


class _RemoteRateLimiter(BaseRateLimiter):
    """A langchain-core rate limiter whose tokens come from the pool's :class:`_SharedBucket`.

    ``acquire(blocking=False)`` reserves a turn once per thread (or asyncio task) and
    answers True when it has come, so the engine's polling never asks the bucket twice for
    one request. A reservation the bucket has not answered yet (it is being restarted) is
    waited for across calls, so the engine's own checks (the job's deadline) keep running.
    A turn its owner gave up (its job passed its deadline while it waited) is kept for the
    owner's next request, unless it came over :data:`TURN_GRACE_S` ago (it would let that
    request out of turn) or its owner is a finished asyncio task; then it is dropped.
    """

    def __init__(self, bucket: Any) -> None:
        self.bucket = bucket
        self._turns: dict[object, Any] = {}
        """Per owner: its turn (``time.monotonic()``), or the bucket's answer to come."""
        self._lock = threading.Lock()

    def _forget_abandoned(self) -> None:
        """Drop the turns no owner will take (called with the lock held)."""
        import asyncio

        now = time.monotonic()
        for owner, turn in list(self._turns.items()):
            past = isinstance(turn, float) and turn + TURN_GRACE_S < now
            if past or (isinstance(owner, asyncio.Task) and owner.done()):
                del self._turns[owner]

    def _ready(self, owner: object) -> bool:
        import ray

        with self._lock:
            self._forget_abandoned()
            turn = self._turns.get(owner)
        if turn is None:
            turn = self.bucket.reserve.remote()
        if not isinstance(turn, float):
            answered, _ = ray.wait([turn], timeout=RESERVE_WAIT_S)
            if not answered:  # the bucket is being restarted: asked again on the next call
                with self._lock:
                    self._turns[owner] = turn
                return False
            try:
                turn = time.monotonic() + float(ray.get(turn))
            except Exception:
                with self._lock:
                    self._turns.pop(owner, None)
                raise
        if time.monotonic() < turn:
            with self._lock:
                self._turns[owner] = turn
            return False
        with self._lock:
            self._turns.pop(owner, None)
        return True

    def acquire(self, *, blocking: bool = True) -> bool:
        """Whether this thread's turn has come (waits for it when ``blocking``)."""
        owner = threading.get_ident()
        while not self._ready(owner):
            if not blocking:
                return False
            time.sleep(0.05)
        return True

    async def aacquire(self, *, blocking: bool = True) -> bool:
        """Async twin of :meth:`acquire`, per asyncio task."""
        import asyncio

        owner = asyncio.current_task() or threading.get_ident()
        while not await asyncio.to_thread(self._ready, owner):
            if not blocking:
                return False
            await asyncio.sleep(0.05)
        return True


class _Scorer:
    """A Ray actor's callable: one judge set and one engine, built here, for every batch."""

    def __init__(
        self,
        recipe: ScoringRecipe,
        ledger: Any = None,
        bucket: Any = None,
        max_retries: int = 3,
    ) -> None:
        self.ledger = ledger
        self.max_retries = max_retries
        self.token = uuid.uuid4().hex
        """This process's token in the ledger (a restarted actor draws a new one)."""
        self.actor = self.token
        """This actor's id in the ledger (outside an actor: the token)."""
        if ledger is not None:
            import ray

            self.actor = ray.get_runtime_context().get_actor_id() or self.token
        self.warned = False
        self.columns = column_names([m.metric_name for m in recipe.metrics])
        self.setup_error: str | None = None
        try:
            self.metrics = recipe.build_metrics()
            for metric in self.metrics:
                if isinstance(metric, JudgedMetric):
                    metric.judge  # noqa: B018 - the default judge is built now, not per job
            self.engine = recipe.build_engine()
        except Exception as exc:  # raised on the first batch, by name (see __call__)
            self.setup_error = f"{type(exc).__name__}: {exc}"
            return
        if bucket is not None:
            self.engine.gate.rate_limiter = _RemoteRateLimiter(bucket)

    def _begin(self, key: str) -> tuple[str | None, int]:
        """Open an attempt at ``key`` in the ledger: its id and the deaths before it.

        Without an answer from the ledger: no id, no deaths (scored unprotected).
        """
        if self.ledger is None:
            return None, 0
        import ray

        attempt = uuid.uuid4().hex
        try:
            ref = self.ledger.begin.remote(key, attempt, self.actor, self.token)
            return attempt, int(ray.get(ref, timeout=LEDGER_TIMEOUT_S))
        except Exception as exc:
            self._unprotected(exc)
            try:  # closes the attempt should the call reach the ledger late (calls keep order)
                self.ledger.finish.remote(key, attempt)
            except Exception:
                logger.debug("the ledger cannot be sent a call", exc_info=True)
            return None, 0

    def _finish(self, key: str, attempt: str | None) -> None:
        if self.ledger is None or attempt is None:
            return
        import ray

        try:
            ray.get(self.ledger.finish.remote(key, attempt), timeout=LEDGER_TIMEOUT_S)
        except Exception as exc:
            self._unprotected(exc)

    def _unprotected(self, exc: Exception) -> None:
        """Say once per actor that the ledger did not answer."""
        if self.warned:
            return
        self.warned = True
        logger.warning(
            "the Ray ledger actor did not answer (%s: %s): this actor scores the batches it "
            "cannot register without the ledger (said once): a death of the actor while it "
            "scores one goes unnoticed, and a row that kills it is re-run by Ray without "
            "the max_retries bound",
            type(exc).__name__,
            exc,
        )

    def __call__(self, batch: pa.Table) -> dict[str, list[Any]]:
        if self.setup_error is not None:
            msg = (
                f"a Ray actor could not build its judge or metrics: {self.setup_error}\n"
                "(The actors read OPENAI_API_KEY from their own environment unless "
                "evaluate_ray(send_api_key=True).)"
            )
            import ray.data

            # Ray Data would raise a UserCodeException with ours as its cause; this actor only
            # runs this callable, so its error is raised as itself (Ray's RayTaskError then
            # is a JudgeSetupError in the caller too).
            ray.data.DataContext.get_current().raise_original_map_exception = True
            raise JudgeSetupError(msg)
        rows = [_without_nulls(r) for r in batch.to_pylist()]
        key = _content_key(rows)
        attempt, died = self._begin(key)
        if died == 0:
            records = self._score(rows)
        else:  # its actor died: one row at a time, so only a row that kills it fails
            records = []
            for index, row in enumerate(rows):
                records.extend(self._score_alone(f"{key}/{index}", row))
        self._finish(key, attempt)
        return _columns(records, self.columns)

    def _score_alone(self, key: str, row: dict[str, Any]) -> list[dict[str, Any]]:
        """One row of a batch whose actor died, scored alone unless it killed it too often."""
        attempt, deaths = self._begin(key)
        if deaths >= self.max_retries:
            what = (
                f"each of the {deaths} times it scored this row"
                if deaths
                else "while it scored this row's batch"
            )
            error = (
                f"the Ray actor died {what} (a crash, out of memory or a lost node); "
                f"not retried again (max_retries={self.max_retries})"
            )
            records = [_failed_row(row, self.columns, error)]
        else:
            records = self._score([row])
        self._finish(key, attempt)
        return records

    def _score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records of ``rows``; whatever goes wrong with one row is its failed record."""
        from langchain_ragmetrics._engine import Job

        records: list[dict[str, Any] | None] = [None] * len(rows)
        scored: list[tuple[int, RagSample]] = []
        for index, row in enumerate(rows):
            try:
                scored.append((index, _read_row(row)))
            except ValueError as exc:
                records[index] = _failed_row(row, self.columns, f"invalid row: {exc}")
            except Exception as exc:  # not a field's error: the row fails alone, named
                error = f"invalid row: {_location(row)}: {type(exc).__name__}: {text_of(exc)}"
                records[index] = _failed_row(row, self.columns, error)
        jobs = [Job(sample, metric, (i, col)) for i, sample in scored for col, metric in
                enumerate(self.metrics)]  # fmt: skip
        try:
            results: list[MetricResult | None] = self.engine.run(jobs)
        except Exception as exc:  # a bug must not fail the whole dataset: its rows say so
            error = f"{type(exc).__name__}: {text_of(exc)}"
            for i, _ in scored:
                records[i] = _failed_row(rows[i], self.columns, error)
            return [r for r in records if r is not None]
        by_row: dict[int, dict[str, MetricResult | None]] = {i: {} for i, _ in scored}
        for job, result in zip(jobs, results, strict=True):
            i, col = job.tag
            by_row[i][self.columns[col]] = result
        for i, sample in scored:
            try:
                records[i] = _record_of(self.columns, rows[i], sample, by_row[i])
            except Exception as exc:  # its record cannot be made: the row fails alone, named
                error = (
                    f"{_location(rows[i])}: its result cannot be written: "
                    f"{type(exc).__name__}: {text_of(exc)}"
                )
                records[i] = _failed_row(rows[i], self.columns, error)
        return [r for r in records if r is not None]


def _metric_list(
    metrics: BaseRagMetric | str | Iterable[BaseRagMetric | str],
) -> list[BaseRagMetric | str]:
    """The metrics as a list: a bare name or metric is one metric (a name is not its letters).

    Raises:
        TypeError: ``metrics``, or one of its items, is neither a metric name nor a metric.
    """
    if isinstance(metrics, (str, BaseRagMetric)):
        return [metrics]
    if not isinstance(metrics, Iterable):
        msg = f"`metrics` must be metric names or metric objects, got {type(metrics).__name__}"
        raise TypeError(msg)
    items = list(metrics)
    for index, item in enumerate(items):
        if not isinstance(item, (str, BaseRagMetric)):
            msg = (
                f"`metrics[{index}]` must be a metric name or a metric object, got "
                f"{type(item).__name__}"
            )
            raise TypeError(msg)
    return items


def _check_judges(recipe: ScoringRecipe) -> None:
    """Build the judges here, as ``evaluate()`` does, so a missing key is named up front.

    Raises:
        JudgeSetupError: A judge cannot be built from the recipe in this process.
    """
    try:
        for metric in recipe.build_metrics():
            if isinstance(metric, JudgedMetric):
                metric.judge  # noqa: B018 - builds the default judge now
    except Exception as exc:
        msg = (
            f"the judge cannot be built, nothing was sent to Ray: {type(exc).__name__}: {exc}\n"
            "Pass api_key=... or set OPENAI_API_KEY (with send_api_key=True it is sent to "
            "the actors)."
        )
        raise JudgeSetupError(msg) from exc


def _check_no_own_keys(recipe: ScoringRecipe) -> None:
    """Refuse a metric whose judge holds its own key while no key is sent to the actors.

    The recipe leaves the key out, so the actors' judge would read the variable of their own
    environment instead: another key, maybe another account billed. A key equal to this
    process's variable of that name came from it (``ChatOpenAI`` reads ``OPENAI_API_KEY``) and
    is not the judge's own: the actors read theirs, as for the default judge.

    Raises:
        ValueError: A metric's judge holds its own key; the message names the metric.
    """
    for index, (metric, judge) in enumerate(zip(recipe.metrics, recipe.judges, strict=True)):
        if judge is None:
            continue
        names = recipe.judge_recipes[judge].secret_names()
        own = sorted(name for name, value in names.items() if os.environ.get(name) != value)
        if own:
            msg = (
                f"`metrics[{index}]` ({metric.metric_name}): its judge holds its own key "
                f"({', '.join(own)}), which is not sent to the Ray actors: they would use the "
                f"{own[0]} of their own environment instead. Pass send_api_key=True (CLI: "
                "--ray-send-api-key) to send it, or build the judge without a key to use the "
                "nodes' environment"
            )
            raise ValueError(msg)


def _check_pool_fits(ray: Any, *, num_actors: int, num_cpus: float) -> None:
    """Warn when the pool leaves no CPU of the cluster as it is now to the tasks that read.

    An actor that does not fit waits, and a lazily read dataset's read tasks (one CPU each)
    wait for the actors: the run may never start. A cluster that scales up may still fit it,
    hence a warning, not an error.
    """
    if not ray.is_initialized():
        return
    total = float(ray.cluster_resources().get("CPU", 0))
    wanted = num_actors * num_cpus
    if total and wanted > total - 1:
        warnings.warn(
            f"num_actors={num_actors} x num_cpus={num_cpus:g} reserve {wanted:g} of the "
            f"cluster's {total:g} CPUs, leaving less than one to the tasks that read the "
            "dataset: the run may wait for ever unless the cluster scales up; lower num_cpus "
            "(default 0.25: an actor mostly waits on the judge) or num_actors",
            RuntimeWarning,
            stacklevel=3,
        )


def evaluate_ray(
    ds: ray.data.Dataset,
    metrics: BaseRagMetric | str | Iterable[BaseRagMetric | str],
    *,
    model: str = DEFAULT_JUDGE_MODEL,
    base_url: str | None = None,
    api_key: str | None = None,
    send_api_key: bool = False,
    judge_timeout: float = DEFAULT_JUDGE_TIMEOUT,
    language: str | None = None,
    num_actors: int = 2,
    max_concurrency: int = 16,
    rate_limit_per_minute: float | None = None,
    timeout: float | None = None,
    batch_size: int = 64,
    cache: str | os.PathLike[str] | None = None,
    num_cpus: float = ACTOR_CPUS,
    max_retries: int = 3,
) -> ray.data.Dataset:
    """Score a Ray dataset of samples; returns a (lazy) dataset with one result row per input row.

    Args:
        ds: Rows with the columns :func:`~langchain_ragmetrics.evaluate` reads (RAGAS names
            accepted; cells cleaned as a CSV file's are; a text field Arrow typed as a
            number, boolean, date or time is text again; a None under a key of ``metadata``
            is left out, as Arrow fills missing keys with None); an optional ``row`` column
            numbers the rows (errors and locations name it; without it, a row is named by its
            question and its output ``row`` is None: Ray Data has no row order to number them
            by without an ordered pass over the whole dataset).
            For a CSV's exact text, read its text columns as strings: ``read_csv(path,
            convert_options=pyarrow.csv.ConvertOptions(column_types={"reference":
            pyarrow.string(), ...}))``.
        metrics: Metric names (``"context_recall"``) or metric objects (a metric's own judge
            must be LangChain-serializable, e.g. ``ChatOpenAI``: it is rebuilt in each actor;
            its own key is sent only with ``send_api_key=True``); a bare name is one metric.
        model: Judge model for the LLM-judged metrics that have no judge.
        base_url: OpenAI-compatible endpoint of that judge (default ``$OPENAI_BASE_URL`` on
            the actors).
        api_key: Its key, sent to the actors only with ``send_api_key=True``.
        send_api_key: Send the key (``api_key``, else this process's ``OPENAI_API_KEY``, and
            the keys of metrics' own judges) to the actors as environment variables of the
            job's Ray ``runtime_env``, where whoever can read the cluster's job metadata can read
            it; Ray also writes it in plain text to each node's log files
            (``runtime_env_agent.log`` in the session's ``logs`` directory). Default: no key
            leaves this process; the actors read their own environment.
        judge_timeout: Seconds per judge HTTP request.
        language: Default language of rows that do not set one.
        num_actors: Size of the actor pool (fixed).
        max_concurrency: Judge calls at work at once in each actor.
        rate_limit_per_minute: Judge requests per minute for the whole pool, retries included
            (one shared bucket: it holds from the first request; restarted if it dies, it
            starts full, so one request may go early then).
        timeout: Seconds before one job is abandoned (it becomes a failed result).
        batch_size: Rows per batch handed to an actor.
        cache: Path of a verdict cache file every actor can reach (same machine or a shared
            file system); None for none.
        num_cpus: CPUs Ray reserves for each actor (little: an actor waits on the judge, and
            the tasks that read the dataset need CPUs too).
        max_retries: Times a row is scored again, alone, after its actor died while scoring
            it; then it is a failed row (0: the rows of a batch whose actor died fail). A
            batch of the same content at work in another actor at the same time is no death.

    Returns:
        A dataset with the columns ``record`` (the line ``EvaluationResult.to_jsonl`` writes
        for the row, as JSON text: sample fields, ``location`` and ``results`` per metric),
        ``row`` (the input's, else None, here and in ``record``), and per metric ``<metric>``
        (the score, NaN when failed or skipped) and ``<metric>_status`` (scored, failed or
        skipped). :func:`result_from_rows` turns it into an
        :class:`~langchain_ragmetrics.EvaluationResult` (its rows numbered 1, 2, ...).

    Raises:
        TypeError: ``metrics`` holds something that is neither a name nor a metric.
        ValueError: An option is invalid (named); ``api_key`` is given, or a metric's judge
            holds its own key (named), without ``send_api_key=True``; a metric or its judge
            cannot be rebuilt in an actor (named, with what to do).
        JudgeSetupError: With ``send_api_key=True``, a judge cannot be built here (no key).
            Without it, the actors' own failure to build one is raised by name on the first
            batch.
    """
    for name, value in (
        ("num_actors", num_actors),
        ("max_concurrency", max_concurrency),
        ("batch_size", batch_size),
    ):
        whole_number(name, value)
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        msg = f"`max_retries` must be a whole number of at least 0, got {max_retries!r}"
        raise ValueError(msg)
    for name, number in (
        ("judge_timeout", judge_timeout),
        ("timeout", timeout),
        ("rate_limit_per_minute", rate_limit_per_minute),
    ):
        if number is not None:
            number_above_zero(name, number)
    number_at_least_zero("num_cpus", num_cpus)
    if api_key is not None and not send_api_key:
        msg = (
            "`api_key` is sent to the Ray actors only with send_api_key=True (it then travels "
            "in the job's runtime_env); or leave it out and set OPENAI_API_KEY where the "
            "actors run"
        )
        raise ValueError(msg)
    prepared = prepare_metrics(_metric_list(metrics), language=language, cache=cache)
    key = (api_key or os.environ.get("OPENAI_API_KEY")) if send_api_key else None
    judge = JudgeRecipe(model=model, base_url=base_url, api_key=key, timeout=judge_timeout)
    try:
        full = ScoringRecipe(
            prepared, max_concurrency=max_concurrency, timeout=timeout, default_judge=judge
        )
    except _RecipeError as exc:  # its advice is for evaluate(workers=...)
        msg = (
            f"{exc.reason}; each Ray actor rebuilds the metrics and their judges: define "
            "custom metric classes at the top level of a module (or of the script you run), "
            "give a metric's own judge as a LangChain-serializable chat model such as "
            "ChatOpenAI without its own client, rate limiter or callbacks, or score in this "
            "process with evaluate()"
        )
        raise ValueError(msg) from exc
    if send_api_key:
        _check_judges(full)
    else:
        _check_no_own_keys(full)
    secrets = full.secret_names() if send_api_key else {}
    recipe = full.without_secrets()
    ray = _import_ray()
    _check_pool_fits(ray, num_actors=num_actors, num_cpus=num_cpus)
    # The ledger and the bucket are restarted if they die, and a call they had not answered
    # is sent again. The ledger loses its state (a death in flight then goes unnoticed once);
    # the bucket starts full, so its first request after a restart goes at once, maybe less
    # than one interval after the one before (one request early per restart).
    restarted = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
    ledger = restarted(_Ledger).remote()
    bucket = None
    if rate_limit_per_minute is not None:
        bucket = restarted(_SharedBucket).remote(rate_limit_per_minute)
    return ds.map_batches(
        _Scorer,
        fn_constructor_kwargs={
            "recipe": recipe,
            "ledger": ledger,
            "bucket": bucket,
            "max_retries": max_retries,
        },
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=num_actors),
        num_cpus=num_cpus,
        # Ray Data restarts a dead actor and re-runs its batch, without limit by default; the
        # ledger bounds how often a row is tried (max_retries), so that never loops forever.
        **({"runtime_env": {"env_vars": secrets}} if secrets else {}),
    )


def _sample_of(record: dict[str, Any]) -> RagSample:
    """The sample of an output record; a row that could not be read keeps its fields as text."""
    from langchain_ragmetrics.evaluation._saved import _sample_from_record

    try:
        return _sample_from_record(record)
    except ValueError:
        text = json.dumps(record, ensure_ascii=False, default=str)
        return RagSample(question=str(record.get("question") or ""), metadata={"row": text})


def _as_metric(name: str) -> BaseRagMetric | str:
    """The registry's metric of ``name``, as :func:`evaluate_ray` builds it; else the name.

    A name the registry does not know stays a name: a custom metric's, or a repeat's ``_2``
    column.
    """
    from langchain_ragmetrics.evaluation._registry import UnknownMetricError, metric_from_name

    try:
        return metric_from_name(name)
    except UnknownMetricError:
        return name


def result_from_rows(
    rows: Sequence[dict[str, Any]],
    metrics: BaseRagMetric | str | Iterable[BaseRagMetric | str],
    *,
    source: str = "ray",
    interrupted: bool = False,
    locations: Mapping[int, str] | None = None,
    elapsed_s: float = 0.0,
    info: RunInfo | None = None,
) -> EvaluationResult:
    """An :class:`EvaluationResult` from the rows :func:`evaluate_ray` produced.

    Rows are sorted by ``row`` when it is set (Ray returns them in no set order), and
    numbered 1, 2, ... in that order; the result has the usual summary, gates and exports.

    Args:
        rows: The output rows of :func:`evaluate_ray` (``take_all()``, or batches' rows).
        metrics: What was given to :func:`evaluate_ray`: metric objects or names (a bare name
            is one metric), or the output's metric columns; repeats get the ``_2`` columns
            :func:`evaluate_ray` wrote.
        source: The dataset's name in the result.
        interrupted: The rows are those scored before the run was stopped.
        locations: Where each ``row`` number came from (a file's row and line), in place of
            the location the actor wrote.
        elapsed_s: Wall time of the run, in seconds (the caller timed it).
        info: The run's metadata; None: made here as :func:`~langchain_ragmetrics.evaluate`
            makes it, from ``metrics`` (a name stands for the registry's metric with its
            defaults; a name the registry does not know has no entry in ``info.metrics``)
            and the rows' samples.

    Raises:
        TypeError: ``metrics`` holds something that is neither a name nor a metric.
        ValueError: ``elapsed_s`` is not a number of at least 0.
    """
    from langchain_ragmetrics.evaluation._saved import _result_from_json

    items = [_as_metric(m) if isinstance(m, str) else m for m in _metric_list(metrics)]
    columns = column_names([m if isinstance(m, str) else m.metric_name for m in items])
    elapsed = number_at_least_zero("elapsed_s", elapsed_s)
    ordered = sorted(rows, key=lambda r: (r.get(ROW_COLUMN) is None, r.get(ROW_COLUMN) or 0))
    out = []
    for position, row in enumerate(ordered):
        record = json.loads(row[RECORD_COLUMN])
        results = record.pop("results")
        location = record.pop("location", None) or f"{source}, row {position + 1}"
        number = record.pop(ROW_COLUMN, None)
        if locations is not None and number in locations:
            location = locations[number]
        out.append(
            EvaluationRow(
                position=position,
                location=location,
                sample=_sample_of(record),
                results={name: _result_from_json(results.get(name), name) for name in columns},
            )
        )
    if info is None:  # a name the registry does not know has no entry in info.metrics
        known = [(c, m) for c, m in zip(columns, items, strict=True) if not isinstance(m, str)]
        samples = [row.sample for row in out]
        info = run_info([c for c, _ in known], [m for _, m in known], samples)
    return EvaluationResult(
        metrics=columns,
        rows=out,
        source=source,
        elapsed_s=elapsed,
        interrupted=interrupted,
        info=info,
    )
