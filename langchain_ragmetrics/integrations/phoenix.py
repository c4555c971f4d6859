"""Online results as Arize Phoenix span annotations on an OpenInference-traced LangChain app.

Extra ``[phoenix]``. Instrument the app with OpenInference
(``LangChainInstrumentor().instrument(tracer_provider=...)``, or ``phoenix.otel.register``):
each result becomes an annotation (score, label, explanation, annotator kind ``LLM``) on the
retriever span of the request that retrieved, where Phoenix shows it.

Example::

    from openinference.instrumentation.langchain import LangChainInstrumentor
    from phoenix.otel import register

    from langchain_ragmetrics import RagMetricsCallbackHandler
    from langchain_ragmetrics.integrations.phoenix import PhoenixSink

    LangChainInstrumentor().instrument(tracer_provider=register())
    handler = RagMetricsCallbackHandler(sinks=[PhoenixSink()])
    chain.invoke("question", config={"callbacks": [handler]})
"""

from __future__ import annotations

import json
import threading
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from langchain_ragmetrics._errors import SinkSkipError
from langchain_ragmetrics._guarded import (
    LOCAL_ERRORS,
    Failure,
    GuardedRequests,
    classify_status,
    http_status,
)
from langchain_ragmetrics._links import OPENINFERENCE
from langchain_ragmetrics._options import fraction, whole_number
from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics.callbacks._stats import FailureLog
from langchain_ragmetrics.callbacks.sinks import BaseSink, escape_unencodable
from langchain_ragmetrics.integrations._otel_attributes import error_type, score_label

if TYPE_CHECKING:
    from phoenix.client import Client

__all__ = ["PhoenixSink"]

_MISSING_EXTRA = "PhoenixSink needs the Phoenix client: pip install 'langchain-ragmetrics[phoenix]'"


def _classify(exc: Exception) -> Failure:
    """How a Phoenix request's error is handled: by its HTTP status, as for LangSmith."""
    if isinstance(exc, LOCAL_ERRORS):
        return "rejected"
    status = http_status(exc)
    if status == 404 and not _names_a_span(exc):
        return "refused"  # no such route (a wrong base URL or path): every request meets it
    return classify_status(status)


def _names_a_span(exc: Exception) -> bool:
    """Whether a 404 is Phoenix's "span not stored yet" ("Spans with IDs ... do not exist")."""
    try:
        text = str(exc.response.text)  # type: ignore[attr-defined]
    except Exception:  # no body to read: taken as "not stored yet", as before
        return True
    return "span" in text.lower()


def _plain(value: Any) -> Any:
    """``value`` as JSON Phoenix takes: objects as text, NaN and infinities as None."""
    return json.loads(json.dumps(value, default=str), parse_constant=lambda _name: None)


class PhoenixSink(BaseSink):
    """Annotates the retriever span of each scored request in Phoenix.

    Each result becomes one span annotation: ``name`` = the metric key, ``score``,
    ``label`` (``pass``/``fail`` against ``pass_threshold`` when set), ``explanation`` =
    the judge's reason, ``annotator_kind="LLM"``, and ``metadata`` with the judge model,
    its usage, the retriever and its LangChain run id, and the verdict details. A failed
    result is an annotation with label ``error`` and the error as explanation; a later
    success for the same span and metric replaces it (Phoenix keeps one annotation per
    name and span).

    Configured as Phoenix's own clients are: without arguments the client reads Phoenix's
    environment variables (``PHOENIX_ENDPOINT``, ``PHOENIX_COLLECTOR_ENDPOINT``,
    ``PHOENIX_BASE_URL``, ``PHOENIX_API_KEY``, ``PHOENIX_CLIENT_HEADERS``); ``endpoint``,
    ``api_key`` and ``headers`` override them, or pass a ``client``.

    A retrieval that OpenInference did not trace is skipped for this sink (counted in
    ``stats.sinks["PhoenixSink"].skipped``, one warning). Delivery is bounded, retried
    and behind a circuit breaker as for the MLflow sink. Phoenix answers "not found" for a
    span it has not stored yet (spans are exported in the background): that is retried for
    up to ``not_found_wait`` seconds. A retry of an annotation Phoenix already stored (its
    reply lost on the way back) replaces it: Phoenix keeps one annotation per span and name.
    Up to ``max_concurrency`` annotations are sent at once (each is a round trip); those of
    the same span and metric go one after another, so a score always replaces its error.

    Args:
        endpoint: Phoenix's base URL (e.g. ``http://127.0.0.1:6006``).
        api_key: Phoenix API key.
        headers: Extra HTTP headers.
        client: A ``phoenix.client.Client`` to use instead of building one.
        pass_threshold: When set, scored results get the label ``pass`` or ``fail``.
        request_timeout: Seconds the sink waits for one request.
        max_retries: Retries of a failed request.
        backoff: First retry delay in seconds (doubled each retry, at most 8 s).
        not_found_wait: Seconds an annotation for a span not stored yet is retried.
        failure_threshold: Failed requests in a row that open the breaker.
        cooldown: Seconds the breaker stays open.
        max_concurrency: Annotations sent at once (each on a thread of the sink's outbox).
    """

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        client: Client | None = None,
        pass_threshold: float | None = None,
        request_timeout: float = 10.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        not_found_wait: float = 30.0,
        failure_threshold: int = 5,
        cooldown: float = 30.0,
        max_concurrency: int = 8,
    ) -> None:
        try:
            import phoenix.client  # noqa: F401
        except ImportError as exc:  # pragma: no cover - exercised only without the extra
            raise ImportError(_MISSING_EXTRA) from exc
        if pass_threshold is not None:
            pass_threshold = fraction("pass_threshold", pass_threshold)
        self.endpoint = endpoint
        self.pass_threshold = pass_threshold
        self._api_key = api_key
        self._headers = dict(headers) if headers else None
        self._client = client
        self._owns_client = client is None
        self.max_concurrency = whole_number("max_concurrency", max_concurrency)
        self.delivery = GuardedRequests(
            label="PhoenixSink",
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

    @override
    def after_fork(self) -> None:
        """Request threads, locks and breaker of its own; a client it built is built anew.

        The parent's connections are not shared; a client the sink was given is kept.
        """
        self.delivery.after_fork()
        self._lock = threading.Lock()
        self._failures = FailureLog()
        if self._owns_client:
            self._client = None

    @property
    def client(self) -> Client:
        """The Phoenix client (built on first use, from the options or the environment)."""
        with self._lock:
            if self._client is None:
                from phoenix.client import Client

                self._client = Client(
                    base_url=self.endpoint, api_key=self._api_key, headers=self._headers
                )
            return self._client

    def annotation(self, item: OnlineResult) -> dict[str, Any]:
        """The ``add_span_annotation`` arguments for a result with an OpenInference span."""
        result = item.result
        _, span_id = item.links[OPENINFERENCE]
        usage = result.usage
        metadata: dict[str, Any] = {
            "judge": result.judge,
            "retriever": item.retriever,
            "run_id": str(item.run_id),
            "judge_calls": usage.judge_calls,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "latency_s": result.latency_s,
            "details": _plain(result.details),
            "library": "langchain-ragmetrics",
        }
        # Text from models and documents may hold lone surrogates, which no JSON body takes.
        annotation: dict[str, Any]
        if result.failed:
            metadata["error_type"] = error_type(result.error)
            annotation = {
                "span_id": span_id,
                "annotation_name": result.metric,
                "annotator_kind": "LLM",
                "label": "error",
                "explanation": result.error or "failed",
                "metadata": metadata,
            }
        else:
            annotation = {
                "span_id": span_id,
                "annotation_name": result.metric,
                "annotator_kind": "LLM",
                "label": score_label(result, self.pass_threshold),
                "score": result.score,
                "explanation": result.reason or None,
                "metadata": metadata,
            }
        escaped: dict[str, Any] = escape_unencodable(annotation)
        return escaped

    @override
    def emit(self, item: OnlineResult) -> None:
        if item.result.skipped:
            msg = "nothing to assess"
            raise SinkSkipError(msg)
        link = item.links.get(OPENINFERENCE)
        if link is None or link[1] is None:
            self._failures.report(
                "no-link",
                "PhoenixSink: a retrieval has no OpenInference span (instrument LangChain "
                "with openinference-instrumentation-langchain before the chain runs); such "
                "results are skipped for Phoenix and counted in "
                "stats.sinks['PhoenixSink'].skipped",
            )
            msg = "no OpenInference span for this retrieval"
            raise SinkSkipError(msg)
        kwargs = self.annotation(item)
        self.delivery.call(
            lambda: self.client.spans.add_span_annotation(**kwargs, sync=True),
            classify=_classify,
        )

    @override
    def order_key(self, item: OnlineResult) -> Hashable | None:
        """(span, metric): Phoenix keeps one annotation of each, the last one sent."""
        link = item.links.get(OPENINFERENCE)
        return None if link is None else (link[1], item.result.metric)

    @override
    def close(self, timeout: float | None = None) -> None:
        self.delivery.close()
