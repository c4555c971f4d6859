"""What reading the trace links costs on the caller's thread, per retriever start or end.

Prints microseconds per ``trace_links`` call: with no tracer loaded, and (when MLflow is
installed) inside an MLflow span, as the handler sees it under ``mlflow.langchain.autolog()``.

Run: python bench/trace_links.py   (in a venv with the [mlflow] extra for the second figure)
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid

from langchain_ragmetrics._links import trace_links

N = 20_000


def per_call_us() -> float:
    run_id = uuid.uuid4()
    started = time.perf_counter()
    for _ in range(N):
        trace_links(run_id)
    return (time.perf_counter() - started) / N * 1e6


print(f"no tracer loaded: {per_call_us():.2f} us per read ({N} reads)")
try:
    import mlflow
    import mlflow.langchain.langchain_tracer  # what autologging imports
except ImportError:
    sys.exit(0)
with tempfile.TemporaryDirectory() as tmp:
    mlflow.set_tracking_uri(f"sqlite:///{tmp}/bench.db")
    with mlflow.start_span("request", span_type="RETRIEVER"):
        assert trace_links(uuid.uuid4())["mlflow"][1] is not None
        print(f"inside an MLflow span: {per_call_us():.2f} us per read ({N} reads)")
