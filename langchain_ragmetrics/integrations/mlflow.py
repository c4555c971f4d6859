"""Online results as MLflow 3 assessments on the traces MLflow's LangChain autologging records.

Extra ``[mlflow]``. Call ``mlflow.langchain.autolog()`` before the chain runs: each result
becomes a ``Feedback`` on the trace of the request that retrieved, on the retriever's span,
logged to the tracking server the application configured (``MLFLOW_TRACKING_URI`` or
``mlflow.set_tracking_uri``).

Example::

    import mlflow
    from langchain_ragmetrics import RagMetricsCallbackHandler
    from langchain_ragmetrics.integrations.mlflow import MlflowSink

    mlflow.langchain.autolog()
    handler = RagMetricsCallbackHandler(sinks=[MlflowSink()])
    chain.invoke("question", config={"callbacks": [handler]})
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from langchain_ragmetrics._errors import SinkSkipError
from langchain_ragmetrics._guarded import (
    LOCAL_ERRORS,
    Failure,
    GuardedRequests,
    classify_status,
)
from langchain_ragmetrics._links import MLFLOW
from langchain_ragmetrics._options import whole_number
from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics.callbacks._stats import FailureLog
from langchain_ragmetrics.callbacks.sinks import BaseSink, escape_unencodable
from langchain_ragmetrics.integrations._otel_attributes import error_type

if TYPE_CHECKING:
    from mlflow.entities import Feedback

    from langchain_ragmetrics._schema import MetricResult

__all__ = ["MlflowSink"]

_MISSING_EXTRA = "MlflowSink needs MLflow 3: pip install 'langchain-ragmetrics[mlflow]'"
_NOT_FOUND = "RESOURCE_DOES_NOT_EXIST"
_REJECTED = frozenset({"INVALID_PARAMETER_VALUE", "BAD_REQUEST"})
_REFUSED = frozenset(
    {"PERMISSION_DENIED", "UNAUTHENTICATED", "CUSTOMER_UNAUTHORIZED", "ENDPOINT_NOT_FOUND"}
)
"""Answers every request would meet: the key, or a route this server lacks (MLflow's client
gives a 404 without a JSON body ``ENDPOINT_NOT_FOUND``: a wrong base path, an old server)."""
_UNCODED = "INTERNAL_ERROR"
_BARE_STATUS = re.compile(r"failed with error code (\d{3}) != \d{3}")
"""How MLflow's client words an answer without a JSON body whose status it has no code for
(405, 410, 413, 415 ...: a web server's or a proxy's page). The code is then INTERNAL_ERROR,
as for a 500, and the message is the only record of the status."""
_REMEMBERED_ERRORS = 10_000
_DELIVERY_KEY = "ragmetrics.delivery_id"
"""Metadata key of the id one ``emit`` gives its assessment: a retry looks for it first."""


def _error_code(exc: Exception) -> str | None:
    code = getattr(exc, "error_code", None)
    return code if isinstance(code, str) else None


def _classify(exc: Exception) -> Failure:
    """How an MLflow request's error is handled (see :mod:`langchain_ragmetrics._guarded`)."""
    if isinstance(exc, LOCAL_ERRORS):
        return "rejected"
    code = _error_code(exc)
    if code == _NOT_FOUND:
        return "not_found"  # the trace is exported in the background: not stored yet
    if code in _REJECTED:
        return "rejected"
    if code in _REFUSED:
        return "refused"
    if code == _UNCODED:
        bare = _BARE_STATUS.search(str(exc))
        if bare is not None:
            return classify_status(int(bare.group(1)))
    return "failed"


def _escaped(result: MetricResult) -> MetricResult:
    """The result with its texts (reason, error, judge) made UTF-8 safe."""
    fields = {
        name: escape_unencodable(getattr(result, name)) for name in ("reason", "error", "judge")
    }
    return result.model_copy(update=fields)


class MlflowSink(BaseSink):
    """Logs each online result as an MLflow ``Feedback`` on its request's trace.

    The feedback has ``name`` = the metric key, ``value`` = the score, ``rationale`` = the
    reason, ``source`` = ``LLM_JUDGE`` with the judge model's name, ``span_id`` = the
    retriever's span, and ``metadata`` with the retriever, its LangChain run id, judge usage
    and, when they fit in ``max_details_chars``, the verdict details as JSON. A failed
    result is logged as an assessment error (``AssessmentError`` with a short error code);
    a later success for the same trace, span and metric overrides it (MLflow then marks the
    error invalid).

    A retrieval that no MLflow trace recorded (autologging off, or turned on after the
    chain started) is skipped for this sink, counted in ``stats.sinks["MlflowSink"].skipped``
    with one warning: a result is never attached to another request's trace. Results with
    nothing to assess (no score, no error) are skipped too.

    Delivery keeps the online guarantees: every request is bounded by ``request_timeout``
    (MLflow's own HTTP retries may run longer; the sink stops waiting), failures are
    retried with backoff, ``failure_threshold`` failures in a row open a circuit breaker for
    ``cooldown`` seconds (results dropped and counted meanwhile), and "trace not found"
    (MLflow exports traces in the background) is retried for up to ``not_found_wait`` s.
    A retry never stores an assessment twice: each ``emit`` tags its assessment with an id
    (metadata ``ragmetrics.delivery_id``), and after a try that may have been stored (no
    answer, a 5xx, a reply lost on the way back) the sink reads the trace and looks for that
    id before sending again. MLflow's own HTTP retries (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``)
    happen inside one try, out of the sink's sight; set it to 0 to leave retrying to the sink.
    Up to ``max_concurrency`` results are sent at once (each is a round trip); results for
    the same trace, span and metric go one after another, so a score always follows its
    error.

    Args:
        request_timeout: Seconds the sink waits for one request.
        max_retries: Retries of a failed request.
        backoff: First retry delay in seconds (doubled each retry, at most 8 s).
        not_found_wait: Seconds an assessment for a trace not stored yet is retried.
        failure_threshold: Failed requests in a row that open the breaker.
        cooldown: Seconds the breaker stays open.
        max_details_chars: Largest JSON of the verdict details put in the metadata.
        max_concurrency: Results sent at once (each on a thread of the sink's outbox).
    """

    def __init__(
        self,
        *,
        request_timeout: float = 10.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        not_found_wait: float = 30.0,
        failure_threshold: int = 5,
        cooldown: float = 30.0,
        max_details_chars: int = 4_000,
        max_concurrency: int = 8,
    ) -> None:
        try:
            import mlflow.entities  # noqa: F401
        except ImportError as exc:  # pragma: no cover - exercised only without the extra
            raise ImportError(_MISSING_EXTRA) from exc
        self.max_details_chars = whole_number("max_details_chars", max_details_chars, minimum=0)
        self.max_concurrency = whole_number("max_concurrency", max_concurrency)
        self.delivery = GuardedRequests(
            label="MlflowSink",
            request_timeout=request_timeout,
            max_retries=max_retries,
            backoff=backoff,
            not_found_wait=not_found_wait,
            failure_threshold=failure_threshold,
            cooldown=cooldown,
            concurrency=self.max_concurrency,
        )
        self._lock = threading.Lock()
        self._failures = FailureLog()
        self._errors: OrderedDict[tuple[str, str | None, str], str] = OrderedDict()

    @override
    def after_fork(self) -> None:
        """Request threads, locks and breaker of its own (the parent's are not usable here)."""
        self.delivery.after_fork()
        self._lock = threading.Lock()
        self._failures = FailureLog()

    def feedback(
        self, item: OnlineResult, *, overrides: str | None = None, delivery_id: str | None = None
    ) -> Feedback:
        """The ``Feedback`` for a result that has an MLflow trace (see the class docs).

        ``delivery_id`` goes in the metadata (``ragmetrics.delivery_id``), so that a retry
        can tell whether an earlier try was stored.
        """
        from mlflow.entities import AssessmentError, AssessmentSource, Feedback

        # Text from models and documents may hold lone surrogates, which no JSON body takes.
        result = _escaped(item.result)
        _, span_id = item.links[MLFLOW]
        source = AssessmentSource(source_type="LLM_JUDGE", source_id=result.judge or "unknown")
        metadata: dict[str, str] = escape_unencodable(self._metadata(item))
        if delivery_id is not None:
            metadata[_DELIVERY_KEY] = delivery_id
        if result.failed:
            return Feedback(
                name=result.metric,
                error=AssessmentError(
                    error_code=error_type(result.error),
                    error_message=result.error or "failed",
                ),
                source=source,
                metadata=metadata,
                span_id=span_id,
            )
        return Feedback(
            name=result.metric,
            value=result.score,
            rationale=result.reason or None,
            source=source,
            metadata=metadata,
            span_id=span_id,
            overrides=overrides,
        )

    @override
    def emit(self, item: OnlineResult) -> None:
        result = item.result
        if result.skipped:
            msg = "nothing to assess"
            raise SinkSkipError(msg)
        link = item.links.get(MLFLOW)
        if link is None:
            self._failures.report(
                "no-link",
                "MlflowSink: a retrieval has no MLflow trace (call mlflow.langchain.autolog() "
                "before the chain runs; for ainvoke/abatch, autolog(run_tracer_inline=True); "
                "a chain's batch() is never linked); such results are skipped for MLflow and "
                "counted in stats.sinks['MlflowSink'].skipped",
            )
            msg = "no MLflow trace recorded this retrieval"
            raise SinkSkipError(msg)
        trace_id, span_id = link
        key = (trace_id, span_id, result.metric)
        with self._lock:
            replaces = None if result.failed else self._errors.get(key)
        delivery_id = uuid.uuid4().hex
        feedback = self.feedback(item, overrides=replaces, delivery_id=delivery_id)
        logged = self.delivery.call(
            lambda: self._log(trace_id, feedback),
            classify=_classify,
            landed=lambda: self._find(trace_id, delivery_id),
        )
        with self._lock:
            if result.failed:
                self._errors[key] = str(logged.assessment_id)
                while len(self._errors) > _REMEMBERED_ERRORS:
                    self._errors.popitem(last=False)
            else:
                self._errors.pop(key, None)

    @override
    def order_key(self, item: OnlineResult) -> Hashable | None:
        """(trace, span, metric): an error and the score that overrides it stay in order."""
        link = item.links.get(MLFLOW)
        return None if link is None else (*link, item.result.metric)

    @override
    def close(self, timeout: float | None = None) -> None:
        self.delivery.close()

    @staticmethod
    def _log(trace_id: str, feedback: Feedback) -> Any:
        import mlflow

        return mlflow.log_assessment(trace_id=trace_id, assessment=feedback)

    @staticmethod
    def _find(trace_id: str, delivery_id: str) -> Any:
        """The assessment an earlier try of this delivery stored, or None."""
        import mlflow

        try:
            trace = mlflow.MlflowClient().get_trace(trace_id)  # the server's copy
        except Exception as exc:
            if _error_code(exc) == _NOT_FOUND:
                return None
            raise
        for assessment in trace.info.assessments or []:
            if (assessment.metadata or {}).get(_DELIVERY_KEY) == delivery_id:
                return assessment
        return None

    def _metadata(self, item: OnlineResult) -> dict[str, str]:
        result = item.result
        usage = result.usage
        metadata = {
            "ragmetrics.retriever": item.retriever or "unknown",
            "ragmetrics.run_id": str(item.run_id),
            "ragmetrics.judge_calls": str(usage.judge_calls),
            "ragmetrics.input_tokens": str(usage.input_tokens),
            "ragmetrics.output_tokens": str(usage.output_tokens),
        }
        if result.latency_s is not None:
            metadata["ragmetrics.latency_s"] = f"{result.latency_s:.3f}"
        if result.details:
            details = json.dumps(result.details, ensure_ascii=False, default=str)
            if len(details) <= self.max_details_chars:
                metadata["ragmetrics.details"] = details
        return metadata
