"""Settings of a Batch API run (``evaluate(..., batch_api=BatchOptions(...))``) and its report."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from langchain_ragmetrics._options import AS_GIVEN

__all__ = [
    "DEFAULT_MAX_BYTES_PER_FILE",
    "DEFAULT_MAX_REQUESTS_PER_FILE",
    "BatchOptions",
    "BatchReport",
    "BatchSummary",
    "default_state_dir",
]

DEFAULT_MAX_REQUESTS_PER_FILE = 50_000
"""OpenAI's limit on the requests of one batch input file."""
DEFAULT_MAX_BYTES_PER_FILE = 200 * 1024 * 1024
"""OpenAI's limit on the size of one batch input file (200 MB)."""
_MILLION = 1_000_000
_HOURS = re.compile(r"[1-9][0-9]*h")


def default_state_dir() -> Path:
    """``<user cache dir>/ragmetrics/batches``: where running batch jobs are remembered."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("ragmetrics", appauthor=False)) / "batches"


class BatchOptions(BaseModel):
    """How :func:`~langchain_ragmetrics.evaluate` uses the OpenAI Batch API.

    ``evaluate(..., batch_api=True)`` takes the defaults; pass ``batch_api=BatchOptions(...)``
    to change them.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    state_dir: Path | None = None
    """Where each job's batch ids and ``custom_id`` map are kept, written before each upload
    so that running the same evaluation again picks the job up; default
    ``<user cache dir>/ragmetrics/batches``."""
    poll_interval: Annotated[float, AS_GIVEN] = Field(default=30.0, ge=0)
    """Seconds between two status checks of the running batches."""
    max_poll_failures: Annotated[int, AS_GIVEN] = Field(default=120, ge=1)
    """Status checks in a row that may fail (a 5xx, 429, timeout or lost connection, each
    after the SDK's own retries) before the run stops waiting; the wait goes on at
    ``poll_interval`` meanwhile (120 at the default interval: an hour of outage)."""
    max_requests_per_file: Annotated[int, AS_GIVEN] = Field(
        default=DEFAULT_MAX_REQUESTS_PER_FILE, ge=1
    )
    """Requests per input file; more are split into several batches."""
    max_bytes_per_file: Annotated[int, AS_GIVEN] = Field(
        default=DEFAULT_MAX_BYTES_PER_FILE, ge=1024
    )
    """Bytes per input file; more are split into several batches."""
    max_attempts: Annotated[int, AS_GIVEN] = Field(default=3, ge=1)
    """Times one request is sent, the first included: an answer that failed (an error line,
    a missing line, an answer failing validation) is sent again in a follow-up batch."""
    retry_direct: StrictBool = False
    """Send the follow-ups through the direct path (ordinary requests, the metric's
    ``RetryPolicy``) instead of a follow-up batch: faster, at the direct price."""
    cancel: StrictBool = False
    """Cancel this evaluation's running batches, then score what they completed."""
    completion_window: str = "24h"
    """The completion window asked of the service, a whole number of hours written like
    ``"24h"`` (OpenAI offers ``24h``); checked here, since the service refuses a bad one only
    after the input file is uploaded."""
    request_timeout: Annotated[float, AS_GIVEN] = Field(default=600.0, gt=0)
    """Seconds one file or batch request to the service may take (uploads can be large)."""
    input_price: Annotated[float | None, AS_GIVEN] = Field(default=None, ge=0)
    """Direct price of one million input tokens (e.g. 0.15 USD for gpt-4o-mini), for the
    cost estimate; None: no estimate."""
    output_price: Annotated[float | None, AS_GIVEN] = Field(default=None, ge=0)
    """Direct price of one million output tokens, for the cost estimate."""
    batch_discount: Annotated[float, AS_GIVEN] = Field(default=0.5, gt=0, le=1)
    """Batch price as a share of the direct price (OpenAI: half)."""
    on_report: Callable[[BatchReport], Any] | None = Field(default=None, exclude=True)
    """Called with the :class:`BatchReport` when the run ends; without it the report is
    written to stderr (unless ``show_progress=False``)."""

    @field_validator("completion_window", mode="before")
    @classmethod
    def _hours(cls, value: object) -> object:
        # Before pydantic's own str check, so a number (24) gets this message too.
        if not isinstance(value, str) or _HOURS.fullmatch(value) is None:
            msg = f"`completion_window` must be a number of hours written like '24h', got {value!r}"
            raise ValueError(msg)
        return value

    @field_validator("state_dir", mode="after")
    @classmethod
    def _expand_home(cls, value: Path | None) -> Path | None:
        # "~/batches" is the user's folder, not "./~" (bash leaves "--batch-dir=~/b" as
        # it is): a state file looked for in the wrong place means a second paid upload.
        return None if value is None else value.expanduser()

    def resolved_state_dir(self) -> Path:
        """:attr:`state_dir`, or the default under the user's cache directory."""
        return self.state_dir if self.state_dir is not None else default_state_dir()


class BatchSummary(BaseModel):
    """One batch as the service last reported it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    """The service's batch id."""
    status: str
    """validating, in_progress, finalizing, completed, expired, cancelling, cancelled, failed."""
    attempt: int
    """1 for the first submission, 2 and more for follow-up batches."""
    total: int = 0
    """Requests in the batch."""
    completed: int = 0
    """Requests the service answered."""
    failed: int = 0
    """Requests the service reported as failed."""


class BatchReport(BaseModel):
    """What a Batch API run sent, got back and (with prices) cost."""

    model_config = ConfigDict(extra="forbid")

    job: str
    """The job key (the name of its state file)."""
    resumed: bool = False
    """True when the run picked up batches an earlier run had submitted."""
    planned: int = 0
    """Judge requests the evaluation needs."""
    cache_hits: int = 0
    """Requests answered from the verdict cache (never sent)."""
    sent: int = 0
    """Distinct requests sent to the Batch API (or, for follow-ups, directly)."""
    attempts: int = 0
    """Requests sent, follow-ups included."""
    retried: int = 0
    """Requests sent more than once."""
    answered: int = 0
    """Requests with a valid answer."""
    failed: int = 0
    """Requests still without a valid answer (their rows are failed, with the cause)."""
    direct_requests: int = 0
    """Follow-up requests sent through the direct path (``retry_direct``)."""
    uploads: int = 0
    """Input files this process uploaded."""
    input_tokens: int = 0
    """Prompt tokens of the answers, as the service reported them (direct follow-ups
    included)."""
    output_tokens: int = 0
    """Completion tokens of the answers (direct follow-ups included)."""
    direct_input_tokens: int = 0
    """The part of ``input_tokens`` spent by direct follow-ups (``retry_direct``)."""
    direct_output_tokens: int = 0
    """The part of ``output_tokens`` spent by direct follow-ups."""
    batches: list[BatchSummary] = Field(default_factory=list)
    """Every batch of the job."""
    stopped: str | None = None
    """Why requests were left unanswered without a retry (expired, cancelled), if they were."""
    batch_cost: float | None = None
    """Estimated cost of the tokens answered through the Batch API, at the batch price
    (with prices)."""
    followup_cost: float | None = None
    """Estimated cost of the direct follow-ups' tokens, at the direct price (with prices)."""
    total_cost: float | None = None
    """``batch_cost`` plus ``followup_cost``: the estimated cost of the run."""
    direct_cost: float | None = None
    """Estimated cost of every token through the direct path, for comparison (with prices)."""

    def price(self, options: BatchOptions) -> BatchReport:
        """This report with the cost estimates of ``options``' prices filled in.

        Batch tokens get the discount, the direct follow-ups' tokens do not.
        """
        if options.input_price is None and options.output_price is None:
            return self

        def cost(tokens_in: int, tokens_out: int) -> float:
            return (
                tokens_in * (options.input_price or 0.0)
                + tokens_out * (options.output_price or 0.0)
            ) / _MILLION

        followup = cost(self.direct_input_tokens, self.direct_output_tokens)
        batched = cost(
            self.input_tokens - self.direct_input_tokens,
            self.output_tokens - self.direct_output_tokens,
        )
        batch = batched * options.batch_discount
        return self.model_copy(
            update={
                "direct_cost": batched + followup,
                "batch_cost": batch,
                "followup_cost": followup,
                "total_cost": batch + followup,
            }
        )

    def summary(self) -> str:
        """A few lines for the terminal: requests, batches, tokens and cost."""
        lines = [
            f"Batch API job {self.job}{' (resumed)' if self.resumed else ''}: "
            f"{self.planned} judge requests, {self.cache_hits} from the cache, {self.sent} sent "
            f"({self.attempts} attempts, {self.retried} retried"
            + (f", {self.direct_requests} directly" if self.direct_requests else "")
            + f"), {self.answered} answered, {self.failed} failed; {self.uploads} file(s) "
            "uploaded by this run"
        ]
        for batch in self.batches:
            lines.append(
                f"  {batch.id} (attempt {batch.attempt}): {batch.status}, {batch.completed}/"
                f"{batch.total} completed, {batch.failed} failed"
            )
        lines.append(
            f"  tokens: {self.input_tokens:,} in, {self.output_tokens:,} out "
            f"({self.input_tokens + self.output_tokens:,} total)"
        )
        if self.direct_input_tokens or self.direct_output_tokens:
            lines.append(
                f"  of which direct follow-ups: {self.direct_input_tokens:,} in, "
                f"{self.direct_output_tokens:,} out (not discounted)"
            )
        if self.batch_cost is not None and self.direct_cost is not None:
            if self.followup_cost:
                lines.append(
                    f"  estimated cost: {self.total_cost:.4f} in all ({self.batch_cost:.4f} "
                    f"through the Batch API + {self.followup_cost:.4f} for the direct "
                    f"follow-ups), {self.direct_cost:.4f} had every request gone direct"
                )
            else:
                lines.append(
                    f"  estimated cost: {self.batch_cost:.4f} through the Batch API, "
                    f"{self.direct_cost:.4f} through the direct path"
                )
        if self.stopped:
            lines.append(f"  {self.stopped}")
        return "\n".join(lines)
