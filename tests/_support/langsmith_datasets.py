"""``LangSmithStub`` plus the dataset and example endpoints of ``langsmith.evaluate``.

With it the real SDK can create a dataset, upload examples and run an experiment on the
dataset by name (``langsmith.evaluate(target, data="my-dataset", ...)``), all on 127.0.0.1.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
import threading
import uuid
from typing import Any

from tests._support.langsmith_stub import LangSmithStub, StubRequest

__all__ = ["LangSmithDatasetStub"]

_UUID = r"[0-9a-fA-F-]{32,36}"


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


class LangSmithDatasetStub(LangSmithStub):
    """A LangSmith stub that also stores datasets and their examples in memory."""

    def __init__(self) -> None:
        """Create an unstarted stub with no datasets."""
        super().__init__()
        self._data_lock = threading.Lock()
        self._datasets: dict[str, dict[str, Any]] = {}
        self._examples: dict[str, list[dict[str, Any]]] = {}

    def info(self) -> dict[str, Any]:
        """Advertise JSON example uploads (``/examples/bulk``) instead of multipart."""
        info = super().info()
        info["instance_flags"]["dataset_examples_multipart_enabled"] = False
        return info

    def datasets(self) -> list[dict[str, Any]]:
        """Datasets created so far."""
        with self._data_lock:
            return copy.deepcopy(list(self._datasets.values()))

    def examples(self, dataset_id: str) -> list[dict[str, Any]]:
        """Examples of one dataset, in upload order."""
        with self._data_lock:
            return copy.deepcopy(self._examples.get(str(dataset_id), []))

    def _route(self, req: StubRequest) -> tuple[int, object]:
        path, method = req.path, req.method
        if method == "POST" and path == "/datasets":
            return self._create_dataset(req)
        if method == "GET" and path == "/datasets":
            return self._list_datasets(req)
        match = re.fullmatch(rf"/datasets/(?P<id>{_UUID})", path)
        if method == "GET" and match:
            return self._read_dataset(match["id"])
        if method == "POST" and path == "/examples/bulk":
            return self._create_examples(req)
        if method == "GET" and path == "/examples":
            return self._list_examples(req)
        return super()._route(req)

    def _create_dataset(self, req: StubRequest) -> tuple[int, object]:
        body = req.body if isinstance(req.body, dict) else {}
        name = str(body.get("name") or "")
        with self._data_lock:
            if any(d["name"] == name for d in self._datasets.values()):
                return 409, {"detail": f"dataset {name!r} already exists"}
            dataset = {
                "id": str(body.get("id") or uuid.uuid4()),
                "name": name,
                "description": body.get("description"),
                "data_type": body.get("data_type") or "kv",
                "created_at": _now(),
                "modified_at": _now(),
                "example_count": 0,
            }
            self._datasets[dataset["id"]] = dataset
            self._examples[dataset["id"]] = []
            return 200, copy.deepcopy(dataset)

    def _list_datasets(self, req: StubRequest) -> tuple[int, object]:
        names = set(req.query.get("name", []))
        with self._data_lock:
            found = [d for d in self._datasets.values() if not names or d["name"] in names]
            return 200, copy.deepcopy(found)

    def _read_dataset(self, dataset_id: str) -> tuple[int, object]:
        with self._data_lock:
            dataset = self._datasets.get(dataset_id)
            if dataset is None:
                return 404, {"detail": f"dataset {dataset_id} not found"}
            return 200, copy.deepcopy(dataset)

    def _create_examples(self, req: StubRequest) -> tuple[int, object]:
        rows = req.body if isinstance(req.body, list) else []
        created = []
        with self._data_lock:
            for row in rows:
                dataset_id = str(row.get("dataset_id"))
                if dataset_id not in self._datasets:
                    return 404, {"detail": f"dataset {dataset_id} not found"}
                example = {
                    "id": str(row.get("id") or uuid.uuid4()),
                    "dataset_id": dataset_id,
                    "inputs": row.get("inputs") or {},
                    "outputs": row.get("outputs") or row.get("reference_outputs"),
                    "metadata": row.get("metadata"),
                    "created_at": _now(),
                    "modified_at": _now(),
                }
                self._examples[dataset_id].append(example)
                self._datasets[dataset_id]["example_count"] += 1
                created.append(copy.deepcopy(example))
        return 200, created

    def _list_examples(self, req: StubRequest) -> tuple[int, object]:
        datasets = req.query.get("dataset", [])
        offset = int(req.query.get("offset", ["0"])[0])
        limit = int(req.query.get("limit", ["100"])[0])
        with self._data_lock:
            found = [e for d in datasets for e in self._examples.get(d, [])]
            return 200, copy.deepcopy(found[offset : offset + limit])
