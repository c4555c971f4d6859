"""A loopback OTLP/HTTP receiver that decodes what the OpenTelemetry exporters send.

Accepts ``POST /v1/logs``, ``/v1/metrics`` and ``/v1/traces`` with protobuf bodies (gzip or
not), decodes them with ``opentelemetry-proto`` and keeps the flattened log records, metric
points and spans. Faults: answer a status (``fail_with = 500``) or hold every request until
the receiver stops (``hold = True``), so tests can prove a dead collector hangs nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests._support.langsmith_stub import decode_body
from tests._support.openai_server import MAX_HOLD_SECONDS, LoopbackHandler, LoopbackServer

__all__ = ["LogRecordSeen", "OtlpReceiver", "PointSeen", "SpanSeen"]


@dataclass(frozen=True)
class LogRecordSeen:
    """One decoded log record."""

    event_name: str
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class PointSeen:
    """One decoded metric data point (histogram: count and sum; counter: value)."""

    metric: str
    attributes: dict[str, Any]
    count: int = 0
    sum: float = 0.0
    value: float = 0.0


@dataclass(frozen=True)
class SpanSeen:
    """One decoded span with its events."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return None if kind is None else getattr(any_value, kind)


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


class _Handler(LoopbackHandler):
    def handle_request(self, method: str) -> None:
        owner = self.server.owner
        if not isinstance(owner, OtlpReceiver):  # pragma: no cover - wiring guard
            raise TypeError(owner)
        raw = self.read_body()
        status = owner.receive(method, self.path, self.headers.get("Content-Encoding"), raw)
        self.send_bytes(status, b"", "application/x-protobuf")


class OtlpReceiver(LoopbackServer):
    """Point ``OTLPLogExporter(endpoint=receiver.url + "/v1/logs")`` (etc.) at it."""

    handler_class: ClassVar[type[LoopbackHandler]] = _Handler

    def __init__(self) -> None:
        super().__init__()
        self.fail_with: int | None = None
        self.hold = False
        self._lock = threading.Lock()
        self._logs: list[LogRecordSeen] = []
        self._points: list[PointSeen] = []
        self._spans: list[SpanSeen] = []
        self.requests: list[str] = []
        self.arrived = threading.Event()
        """Set at each request (tests wait on it instead of sleeping)."""
        self._released = threading.Event()

    def heal(self) -> None:
        """Answer normally from now on and release the requests being held."""
        self.fail_with = None
        self.hold = False
        self._released.set()

    def logs(self) -> list[LogRecordSeen]:
        with self._lock:
            return list(self._logs)

    def points(self, metric: str | None = None) -> list[PointSeen]:
        """Points of the last metrics export (cumulative: the totals so far)."""
        with self._lock:
            return [p for p in self._points if metric is None or p.metric == metric]

    def spans(self) -> list[SpanSeen]:
        with self._lock:
            return list(self._spans)

    def receive(self, method: str, path: str, encoding: str | None, raw: bytes) -> int:
        with self._lock:
            self.requests.append(f"{method} {path}")
        self.arrived.set()
        if self.hold:
            self._released.wait(MAX_HOLD_SECONDS)
            return 503
        if self.fail_with is not None:
            return self.fail_with
        body = decode_body(raw, encoding)
        if path == "/v1/logs":
            self._decode_logs(body)
        elif path == "/v1/metrics":
            self._decode_metrics(body)
        elif path == "/v1/traces":
            self._decode_traces(body)
        else:
            return 404
        return 200

    def _decode_logs(self, body: bytes) -> None:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
        )

        request = ExportLogsServiceRequest.FromString(body)
        found = [
            LogRecordSeen(
                event_name=record.event_name,
                trace_id=record.trace_id.hex(),
                span_id=record.span_id.hex(),
                attributes=_attributes(record.attributes),
            )
            for resource in request.resource_logs
            for scope in resource.scope_logs
            for record in scope.log_records
        ]
        with self._lock:
            self._logs.extend(found)

    def _decode_metrics(self, body: bytes) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )

        request = ExportMetricsServiceRequest.FromString(body)
        found: list[PointSeen] = []
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    data = getattr(metric, kind)
                    for point in data.data_points:
                        attributes = _attributes(point.attributes)
                        if kind == "histogram":
                            found.append(PointSeen(metric.name, attributes, point.count, point.sum))
                        else:
                            value = point.as_int if point.HasField("as_int") else point.as_double
                            found.append(PointSeen(metric.name, attributes, value=value))
        with self._lock:
            self._points = found  # cumulative temporality: the last export holds the totals

    def _decode_traces(self, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        request = ExportTraceServiceRequest.FromString(body)
        found = [
            SpanSeen(
                name=span.name,
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_span_id=span.parent_span_id.hex(),
                events=[(e.name, _attributes(e.attributes)) for e in span.events],
            )
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]
        with self._lock:
            self._spans.extend(found)
