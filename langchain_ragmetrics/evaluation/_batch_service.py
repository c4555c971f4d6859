"""The Batch API of one judge's endpoint (``/v1/files``, ``/v1/batches``), via its own client."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._errors import BatchError
from langchain_ragmetrics.metrics._judge import RetryPolicy, is_transient

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from langchain_ragmetrics.evaluation._batch_requests import BatchJudge
    from langchain_ragmetrics.evaluation._batch_state import BatchRecord

__all__ = ["BatchService", "transient_failure"]

_SDK_RETRIES = 2  # reads (status, lists, downloads) and cancels: safe to send again
_SCAN_SLACK_S = 300  # clock skew allowed when looking for a lost upload or batch
_CREATE_RETRY = RetryPolicy(max_retries=4, initial_backoff=2.0, max_backoff=60.0)
"""Our own retries of an upload or a batch creation (the SDK's would create a second one)."""


def transient_failure(error: BatchError) -> bool:
    """True when ``error`` came from a failure worth trying again (5xx, 429, timeout, network)."""
    cause = error.__cause__
    return cause is not None and is_transient(cause)


def _may_have_landed(exc: BaseException) -> bool:
    """Whether a failed POST may still have created its file or batch at the service.

    A 429 was refused before anything was made; a timeout, a lost connection, a 5xx or a 409
    may come after the service made it (only its answer was lost).
    """
    return is_transient(exc) and getattr(exc, "status_code", None) != 429


class BatchService:
    """Uploads, batches and downloads for one judge, with the judge's own openai client.

    The client keeps the judge's base URL, key, organisation and headers; it gets a longer
    timeout (uploads can be large). Reads and cancels keep the SDK's retries; an upload or
    a batch creation is sent without them, since the SDK would repeat a POST whose answer
    was lost and pay for a second batch: :meth:`upload` and :meth:`create` look the lost
    one up instead and retry only when it is not there.
    """

    def __init__(
        self,
        judge: BatchJudge,
        *,
        timeout: float,
        since: float,
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        """Wrap the root openai client of ``judge``.

        ``since`` bounds the look-ups of lost files and batches (the job's start); ``pause``
        sleeps out a backoff (the run's, which Ctrl-C or a cancelled wait cuts short).
        """
        root: Any = getattr(judge.llm, "root_client", None)
        self.label = judge.label
        self.since = since
        self.pause = pause
        self.client: Any = root.with_options(timeout=timeout, max_retries=_SDK_RETRIES)
        self.writer: Any = root.with_options(timeout=timeout, max_retries=0)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        import openai

        try:
            return fn()
        except openai.APIError as exc:
            msg = f"the Batch API of {self.label} failed to {what}: {type(exc).__name__}: {exc}"
            raise BatchError(msg) from exc

    def _create_once(self, what: str, send: Callable[[], Any], find: Callable[[], Any]) -> Any:
        """What ``send`` creates, or what ``find`` finds after a failure that may have landed.

        ``send`` goes out without the SDK's retries. A 429, and a lost POST that ``find`` does
        not see, are sent again after a backoff, at most ``_CREATE_RETRY.max_retries`` times;
        any other failure raises at once.

        Raises:
            BatchError: The service refused, or kept failing (the cause and attempts named).
        """
        import openai

        attempt = 0
        while True:
            try:
                return send()
            except openai.APIError as exc:
                if not is_transient(exc) or attempt >= _CREATE_RETRY.max_retries:
                    msg = f"the Batch API of {self.label} failed to {what}: {type(exc).__name__}"
                    tries = f" (after {attempt + 1} attempts)" if attempt else ""
                    raise BatchError(f"{msg}: {exc}{tries}") from exc
                if _may_have_landed(exc):
                    found = find()
                    if found is not None:
                        return found
                self.pause(_CREATE_RETRY.delay(attempt, exc))
                attempt += 1

    def upload(self, filename: str, content: bytes) -> str:
        """Upload a batch input file; its id (a lost upload is found by its name, not resent)."""
        created = self._create_once(
            f"take the file {filename}",
            lambda: self.writer.files.create(
                file=(filename, content, "application/jsonl"), purpose="batch"
            ),
            lambda: self.find_file(filename, self.since),
        )
        return str(created) if isinstance(created, str) else str(created.id)

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
        """Create a batch of the uploaded file (a lost creation is found by its metadata)."""
        return self._create_once(
            f"create a batch of {file_id}",
            lambda: self.writer.batches.create(
                input_file_id=file_id,
                endpoint="/v1/chat/completions",
                completion_window=window,
                metadata=metadata,
            ),
            lambda: self.find_batch(metadata, self.since),
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
