"""The Batch API of one judge's endpoint (``/v1/files``, ``/v1/batches``), via its own client."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._errors import BatchError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from langchain_ragmetrics.evaluation._batch_requests import BatchJudge
    from langchain_ragmetrics.evaluation._batch_state import BatchRecord

__all__ = ["BatchService"]

_SDK_RETRIES = 2  # the file and batch requests are idempotent reads or guarded by the state file
_SCAN_SLACK_S = 300  # clock skew allowed when looking for a lost upload or batch


class BatchService:
    """Uploads, batches and downloads for one judge, with the judge's own openai client.

    The client keeps the judge's base URL, key, organisation and headers; it gets a longer
    timeout (uploads can be large) and the SDK's retries for the file and batch requests.
    """

    def __init__(self, judge: BatchJudge, *, timeout: float) -> None:
        """Wrap the root openai client of ``judge``."""
        root: Any = getattr(judge.llm, "root_client", None)
        self.label = judge.label
        self.client: Any = root.with_options(timeout=timeout, max_retries=_SDK_RETRIES)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        import openai

        try:
            return fn()
        except openai.APIError as exc:
            msg = f"the Batch API of {self.label} failed to {what}: {type(exc).__name__}: {exc}"
            raise BatchError(msg) from exc

    def upload(self, filename: str, content: bytes) -> str:
        """Upload a batch input file; its id."""
        created = self._call(
            f"take the file {filename}",
            lambda: self.client.files.create(
                file=(filename, content, "application/jsonl"), purpose="batch"
            ),
        )
        return str(created.id)

    def find_file(self, filename: str, since: float) -> str | None:
        """The id of a batch file named ``filename`` uploaded after ``since`` (a lost upload)."""

        def scan() -> str | None:
            for item in self.client.files.list(purpose="batch", order="desc"):
                if item.created_at < since - _SCAN_SLACK_S:
                    return None  # newest first: older ones cannot be ours
                if item.filename == filename:
                    return str(item.id)
            return None

        found: str | None = self._call("list its files", scan)
        return found

    def create(self, file_id: str, *, window: str, metadata: dict[str, str]) -> Any:
        """Create a batch of the uploaded file."""
        return self._call(
            f"create a batch of {file_id}",
            lambda: self.client.batches.create(
                input_file_id=file_id,
                endpoint="/v1/chat/completions",
                completion_window=window,
                metadata=metadata,
            ),
        )

    def find_batch(self, metadata: dict[str, str], since: float) -> Any:
        """A batch created after ``since`` with this metadata (created by a killed run), or None."""

        def scan() -> Any:
            for item in self.client.batches.list(limit=100):
                if item.created_at < since - _SCAN_SLACK_S:
                    return None  # newest first: older ones cannot be ours
                mine = item.metadata or {}
                if all(mine.get(k) == v for k, v in metadata.items()):
                    return item
            return None

        return self._call("list its batches", scan)

    def retrieve(self, batch_id: str) -> Any:
        """The batch as the service sees it now."""
        return self._call(f"read batch {batch_id}", lambda: self.client.batches.retrieve(batch_id))

    def cancel(self, batch_id: str) -> Any:
        """Ask the service to cancel a batch."""
        return self._call(f"cancel batch {batch_id}", lambda: self.client.batches.cancel(batch_id))

    def lines(self, file_id: str | None) -> Iterator[dict[str, Any]]:
        """The JSON objects of an output or error file (lines that are not objects skipped)."""
        if file_id is None:
            return
        response = self._call(f"download {file_id}", lambda: self.client.files.content(file_id))
        for raw in response.content.splitlines():
            try:
                item = json.loads(raw)
            except ValueError:  # a broken line names no request: that request counts as missing
                continue
            if isinstance(item, dict):
                yield item


def update_record(record: BatchRecord, batch: Any) -> bool:
    """Copy a batch's id, status, files and counts into its record; True when any changed."""
    counts = getattr(batch, "request_counts", None)
    errors = getattr(getattr(batch, "errors", None), "data", None) or []
    new = {
        "batch_id": str(batch.id),
        "status": str(batch.status),
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "total": int(getattr(counts, "total", 0) or 0),
        "completed": int(getattr(counts, "completed", 0) or 0),
        "failed": int(getattr(counts, "failed", 0) or 0),
        "errors": [str(getattr(e, "message", None) or e) for e in errors],
    }
    changed = any(getattr(record, k) != v for k, v in new.items())
    for name, value in new.items():
        setattr(record, name, value)
    return changed
