"""The online handler's options, checked once and handed down as one object.

The same model configures the isolated mode's child process (:meth:`HandlerSettings.for_child`
and :meth:`HandlerSettings.in_child`): an option is written here once, never relayed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from langchain_core.callbacks import BaseCallbackHandler
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from langchain_ragmetrics._options import AS_GIVEN
from langchain_ragmetrics._retrieval import AnswerFrom, QuestionFrom, ReferenceProvider
from langchain_ragmetrics.callbacks._isolation import ProcessIsolation, ScoringSetup
from langchain_ragmetrics.callbacks._sampling import check_rate
from langchain_ragmetrics.callbacks._setup import check_metrics, check_sinks
from langchain_ragmetrics.callbacks.sinks import BaseSink
from langchain_ragmetrics.metrics._base import BaseRagMetric

__all__ = ["DEFAULT_CLOSE_TIMEOUT", "DEFAULT_MAX_CONCURRENCY", "HandlerSettings"]

DEFAULT_MAX_CONCURRENCY = 16
"""Judge jobs at once by default: a 200 ms judge then completes up to 80 calls a second, twice
the 40 that 20 sampled retrievals a second with 2 metrics need (headroom for retries and
latency spikes). The jobs wait on the network, so 16 cost threads, not CPU."""

DEFAULT_CLOSE_TIMEOUT = 30.0
"""Seconds ``flush``, ``close`` and the exit hook wait by default before giving up."""


class HandlerSettings(BaseModel):
    """Every option of :class:`RagMetricsCallbackHandler`, validated once.

    The handler builds it from its keyword arguments; the runtime (threads here, or the
    isolated mode's child process, which receives a copy), the pipeline and the sink outboxes
    read what they need from it instead of relaying a dozen arguments.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", frozen=True)

    isolation: Literal["thread"] | ProcessIsolation = "thread"
    """``"thread"``: score on this process's threads; a :class:`ProcessIsolation` (or
    ``"process"``): in a child process that builds its own metrics, sinks and provider. The
    handler's default ``"auto"`` is resolved to one of these before the settings are built
    (see ``callbacks._auto``)."""
    metrics: list[BaseRagMetric] = Field(default_factory=lambda: check_metrics(None))
    """The metrics (default ``ContextRelevance`` and ``ContextPrecision``)."""
    sinks: list[BaseSink] = Field(default_factory=lambda: check_sinks(None))
    """Where results go (default a ``LoggingSink``)."""
    sample_rate: Annotated[float, AS_GIVEN] = 1.0
    """Fraction of traces scored, decided by a hash of the trace id."""
    question_from: QuestionFrom = "query"
    """``"query"``, ``"input"`` or ``fn(root_input) -> str | None``."""
    answer_from: AnswerFrom | None = None
    """``fn(root_output) -> str | None``; None: the default mapping."""
    reference_provider: ReferenceProvider | None = None
    """``fn(question, metadata) -> str | dict | None`` (sync or async)."""
    max_queue_size: Annotated[int, AS_GIVEN] = Field(default=1000, ge=1)
    """Bound on retrievals waiting or being scored."""
    max_concurrency: Annotated[int, AS_GIVEN] = Field(default=DEFAULT_MAX_CONCURRENCY, ge=1)
    """Judge jobs at once (also the number of judge threads)."""
    rate_limit_per_minute: Annotated[float | None, AS_GIVEN] = Field(default=None, gt=0)
    """Cap on judge calls per minute."""
    timeout: Annotated[float | None, AS_GIVEN] = Field(default=120.0, gt=0)
    """Seconds per metric job (None: no limit)."""
    trace_judge: str | BaseCallbackHandler | None = None
    """None, a LangSmith project name or a tracer for the judge runs."""
    max_open_traces: Annotated[int, AS_GIVEN] = Field(default=10_000, ge=1)
    """Bound on traces in progress."""
    sink_queue_size: Annotated[int, AS_GIVEN] = Field(default=10_000, ge=1)
    """Bound on results waiting in each sink's outbox; beyond it the sink drops (counted)."""
    exit_timeout: Annotated[float | None, AS_GIVEN] = Field(default=DEFAULT_CLOSE_TIMEOUT, ge=0)
    """Seconds the interpreter-exit hook may spend; None disables the hook."""
    name: str = "ragmetrics"
    """Prefix of the background threads' names."""

    @property
    def process(self) -> ProcessIsolation | None:
        """The isolated mode's options, or None for in-process scoring."""
        return self.isolation if isinstance(self.isolation, ProcessIsolation) else None

    def for_child(self) -> HandlerSettings:
        """The picklable copy the isolated mode sends to its child process.

        The user's hooks ran on the caller's thread already (they may not pickle); metrics,
        sinks and the provider are built in the child by its setup.
        """
        trace_judge = self.trace_judge
        if trace_judge is not None and not isinstance(trace_judge, str):
            msg = "with isolation='process', `trace_judge` must be a project name or None"
            raise TypeError(msg)
        return self.model_copy(update={"question_from": "query", "answer_from": None})

    def in_child(self, setup: ScoringSetup) -> HandlerSettings:
        """The settings a child process scores with: its setup's metrics, sinks and provider.

        The parent owns the exit (it closes the child in time), so the child has no exit hook.
        """
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        fields.update(
            isolation="thread",
            metrics=setup.metrics,
            sinks=setup.sinks,
            reference_provider=setup.reference_provider,
            exit_timeout=None,
        )
        return type(self).model_validate(fields)

    @field_validator("isolation", mode="before")
    @classmethod
    def _isolation(cls, value: Any) -> Any:
        if value == "process":
            return ProcessIsolation()
        if value == "thread" or isinstance(value, ProcessIsolation):
            return value
        msg = (
            f"`isolation` must be 'auto', 'thread', 'process' or a ProcessIsolation, got {value!r}"
        )
        raise TypeError(msg)

    @staticmethod
    def _in_child(value: Any, info: ValidationInfo) -> bool:
        """True in process isolation, where the option must be left to the child's setup."""
        if not isinstance(info.data.get("isolation"), ProcessIsolation):
            return False
        if value is not None:
            msg = (
                f"with isolation='process', `{info.field_name}` is built in the child process: "
                "return it from ProcessIsolation(setup=...) as part of a ScoringSetup"
            )
            raise ValueError(msg)
        return True

    @field_validator("metrics", mode="before")
    @classmethod
    def _metrics(cls, value: Any, info: ValidationInfo) -> list[BaseRagMetric]:
        return [] if cls._in_child(value, info) else check_metrics(value)

    @field_validator("sinks", mode="before")
    @classmethod
    def _sinks(cls, value: Any, info: ValidationInfo) -> list[BaseSink]:
        return [] if cls._in_child(value, info) else check_sinks(value)

    @field_validator("sample_rate")
    @classmethod
    def _rate(cls, value: float) -> float:
        return check_rate(value)

    @field_validator("question_from", mode="before")
    @classmethod
    def _question_from(cls, value: Any) -> Any:
        if value not in ("query", "input") and not callable(value):
            msg = "`question_from` must be 'query', 'input' or a callable"
            raise ValueError(msg)
        return value

    @field_validator("answer_from", "reference_provider", mode="before")
    @classmethod
    def _hook(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name == "reference_provider" and cls._in_child(value, info):
            return None
        if value is not None and not callable(value):
            msg = f"`{info.field_name}` must be a callable"
            raise TypeError(msg)
        return value

    @field_validator("trace_judge", mode="before")
    @classmethod
    def _trace_judge(cls, value: Any) -> Any:
        if value is None or isinstance(value, BaseCallbackHandler):
            return value
        if isinstance(value, str) and value:
            return value
        msg = "`trace_judge` must be a LangSmith project name or a callback handler (a tracer)"
        raise TypeError(msg)
