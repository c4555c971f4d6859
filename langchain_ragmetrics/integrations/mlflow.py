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

import functools
import inspect
import json
import logging
import math
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from typing_extensions import override

from langchain_ragmetrics._errors import SinkSkipError
from langchain_ragmetrics._guarded import (
    LOCAL_ERRORS,
    Failure,
    GuardedRequests,
    classify_status,
    http_status,
)
from langchain_ragmetrics._links import MLFLOW
from langchain_ragmetrics._options import number_above_zero, whole_number
from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics.callbacks._stats import FailureLog
from langchain_ragmetrics.callbacks.sinks import BaseSink, escape_unencodable
from langchain_ragmetrics.integrations._otel_attributes import error_type
from langchain_ragmetrics.metrics._judge import retry_after

if TYPE_CHECKING:
    import requests
    from mlflow.entities import Feedback
    from mlflow.exceptions import MlflowException

    from langchain_ragmetrics._schema import MetricResult

__all__ = ["MlflowSink"]

logger = logging.getLogger(__name__)

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
as for a 500, and the message is the only record of the status: read there for the answers
that come through MLflow's API (the stores the sink does not send to itself)."""
_GRACE_S = 1.0
"""How much longer than ``request_timeout`` (the HTTP timeout of each of its requests) the
sink waits for one: the time for the client to give up by itself and free its thread."""
_REMEMBERED_ERRORS = 10_000
_DELIVERY_KEY = "ragmetrics.delivery_id"
"""Metadata key of the id one ``emit`` gives its assessment: a retry looks for it first."""
_ErrorKey = tuple[str, str | None, UUID, str]
"""(trace, span, retrieval run id, metric) of an error a later score may override."""


def _error_code(exc: Exception) -> str | None:
    code = getattr(exc, "error_code", None)
    return code if isinstance(code, str) else None


def _classify(exc: Exception) -> Failure:
    """How an MLflow request's error is handled (see :mod:`langchain_ragmetrics._guarded`).

    An answer the sink received itself carries its HTTP status, which decides: whatever
    answered (MLflow, or a proxy or gateway in front of it) said it with the status, while
    a JSON body may be anyone's (``{"error": ...}`` has no MLflow code, and a proxy may copy
    a code that contradicts its status). Only a 404 reads the body: MLflow's "not stored
    yet" (``RESOURCE_DOES_NOT_EXIST``) is retried, any other 404 is a route the server
    lacks. Without a status (no answer, or through ``mlflow.log_assessment``), MLflow's
    error code decides.
    """
    if isinstance(exc, LOCAL_ERRORS):
        return "rejected"
    code = _error_code(exc)
    status = http_status(exc)
    if status is not None:
        if status == 404:
            return "not_found" if code == _NOT_FOUND else "refused"
        return classify_status(status)
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


_HTTP_OPTIONS = frozenset(
    {"backoff_factor", "max_retries", "raise_on_status", "retry_codes", "timeout"}
)
"""The per-request options of MLflow's ``http_request`` that the sink's own requests use."""


@functools.cache
def _can_send_itself() -> bool:
    """Whether this MLflow has every piece the sink's own requests use (looked at once).

    They use MLflow's HTTP helper and its trace API's messages, which are not public API;
    the extra allows MLflow releases the sink was not tested on. Should one lack a piece,
    or take other options, the sink goes through ``mlflow.log_assessment`` instead (with
    MLflow's retries inside each try, as before), with one INFO line, rather than fail
    every result.
    """
    try:
        from mlflow.entities import Assessment, TraceInfo  # noqa: F401
        from mlflow.protos.databricks_pb2 import ErrorCode  # noqa: F401
        from mlflow.protos.service_pb2 import CreateAssessment, GetTraceInfoV3  # noqa: F401
        from mlflow.store.tracking.rest_store import RestStore  # noqa: F401
        from mlflow.tracing.client import TracingClient  # noqa: F401
        from mlflow.utils.proto_json_utils import message_to_json, parse_dict  # noqa: F401
        from mlflow.utils.rest_utils import (  # noqa: F401
            _V3_TRACE_REST_API_PATH_PREFIX,
            get_single_trace_endpoint,
            http_request,
            verify_rest_response,
        )

        accepted = inspect.signature(http_request).parameters
    except (ImportError, TypeError, ValueError) as exc:
        missing: str = repr(exc)
    else:
        if accepted.keys() >= _HTTP_OPTIONS:
            return True
        missing = f"http_request takes no {sorted(_HTTP_OPTIONS - accepted.keys())}"
    logger.info(
        "MlflowSink: this MLflow lacks what the sink's own requests use (%s); assessments "
        "go through mlflow.log_assessment, with MLflow's HTTP retries inside each try",
        missing,
    )
    return False


def _rest_store() -> Any | None:
    """MLflow's store for the tracking URI now set, when the sink sends to it itself.

    That is an MLflow tracking server at an http(s) URI (MLflow's ``RestStore``), with an
    MLflow that has what the sink's requests use (:func:`_can_send_itself`). Other stores
    (Databricks, whose client has retries of its own; a local database, without HTTP) get
    the sink's requests through MLflow's API, and None here.
    """
    if not _can_send_itself():
        return None
    from mlflow.store.tracking.rest_store import RestStore
    from mlflow.tracing.client import TracingClient

    store = TracingClient().store
    return store if type(store) is RestStore else None


def _request(store: Any, method: str, endpoint: str, body: Any, timeout: float) -> Any:
    """One HTTP request to the tracking server, MLflow's retries off; the answer's JSON.

    Through MLflow's own HTTP helper (its host, credentials, TLS and headers), with
    ``max_retries=0`` and ``timeout`` for this request only: MLflow's retry settings
    (``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` ...) stay the application's, for its own requests.

    Raises:
        TimeoutError: No connection or no answer within ``timeout``.
        MlflowException: An answer other than a 200 with a JSON object, with the answer as
            ``response`` (its status and headers); or another failure to get one (MLflow's
            error for it, without ``response``).
    """
    from mlflow.exceptions import MlflowException
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    sent = {"params": body} if method == "GET" else {"json": body}
    try:
        response = http_request(
            store.get_host_creds(),
            endpoint,
            method,
            max_retries=0,
            backoff_factor=0,
            retry_codes=frozenset(),
            raise_on_status=False,
            timeout=timeout,
            **sent,
        )
    except MlflowException as exc:
        if _timed_out(exc):
            # MLflow's message would point at MLFLOW_HTTP_REQUEST_TIMEOUT: not this bound.
            msg = f"MlflowSink: no answer within {timeout:g} s ({method} {endpoint})"
            raise TimeoutError(msg) from exc
        raise
    try:
        verify_rest_response(response, endpoint)
    except MlflowException as exc:
        raise _answered(exc, response) from exc
    try:
        answer = json.loads(response.text)
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        return answer
    # A 200 whose body is cut or mangled (a proxy): it may have been stored, so "failed".
    text = response.text[:200]
    msg = f"API request to endpoint {endpoint} got an answer that is not JSON: {text!r}"
    raise _answered(MlflowException(msg), response)


def _timed_out(exc: BaseException) -> bool:
    """Whether MLflow's error ``exc`` comes from a connect or read timeout.

    Without retries left, ``urllib3`` reports a read timeout as the reason of a
    ``MaxRetryError``, which ``requests`` raises as a ``ConnectionError``; a refused
    connection is a ``NewConnectionError``, which ``urllib3`` derives from its timeout.
    """
    import requests
    import urllib3

    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None or isinstance(seen, urllib3.exceptions.NewConnectionError):
            return False
        if isinstance(seen, (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _answered(exc: MlflowException, response: requests.Response) -> MlflowException:
    """``exc``, MLflow's error for ``response``, with the status in its message.

    ``response`` is attached: :func:`~langchain_ragmetrics._guarded.http_status` reads the
    status there, and the retry its ``Retry-After``.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import ErrorCode

    status = response.status_code
    message = exc.message
    if f"error code {status}" not in message:
        message = f"HTTP {status}: {message}"
    try:
        code = ErrorCode.Value(exc.error_code)
    except ValueError:  # pragma: no cover - MLflow's errors carry one of its codes
        code = ErrorCode.Value(_UNCODED)
    error = MlflowException(message, error_code=code)
    error.response = response
    return error


def _assessment_body(trace_id: str, feedback: Feedback) -> Any:
    """The JSON body of ``store.create_assessment``'s request, built before any try.

    Building it is local (a value protobuf's JSON cannot hold, text it cannot encode):
    should it fail, the error is raised once from ``emit``, never retried nor counted by
    the breaker as a failure of the server.
    """
    from mlflow.protos.service_pb2 import CreateAssessment
    from mlflow.utils.proto_json_utils import message_to_json

    feedback.trace_id = trace_id
    return json.loads(message_to_json(CreateAssessment(assessment=feedback.to_proto())))


def _create_assessment(store: Any, trace_id: str, body: Any, timeout: float) -> Any:
    """What ``store.create_assessment`` sends (``body``) and returns, in one request."""
    from mlflow.entities import Assessment
    from mlflow.protos.service_pb2 import CreateAssessment
    from mlflow.utils.proto_json_utils import parse_dict
    from mlflow.utils.rest_utils import _V3_TRACE_REST_API_PATH_PREFIX

    endpoint = f"{_V3_TRACE_REST_API_PATH_PREFIX}/{trace_id}/assessments"
    answer = _request(store, "POST", endpoint, body, timeout)
    created = CreateAssessment.Response()
    parse_dict(answer, created)
    return Assessment.from_proto(created.assessment)


def _trace_info(store: Any, trace_id: str, timeout: float) -> Any:
    """The stored trace's info, with its assessments (MLflow's GetTraceInfoV3), in one request."""
    from mlflow.entities import TraceInfo
    from mlflow.protos.service_pb2 import GetTraceInfoV3
    from mlflow.utils.proto_json_utils import parse_dict
    from mlflow.utils.rest_utils import get_single_trace_endpoint

    answer = _request(
        store, "GET", get_single_trace_endpoint(trace_id), {"trace_id": trace_id}, timeout
    )
    found = GetTraceInfoV3.Response()
    parse_dict(answer, found)
    return TraceInfo.from_proto(found.trace.trace_info)


def _failure(result: MetricResult) -> tuple[str, str] | None:
    """The error code and message a result is logged with, or None for a score.

    A score that is not finite (a custom metric's bug: ``inf``) is no number MLflow's JSON
    can carry, so it is logged as an error too rather than fail on every try.
    """
    if result.failed:
        return error_type(result.error), result.error or "failed"
    score = result.score
    if score is not None and not math.isfinite(score):
        return "ValueError", f"ValueError: the metric gave a score of {score!r}, not a finite one"
    return None


def _error_key(item: OnlineResult, trace_id: str, span_id: str | None) -> _ErrorKey:
    """Whose error a later score overrides: the same retrieval (its run) and metric.

    The run id tells apart two retrievals of one trace that have no span (the score then
    goes on the trace alone): one's score must not mark the other's error invalid.
    """
    return (trace_id, span_id, item.run_id, item.result.metric)


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
    result is logged as an assessment error (``AssessmentError`` with a short error code),
    and so is a score that is not finite (``inf``: no JSON number holds it); a later success
    for the same retrieval and metric overrides it (MLflow then marks the error invalid).

    A retrieval that no MLflow trace recorded (autologging off, or turned on after the
    chain started, or a request MLflow's trace sampling left out) is skipped for this sink,
    counted in ``stats.sinks["MlflowSink"].skipped`` with one warning: a result is never
    attached to another request's trace. Results with nothing to assess (no score, no
    error) are skipped too.

    Delivery keeps the online guarantees, and retrying is the sink's alone. To an MLflow
    tracking server (an http(s) tracking URI) the sink sends its requests itself, through
    MLflow's HTTP helper (the same host, credentials and TLS) with MLflow's retries off for
    these requests only: each try is one HTTP request whose timeout is ``request_timeout``.
    ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``..._BACKOFF_FACTOR`` and ``..._TIMEOUT`` keep
    applying to the application's own MLflow requests (its trace export); the sink sets no
    process-wide setting. Failures (no answer, a refused connection, a 5xx, a 429, an
    answer that is not JSON) are retried with backoff, waiting at least a ``Retry-After``
    (at most 8 s): ``1 + max_retries`` requests per result while MLflow keeps failing.
    ``failure_threshold`` failures in a row open a circuit breaker for ``cooldown`` seconds
    (results dropped and counted meanwhile), and "trace not found" (MLflow exports traces
    in the background) is retried for up to ``not_found_wait`` s. The HTTP status of an
    answer decides how it is handled, whatever its body says (a proxy's JSON body may carry
    no MLflow code, or one that contradicts the status): 401, 403, 405, 410, 415 and a 404
    that is not MLflow's "not found" are refused (a key or a route every request would
    meet: fail at once, counted by the breaker); 400, 413 and other 4xx are rejected (fail
    at once, not counted). A retry never stores an assessment twice: each ``emit`` tags its
    assessment with an id (metadata ``ragmetrics.delivery_id``), and after a try that may
    have been stored (no answer, a 5xx, a reply lost on the way back) the sink reads the
    trace and looks for that id before sending again. Up to ``max_concurrency`` results are
    sent at once (each is a round trip); results for the same retrieval and metric go one
    after another, so a score always follows its error. ``close()`` starts no request and
    waits (within its timeout) for those still out, which end by their own timeout.

    Other stores (Databricks, a local database) are written through
    ``mlflow.log_assessment``, under the same retry rules; for Databricks MLflow's own
    retries then run inside each try, and the sink stops waiting after ``request_timeout``.

    Args:
        request_timeout: Timeout of each request, in seconds (to connect, and between two
            reads of its answer); the sink waits one second more for the client to give up.
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
        try:  # MLflow 2 has mlflow.entities, without the assessment classes
            from mlflow.entities import (  # noqa: F401
                AssessmentError,
                AssessmentSource,
                Feedback,
            )
        except ImportError as exc:
            raise ImportError(_MISSING_EXTRA) from exc
        self.request_timeout = number_above_zero("request_timeout", request_timeout)
        self.max_details_chars = whole_number("max_details_chars", max_details_chars, minimum=0)
        self.max_concurrency = whole_number("max_concurrency", max_concurrency)
        self.delivery = GuardedRequests(
            label="MlflowSink",
            request_timeout=self.request_timeout + _GRACE_S,
            max_retries=max_retries,
            backoff=backoff,
            not_found_wait=not_found_wait,
            failure_threshold=failure_threshold,
            cooldown=cooldown,
            concurrency=self.max_concurrency,
        )
        self._lock = threading.Lock()
        self._failures = FailureLog()
        self._errors: OrderedDict[_ErrorKey, str] = OrderedDict()

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
        failure = _failure(result)
        if failure is not None:
            code, message = failure
            return Feedback(
                name=result.metric,
                error=AssessmentError(error_code=code, error_message=message),
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
                "MlflowSink: a retrieval has no MLflow trace (autologging off: call "
                "mlflow.langchain.autolog() before the chain runs; or MLflow's trace sampling, "
                "MLFLOW_TRACE_SAMPLING_RATIO, left its request out; for ainvoke/abatch, "
                "autolog(run_tracer_inline=True); a chain's batch() is never linked); such "
                "results are skipped for MLflow and counted in stats.sinks['MlflowSink'].skipped",
            )
            msg = "no MLflow trace recorded this retrieval"
            raise SinkSkipError(msg)
        trace_id, span_id = link
        key = _error_key(item, trace_id, span_id)
        failed = _failure(result) is not None
        with self._lock:
            replaces = None if failed else self._errors.get(key)
        delivery_id = uuid.uuid4().hex
        feedback = self.feedback(item, overrides=replaces, delivery_id=delivery_id)
        # Built here, not in the retried request: a local error is no failure of the server.
        body = _assessment_body(trace_id, feedback) if _can_send_itself() else None
        logged = self.delivery.call(
            lambda: self._log(trace_id, feedback, body),
            classify=_classify,
            landed=lambda: self._find(trace_id, delivery_id),
            retry_after=retry_after,
        )
        with self._lock:
            if failed:
                self._errors[key] = str(logged.assessment_id)
                while len(self._errors) > _REMEMBERED_ERRORS:
                    self._errors.popitem(last=False)
            else:
                self._errors.pop(key, None)

    @override
    def order_key(self, item: OnlineResult) -> Hashable | None:
        """The retrieval and metric: an error and the score that overrides it stay in order."""
        link = item.links.get(MLFLOW)
        return None if link is None else _error_key(item, *link)

    @override
    def close(self, timeout: float | None = None) -> None:
        """Stop sending at once; wait (within ``timeout``) for the requests still out.

        No request starts after this; one still out ends by its own timeout
        (``request_timeout``), so the wait is at most about that long.
        """
        bound = self.request_timeout + _GRACE_S
        self.delivery.close(bound if timeout is None else max(0.0, min(timeout, bound)))

    def _log(self, trace_id: str, feedback: Feedback, body: Any) -> Any:
        """Store ``feedback``: one request of the sink's, or ``mlflow.log_assessment``.

        ``body`` is the request's JSON, built before the first try (None: this MLflow lacks
        the pieces of the sink's own requests).
        """
        store = None if body is None else _rest_store()
        if store is None:
            import mlflow

            return mlflow.log_assessment(trace_id=trace_id, assessment=feedback)
        return _create_assessment(store, trace_id, body, self.request_timeout)

    def _find(self, trace_id: str, delivery_id: str) -> Any:
        """The assessment an earlier try of this delivery stored, or None."""
        store = _rest_store()
        try:
            if store is None:
                import mlflow

                info = mlflow.MlflowClient().get_trace(trace_id).info  # the server's copy
            else:
                info = _trace_info(store, trace_id, self.request_timeout)
        except Exception as exc:
            if _classify(exc) == "not_found":
                return None
            raise
        for assessment in info.assessments or []:
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
