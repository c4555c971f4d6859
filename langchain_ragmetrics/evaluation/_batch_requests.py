"""The request lines of a batch, built by langchain-openai and the openai SDK themselves.

A judge call becomes the exact HTTP body the direct path would send: langchain-openai's
``_get_request_payload`` makes the payload from the formatted messages and the bound tool
(schema and forced ``tool_choice``), and the openai SDK serialises it through its own
``chat.completions.create`` into a transport that keeps the bytes instead of sending them.
An answer line is read back by the same two libraries (``_create_chat_result``, then the
runner's tool parser) and validated by the retry layer's own check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._errors import BatchError
from langchain_ragmetrics._schema import Usage
from langchain_ragmetrics.metrics._judge import JudgeOutcome, RetryPolicy, judge_name

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from langchain_core.language_models import BaseChatModel

    from langchain_ragmetrics.metrics._judge import CachedCall, JudgeCall, JudgeRunner

__all__ = [
    "CHAT_URL",
    "BatchJudge",
    "PlannedCall",
    "http_module",
    "jsonl_line",
    "public_url",
    "split_lines",
]

CHAT_URL = "/v1/chat/completions"
"""The endpoint every line targets."""
_CAPTURED = {
    "id": "captured",
    "object": "chat.completion",
    "created": 0,
    "model": "captured",
    "choices": [],
}


def http_module() -> Any:
    """The HTTP library of the installed openai SDK (``httpx2`` in openai 3, else ``httpx``)."""
    import importlib

    try:
        return importlib.import_module("httpx2")
    except ImportError:
        return importlib.import_module("httpx")


class _Capture:
    """The handler of an ``httpx.MockTransport`` that keeps the request instead of sending it."""

    def __init__(self) -> None:
        self.body: bytes | None = None
        self.path: str | None = None

    def handle_request(self, request: Any) -> Any:
        self.body = request.read()
        self.path = request.url.path
        return http_module().Response(200, json=_CAPTURED, request=request)


@dataclass
class BatchJudge:
    """A judge whose calls can go through the Batch API (langchain-openai's ``ChatOpenAI``)."""

    index: int
    llm: BaseChatModel
    _capture: _Capture = field(default_factory=_Capture)
    _client: Any = None

    @property
    def identity(self) -> str:
        """Model and full base URL: which judges share a batch (never shown or stored)."""
        client = getattr(self.llm, "root_client", None)
        base = str(getattr(client, "base_url", "") or "").rstrip("/")
        return f"{judge_name(self.llm)} at {base or '?'}"

    @property
    def label(self) -> str:
        """Model and base URL without credentials or query, for the state file and messages."""
        client = getattr(self.llm, "root_client", None)
        base = public_url(str(getattr(client, "base_url", "") or "")).rstrip("/")
        return f"{judge_name(self.llm)} at {base or '?'}"

    def check(self, runner: JudgeRunner) -> None:
        """Refuse a judge the Batch API cannot serve, before anything is sent.

        Raises:
            BatchError: Not an OpenAI chat model, a streaming or Responses API model, or a
                model bound without tool calling.
        """
        import openai

        llm = self.llm
        name = f"{judge_name(llm)} ({type(llm).__name__})"
        root = getattr(llm, "root_client", None)
        if not hasattr(llm, "_get_request_payload") or root is None:
            msg = (
                f"batch_api needs langchain-openai's ChatOpenAI judges (the OpenAI Batch API, "
                f"or a server with /v1/files and /v1/batches); the judge {name} is not one"
            )
            raise BatchError(msg)
        if isinstance(root, openai.AzureOpenAI):  # deployments, api-version: other endpoints
            msg = (
                f"batch_api does not support Azure OpenAI yet (its Batch API takes deployment "
                f"names and its own URLs); the judge {name} is an Azure one: run it without "
                "batch_api"
            )
            raise BatchError(msg)
        if not runner.parse_here:
            msg = f"batch_api needs a judge with tool calling; {name} has none"
            raise BatchError(msg)
        if getattr(llm, "streaming", False):
            msg = f"batch_api cannot send streamed requests: build {name} with streaming=False"
            raise BatchError(msg)

    def body(self, runner: JudgeRunner, call: JudgeCall) -> bytes:
        """The exact HTTP body the direct path sends for ``call``.

        Raises:
            BatchError: The model would use the Responses API or a ``response_format``.
        """
        llm: Any = runner.llm
        messages = runner.prompt.format_messages(**call.variables)
        kwargs = dict(getattr(runner.model, "kwargs", {}) or {})
        payload = llm._get_request_payload(messages, **kwargs)
        if "response_format" in payload or llm._use_responses_api(payload):
            msg = (
                f"batch_api sends Chat Completions tool calls; the judge {self.label} would use "
                "the Responses API or response_format"
            )
            raise BatchError(msg)
        if self._client is None:
            http_lib = http_module()
            http = http_lib.Client(transport=http_lib.MockTransport(self._capture.handle_request))
            self._client = llm.root_client.with_options(http_client=http, max_retries=0)
        self._client.chat.completions.with_raw_response.create(**payload)
        body = self._capture.body
        if body is None or not (self._capture.path or "").endswith("/chat/completions"):
            msg = f"the openai SDK built no chat-completions request for {self.label}"
            raise BatchError(msg)
        return body

    def read_answer(self, runner: JudgeRunner, call: JudgeCall, body: Any) -> JudgeOutcome:
        """Validate one answered line exactly as the direct path validates a response.

        The completion goes through langchain-openai's ``_create_chat_result`` (as a direct
        response does), the runner's tool parser and the retry layer's check of the parsed
        answer; its token usage counts as one judge call.
        """
        from langchain_ragmetrics.metrics._judge import _Attempts

        llm: Any = runner.llm
        try:
            result = llm._create_chat_result(_completion(body))
            output = runner.parse(result.generations[0].message)
        except Exception as exc:
            return JudgeOutcome(error=f"{type(exc).__name__}: {exc}", usage=Usage(judge_calls=1))
        once = RetryPolicy(max_retries=0, parse_retries=0)
        outcome = _Attempts(call, once).on_output(output)
        return outcome if outcome is not None else JudgeOutcome(error="no answer")


def public_url(url: str) -> str:
    """``url`` without ``user:password@`` and without its query or fragment (may hold keys)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment=""))


def _completion(body: Any) -> Any:
    """The SDK's ``ChatCompletion`` for a line's body (the direct path's type), else the dict."""
    from openai.types.chat import ChatCompletion
    from pydantic import ValidationError

    try:
        return ChatCompletion.model_validate(body)
    except ValidationError:
        return body


@dataclass
class PlannedCall:
    """One judge request of the evaluation, and what became of it."""

    custom_id: str
    row: int
    column: int
    index: int
    """Position of the call in the metric's plan."""
    judge: BatchJudge
    runner: JudgeRunner
    call: JudgeCall
    cached: CachedCall | None
    body: bytes = b""
    outcome: JudgeOutcome | None = None
    """The valid answer (or the cache hit), once there is one."""
    attempts: int = 0
    """Times the request was sent and came back (or was reported missing)."""
    placed: int = 0
    """Times the request was placed in a batch the service took, or sent directly (the
    report's attempts: an expired or cancelled batch counts too)."""
    usage: Usage = field(default_factory=Usage)
    """Tokens and judge calls of every attempt."""
    direct_usage: Usage = field(default_factory=Usage)
    """The part of ``usage`` spent on direct follow-ups (priced without the discount)."""
    cause: str | None = None
    """Why the last attempt failed."""
    stopped: bool = False
    """The last batch expired or was cancelled before answering: no automatic retry."""
    final: bool = False
    """The failure cannot be cured by sending again (the service failed the whole batch)."""

    @property
    def answered(self) -> bool:
        """True when the request has a valid answer."""
        return self.outcome is not None and self.outcome.error is None


def jsonl_line(custom_id: str, body: bytes) -> bytes:
    """One line of a batch input file, with the body's bytes as the SDK made them."""
    head = json.dumps(
        {"custom_id": custom_id, "method": "POST", "url": CHAT_URL}, separators=(",", ":")
    )
    return head[:-1].encode("utf-8") + b',"body":' + body + b"}\n"


def split_lines(
    lines: Sequence[tuple[str, bytes]], *, max_requests: int, max_bytes: int
) -> Iterator[list[tuple[str, bytes]]]:
    """Group ``(custom_id, line)`` pairs into files within the request and size limits."""
    part: list[tuple[str, bytes]] = []
    size = 0
    for custom_id, line in lines:
        if part and (len(part) >= max_requests or size + len(line) > max_bytes):
            yield part
            part, size = [], 0
        part.append((custom_id, line))
        size += len(line)
    if part:
        yield part
