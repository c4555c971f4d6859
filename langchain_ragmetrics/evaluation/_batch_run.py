"""Scoring a dataset through the OpenAI Batch API: plan every judge call, send, collect, score.

Each (sample x metric) job is split as the direct path splits it: the metric's ``plan``
gives the judge calls, the verdict cache answers what it can, the misses become lines of
one or more batch files, and once the batches end every answer is validated as a direct
answer is and the metric's pure ``score`` turns the answers into the same
:class:`~langchain_ragmetrics.MetricResult` the direct path returns.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._engine import ScoringEngine
from langchain_ragmetrics._errors import BatchError, DeadlineExceededError, JudgeError
from langchain_ragmetrics._gate import Admission, admitted
from langchain_ragmetrics._schema import MetricResult, Usage
from langchain_ragmetrics.evaluation._batch_options import BatchReport, BatchSummary
from langchain_ragmetrics.evaluation._batch_requests import (
    BatchJudge,
    PlannedCall,
    http_module,
    jsonl_line,
    split_lines,
)
from langchain_ragmetrics.evaluation._batch_service import (
    BatchService,
    transient_failure,
    update_record,
)
from langchain_ragmetrics.evaluation._batch_state import (
    BatchRecord,
    JobState,
    RequestRef,
    job_key,
)
from langchain_ragmetrics.metrics import JudgedMetric
from langchain_ragmetrics.metrics._base import Plan, Verdict, note_truncation
from langchain_ragmetrics.metrics._judge import CachedCall, JudgeOutcome, call_judge

if TYPE_CHECKING:
    from pathlib import Path

    from langchain_ragmetrics._schema import RagSample
    from langchain_ragmetrics._text import Truncation
    from langchain_ragmetrics.evaluation._batch_options import BatchOptions
    from langchain_ragmetrics.metrics import BaseRagMetric

__all__ = ["BatchRun"]

_STOPPED_CODES = {"batch_expired": "expired", "batch_cancelled": "cancelled"}


class _StoppedError(Exception):
    """The caller stopped the wait (a cancelled ``aevaluate``)."""


def _engine_failure(metric: BaseRagMetric, exc: Exception) -> MetricResult:
    """The result the scoring engine records for a job that raised (same message)."""
    return MetricResult(
        metric=metric.metric_name, score=math.nan, error=f"{type(exc).__name__}: {exc}"
    )


@dataclass
class _Job:
    """One (sample x metric) job waiting for its judge answers."""

    row: int
    column: int
    metric: JudgedMetric
    plan: Plan
    truncated: list[Truncation]
    calls: list[PlannedCall] = field(default_factory=list)
    settled: bool = False


class BatchRun:
    """One evaluation through the Batch API (built and driven by ``evaluate``)."""

    def __init__(
        self,
        *,
        samples: list[RagSample],
        metrics: list[BaseRagMetric],
        columns: list[str],
        options: BatchOptions,
        record: Callable[[int, int, MetricResult], None],
        preflight: Callable[[], None] | None,
        raise_exceptions: bool = False,
        show_progress: bool = True,
        stop: threading.Event | None = None,
        engine: ScoringEngine | None = None,
    ) -> None:
        """Prepare a run; nothing is planned or sent before :meth:`execute`.

        ``stop`` ends the waiting like Ctrl-C does (the batches keep running). ``engine``
        is the direct path's: its ``max_concurrency``, ``timeout`` (per follow-up) and rate
        limiter bound the ``retry_direct`` follow-ups (default: an engine of its own).
        """
        self.samples = samples
        self.metrics = metrics
        self.columns = columns
        self.options = options
        self.record = record
        self.preflight = preflight
        self.raise_exceptions = raise_exceptions
        self.show_progress = show_progress
        self.stop = stop or threading.Event()
        self.engine = engine or ScoringEngine()
        self.directory: Path = options.resolved_state_dir()
        self.jobs: list[_Job] = []
        self.calls: dict[str, PlannedCall] = {}
        self._job_of: dict[str, _Job] = {}
        self.judges: list[BatchJudge] = []
        self.services: list[BatchService] = []
        self.report = BatchReport(job="")
        self._from_disk: set[int] = set()
        self._collected: set[int] = set()
        self._since = time.time()
        self._last_line = ""

    # ------------------------------------------------------------------ entry point

    def execute(self) -> bool:
        """Score every job; False when Ctrl-C stopped the run (the batches keep running).

        Raises:
            BatchError: A judge the Batch API cannot serve, nothing to cancel, another run
                holds the job, or the service refused a file or a batch (then the message
                says what keeps running at the service and how to resume or cancel it).
            PreflightError: The judge failed the pre-flight request (nothing was uploaded).
        """
        self._plan()
        if self.stop.is_set():  # on_result stopped the run while it was planned
            self._interrupted(None)
            return False
        misses = [c for c in self.calls.values() if c.outcome is None]
        for call in self.calls.values():
            call.body = call.judge.body(call.runner, call.call)
        key = job_key(
            (c.custom_id, _digest(c.judge.identity.encode() + c.body)) for c in self.calls.values()
        )
        self.report = BatchReport(
            job=key, planned=len(self.calls), cache_hits=len(self.calls) - len(misses)
        )
        if self.options.cancel:  # uploads nothing: may stop the batches of a waiting run
            return self._execute(key, misses=bool(misses))
        with JobState.lock(self.directory, key):
            return self._execute(key, misses=bool(misses))

    def _execute(self, key: str, *, misses: bool) -> bool:
        """:meth:`execute` once the job is held by this run."""
        state = JobState.load(self.directory, key)
        if state is not None:
            self._from_disk = {b.part for b in state.batches}
            self._since = state.created_at.timestamp()
        for service in self.services:
            service.since = self._since
        try:
            if self.options.cancel:
                state = self._cancel(state, key)
            elif state is None:
                if not misses:
                    return self._finish(None)
                if self.preflight is not None:
                    self.preflight()
                state = self._new_state(key)
            else:
                self.report.resumed = True
            self._drive(state)
        except (KeyboardInterrupt, _StoppedError):
            self._interrupted(state)
            return False
        except BatchError as exc:
            advice = self._advice(state)
            if advice is None:
                raise
            raise BatchError(f"{exc}\n{advice}") from exc
        except Exception:  # not ours to rename: the advice goes to stderr, as for Ctrl-C
            advice = self._advice(state)
            if advice is not None:
                sys.stderr.write(advice + "\n")
            raise
        return self._finish(state)

    def _pause(self, seconds: float) -> None:
        """Sleep out a backoff; Ctrl-C or a stopped wait (``stop``) cuts it short."""
        if self.stop.wait(seconds):
            raise _StoppedError

    def _advice(
        self, state: JobState | None, *, head: str = "Meanwhile: ", interrupted: bool = False
    ) -> str | None:
        """What a run ending early leaves at the service and what to do; None: nothing sent.

        After an interruption a part with an uploaded file but no batch id counts as
        running: its creation may have reached the service (an error from a creation means
        the service refused it, or it was looked up and is not there).
        """
        if state is None:
            return None
        where = JobState.path(self.directory, state.key)
        if any(
            not r.terminal and (r.batch_id or (interrupted and r.file_id)) for r in state.batches
        ):
            return (
                f"{head}the batches keep running at the service (and are billed). Run the same "
                "command again to pick them up without paying twice, or stop them with "
                f"--cancel (Python: BatchOptions(cancel=True)). Job state: {where}"
            )
        if any(r.batch_id or r.file_id for r in state.batches):
            return (
                f"{head}no batch of this job is running at the service. Run the same command "
                "again to resume: what was uploaded or answered is reused, not paid twice. "
                f"Job state: {where}"
            )
        return None

    def _interrupted(self, state: JobState | None) -> None:
        """Say what Ctrl-C left behind (said even without progress: money is at stake)."""
        advice = self._advice(state, head="Interrupted: ", interrupted=True)
        sys.stderr.write((advice or "Interrupted: nothing was sent to the Batch API.") + "\n")

    # ------------------------------------------------------------------ planning

    def _judge(self, llm: Any) -> BatchJudge:
        """The batch group of ``llm``: one per endpoint and model (a batch holds one model)."""
        candidate = BatchJudge(len(self.judges), llm)
        for judge in self.judges:
            if judge.llm is llm or judge.identity == candidate.identity:
                return judge
        judge = candidate
        self.judges.append(judge)
        self.services.append(
            BatchService(
                judge, timeout=self.options.request_timeout, since=self._since, pause=self._pause
            )
        )
        return judge

    def _plan(self) -> None:
        """Plan every job: finished now (no judge needed, cache hits, bad rows) or calls."""
        for row, sample in enumerate(self.samples):
            for column, metric in enumerate(self.metrics):
                job = self._plan_one(row, column, metric, sample)
                if job is not None:
                    self.jobs.append(job)
                    if all(c.outcome is not None for c in job.calls):
                        self._settle(job)

    def _plan_one(
        self, row: int, column: int, metric: BaseRagMetric, sample: RagSample
    ) -> _Job | None:
        try:
            checked = metric.validate_sample(sample)
            if not isinstance(metric, JudgedMetric):
                self._emit(row, column, metric.score_unobserved(checked))
                return None
            capped, truncated = metric.capped(checked)
            try:
                plan = metric.plan(capped)
            except JudgeError:
                raise
            except Exception as exc:  # as the metric's own guard turns it into a failure
                if metric.raise_on_error:
                    raise
                self._emit(row, column, metric._failure(f"{type(exc).__name__}: {exc}"))
                return None
        except Exception as exc:
            if self.raise_exceptions:
                raise
            self._emit(row, column, _engine_failure(metric, exc))
            return None
        if isinstance(plan, Verdict):
            result = metric._result(plan)
            self._emit(row, column, note_truncation(result, truncated))
            return None
        job = _Job(row, column, metric, plan, truncated)
        for index, call in enumerate(plan.calls):
            runner = metric.runner(call)
            judge = self._judge(runner.llm)
            judge.check(runner)
            custom_id = f"r{row}-m{column}-c{index}"
            cached = CachedCall.open(metric.cache, runner, call)
            planned = PlannedCall(custom_id, row, column, index, judge, runner, call, cached)
            if cached is not None and cached.hit is not None:
                planned.outcome = cached.hit
            job.calls.append(planned)
            self.calls[custom_id] = planned
            self._job_of[custom_id] = job
        return job

    def _emit(self, row: int, column: int, result: MetricResult) -> None:
        self.record(row, column, result)

    # ------------------------------------------------------------------ submitting

    def _new_state(self, key: str) -> JobState:
        state = JobState(
            key=key,
            endpoints=[j.label for j in self.judges],
            requests={
                c.custom_id: RequestRef(row=c.row, metric=self.columns[c.column], call=c.index)
                for c in self.calls.values()
            },
        )
        state.save(self.directory)
        return state

    def _todo(self) -> list[PlannedCall]:
        """Requests to send (again): no valid answer, attempts left, not stopped or final."""
        return [
            c
            for c in self.calls.values()
            if not c.answered
            and not c.final
            and not c.stopped
            and c.attempts < self.options.max_attempts
        ]

    def _add_batches(self, state: JobState, todo: list[PlannedCall]) -> None:
        """Write the records of new batches for ``todo`` (saved before anything is uploaded)."""
        limit = self.options.max_bytes_per_file
        for judge in self.judges:
            lines = []
            for call in todo:
                if call.judge is not judge:
                    continue
                line = jsonl_line(call.custom_id, call.body)
                if len(line) > limit:
                    call.final = True
                    call.cause = (
                        f"the request is {len(line):,} bytes, above the batch file limit of "
                        f"{limit:,} bytes (max_bytes_per_file)"
                    )
                    continue
                lines.append((call.custom_id, line))
            for part in split_lines(
                lines, max_requests=self.options.max_requests_per_file, max_bytes=limit
            ):
                number = state.next_part()
                ids = [custom_id for custom_id, _ in part]
                state.batches.append(
                    BatchRecord(
                        part=number,
                        attempt=1 + max(self.calls[i].attempts for i in ids),
                        judge=judge.index,
                        filename=f"ragmetrics-{state.key}-part{number}.jsonl",
                        custom_ids=ids,
                    )
                )
        state.save(self.directory)

    def _submit(self, state: JobState) -> None:
        """Upload and create every batch the state has no batch id for (finding lost ones)."""
        for record in state.batches:
            if record.batch_id is not None or self.options.cancel:
                continue
            service = self.services[record.judge]
            recovering = record.part in self._from_disk
            if record.file_id is None:
                found = service.find_file(record.filename, self._since) if recovering else None
                if found is None:
                    content = b"".join(
                        jsonl_line(i, self._call_of(i).body) for i in record.custom_ids
                    )
                    found = service.upload(record.filename, content)
                    self.report.uploads += 1
                record.file_id = found
                state.save(self.directory)
            metadata = _metadata(state, record)
            batch = service.find_batch(metadata, self._since) if recovering else None
            if batch is None:
                batch = service.create(
                    record.file_id, window=self.options.completion_window, metadata=metadata
                )
            update_record(record, batch)
            state.save(self.directory)
            self._progress(state)

    def _call_of(self, custom_id: str) -> PlannedCall:
        call = self.calls.get(custom_id)
        if call is None:
            msg = f"the batch job state names a request this evaluation does not plan: {custom_id}"
            raise BatchError(msg)
        return call

    # ------------------------------------------------------------------ waiting and reading

    def _drive(self, state: JobState) -> None:
        """Submit, poll, collect and follow up until every request has its final outcome."""
        while True:
            self._submit(state)
            self._poll(state)
            for record in state.batches:
                if record.part not in self._collected:
                    self._collect(record)
                    self._collected.add(record.part)
            todo = [] if self.options.cancel else self._todo()
            if self.options.retry_direct:  # follow-ups directly; first sends still batched
                self._direct([c for c in todo if c.attempts])
                todo = [c for c in todo if not c.attempts]
            if not todo:
                return
            self._add_batches(state, todo)

    def _poll(self, state: JobState) -> None:
        """Wait until every batch has ended, riding out ``max_poll_failures`` failed checks."""
        failures = 0
        while True:
            live = [r for r in state.batches if r.batch_id is not None and not r.terminal]
            changed = False
            try:
                for record in live:
                    batch = self.services[record.judge].retrieve(str(record.batch_id))
                    changed = update_record(record, batch) or changed
                failures = 0
            except BatchError as exc:
                if not transient_failure(exc):
                    raise
                failures += 1
                limit = self.options.max_poll_failures
                if failures >= limit:
                    msg = f"{exc} ({failures} status checks in a row failed: max_poll_failures)"
                    raise BatchError(msg) from exc
                self._say(f"Batch API: a status check failed ({failures}/{limit}): {exc}")
            if changed:
                state.save(self.directory)
            self._progress(state)
            if not live or all(r.terminal for r in live):
                return
            if self.stop.wait(self.options.poll_interval):
                raise _StoppedError

    def _progress(self, state: JobState) -> None:
        parts = [
            f"{r.batch_id} {r.status} {r.completed}/{r.total}"
            + (f" ({r.failed} failed)" if r.failed else "")
            for r in state.batches
            if r.part not in self._collected
        ]
        line = "Batch API: " + "; ".join(parts)
        if parts and line != self._last_line:
            self._last_line = line
            self._say(line)

    def _say(self, text: str) -> None:
        if self.show_progress:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()

    def _collect(self, record: BatchRecord) -> None:
        """Read a finished batch's output and error files into its requests."""
        mine = set(record.custom_ids)
        where = f"batch {record.batch_id}"
        if record.batch_id is not None:  # the service took every line of it: each was sent
            for custom_id in record.custom_ids:
                self._call_of(custom_id).placed += 1
        if record.batch_id is None:  # cancelled before this part was submitted
            for custom_id in record.custom_ids:
                call = self._call_of(custom_id)
                if not call.answered:
                    call.stopped, call.cause = True, "never sent: the run was cancelled first"
            return
        if record.status == "failed":
            why = "; ".join(record.errors) or "no reason given"
            for custom_id in record.custom_ids:
                call = self._call_of(custom_id)
                if not call.answered:
                    call.final, call.cause = True, f"{where} failed: {why}"
            return
        service = self.services[record.judge]
        seen: set[str] = set()
        for file_id in (record.output_file_id, record.error_file_id):
            for line in service.lines(file_id):
                named = line.get("custom_id")
                if not isinstance(named, str) or named not in mine or named in seen:
                    continue
                seen.add(named)
                call = self._call_of(named)
                if not call.answered:
                    self._read_line(call, line, record)
        stopped = _STOPPED_CODES.get(str(record.status))
        for custom_id in record.custom_ids:
            call = self._call_of(custom_id)
            if custom_id in seen or call.answered:
                continue
            if stopped is not None:
                call.stopped = not record.reported
                call.cause = f"{where} {stopped} before answering it"
            else:
                call.attempts += 1
                call.usage = call.usage + Usage(judge_calls=1)
                call.cause = f"{where} returned no line for it"

    def _read_line(self, call: PlannedCall, line: dict[str, Any], record: BatchRecord) -> None:
        where = f"batch {record.batch_id}"
        response = line.get("response") if isinstance(line.get("response"), dict) else None
        error = line.get("error") if isinstance(line.get("error"), dict) else None
        status = (response or {}).get("status_code")
        if error is None and status == 200:
            outcome = call.judge.read_answer(call.runner, call.call, (response or {}).get("body"))
            call.attempts += 1
            call.usage = call.usage + outcome.usage
            if outcome.error is not None:
                call.cause = f"{where}: {outcome.error}"
                return
            outcome.usage = call.usage
            call.outcome = outcome if call.cached is None else call.cached.store(outcome)
            return
        code = str((error or {}).get("code") or "")
        if code in _STOPPED_CODES:
            call.stopped = not record.reported
            call.cause = f"{where} {_STOPPED_CODES[code]} before answering it"
            return
        body = (response or {}).get("body")
        detail = (body or {}).get("error") if isinstance(body, dict) else None
        source = error or detail
        message = str((source.get("message") if isinstance(source, dict) else None) or code)
        call.attempts += 1
        call.usage = call.usage + Usage(judge_calls=1)
        call.cause = (
            f"{where}: "
            + (f"HTTP {status}: " if status else "")
            + (message or "error without a message")
        )
        if isinstance(status, int) and not _worth_retrying(status, message, body):
            call.final = True  # what the direct path would not retry either (400, 401 ...)

    def _direct(self, todo: list[PlannedCall]) -> None:
        """Send the follow-ups through the direct path, with the metric's retry policy.

        Each runs under an admission of the engine's gate, as a direct job's calls do: one
        of ``max_concurrency`` slots (given back during a backoff), the engine's rate
        limiter for every HTTP attempt, and ``timeout`` as its deadline.
        """
        if not todo:
            return
        engine = self.engine

        def one(call: PlannedCall) -> None:
            policy = self._job_of[call.custom_id].metric.retry
            deadline = None if engine.timeout is None else time.monotonic() + engine.timeout
            admission = Admission(engine.gate, deadline)
            try:
                admission.enter()
                with admitted(admission):
                    outcome = call_judge(call.runner, call.call, engine.config, policy)
            except DeadlineExceededError as exc:  # no slot before the deadline: never sent
                outcome = JudgeOutcome(error=f"{type(exc).__name__}: {exc}")
            finally:
                admission.close()
            call.attempts += outcome.usage.judge_calls
            call.placed += outcome.usage.judge_calls
            call.usage = call.usage + outcome.usage
            call.direct_usage = call.direct_usage + outcome.usage
            self.report.direct_requests += outcome.usage.judge_calls
            if outcome.error is not None:  # the metric's retry policy is spent: final
                call.final, call.cause = True, f"direct follow-up: {outcome.error}"
                return
            outcome.usage = call.usage
            call.outcome = outcome if call.cached is None else call.cached.store(outcome)

        workers = min(len(todo), engine.max_concurrency)
        with ThreadPoolExecutor(workers, thread_name_prefix="ragmetrics-batch") as pool:
            list(pool.map(one, todo))

    # ------------------------------------------------------------------ cancelling

    def _cancel(self, state: JobState | None, key: str) -> JobState:
        if state is not None:
            self._adopt_untracked(state)
        live = [] if state is None else [r for r in state.batches if r.batch_id and not r.terminal]
        if state is None or not live:
            msg = (
                f"no running batch to cancel for this evaluation (job {key}, state directory "
                f"{self.directory})"
            )
            raise BatchError(msg)
        self.report.resumed = True
        for record in live:
            update_record(record, self.services[record.judge].cancel(str(record.batch_id)))
        state.save(self.directory)
        return state

    def _adopt_untracked(self, state: JobState) -> None:
        """Find the batches a killed run created but never saved (by their metadata)."""
        changed = False
        for record in state.batches:
            if record.batch_id is not None:
                continue
            service = self.services[record.judge]
            batch = service.find_batch(_metadata(state, record), self._since)
            if batch is not None:
                record.file_id = record.file_id or str(batch.input_file_id)
                update_record(record, batch)
                changed = True
        if changed:
            state.save(self.directory)

    # ------------------------------------------------------------------ scoring

    def _settle(self, job: _Job) -> None:
        job.settled = True
        outcomes = [self._final(c) for c in job.calls]
        try:
            result = job.metric._finish(job.plan, outcomes)
        except JudgeError as exc:
            if self.raise_exceptions:
                raise
            result = _engine_failure(job.metric, exc)
        except Exception as exc:
            if job.metric.raise_on_error or self.raise_exceptions:
                raise
            result = job.metric._failure(f"{type(exc).__name__}: {exc}")
        self._emit(job.row, job.column, note_truncation(result, job.truncated))

    def _final(self, call: PlannedCall) -> JudgeOutcome:
        if call.outcome is not None:
            return call.outcome
        tries = f" (after {call.attempts} attempt{'s' if call.attempts != 1 else ''})"
        failed = JudgeOutcome(
            error=(call.cause or "no answer") + (tries if call.attempts else ""),
            usage=call.usage,
        )
        return failed if call.cached is None else call.cached.store(failed)

    def _finish(self, state: JobState | None) -> bool:
        """Score, report and forget the job; False when ``on_result`` stopped the run.

        A run stopped while its rows are scored keeps the state: the batches have ended and
        the same command scores them again without sending anything.
        """
        for job in self.jobs:
            if self.stop.is_set():
                break
            if not job.settled:
                self._settle(job)
        stopped = [c for c in self.calls.values() if c.stopped and not c.answered]
        report = self.report
        sent = [c for c in self.calls.values() if c.placed]
        report.sent = len(sent)
        report.attempts = sum(c.placed for c in sent)
        report.retried = sum(1 for c in sent if c.placed > 1)
        report.answered = sum(1 for c in self.calls.values() if c.answered) - report.cache_hits
        report.failed = sum(1 for c in self.calls.values() if not c.answered)
        report.input_tokens = sum(c.usage.input_tokens for c in self.calls.values())
        report.output_tokens = sum(c.usage.output_tokens for c in self.calls.values())
        report.direct_input_tokens = sum(c.direct_usage.input_tokens for c in self.calls.values())
        report.direct_output_tokens = sum(c.direct_usage.output_tokens for c in self.calls.values())
        if state is not None:
            report.batches = [
                BatchSummary(
                    id=str(r.batch_id),
                    status=str(r.status),
                    attempt=r.attempt,
                    total=r.total,
                    completed=r.completed,
                    failed=r.failed,
                )
                for r in state.batches
            ]
        if state is not None and self.stop.is_set():
            state.save(self.directory)
            sys.stderr.write(
                "Interrupted: the batches have ended; run the same command again to score "
                f"them without sending anything (job state: "
                f"{JobState.path(self.directory, state.key)}).\n"
            )
        elif state is not None and stopped:
            report.stopped = (
                f"{len(stopped)} requests were left unanswered ({stopped[0].cause}); run "
                "the same evaluation again to resubmit them"
            )
            for record in state.batches:
                if record.status in ("expired", "cancelled"):
                    record.reported = True
            state.save(self.directory)
        elif state is not None:
            state.remove(self.directory)
        self.report = report.price(self.options)
        if self.options.on_report is not None:
            self.options.on_report(self.report)
        else:
            self._say(self.report.summary())
        return not self.stop.is_set()


def _worth_retrying(status: int, message: str, body: Any) -> bool:
    """Whether the direct path's retry layer would retry a request answered with ``status``.

    The line's status and body become the openai SDK's own status error, which the retry
    layer classifies as it classifies a direct failure.
    """
    import openai

    from langchain_ragmetrics.metrics._judge import is_transient

    http_lib = http_module()
    request = http_lib.Request("POST", "https://batch.invalid/v1/chat/completions")
    response = http_lib.Response(status, request=request, json=body if body is not None else {})
    return is_transient(openai.APIStatusError(message, response=response, body=body))


def _metadata(state: JobState, record: BatchRecord) -> dict[str, str]:
    """The metadata a batch of ``record`` carries: how a lost or untracked one is found."""
    return {"ragmetrics_job": state.key, "part": str(record.part)}


def _digest(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
