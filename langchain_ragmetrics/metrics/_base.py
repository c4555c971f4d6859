"""The Runnable base of every metric, and the judge-backed variant."""

from __future__ import annotations

import asyncio
import contextvars
import math
import os
import queue
import re
import threading
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, ClassVar, Generic, TypeVar

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from langchain_core.runnables.config import patch_config
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator
from typing_extensions import override

from langchain_ragmetrics._cache import VerdictCache
from langchain_ragmetrics._errors import JudgeError
from langchain_ragmetrics._gate import Admission, current_admission
from langchain_ragmetrics._prompts._common import to_payload
from langchain_ragmetrics._schema import MetricInput, MetricResult, RagSample, Usage, coerce_sample
from langchain_ragmetrics._text import Truncation, cap_texts, check_language, language_name
from langchain_ragmetrics._transient import transient_thread
from langchain_ragmetrics.metrics._judge import (
    JudgeCall,
    JudgeOutcome,
    JudgeRunner,
    RetryPolicy,
    acall_judge,
    call_judge,
    judge_name,
    make_judge,
    unobserved,
)

__all__ = [
    "DEFAULT_MAX_CONTEXT_CHARS",
    "DEFAULT_MAX_SAMPLE_CHARS",
    "BaseRagMetric",
    "JudgeError",
    "JudgedMetric",
    "Plan",
    "Preparation",
    "Replacement",
    "Verdict",
    "note_truncation",
    "replace_unencodable",
    "run_parallel",
]

DEFAULT_MAX_CONTEXT_CHARS = 20_000
"""Default cap on the characters of one context sent to the judge (about 5k tokens)."""
DEFAULT_MAX_SAMPLE_CHARS = 60_000
"""Default cap on the characters of all of a sample's contexts sent to the judge."""


@dataclass
class Verdict:
    """What a scorer returns: the score, a one-line reason and structured details."""

    score: float | None
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    """Judge calls a metric needs for one sample, plus what the scorer needs afterwards."""

    calls: list[JudgeCall]
    state: Any = None


class BaseRagMetric(RunnableSerializable[MetricInput, MetricResult]):
    """A metric as a Runnable: ``RagSample | dict -> MetricResult``.

    Invalid input (a missing field the metric needs) raises ``ValueError``; anything that goes
    wrong while scoring becomes a result with ``score=NaN`` and ``error`` set, unless the
    metric was built with ``raise_on_error=True``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    key: ClassVar[str] = "metric"
    """The metric's result key (``MetricResult.metric``)."""
    requires: ClassVar[tuple[str, ...]] = ()
    """Sample fields the metric cannot work without."""

    language: str | None = None
    """Default language of samples that do not set one ("en" when neither does)."""
    raise_on_error: bool = False
    """Raise instead of returning a NaN result when scoring fails."""

    @field_validator("language")
    @classmethod
    def _check_language(cls, value: str | None) -> str | None:
        return None if value is None else check_language(value, field="language")

    @property
    def metric_name(self) -> str:
        """The result key, e.g. ``context_recall``."""
        return self.key

    @property
    @override
    def InputType(self) -> Any:
        return RagSample

    @property
    @override
    def OutputType(self) -> type[MetricResult]:
        return MetricResult

    def sample_language(self, sample: RagSample) -> str:
        """The language a sample is judged in: its own, else the metric's, else English."""
        return sample.language or self.language or "en"

    def validate_sample(self, value: MetricInput) -> RagSample:
        """Coerce the input and check the fields this metric needs (ValueError otherwise)."""
        sample = coerce_sample(value)
        sample.require(type(self).__name__, *self.requires)
        return sample

    def _result(self, verdict: Verdict, usage: Usage | None = None) -> MetricResult:
        return MetricResult(
            metric=self.key,
            score=verdict.score,
            reason=verdict.reason,
            details=verdict.details,
            usage=usage or Usage(),
            judge=self._judge_label(),
        )

    def _failure(self, error: str, usage: Usage | None = None) -> MetricResult:
        if self.raise_on_error:
            raise JudgeError(f"{type(self).__name__}: {error}")
        return MetricResult(
            metric=self.key,
            score=math.nan,
            reason=None,
            error=error,
            usage=usage or Usage(),
            judge=self._judge_label(),
        )

    def _judge_label(self) -> str | None:
        return None

    @abstractmethod
    def _evaluate(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        """Score a validated sample synchronously."""

    async def _aevaluate(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        """Score a validated sample; metrics without I/O reuse the sync path."""
        return self._evaluate(sample, config)

    def _guarded(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        start = time.perf_counter()
        try:
            result = self._evaluate(sample, config)
        except JudgeError:
            raise
        except Exception as exc:
            if self.raise_on_error:
                raise
            result = self._failure(f"{type(exc).__name__}: {exc}")
        result.latency_s = time.perf_counter() - start
        return result

    async def _aguarded(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        start = time.perf_counter()
        try:
            result = await self._aevaluate(sample, config)
        except JudgeError:
            raise
        except Exception as exc:
            if self.raise_on_error:
                raise
            result = self._failure(f"{type(exc).__name__}: {exc}")
        result.latency_s = time.perf_counter() - start
        return result

    def _invoke(
        self, value: MetricInput, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> MetricResult:
        sample = self.validate_sample(value)
        return self._guarded(sample, patch_config(config, callbacks=run_manager.get_child()))

    async def _ainvoke(
        self,
        value: MetricInput,
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> MetricResult:
        sample = self.validate_sample(value)
        return await self._aguarded(sample, patch_config(config, callbacks=run_manager.get_child()))

    def score_unobserved(
        self, input: MetricInput, config: RunnableConfig | None = None
    ) -> MetricResult:
        """What ``invoke`` returns, without a run of its own for the metric.

        For callers that checked no callback handler or tracer listens (the scoring engine
        does, once per run): it skips a callback-manager setup per call. Judge calls still
        go to the chat model's ``_generate`` directly when the model has no callbacks, cache
        or rate limiter of its own (see ``JudgeRunner.invoke``).
        """
        sample = self.validate_sample(input)
        with unobserved():
            return self._guarded(sample, config or {})

    async def ascore_unobserved(
        self, input: MetricInput, config: RunnableConfig | None = None
    ) -> MetricResult:
        """Async twin of :meth:`score_unobserved`."""
        sample = self.validate_sample(input)
        with unobserved():
            return await self._aguarded(sample, config or {})

    @override
    def invoke(
        self, input: MetricInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> MetricResult:
        return self._call_with_config(self._invoke, input, config, run_type="chain")

    @override
    async def ainvoke(
        self, input: MetricInput, config: RunnableConfig | None = None, **kwargs: Any
    ) -> MetricResult:
        return await self._acall_with_config(self._ainvoke, input, config, run_type="chain")


class JudgedMetric(BaseRagMetric):
    """A metric built as *prompt -> chat model with structured output -> scorer*.

    Subclasses say which judge calls a sample needs (:meth:`plan`) and turn the parsed answers
    into a score with a pure function (:meth:`score`).
    """

    output_schema: ClassVar[type[BaseModel]]
    """The structured answer the judge fills (subclass to customise)."""

    llm: BaseChatModel | None = None
    """The judge; default ``ChatOpenAI(model="gpt-4o-mini", temperature=0)``, built on first use."""
    prompt: ChatPromptTemplate = Field(default=None, validate_default=True)
    """The judge prompt (variables ``payload`` and ``language``); each metric has its default."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    """Retries for transient errors and unparseable answers."""
    max_parallel_calls: int = Field(default=8, ge=1)
    """Upper bound on concurrent judge calls inside one sample (entity recall's two lists,
    ``per_context`` modes). Under ``evaluate()`` or the callback handler the calls beyond the
    first also need free slots of ``max_concurrency``."""
    cache: VerdictCache | None = None
    """Verdict cache consulted before each judge call (None: always ask the judge)."""
    max_context_chars: int | None = Field(default=DEFAULT_MAX_CONTEXT_CHARS, gt=0)
    """Characters of each retrieved context sent to the judge; None: no cap."""
    max_sample_chars: int | None = Field(default=DEFAULT_MAX_SAMPLE_CHARS, gt=0)
    """Characters of all the sample's contexts sent to the judge (later ones cut first)."""

    _default_llm: BaseChatModel | None = PrivateAttr(default=None)
    _runners: dict[tuple[int, int, type[BaseModel]], JudgeRunner] = PrivateAttr(
        default_factory=dict
    )

    @field_validator("prompt", mode="before")
    @classmethod
    def _default_prompt(cls, value: Any) -> Any:
        if value is None:
            return cls.default_prompt()
        if not isinstance(value, (ChatPromptTemplate, Mapping)):
            msg = (
                "must be a ChatPromptTemplate (with the variables `payload` and `language`), "
                f"got {type(value).__name__}"
            )
            raise ValueError(msg)  # (pydantic names the field)
        return value

    @classmethod
    @abstractmethod
    def default_prompt(cls) -> ChatPromptTemplate:
        """The built-in prompt of this metric."""

    @property
    def judge(self) -> BaseChatModel:
        """The chat model used as judge (the default one is built lazily)."""
        if self.llm is not None:
            return self.llm
        if self._default_llm is None:
            self._default_llm = make_judge()
        return self._default_llm

    @override
    def _judge_label(self) -> str | None:
        return judge_name(self.llm if self.llm is not None else self._default_llm)

    def ask(
        self,
        sample: RagSample,
        data: dict[str, Any],
        *,
        prompt: ChatPromptTemplate | None = None,
        schema: type[BaseModel] | None = None,
        check: Callable[[Any], None] | None = None,
    ) -> JudgeCall:
        """A judge call sending ``data`` as the JSON payload, in the sample's language."""
        return JudgeCall(
            prompt or self.prompt,
            schema or self.output_schema,
            {"payload": to_payload(data), "language": language_name(self.sample_language(sample))},
            check,
        )

    @abstractmethod
    def plan(self, sample: RagSample) -> Plan | Verdict:
        """The judge calls needed for a sample, or a final verdict when none is needed."""

    @abstractmethod
    def score(self, plan: Plan, answers: Sequence[Any]) -> Verdict:
        """Turn the parsed judge answers (one per call, in order) into a verdict."""

    def runner(self, call: JudgeCall) -> JudgeRunner:
        """The prompt-and-model pipe for a call, built once per (judge, prompt, schema)."""
        llm = self.judge
        key = (id(llm), id(call.prompt), call.schema)
        runner = self._runners.get(key)
        if runner is None or runner.llm is not llm or runner.prompt is not call.prompt:
            runner = self._runners[key] = JudgeRunner.build(llm, call.prompt, call.schema)
        return runner

    def _finish(self, plan: Plan, outcomes: Sequence[JudgeOutcome]) -> MetricResult:
        usage = Usage.total(o.usage for o in outcomes)
        errors = [o.error for o in outcomes if o.error is not None]
        if errors:
            return self._failure(errors[0], usage)
        return self._result(self.score(plan, [o.parsed for o in outcomes]), usage)

    def capped(self, sample: RagSample) -> tuple[RagSample, list[Truncation]]:
        """The sample with its contexts cut to the size caps, and what was cut.

        Bounds the judge's input (cost, context window) and the CPU spent before the call.
        """
        contexts, truncated = cap_texts(
            sample.contexts,
            max_chars_each=self.max_context_chars,
            max_chars_total=self.max_sample_chars,
        )
        if not truncated:
            return sample, truncated
        return sample.model_copy(update={"contexts": contexts}), truncated

    def prepared(self, sample: RagSample) -> tuple[RagSample, Preparation]:
        """The sample as the judge gets it: cut to the size caps, then made encodable.

        A lone surrogate (half of a UTF-16 pair, e.g. from a badly decoded document) cannot
        be encoded in a request body; it is replaced by U+FFFD so the sample is still scored.
        Capping first keeps the scan bounded by the caps.
        """
        sample, truncated = self.capped(sample)
        sample, replaced = replace_unencodable(sample)
        return sample, Preparation(truncated=truncated, replaced=replaced)

    @override
    def _evaluate(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        sample, preparation = self.prepared(sample)
        return preparation.note(self._evaluate_capped(sample, config))

    def _evaluate_capped(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        plan = self.plan(sample)
        if isinstance(plan, Verdict):
            return self._result(plan)
        if len(plan.calls) == 1:
            call = plan.calls[0]
            outcomes = [call_judge(self.runner(call), call, config, self.retry, self.cache)]
        else:
            outcomes = run_parallel(
                lambda c: call_judge(self.runner(c), c, config, self.retry, self.cache),
                plan.calls,
                limit=self.max_parallel_calls,
            )
        return self._finish(plan, outcomes)

    @override
    async def _aevaluate(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        sample, preparation = self.prepared(sample)
        return preparation.note(await self._aevaluate_capped(sample, config))

    async def _aevaluate_capped(self, sample: RagSample, config: RunnableConfig) -> MetricResult:
        plan = self.plan(sample)
        if isinstance(plan, Verdict):
            return self._result(plan)
        outcomes = await arun_parallel(
            lambda c: acall_judge(self.runner(c), c, config, self.retry, self.cache),
            plan.calls,
            limit=self.max_parallel_calls,
        )
        return self._finish(plan, outcomes)


_T = TypeVar("_T")
_R = TypeVar("_R")
_IDLE_S = 30.0  # a helper thread with nothing to do for this long ends


class _CallThreads:
    """Daemon threads kept for the concurrent judge calls of a sample, reused across samples.

    A thread pool per sample started a thread per call and joined it after (a few tenths of
    a millisecond of CPU per call). A task starts at once: an idle thread takes it, else a
    new thread does, so concurrency is bounded by the callers only (:func:`run_parallel`'s
    ``limit``). A thread idle for ``_IDLE_S`` seconds ends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a task, less the tasks queued for them
        self._epoch = 0  # threads started before the last ``retire_idle`` end when done
        self._tasks: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()

    def submit(self, task: Callable[[], object]) -> None:
        """Run ``task`` on an idle thread, or on a new one when none is idle."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._tasks.put(task)
                return
        transient_thread(self._serve, args=(task,), name="ragmetrics-call").start()

    def retire_idle(self) -> None:
        """End the threads idle now, and those busy now once done (before a fork)."""
        with self._lock:  # under the lock: a thread timing out meanwhile sees them queued
            for _ in range(self._idle):
                self._tasks.put(_retire)
            self._idle = 0
            self._epoch += 1

    def _serve(self, task: Callable[[], object]) -> None:
        with self._lock:
            epoch = self._epoch
        while True:
            task()
            with self._lock:
                if self._epoch != epoch:  # retired while busy
                    return
                self._idle += 1
            while True:
                try:
                    task = self._tasks.get(timeout=_IDLE_S)
                    if task is _retire:  # ``retire_idle`` took it off the idle count
                        return
                    break
                except queue.Empty:
                    with self._lock:  # a task queued meanwhile is someone's: keep waiting
                        if self._tasks.empty():
                            self._idle -= 1
                            return


def _retire() -> None:
    """The task that ends an idle helper thread (see :meth:`_CallThreads.retire_idle`)."""


_CALL_THREADS = _CallThreads()


def retire_idle_call_threads() -> None:
    """End the idle helper threads of per-context judge calls; they start again when needed."""
    _CALL_THREADS.retire_idle()


def _new_call_threads() -> None:
    global _CALL_THREADS  # noqa: PLW0603 - a forked child has none of its parent's threads
    _CALL_THREADS = _CallThreads()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_call_threads)


def run_parallel(fn: Callable[[_T], _R], items: Sequence[_T], *, limit: int) -> list[_R]:
    """``[fn(x) for x in items]`` with up to ``limit`` calls at once; results in item order.

    The calling thread takes part; the helpers are reused threads, each running in a copy of
    the caller's context (as ``ContextThreadPoolExecutor`` does), so the engine's admission
    and any tracing context carry over. Under the engine each helper needs a free slot of
    its own (:meth:`~langchain_ragmetrics._gate.Admission.try_join`): without one the calls
    run on fewer threads, so ``max_concurrency`` bounds the calls at work; a call sleeping out
    a backoff frees its slot for a call not started yet. Every call runs; the first exception
    in item order is raised after all of them have finished (a Ctrl-C in the caller's own
    call at once).
    """
    return _ParallelCalls(fn, items, limit).run()


class _ParallelCalls(Generic[_T, _R]):
    """The state of one :func:`run_parallel`: the calls handed out, done, and their outcomes."""

    def __init__(self, fn: Callable[[_T], _R], items: Sequence[_T], limit: int) -> None:
        self.fn = fn
        self.items = items
        self.limit = limit
        self.count = len(items)
        self.results: list[Any] = [None] * self.count
        self.errors: dict[int, BaseException] = {}
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.taken = self.done = 0
        self.workers = 1  # the caller
        self.context = contextvars.copy_context()
        self.admission = current_admission()

    def work(self, caught: type[BaseException]) -> None:
        """Take the next call and run it, until none is left."""
        while True:
            with self.lock:
                index = self.taken
                if index >= self.count:
                    return
                self.taken += 1
            try:
                self.results[index] = self.fn(self.items[index])
            except caught as exc:  # re-raised by the caller, in item order
                self.errors[index] = exc
            with self.lock:
                self.done += 1
                if self.done == self.count:
                    self.finished.set()

    def helper(self, admission: Admission) -> None:
        """A helper thread (it keeps even a BaseException: a lost count would hang the caller)."""
        try:
            self.work(BaseException)
        finally:
            admission.leave()

    def _wanted(self) -> bool:
        """Count one more worker if the limit allows one and calls are left to take."""
        with self.lock:
            # Workers are never counted down: a helper ends only once every call is taken.
            if self.workers >= self.limit or self.taken >= self.count:
                return False
            self.workers += 1
            return True

    def _start_helper(self, admission: Admission) -> None:
        """A helper thread on a slot the job holds for it (it ends with ``leave``)."""
        try:
            _CALL_THREADS.submit(partial(self.context.copy().run, self.helper, admission))
        except BaseException:
            with self.lock:
                self.workers -= 1
            raise

    def join(self) -> bool:
        """One more helper, if the limit allows, calls are left and a slot is free now."""
        admission = self.admission
        if admission is None or not self._wanted():
            return False
        if not admission.try_join():
            with self.lock:
                self.workers -= 1
            return False
        try:
            self._start_helper(admission)
        except BaseException:
            admission.leave()
            raise
        return True

    def handed(self) -> bool:
        """A worker's backoff handed the job a slot: a helper takes the next call on it."""
        admission = self.admission
        if admission is None or not self._wanted():
            return False
        self._start_helper(admission)
        return True

    def run(self) -> list[Any]:
        admission = self.admission
        if admission is None:
            for _ in range(min(self.limit, self.count) - 1):
                _CALL_THREADS.submit(partial(self.context.copy().run, self.work, BaseException))
            self.work(Exception)  # the caller's own Ctrl-C propagates at once
            if self.count:
                self.finished.wait()
        else:
            for _ in range(min(self.limit, self.count) - 1):
                if not self.join():
                    break  # no free slot: the calls left run on the threads that have one
            # A worker sleeping out a backoff frees its slot: a call not started takes it.
            with admission.starting_siblings(self.handed):
                self.work(Exception)
                if self.count:
                    admission.wait(self.finished)  # without its slot, which a helper may need
        if self.errors:
            raise self.errors[min(self.errors)]
        return self.results


async def arun_parallel(
    fn: Callable[[_T], Awaitable[_R]], items: Sequence[_T], *, limit: int
) -> list[_R]:
    """Async twin of :func:`run_parallel`: the calling task and helper tasks, same limits.

    The first exception in item order is raised once every call has finished; cancelling
    the caller cancels the helpers.
    """
    count = len(items)
    results: list[Any] = [None] * count
    errors: dict[int, BaseException] = {}
    indices = iter(range(count))
    taken = 0  # one event loop: the counters need no lock

    async def work() -> None:
        nonlocal taken
        for index in indices:
            taken = index + 1
            try:
                results[index] = await fn(items[index])
            except Exception as exc:  # re-raised by the caller, in item order
                errors[index] = exc

    async def helper(admission: Admission) -> None:
        try:
            await work()
        finally:
            admission.leave()

    admission = current_admission()
    helpers: list[asyncio.Future[None]] = []

    def wanted() -> bool:
        # Helpers are never counted down: one ends only once every call is taken.
        return admission is not None and len(helpers) + 1 < limit and taken < count

    def join() -> bool:
        """One more helper task, if the limit allows, calls are left and a slot is free."""
        if admission is None or not wanted() or not admission.try_join():
            return False
        helpers.append(asyncio.ensure_future(helper(admission)))
        return True

    def handed() -> bool:
        """A task's backoff handed the job a slot: a helper takes the next call on it."""
        if admission is None or not wanted():
            return False
        helpers.append(asyncio.ensure_future(helper(admission)))
        return True

    for _ in range(min(limit, count) - 1):
        if admission is None:
            helpers.append(asyncio.ensure_future(work()))
        elif not join():
            break  # no free slot: the calls left run on the tasks that have one
    try:
        if admission is None:
            await work()
            if helpers:
                await asyncio.wait(helpers)
        else:
            # A task sleeping out a backoff frees its slot: a call not started takes it.
            with admission.starting_siblings(handed):
                await work()
                if helpers:
                    await admission.await_all(helpers)
    except BaseException:
        for task in helpers:
            task.cancel()
        raise
    for task in helpers:
        task.result()  # a helper's own BaseException (its Exceptions are in ``errors``)
    if errors:
        raise errors[min(errors)]
    return results


def note_truncation(result: MetricResult, truncated: Sequence[Truncation]) -> MetricResult:
    """Record in ``details["truncated"]`` which contexts the size caps shortened (if any)."""
    if truncated:
        result.details["truncated"] = [asdict(t) for t in truncated]
    return result


_LONE_HALF = re.compile("[\ud800-\udfff]")
_TEXT_FIELDS = ("question", "answer", "reference")
_LIST_FIELDS = ("contexts", "reference_contexts")


@dataclass(frozen=True)
class Replacement:
    """A sample text in which code points that cannot be encoded were replaced by U+FFFD."""

    field: str
    """The sample field (``question``, ``contexts`` ...)."""
    index: int | None
    """The position in a list field (None for a plain text field)."""
    replaced: int
    """How many code points were replaced."""


def _encodable(text: str) -> tuple[str, int]:
    """``text`` with valid surrogate pairs joined and lone surrogates made U+FFFD; the count."""
    if _LONE_HALF.search(text) is None:
        return text, 0
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return joined, joined.count("\ufffd") - text.count("\ufffd")


def replace_unencodable(sample: RagSample) -> tuple[RagSample, list[Replacement]]:
    """The sample with every text made UTF-8 encodable, and what was replaced where."""
    update: dict[str, Any] = {}
    found: list[Replacement] = []
    for name in _TEXT_FIELDS:
        value = getattr(sample, name)
        if value is not None:
            text, count = _encodable(value)
            if text != value:
                update[name] = text
            if count:
                found.append(Replacement(name, None, count))
    for name in _LIST_FIELDS:
        values = getattr(sample, name)
        if values is None:
            continue
        fixed = []
        for index, value in enumerate(values):
            text, count = _encodable(value)
            fixed.append(text)
            if count:
                found.append(Replacement(name, index, count))
        if fixed != values:
            update[name] = fixed
    if not update:
        return sample, found
    return sample.model_copy(update=update), found


@dataclass(frozen=True)
class Preparation:
    """What :meth:`JudgedMetric.prepared` changed in a sample before the judge saw it."""

    truncated: list[Truncation] = field(default_factory=list)
    """Contexts the size caps shortened."""
    replaced: list[Replacement] = field(default_factory=list)
    """Texts whose unencodable code points became U+FFFD."""

    def note(self, result: MetricResult) -> MetricResult:
        """Record the changes in ``details`` (``truncated``, ``replaced_unencodable``)."""
        note_truncation(result, self.truncated)
        if self.replaced:
            result.details["replaced_unencodable"] = [
                {k: v for k, v in asdict(r).items() if v is not None} for r in self.replaced
            ]
        return result
