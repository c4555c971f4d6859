"""The state file of a Batch API job: batch ids and the ``custom_id`` map, kept across runs.

Written before each upload and after each id the service hands back, so a run killed at any
point (Ctrl-C, a crash, a reboot) leaves enough behind for the same command to find the file
it uploaded and the batch it created instead of paying for them twice. The directory is
created private (0700) and the files are written 0600: they name the judge's endpoint and
every request of the job. A lock file beside the state (``fcntl.flock``, POSIX only; skipped
where there is no ``fcntl``) keeps a second run of the same job from uploading it again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from langchain_ragmetrics._errors import BatchError
from langchain_ragmetrics._files import exclusive_lock

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ["TERMINAL", "BatchRecord", "JobState", "RequestRef", "job_key", "make_private_dir"]

TERMINAL = frozenset({"completed", "expired", "cancelled", "failed"})
"""Batch statuses after which nothing changes any more."""
_FORMAT = 1


def job_key(parts: Iterable[tuple[str, str]]) -> str:
    """A stable name for a job: a digest of every ``(custom_id, body digest)`` it plans.

    The same dataset, metrics, prompts and judge give the same key, whatever the verdict
    cache holds, so a re-run finds the job even after part of it was cached.
    """
    text = json.dumps(sorted(parts), separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def make_private_dir(directory: Path) -> None:
    """Create the state directory readable by its owner only (an existing one is left as is).

    Raises:
        BatchError: The directory cannot be created (named in the message).
    """
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"cannot create the batch job directory {directory}: {exc}"
        raise BatchError(msg) from exc


class RequestRef(BaseModel):
    """Which job a ``custom_id`` answers: row, metric column and call of the metric's plan."""

    model_config = ConfigDict(extra="forbid")

    row: int
    """0-based position of the sample."""
    metric: str
    """The metric column."""
    call: int
    """Index of the call in the metric's plan."""


class BatchRecord(BaseModel):
    """One input file and the batch made of it."""

    model_config = ConfigDict(extra="forbid")

    part: int
    """Sequence number of the batch within the job (also sent as batch metadata)."""
    attempt: int
    """1 for a first submission, 2 and more for follow-ups."""
    judge: int
    """Index of the judge (endpoint) the batch goes to."""
    filename: str
    """Name of the uploaded file (unique per job and part: how a lost upload is found)."""
    custom_ids: list[str]
    """The requests of the file, in order."""
    file_id: str | None = None
    """The uploaded file's id, once the service gave it."""
    batch_id: str | None = None
    """The batch's id, once the service gave it."""
    status: str | None = None
    """The status last seen."""
    output_file_id: str | None = None
    """File of the answers (when the batch ended)."""
    error_file_id: str | None = None
    """File of the failed requests (when the batch ended)."""
    total: int = 0
    """Request counts last seen: total."""
    completed: int = 0
    """Request counts last seen: completed."""
    failed: int = 0
    """Request counts last seen: failed."""
    errors: list[str] = Field(default_factory=list)
    """Why the service failed the whole batch (``status == "failed"``)."""
    reported: bool = False
    """True once a run reported this batch as expired or cancelled: a later run resubmits
    what it left unanswered."""

    @property
    def terminal(self) -> bool:
        """True when the batch has ended (completed, expired, cancelled or failed)."""
        return self.status in TERMINAL


class JobState(BaseModel):
    """Everything a later run needs to pick a job up."""

    model_config = ConfigDict(extra="forbid")

    format: int = _FORMAT
    """Layout version of the state file."""
    key: str
    """The job key (see :func:`job_key`)."""
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    """When the job was first submitted."""
    endpoints: list[str] = Field(default_factory=list)
    """Base URL and model of each judge, by judge index (for the reader of the file)."""
    requests: dict[str, RequestRef] = Field(default_factory=dict)
    """The ``custom_id`` map: every request the job sends."""
    batches: list[BatchRecord] = Field(default_factory=list)
    """Every batch of the job, in submission order."""

    @staticmethod
    def path(directory: Path, key: str) -> Path:
        """The state file of job ``key`` in ``directory``."""
        return directory / f"{key}.json"

    @classmethod
    def load(cls, directory: Path, key: str) -> JobState | None:
        """The saved state of job ``key``, or None when there is none.

        Raises:
            BatchError: The file exists but cannot be read (named in the message).
        """
        target = cls.path(directory, key)
        try:
            text = target.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            msg = f"cannot read the batch job state {target}: {exc}"
            raise BatchError(msg) from exc
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            msg = f"the batch job state {target} is damaged ({exc.error_count()} problems): {exc}"
            raise BatchError(msg) from exc

    def save(self, directory: Path) -> Path:
        """Write the state atomically (a temporary file renamed over the old one).

        Raises:
            BatchError: The directory or the file cannot be written.
        """
        target = self.path(directory, self.key)
        temp = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        make_private_dir(directory)
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "w", encoding="utf-8") as out:
                out.write(self.model_dump_json(indent=1))
                out.flush()
                os.fsync(out.fileno())
            temp.replace(target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temp.unlink()
            msg = f"cannot write the batch job state {target}: {exc}"
            raise BatchError(msg) from exc
        return target

    @staticmethod
    @contextlib.contextmanager
    def lock(directory: Path, key: str) -> Iterator[None]:
        """Hold job ``key`` for this run: a second run of the same job fails at once.

        ``fcntl.flock`` on ``<key>.lock`` beside the state file, released (and the lock file
        removed) when the block ends, a crash included (the kernel drops the lock).

        Raises:
            BatchError: Another run holds the job (the message names its state file).
        """
        make_private_dir(directory)
        path = directory / f"{key}.lock"
        held = contextlib.ExitStack()
        try:
            held.enter_context(exclusive_lock(path))
        except BlockingIOError as exc:
            state = JobState.path(directory, key)
            msg = (
                f"another run of this evaluation holds its batch job {state} (lock {path}): "
                "wait for it to end, or stop it, before running it again"
            )
            raise BatchError(msg) from exc
        except OSError as exc:
            msg = f"cannot lock the batch job lock {path}: {exc}"
            raise BatchError(msg) from exc
        with held:
            yield

    def remove(self, directory: Path) -> None:
        """Forget the job (every request has its final outcome)."""
        with contextlib.suppress(FileNotFoundError):
            self.path(directory, self.key).unlink()

    def next_part(self) -> int:
        """The part number of the next batch."""
        return max((b.part for b in self.batches), default=0) + 1
