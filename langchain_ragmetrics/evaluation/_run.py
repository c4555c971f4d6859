"""``evaluate`` / ``aevaluate``: score a dataset with metrics through the scoring engine."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._cache import CacheLike, resolve_cache
from langchain_ragmetrics._dataset import (
    DatasetLike,
    LoadedDataset,
    MissingFieldError,
    read_dataset,
)
from langchain_ragmetrics._engine import Job, ScoringEngine
from langchain_ragmetrics._errors import JudgeSetupError
from langchain_ragmetrics._options import flag
from langchain_ragmetrics._progress import Progress
from langchain_ragmetrics._schema import _ALIASES, MetricResult
from langchain_ragmetrics._text import check_language
from langchain_ragmetrics.evaluation._batch_options import BatchOptions
from langchain_ragmetrics.evaluation._preflight import DEFAULT_PREFLIGHT_TIMEOUT, preflight_metrics
from langchain_ragmetrics.evaluation._recipe import ScoringRecipe
from langchain_ragmetrics.evaluation._registry import metric_from_name
from langchain_ragmetrics.evaluation._result import EvaluationResult, EvaluationRow, column_names
from langchain_ragmetrics.evaluation._saved import run_info
from langchain_ragmetrics.evaluation._workers import (
    AUTO_MIN_JOBS_FORKED,
    Workers,
    available_cores,
    method_now,
    needs_main,
    score_in_processes,
    start_method,
    worker_count,
)
from langchain_ragmetrics.metrics import BaseRagMetric, JudgedMetric

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import RunnableConfig

__all__ = ["JudgeSetupError", "ResultCallback", "aevaluate", "evaluate", "prepare_metrics"]

ResultCallback = Callable[[int, str, MetricResult], None]
"""Called as each job finishes with (row position, metric column, result)."""

_LOCAL_SERVER_HINT = (
    "point OPENAI_BASE_URL at an OpenAI-compatible server such as "
    "Ollama (http://localhost:11434/v1) or vLLM (http://localhost:8000/v1)"
)


def prepare_metrics(
    metrics: Sequence[BaseRagMetric | str],
    *,
    llm: BaseChatModel | None = None,
    language: str | None = None,
    cache: CacheLike = None,
) -> list[BaseRagMetric]:
    """Copies of the metrics with ``llm`` / ``language`` / ``cache`` filled in where unset.

    Names (``"context_recall"``) are built from the registry. The caller's metric objects are
    never modified.
    """
    if isinstance(metrics, (str, BaseRagMetric)):
        metrics = [metrics]
    if not metrics:
        msg = "pass at least one metric, e.g. metrics=[ContextRecall(), ContextPrecision()]"
        raise ValueError(msg)
    lang = check_language(language) if language is not None else None
    verdicts = resolve_cache(cache)
    out = []
    for item in metrics:
        metric = metric_from_name(item) if isinstance(item, str) else item
        if not isinstance(metric, BaseRagMetric):
            msg = f"metrics must be metric objects or names, got {type(metric).__name__}"
            raise TypeError(msg)
        update: dict[str, Any] = {}
        if llm is not None and isinstance(metric, JudgedMetric) and metric.llm is None:
            update["llm"] = llm
        if lang is not None and metric.language is None:
            update["language"] = lang
        if verdicts is not None and isinstance(metric, JudgedMetric) and metric.cache is None:
            update["cache"] = verdicts
        out.append(metric.model_copy(update=update))
    return out


def _accepted_names(message: str) -> str:
    """The column names accepted for the field an error message names (RAGAS aliases)."""
    match = re.search(r"`(\w+)`", message)
    if match is None:
        return ""
    field = match.group(1)
    names = [field, *(alias for alias, target in _ALIASES.items() if target == field)]
    if len(names) == 1:
        return ""
    quoted = [f"`{n}`" for n in names]
    return f" (accepted column names: {', '.join(quoted[:-1])} or {quoted[-1]})"


def check_fields(
    data: LoadedDataset, columns: Sequence[str], metrics: Sequence[BaseRagMetric]
) -> None:
    """Raise MissingFieldError when a metric cannot score a single row of the dataset.

    A field missing from only some rows is not an error here: those jobs fail one by one
    (NaN with the row and field in the error) and the rest of the run goes on.
    """
    lines = []
    for name, metric in zip(columns, metrics, strict=True):
        first: ValueError | None = None
        for sample in data.samples:
            try:
                metric.validate_sample(sample)
                break
            except ValueError as exc:
                first = first or exc
        else:
            lines.append(f"  - {name}: {first}{_accepted_names(str(first))}")
    if lines:
        rows = len(data.samples)
        head = f"{data.source}: none of the {rows} rows has what these metrics need:"
        raise MissingFieldError("\n".join([head, *lines]))


def _resolve_judges(metrics: Sequence[BaseRagMetric]) -> None:
    for metric in metrics:
        if not isinstance(metric, JudgedMetric) or metric.llm is not None:
            continue
        try:
            metric.judge  # noqa: B018 - builds the default judge now, not in every job
        except Exception as exc:
            msg = (
                f"{metric.metric_name} needs an LLM judge and the default one (ChatOpenAI "
                f"gpt-4o-mini) cannot be built: {exc}\nPass llm=..., set OPENAI_API_KEY, or "
                f"{_LOCAL_SERVER_HINT} (any non-empty OPENAI_API_KEY works there)."
            )
            raise JudgeSetupError(msg) from exc


class _Run:
    """One evaluation in progress: the jobs, the results so far and the progress bar."""

    def __init__(
        self,
        data: LoadedDataset,
        metrics: list[BaseRagMetric],
        engine: ScoringEngine,
        *,
        show_progress: bool,
        on_result: ResultCallback | None,
    ) -> None:
        self.data = data
        self.metrics = metrics
        self.columns = column_names([m.metric_name for m in metrics])
        self.engine = engine
        self.show_progress = show_progress
        self.on_result = on_result
        self.results: dict[tuple[int, int], MetricResult] = {}
        self.stop_requested = False
        self.elapsed = 0.0
        self._stop = threading.Event()
        self._task: asyncio.Task[Any] | None = None
        self._progress: Progress | None = None
        self.workers = 1
        """Processes scoring the jobs, this one included."""
        self.recipe: ScoringRecipe | None = None
        """Set when worker processes share the jobs (``workers > 1``)."""
        self.start_method: str | None = None
        """How workers start, when ``workers="auto"`` decided it (None: decided later)."""
        self._asked: tuple[Workers, float | None] = (1, None)
        """``workers`` and ``rate_limit_per_minute`` as given (to decide again)."""

    def use_workers(self, workers: Workers, *, rate_limit_per_minute: float | None) -> None:
        """Decide how many processes score the jobs and, for more than one, make the recipe.

        ``"auto"`` falls back to this process alone, without a word, when the metrics cannot
        be sent to a worker (a judge LangChain cannot serialize, config callbacks) or when a
        spawned worker would have to re-run the caller's script (a metric class defined
        there: the script may lack the ``if __name__ == "__main__":`` guard; a forked worker
        has the class already); an explicit number raises in the first case and relies on
        the guard in the second.
        """
        self._asked = (workers, rate_limit_per_minute)
        jobs = len(self.data.samples) * len(self.metrics)
        if workers == "auto" and jobs >= 2 * AUTO_MIN_JOBS_FORKED and available_cores() > 1:
            self.start_method = start_method()  # forked workers pay off on shorter runs
        self._decide()

    def recheck_workers(self) -> None:
        """Decide again if a thread started since ``"auto"`` chose to fork (the pre-flight's).

        Workers would then be spawned: a spawned worker pays off only on longer runs, and it
        re-runs the caller's script when a metric class is defined there, which ``"auto"``
        never lets happen (see :meth:`use_workers`).
        """
        if self.start_method != "fork" or self.recipe is None:
            return
        method = method_now(self.start_method)
        if method == self.start_method:
            return
        self.start_method = method
        self.workers, self.recipe = 1, None
        self._decide()

    def _decide(self) -> None:
        """Set ``workers`` and ``recipe`` from what was asked and ``start_method``."""
        workers, rate_limit_per_minute = self._asked
        engine = self.engine
        jobs = len(self.data.samples) * len(self.metrics)
        count = worker_count(
            workers,
            jobs=jobs,
            max_concurrency=engine.max_concurrency,
            rate_limit_per_minute=rate_limit_per_minute if workers == "auto" else None,
            forked=self.start_method == "fork",
        )
        if count == 1:
            return
        try:
            recipe = ScoringRecipe(
                self.metrics,
                max_concurrency=engine.max_concurrency,
                timeout=engine.timeout,
                rate_limit_per_minute=rate_limit_per_minute,
                raise_exceptions=engine.raise_exceptions,
                config=engine.config,
            )
        except ValueError:
            if workers == "auto":
                return
            raise
        if workers == "auto" and self.start_method != "fork" and needs_main(recipe):
            return  # a forked worker has the script's classes; a spawned one re-runs it
        self.workers, self.recipe = count, recipe

    def jobs(self) -> list[Job]:
        """Sample-major job list, so an interrupted run leaves whole rows behind it."""
        return [
            Job(sample, metric, (row, col))
            for row, sample in enumerate(self.data.samples)
            for col, metric in enumerate(self.metrics)
        ]

    def stop(self) -> None:
        """Stop starting jobs and give up on the unfinished ones (what Ctrl-C does)."""
        self.stop_requested = True
        self._stop.set()
        if self._task is not None:
            self._task.cancel()

    def _record(self, job: Job, result: MetricResult) -> None:
        row, col = job.tag
        self._record_at(row, col, result)

    def _record_at(self, row: int, col: int, result: MetricResult) -> None:
        self.results[(row, col)] = result
        if self._progress is not None:
            self._progress.update(self.columns[col], result)
        if self.on_result is not None:
            try:
                self.on_result(row, self.columns[col], result)
            except KeyboardInterrupt:
                self.stop()

    def execute(self) -> bool:
        """Score every job on the engine's threads; False when Ctrl-C stopped the run.

        The calling thread only waits (no event loop), so this works the same inside a
        running loop (Jupyter). Finished results are kept when the run is interrupted.
        """
        jobs = self.jobs()

        def show() -> None:  # a tqdm bar starts a thread: after the workers are forked
            self._progress = Progress(len(jobs), self.columns, enabled=self.show_progress)

        start = time.perf_counter()
        try:
            if self.recipe is not None:
                score_in_processes(
                    self.data.samples,
                    self.metrics,
                    self.engine,
                    self.recipe,
                    processes=self.workers,
                    on_result=self._record_at,
                    stop=self._stop,
                    on_start=show,
                    method=self.start_method,
                )
            else:
                show()
                self.engine.run(jobs, on_result=self._record, stop=self._stop)
        except KeyboardInterrupt:
            self.stop()
        finally:
            self.elapsed = time.perf_counter() - start
            if self._progress is not None:
                self._progress.close()
        return not self.stop_requested

    async def aexecute(self) -> None:
        """Score every job on the running loop; keeps the results of finished jobs if cancelled."""
        self._task = asyncio.current_task()
        jobs = self.jobs()
        self._progress = Progress(len(jobs), self.columns, enabled=self.show_progress)
        start = time.perf_counter()
        try:
            await self.engine.arun(jobs, on_result=self._record)
        finally:
            self.elapsed = time.perf_counter() - start
            self._progress.close()

    def execute_batch(self, options: BatchOptions, *, preflight: bool) -> bool:
        """Score every job through the OpenAI Batch API; False when Ctrl-C stopped the run."""
        from langchain_ragmetrics.evaluation._batch_run import BatchRun

        def record(row: int, col: int, result: MetricResult) -> None:
            self.results[(row, col)] = result
            if self.on_result is not None and not self.stop_requested:
                try:
                    self.on_result(row, self.columns[col], result)
                except KeyboardInterrupt:  # stops the run like Ctrl-C, as _record_at does
                    self.stop()

        batch = BatchRun(
            samples=self.data.samples,
            metrics=self.metrics,
            columns=self.columns,
            options=options,
            record=record,
            preflight=(lambda: _preflight(self)) if preflight else None,
            raise_exceptions=self.engine.raise_exceptions,
            show_progress=self.show_progress,
            stop=self._stop,
            engine=self.engine,  # the direct follow-ups keep the run's limits
        )
        start = time.perf_counter()
        try:
            completed = batch.execute()
        finally:
            self.elapsed = time.perf_counter() - start
        self.stop_requested = not completed
        return completed

    def result(self, *, interrupted: bool) -> EvaluationResult:
        """Assemble the EvaluationResult; unfinished jobs are marked as not run."""
        rows = [
            EvaluationRow(
                position=i,
                location=self.data.describe(i),
                sample=sample,
                results={name: self.results.get((i, col)) for col, name in enumerate(self.columns)},
            )
            for i, sample in enumerate(self.data.samples)
        ]
        return EvaluationResult(
            metrics=self.columns,
            rows=rows,
            source=self.data.source,
            elapsed_s=self.elapsed,
            interrupted=interrupted,
            info=run_info(self.columns, self.metrics, self.data.samples),
        )


def _prepare(
    dataset: DatasetLike,
    metrics: Sequence[BaseRagMetric | str],
    *,
    llm: BaseChatModel | None,
    language: str | None,
    max_concurrency: int,
    timeout: float | None,
    rate_limit_per_minute: float | None,
    show_progress: bool,
    raise_exceptions: bool,
    config: RunnableConfig | None,
    on_result: ResultCallback | None,
    cache: CacheLike = None,
) -> _Run:
    if on_result is not None and not callable(on_result):
        msg = "`on_result` must be a function of (row, metric, result), got "
        msg += type(on_result).__name__
        raise TypeError(msg)
    show_progress = flag("show_progress", show_progress)
    raise_exceptions = flag("raise_exceptions", raise_exceptions)  # "no" would raise
    prepared = prepare_metrics(metrics, llm=llm, language=language, cache=cache)
    engine = ScoringEngine(
        max_concurrency=max_concurrency,
        timeout=timeout,
        rate_limit_per_minute=rate_limit_per_minute,
        raise_exceptions=raise_exceptions,
        config=config,
    )
    data = read_dataset(dataset)
    run = _Run(data, prepared, engine, show_progress=show_progress, on_result=on_result)
    check_fields(data, run.columns, prepared)
    _resolve_judges(prepared)
    preflight_metrics(prepared, call=False)  # no tool calling: refused now, without a call
    return run


def _preflight(run: _Run) -> None:
    """The pre-flight request to each judge (skipped for judges whose calls are all cached)."""
    preflight_metrics(
        run.metrics, call=True, samples=run.data.samples, timeout=DEFAULT_PREFLIGHT_TIMEOUT
    )


def _run_mode(batch_api: object, preflight: object) -> tuple[BatchOptions | None, bool | None]:
    """The run's mode, checked: the Batch API's options (None: direct calls) and ``preflight``.

    ``preflight`` comes back as a Python bool (a NumPy bool is unwrapped), or None for the
    mode's default.

    Raises:
        TypeError: ``batch_api`` is neither a bool nor a :class:`BatchOptions` (``None`` or
            ``0`` would otherwise have turned on a run that takes hours), or ``preflight``
            is not a bool or None (``"no"`` would have sent the pre-flight request).
    """
    checked = flag("preflight", preflight, allow_none=True)
    if batch_api is False:
        return None, checked
    if batch_api is True:
        return BatchOptions(), checked
    if isinstance(batch_api, BatchOptions):
        return batch_api, checked
    msg = f"`batch_api` must be True, False or BatchOptions(...), got {batch_api!r}"
    raise TypeError(msg)


def evaluate(
    dataset: DatasetLike,
    metrics: Sequence[BaseRagMetric | str],
    *,
    llm: BaseChatModel | None = None,
    language: str | None = None,
    max_concurrency: int = 16,
    workers: Workers = "auto",
    timeout: float | None = None,
    rate_limit_per_minute: float | None = None,
    show_progress: bool = True,
    raise_exceptions: bool = False,
    config: RunnableConfig | None = None,
    on_result: ResultCallback | None = None,
    cache: CacheLike = None,
    preflight: bool | None = None,
    batch_api: bool | BatchOptions = False,
) -> EvaluationResult:
    """Score every sample of a dataset with every metric.

    All (sample x metric) jobs go through one :class:`~langchain_ragmetrics._engine.ScoringEngine`:
    each metric's sync ``invoke`` runs on worker threads while the calling thread waits, so it
    works the same from a script and from inside a running event loop (Jupyter, no
    nest_asyncio), and never touches async HTTP clients bound to another loop (langchain-openai
    shares one per base URL). ``max_concurrency`` bounds the judge calls at work; a call
    waiting out a retry backoff gives its slot to the next one. A failed job becomes a NaN
    score with its error and the run goes on; Ctrl-C stops the run and returns what was
    scored so far (``result.interrupted`` is True, unfinished jobs are "not run").

    Args:
        dataset: RagSamples or dicts (RAGAS column names accepted), a dict of columns, a path
            to a ``.jsonl`` / ``.json`` / ``.csv`` file, or a pandas DataFrame.
        metrics: Metric objects, or names such as ``"context_recall"``.
        llm: Judge for the LLM-judged metrics that have none (metrics are copied, not changed).
        language: Default language for metrics and samples that do not set one (``"ja"``).
        max_concurrency: Judge calls at work at the same time, the bound your judge sees: a
            job's calls beyond its first (entity recall's two lists, ``per_context``
            precision) run at once only on free slots, else one after another; a call
            sleeping out a retry backoff does not count. With ``workers`` it is the total,
            shared among them.
        workers: Processes scoring the jobs, this one included. This process starts scoring
            at once on its threads while the others start (forked on Linux while this
            process runs one thread: well under a second; else spawned: a second or two), and every
            process pulls jobs from one feed as it frees up, so extra processes never delay a
            run's start and a slow one takes fewer jobs. ``"auto"`` (the default) uses more
            than one only where that can pay off: more than one core, at least 100 jobs per
            process when workers are forked (400 when spawned) and 8 of
            ``max_concurrency``'s slots per process, no rate limit under 3,000 a minute,
            and metrics that can cross to another process (else it quietly stays at 1). 1
            keeps everything in this process; a number above 1 (any integer type but a bool,
            ``numpy.int64`` too) asks for that many (a metric or judge that cannot cross is
            then an error; a worker the system refuses to start is warned about and the run
            goes on without it). Metrics and judges cross as a recipe (a judge LangChain can
            serialize, such as ``ChatOpenAI``); a metric class defined in the running script
            needs its ``if __name__ == "__main__":`` guard. A result whose details a worker
            cannot pickle keeps its score and reason, with its details as plain data (one
            warning per metric). See docs/offline/scaling.md.
        timeout: Seconds before one job is abandoned (it becomes NaN); None for no limit.
        rate_limit_per_minute: Upper bound on judge requests per minute, retries included
            (langchain-core's ``InMemoryRateLimiter``); None for no limit.
        show_progress: Show a progress bar (only on a terminal or in a notebook).
        raise_exceptions: Raise the first job error instead of recording it as NaN.
        config: RunnableConfig for the metric runs (callbacks, tags, metadata).
        on_result: Called with (row position, metric column, result) as each job finishes; a
            KeyboardInterrupt raised there stops the run like Ctrl-C.
        cache: Verdict cache for the LLM-judged metrics that have none: a
            :class:`~langchain_ragmetrics.VerdictCache`, a file path, or True for the default
            file under the user's cache directory. An unchanged re-run then makes no judge
            call; ``result.usage`` counts ``cache_hits`` and ``cache_misses``. A string that
            is blank or reads as a switch (``"false"``, ``"0"``) is refused, not made a file.
        preflight: Send each judge one tiny structured request before scoring, so an
            unreachable or unsuitable judge fails at once (a judge without tool calling /
            structured output is always refused up front, without a call). Default (None):
            off for direct calls, on with ``batch_api`` (before anything is uploaded).
        batch_api: Send the judge calls through the OpenAI Batch API (half the price,
            answers within 24 hours): True, or :class:`BatchOptions` to set polling, file
            limits, follow-ups, prices, cancel. Only the verdict cache's misses are sent; the
            result is the same as with direct calls. ``max_concurrency``, ``timeout`` and
            ``rate_limit_per_minute`` apply to direct calls only. See ``docs/batch.md``.

    Returns:
        The :class:`EvaluationResult`.

    Raises:
        TypeError: ``on_result`` is given but cannot be called, or ``batch_api`` is neither
            a bool nor a :class:`BatchOptions`.
        FileNotFoundError: The dataset path does not exist.
        DatasetError: Rows cannot be read (every bad row is listed with file, row and field).
        MissingFieldError: A metric needs a field that no row has.
        UnknownMetricError: A metric name is not known.
        JudgeSetupError: An LLM-judged metric has no judge and no OpenAI key is configured.
        PreflightError: A judge cannot do structured output, or failed the pre-flight call.
        BatchError: ``batch_api``: a judge the Batch API cannot serve, nothing to cancel, or
            the service refused a file or a batch.
        ValueError: ``workers`` is not ``"auto"`` or a number of at least 1, or (a number
            above 1) a metric, its judge or the config's callbacks cannot be sent to another
            process; or ``cache`` is a blank string or one that reads as a switch.
    """
    options, preflight = _run_mode(batch_api, preflight)
    run = _prepare(
        dataset,
        metrics,
        llm=llm,
        language=language,
        max_concurrency=max_concurrency,
        timeout=timeout,
        rate_limit_per_minute=rate_limit_per_minute,
        show_progress=show_progress,
        raise_exceptions=raise_exceptions,
        config=config,
        on_result=on_result,
        cache=cache,
    )
    if options is not None:
        if workers not in (1, "auto"):
            msg = "`workers` spreads direct judge calls over processes; with `batch_api` the "
            msg += "Batch API does the work: leave `workers` at 1"
            raise ValueError(msg)
        completed = run.execute_batch(options, preflight=preflight is not False)
        return run.result(interrupted=not completed)
    run.use_workers(workers, rate_limit_per_minute=rate_limit_per_minute)
    if preflight:
        _preflight(run)
        run.recheck_workers()  # the pre-flight request may have started a thread
    completed = run.execute()
    return run.result(interrupted=not completed)


async def aevaluate(
    dataset: DatasetLike,
    metrics: Sequence[BaseRagMetric | str],
    *,
    llm: BaseChatModel | None = None,
    language: str | None = None,
    max_concurrency: int = 16,
    timeout: float | None = None,
    rate_limit_per_minute: float | None = None,
    show_progress: bool = True,
    raise_exceptions: bool = False,
    config: RunnableConfig | None = None,
    on_result: ResultCallback | None = None,
    cache: CacheLike = None,
    preflight: bool | None = None,
    batch_api: bool | BatchOptions = False,
) -> EvaluationResult:
    """Async twin of :func:`evaluate` (same arguments): ``ainvoke`` on the caller's event loop.

    Cancelling the awaiting task cancels the unfinished jobs and propagates as usual; a
    KeyboardInterrupt raised by ``on_result`` returns the partial result instead.
    """
    options, preflight = _run_mode(batch_api, preflight)
    run = _prepare(
        dataset,
        metrics,
        llm=llm,
        language=language,
        max_concurrency=max_concurrency,
        timeout=timeout,
        rate_limit_per_minute=rate_limit_per_minute,
        show_progress=show_progress,
        raise_exceptions=raise_exceptions,
        config=config,
        on_result=on_result,
        cache=cache,
    )
    if options is not None:  # polls for minutes or hours: off the caller's event loop
        worker = asyncio.ensure_future(
            asyncio.to_thread(run.execute_batch, options, preflight=preflight is not False)
        )
        try:
            completed = await asyncio.shield(worker)
        except asyncio.CancelledError:
            run.stop()  # the polling thread ends at its next check; the batches keep running
            await asyncio.wait({worker})
            raise
        return run.result(interrupted=not completed)
    if preflight:  # a blocking check, bounded: off the caller's event loop
        await asyncio.to_thread(_preflight, run)
    inner = asyncio.ensure_future(run.aexecute())
    try:
        await inner
    except asyncio.CancelledError:
        current = asyncio.current_task()
        cancelling = getattr(current, "cancelling", None)
        if not run.stop_requested or (callable(cancelling) and cancelling()):
            raise
    return run.result(interrupted=run.stop_requested)
