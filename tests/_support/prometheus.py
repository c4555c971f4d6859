"""The Prometheus recipe of the docs as a test helper: a meter provider served on ``/metrics``."""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, start_http_server

__all__ = ["PrometheusEndpoint", "prometheus_endpoint"]


@dataclass
class PrometheusEndpoint:
    """A meter provider whose metrics a loopback HTTP server serves at :attr:`url`."""

    meter_provider: MeterProvider
    url: str

    def scrape(self) -> str:
        """The exposition text a Prometheus server would read now."""
        with urllib.request.urlopen(self.url, timeout=10) as response:
            return str(response.read().decode())


@contextlib.contextmanager
def prometheus_endpoint() -> Iterator[PrometheusEndpoint]:
    """Serve a fresh registry on 127.0.0.1 (a free port); shut everything down after."""
    registry = CollectorRegistry()
    meter_provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield PrometheusEndpoint(meter_provider, f"http://127.0.0.1:{server.server_port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        meter_provider.shutdown()
