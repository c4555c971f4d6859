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
import math
import re
import threading
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

import httpx
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
from langchain_ragmetrics._options import fraction, number_above_zero, whole_number
from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics.callbacks._stats import FailureLog
from langchain_ragmetrics.callbacks.sinks import BaseSink, escape_unencodable
from langchain_ragmetrics.integrations._otel_attributes import error_type, score_label
from langchain_ragmetrics.metrics._judge import retry_after

if TYPE_CHECKING:
    from phoenix.client import Client

__all__ = ["PhoenixAnswerError", "PhoenixSink", "SpanNotFoundError"]

_MISSING_EXTRA = "PhoenixSink needs the Phoenix client: pip install 'langchain-ragmetrics[phoenix]'"


_GRACE_S = 1.0
"""How much longer than ``request_timeout`` (the HTTP timeout of each request of a client the
sink builds) the sink waits for one: the time for the client to give up and free its thread."""
_NOT_STORED = re.compile(r"Spans? with IDs? .+ do(?:es)? not exist\.?", re.DOTALL)
"""Phoenix's own answer (plain text) for a span it has not stored (yet): "Spans with IDs ...
do not exist." Any other 404 (a proxy's page, a gateway's JSON that echoes the path) is a
route."""


class PhoenixAnswerError(RuntimeError):
    """Phoenix (or what answers at its URL) gave an answer the sink cannot take as stored."""


class SpanNotFoundError(LookupError):
    """Phoenix still had no span of this id when ``not_found_wait`` ran out."""


def _classify(exc: Exception) -> Failure:
    """How a Phoenix request's error is handled: by its HTTP status, as for LangSmith.

    A 404 is "not stored yet" only when Phoenix itself says so (:data:`_NOT_STORED`); an
    error raised while the client built the request (no status) is rejected, not counted.
    """
    if isinstance(exc, LOCAL_ERRORS) or _built_badly(exc):
        return "rejected"
    status = http_status(exc)
    if status == 404 and not _names_a_span(exc):
        return "refused"  # no such route (a wrong base URL or path): every request meets it
    return classify_status(status)


def _built_badly(exc: Exception) -> bool:
    """Whether ``exc`` is the client's ValueError for a request it could not build.

    E.g. "Out of range float values are not JSON compliant": the server never saw it. Not
    an answer's JSON that does not parse (a ``JSONDecodeError``, a server's doing).
    """
    return (
        isinstance(exc, ValueError)
        and not isinstance(exc, json.JSONDecodeError)
        and http_status(exc) is None
    )


def _detail(exc: Exception) -> str | None:
    """What the error answer behind ``exc`` says: its text, or a JSON body's ``detail``.

    Phoenix answers its errors as plain text; a JSON ``{"detail": ...}`` (FastAPI's shape)
    is read too. None without an answer.
    """
    try:
        text = str(exc.response.text)  # type: ignore[attr-defined]
    except Exception:  # no answer to read
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()
    detail = body.get("detail") if isinstance(body, dict) else None
    return detail.strip() if isinstance(detail, str) else text.strip()


def _names_a_span(exc: Exception) -> bool:
    """Whether a 404 is Phoenix's "span not stored yet" ("Spans with IDs ... do not exist")."""
    detail = _detail(exc)
    return detail is not None and _NOT_STORED.fullmatch(detail) is not None


def _public_url(url: httpx.URL | str) -> str:
    """``url`` without credentials, query or fragment: safe for a log line."""
    plain = httpx.URL(url).copy_with(username=None, password=None, query=None, fragment=None)
    return str(plain).rstrip("/")


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
    name and span). A score that is not a finite number (a custom metric's infinity) is
    sent as such an error annotation: no JSON body holds it.

    Configured as Phoenix's own clients are: without arguments the client reads Phoenix's
    environment variables (``PHOENIX_ENDPOINT``, ``PHOENIX_COLLECTOR_ENDPOINT``,
    ``PHOENIX_BASE_URL``, ``PHOENIX_API_KEY``, ``PHOENIX_CLIENT_HEADERS``); ``endpoint``,
    ``api_key`` and ``headers`` override them, or pass a ``client``.

    A retrieval that OpenInference did not trace, or whose trace its sampler dropped (never
    exported), is skipped for this sink (counted in ``stats.sinks["PhoenixSink"].skipped``,
    one warning). Delivery is bounded, retried (waiting at least a 429's or 503's
    ``Retry-After``, at most 8 s) and behind a circuit breaker as for the MLflow sink; errors
    and the breaker's warnings name Phoenix's base URL (without credentials). Phoenix answers
    "not found" (``Spans with IDs ... do not exist``) for a span it has not stored yet (spans
    are exported in the background): that is retried for up to ``not_found_wait`` seconds,
    then fails with :class:`SpanNotFoundError` naming the span. Any other 404 (a proxy's
    page: a wrong base URL or path) fails at once and counts toward the breaker. A 200
    without the stored annotation's id is an error (:class:`PhoenixAnswerError`), not a
    delivery. A retry of an annotation Phoenix already stored (its
    reply lost on the way back) replaces it: Phoenix keeps one annotation per span and name.
    Up to ``max_concurrency`` annotations are sent at once (each is a round trip); those of
    the same span and metric go one after another, so a score always replaces its error.

    Args:
        endpoint: Phoenix's base URL (e.g. ``http://127.0.0.1:6006``).
        api_key: Phoenix API key.
        headers: Extra HTTP headers.
        client: A ``phoenix.client.Client`` to use instead of building one.
        pass_threshold: When set, scored results get the label ``pass`` or ``fail``.
        request_timeout: Timeout of each request, in seconds (the HTTP timeout of the client
            the sink builds; the sink waits one second more for the client to give up).
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
        self.request_timeout = number_above_zero("request_timeout", request_timeout)
        self._api_key = api_key
        self._headers = dict(headers) if headers else None
        self._client = client
        self._owns_client = client is None
        self.max_concurrency = whole_number("max_concurrency", max_concurrency)
        self.delivery = GuardedRequests(
            label="PhoenixSink",
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
        self.where = "" if client is None else self._locate(client)
        """Phoenix's base URL without credentials, once known (named in errors and warnings)."""

    def _locate(self, client: Client) -> str:
        """``client``'s base URL, made safe to log; the breaker's warnings name it too.

        Read from the client's httpx client (a private attribute): a client without one is
        named as "its client".
        """
        base = getattr(getattr(client, "_client", None), "base_url", None)
        if base is None:
            return "its client"
        where = _public_url(base)
        self.delivery.label = f"PhoenixSink ({where})"
        return where

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

                client = Client(
                    base_url=self.endpoint, api_key=self._api_key, headers=self._headers
                )
                # Phoenix's client reads for up to 30 s: each request gets request_timeout.
                client._client.timeout = httpx.Timeout(self.request_timeout)
                self.where = self._locate(client)
                self._client = client
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
            "details": result.details,
            "library": "langchain-ragmetrics",
        }
        error = result.error
        score = result.score
        if error is None and score is not None and not math.isfinite(score):
            # A custom metric's bug; as a number no JSON body holds it (NaN is "no score").
            error = f"ValueError: the metric's score is not a finite number ({score!r})"
        # Text from models and documents may hold lone surrogates, which no JSON body takes.
        annotation: dict[str, Any]
        if error is not None:
            metadata["error_type"] = error_type(error)
            annotation = {
                "span_id": span_id,
                "annotation_name": result.metric,
                "annotator_kind": "LLM",
                "label": "error",
                "explanation": error or "failed",
                "metadata": _plain(metadata),
            }
        else:
            annotation = {
                "span_id": span_id,
                "annotation_name": result.metric,
                "annotator_kind": "LLM",
                "label": score_label(result, self.pass_threshold),
                "score": score,
                "explanation": result.reason or None,
                "metadata": _plain(metadata),
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
                "with openinference-instrumentation-langchain before the chain runs), or its "
                "trace was not sampled (never exported); such "
                "results are skipped for Phoenix and counted in "
                "stats.sinks['PhoenixSink'].skipped",
            )
            msg = "no OpenInference span for this retrieval"
            raise SinkSkipError(msg)
        kwargs = self.annotation(item)
        try:
            self.delivery.call(
                lambda: self._send(kwargs), classify=_classify, retry_after=retry_after
            )
        except httpx.HTTPStatusError as exc:
            if _classify(exc) != "not_found":
                raise
            wait = self.delivery.not_found_wait
            msg = (
                f"PhoenixSink: Phoenix at {self.where} still has no span {kwargs['span_id']} "
                f"after not_found_wait={wait:g} s (Phoenix: {_detail(exc)!r}); was it exported "
                "to this Phoenix, and to the project it reads?"
            )
            raise SpanNotFoundError(msg) from exc

    def _send(self, kwargs: dict[str, Any]) -> Any:
        """One annotation request; an error without an answer names Phoenix's URL.

        Raises:
            TimeoutError: No answer within ``request_timeout``.
            ConnectionError: No connection (or another transport failure).
            PhoenixAnswerError: A 200 without the stored annotation's id (nothing stored).
            httpx.HTTPStatusError: Any other answer but a 200.
        """
        client = self.client
        try:
            inserted = client.spans.add_span_annotation(**kwargs, sync=True)
        except httpx.TimeoutException as exc:
            msg = f"PhoenixSink: no answer from {self.where} within {self.request_timeout:g} s"
            raise TimeoutError(msg) from exc
        except httpx.TransportError as exc:
            msg = f"PhoenixSink: could not reach {self.where}: {type(exc).__name__}: {exc}"
            raise ConnectionError(msg) from exc
        except KeyError as exc:  # a 200 whose JSON has no "data": not Phoenix's answer
            msg = (
                f"PhoenixSink: {self.where} answered 200 whose JSON has no {exc} key; is it "
                "Phoenix's API?"
            )
            raise PhoenixAnswerError(msg) from exc
        if not isinstance(inserted, Mapping) or not inserted.get("id"):
            msg = (
                f"PhoenixSink: {self.where} answered 200 without the annotation's id (got "
                f"{inserted!r}): nothing is known to be stored; is it Phoenix's API?"
            )
            raise PhoenixAnswerError(msg)
        return inserted

    @override
    def order_key(self, item: OnlineResult) -> Hashable | None:
        """(span, metric): Phoenix keeps one annotation of each, the last one sent."""
        link = item.links.get(OPENINFERENCE)
        return None if link is None else (link[1], item.result.metric)

    @override
    def close(self, timeout: float | None = None) -> None:
        self.delivery.close()
