"""Calling a chat model for a structured verdict: the judge factory, retries, parse checks.

This module is the package's one retry layer. Judges built by :func:`make_judge` have the
openai SDK's own retries off, so a request is sent at most ``1 + RetryPolicy.max_retries``
times. Errors are classified by type (langchain-core's standard model exceptions, which
langchain-openai's errors subclass), HTTP status and the error body's code; ``Retry-After``
is honoured. Errors no retry can heal (quota, authentication, permission, unknown model, a
request the server refuses) are sent once and named by their cause.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from langchain_ragmetrics._errors import JudgeConfigError
from langchain_ragmetrics._gate import Admission, DeadlineExceededError, current_admission
from langchain_ragmetrics._options import AS_GIVEN
from langchain_ragmetrics._schema import Usage

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage
    from langchain_core.outputs import ChatResult
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import Runnable, RunnableConfig

    from langchain_ragmetrics._cache import VerdictCache

__all__ = [
    "DEFAULT_JUDGE_MODEL",
    "DEFAULT_JUDGE_TIMEOUT",
    "PERMANENT_CAUSES",
    "CachedCall",
    "JudgeCall",
    "JudgeConfigError",
    "JudgeOutcome",
    "JudgeRunner",
    "RetryPolicy",
    "acall_judge",
    "call_judge",
    "cause_of",
    "is_transient",
    "judge_name",
    "make_judge",
    "permanent_cause",
    "retry_after",
    "unobserved",
]

DEFAULT_JUDGE_MODEL = "gpt-4o-mini"
DEFAULT_JUDGE_TIMEOUT = 60.0
_TRANSIENT_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
_LOCAL_KEY = "not-needed"  # local OpenAI-compatible servers (Ollama, vLLM) ignore the key


def make_judge(
    model: str = DEFAULT_JUDGE_MODEL,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float = DEFAULT_JUDGE_TIMEOUT,
    max_retries: int = 0,
) -> BaseChatModel:
    """The package's one judge factory: a ``ChatOpenAI`` at temperature 0 with a bounded timeout.

    Used by the metrics' default judge, the CLI and the demo, so every judge we build has the
    same timeout and no SDK retries (``RetryPolicy`` is the only retry layer). langchain-openai
    is imported only now, which keeps ``import langchain_ragmetrics`` light.

    Args:
        model: Model name.
        base_url: OpenAI-compatible endpoint; default ``$OPENAI_BASE_URL``, else OpenAI.
        api_key: Default ``$OPENAI_API_KEY``; with a base URL and no key, a placeholder (local
            servers such as Ollama or vLLM need none).
        timeout: Seconds per HTTP request.
        max_retries: The SDK's own retries; keep 0 for judges. Only a model that is not a
            judge (the demo's answering model, which has no other retry layer) sets more.

    Raises:
        JudgeConfigError: No API key and no base URL, or ChatOpenAI rejected the settings.
    """
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    api_key = api_key or os.environ.get("OPENAI_API_KEY") or (_LOCAL_KEY if base_url else None)
    if api_key is None:
        msg = (
            f"no judge for ChatOpenAI(model={model!r}): OPENAI_API_KEY is not set. Set it, or "
            "OPENAI_BASE_URL (any OPENAI_API_KEY, or none) to use a local OpenAI-compatible "
            "server, or pass llm=<any chat model> to the metric."
        )
        raise JudgeConfigError(msg)
    from langchain_openai import ChatOpenAI

    try:
        return ChatOpenAI(
            model=model,
            base_url=base_url,
            api_key=api_key,
            temperature=0,
            timeout=timeout,
            max_retries=max_retries,
        )
    except Exception as exc:
        msg = f"could not build the judge ChatOpenAI(model={model!r}): {exc}"
        raise JudgeConfigError(msg) from exc


def judge_name(llm: Any) -> str | None:
    """Best-effort model name of a chat model, for results and feedback."""
    for attr in ("model_name", "model", "model_id"):
        value = getattr(llm, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(llm).__name__ if llm is not None else None


class RetryPolicy(BaseModel):
    """How hard to try before a judge failure becomes a NaN score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_retries: Annotated[int, AS_GIVEN] = Field(default=3, ge=0)
    """Retries after a transient error (HTTP 429, 5xx, timeouts, refused or lost connections)."""
    parse_retries: Annotated[int, AS_GIVEN] = Field(default=1, ge=0)
    """Retries after an answer that fails to parse or validate."""
    initial_backoff: Annotated[float, AS_GIVEN] = Field(default=0.5, ge=0)
    """Ceiling of the sleep before the first transient retry, in seconds (the openai SDK's
    own first delay, whose retries this layer replaces); it doubles with each retry."""
    max_backoff: Annotated[float, AS_GIVEN] = Field(default=30.0, ge=0)
    """Upper bound of one backoff sleep, in seconds (a longer ``Retry-After`` is cut to it)."""

    @model_validator(mode="after")
    def _backoff_bounds(self) -> RetryPolicy:
        # Only when both are given: a small max_backoff alone (0: retry at once) caps the
        # default initial_backoff, as backoff() does.
        both = {"initial_backoff", "max_backoff"} <= self.model_fields_set
        if both and self.initial_backoff > self.max_backoff:
            msg = (
                f"`initial_backoff` ({self.initial_backoff:g} s) is above `max_backoff` "
                f"({self.max_backoff:g} s), which would cut every wait to it: raise "
                "`max_backoff` or lower `initial_backoff`"
            )
            raise ValueError(msg)
        return self

    def backoff(self, attempt: int) -> float:
        """Sleep before transient retry number ``attempt`` (0-based): "full jitter".

        Uniform between 0 and ``initial_backoff * 2**attempt`` (at most ``max_backoff``), the
        scheme AWS measured to spread the retries of many clients best for the least total
        wait: clients failing together do not come back together, and the ceiling still
        doubles, so a server that keeps failing is asked less and less often. Its mean is
        half the ceiling, a third less than the former uniform [ceiling/2, ceiling], so the
        retry chains of a batch's last jobs end sooner. Only for errors without a
        ``Retry-After``: a server's wait is kept whole (:meth:`delay`).
        """
        ceiling = min(self.max_backoff, self.initial_backoff * (2**attempt))
        return float(ceiling * random.random())  # noqa: S311 - jitter, not crypto

    def delay(self, attempt: int, exc: BaseException) -> float:
        """The sleep before retrying after ``exc``: its ``Retry-After`` if any, else backoff.

        The server's wait is a floor for this request (only ``max_backoff`` cuts it), never
        jittered down: a rate-limited judge is not asked again sooner than it said.
        """
        hinted = retry_after(exc)
        if hinted is not None:
            return min(self.max_backoff, hinted)
        return self.backoff(attempt)


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection and timeout errors of the HTTP stacks already imported (none imported here)."""
    found: list[type[BaseException]] = [TimeoutError, ConnectionError]
    openai = sys.modules.get("openai")
    if openai is not None:
        found.append(openai.APIConnectionError)  # APITimeoutError is a subclass
    for name in ("httpx", "httpx2"):
        module = sys.modules.get(name)
        error = getattr(module, "TransportError", None)
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)


PERMANENT_CAUSES: dict[str, str] = {
    "insufficient quota": "The account has no credit left: add credit (billing) or use "
    "another key or model; retrying cannot help.",
    "authentication failed": "Check OPENAI_API_KEY (or the key given to the judge).",
    "permission denied": "The key may not use this model, project or region.",
    "unknown model": "Check the model name (--model) and the base URL.",
    "context length exceeded": "The request is longer than the model's context window: lower "
    "max_context_chars / max_sample_chars, or use a model with a larger window.",
    "invalid request": "The server refused the request as malformed.",
}
"""Errors that no retry can heal, each with what to do about it. A failed result's ``error``
starts with its cause (``"insufficient quota: ..."``), so the cause survives any process
boundary (the online child process, saved results)."""

_QUOTA_CODES = frozenset({"insufficient_quota", "billing_not_active"})
_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_CAUSE_BY_STATUS = {
    400: "invalid request",
    401: "authentication failed",
    403: "permission denied",
    404: "unknown model",
}


def _error_codes(exc: BaseException) -> set[str]:
    """``code`` and ``type`` of the provider's error body (openai: ``exc.code``, ``exc.body``)."""
    found = {getattr(exc, "code", None), getattr(exc, "type", None)}
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            found |= {inner.get("code"), inner.get("type")}
    return {c for c in found if isinstance(c, str)}


def permanent_cause(exc: BaseException) -> str | None:
    """The cause of an error no retry can heal (a key of :data:`PERMANENT_CAUSES`), or None.

    A 429 whose body says ``insufficient_quota`` is billing, not load; 401, 403, 404 and 400
    (context length exceeded among them) answer the same however often they are asked. By
    langchain-core's standard exception types first, then by HTTP status for providers that
    raise their SDK's own errors.
    """
    from langchain_core.exceptions import (
        ContextOverflowError,
        ModelAuthenticationError,
        ModelInvalidRequestError,
        ModelNotFoundError,
        ModelPermissionDeniedError,
    )

    codes = _error_codes(exc)
    status = _status_of(exc)
    if codes & _QUOTA_CODES:
        return "insufficient quota"
    if codes & _CONTEXT_CODES or isinstance(exc, ContextOverflowError):
        return "context length exceeded"
    by_type = (
        (ModelAuthenticationError, 401),
        (ModelPermissionDeniedError, 403),
        (ModelNotFoundError, 404),
        (ModelInvalidRequestError, 400),
    )
    for kind, code in by_type:
        if isinstance(exc, kind):
            status = code
    return None if status is None else _CAUSE_BY_STATUS.get(status)


def cause_of(error: str | None) -> str | None:
    """The permanent cause a failed result's ``error`` starts with, or None."""
    if not error:
        return None
    head = error.split(":", 1)[0]
    return head if head in PERMANENT_CAUSES else None


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: rate limits, server errors, timeouts, connections.

    Never for a :func:`permanent_cause` (a 429 out of quota is not a busy server). Then by
    type: langchain-core's ``ModelError`` says itself whether it is retryable
    (``ModelRateLimitError``, ``ModelAPIError``, ``ModelConnectionError``,
    ``ModelTimeoutError`` are; langchain-openai's errors subclass them). Then by HTTP status
    (408, 409, 429, 5xx) for providers that raise their SDK's own errors, then the transport
    errors of the openai SDK and httpx and the builtin ``TimeoutError`` / ``ConnectionError``.
    Also "Event loop is closed" from a pooled connection of an event loop that has ended:
    langchain-openai keeps one async HTTP client per process (langchain-ai/langchain#35783),
    so a second ``asyncio.run`` meets the first one's idle connections; closing the first
    of them raises this, the pool has dropped it by then, and a retry goes out fresh.
    """
    from langchain_core.exceptions import ModelError

    if permanent_cause(exc) is not None:
        return False
    if isinstance(exc, ModelError):
        return bool(exc.is_retryable)
    status = _status_of(exc)
    if status is not None:
        return status in _TRANSIENT_STATUS
    if isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed":
        return True
    return isinstance(exc, _transport_errors())


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` or ``Retry-After``), or None.

    ``Retry-After`` may be a number of seconds or an HTTP date.
    """
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return max(0.0, float(millis) / 1000)
        value = headers.get("retry-after")
    except (TypeError, ValueError, AttributeError):
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class JudgeCall:
    """One structured request to the judge."""

    prompt: ChatPromptTemplate
    """The prompt; formatted with ``variables``."""
    schema: type[BaseModel]
    """The output schema the judge must fill."""
    variables: Mapping[str, Any]
    """Prompt variables."""
    check: Callable[[Any], None] | None = None
    """Extra validation of the parsed answer; a ValueError counts as a parse failure."""


@dataclass
class JudgeOutcome:
    """What came back from a judge call after retries."""

    parsed: Any = None
    """The validated output, or None on failure."""
    error: str | None = None
    """Why the call failed, if it did."""
    usage: Usage = field(default_factory=Usage)
    """Tokens and requests spent, retries included."""


_UNOBSERVED: ContextVar[bool] = ContextVar("ragmetrics_unobserved", default=False)

# The steps of ``invoke`` / ``ainvoke`` between a binding and ``_generate`` / ``_agenerate``: a
# model that overrides any of them has its own logic there, and keeps its ``invoke``.
_RUN_STEPS = (
    "invoke",
    "generate_prompt",
    "generate",
    "_generate_with_cache",
    "ainvoke",
    "agenerate_prompt",
    "agenerate",
    "_agenerate_with_cache",
)
_BINDING = ("invoke", "ainvoke")
# Keys ``generate`` pops from the kwargs before they reach ``_generate`` (trace annotations).
_TRACE_ONLY_KWARGS = ("ls_structured_output_format", "structured_output_format")


@contextmanager
def unobserved() -> Iterator[None]:
    """Mark the judge calls made in this context as unobserved by any callback handler or tracer.

    Set by ``score_unobserved`` (the scoring engine checked, once per run, that nothing
    listens): such calls go to the model's ``_generate`` directly, without a run of their own
    (see :meth:`JudgeRunner.invoke`). Threads and tasks started inside inherit the mark with
    the context.
    """
    token = _UNOBSERVED.set(True)
    try:
        yield
    finally:
        _UNOBSERVED.reset(token)


def _direct_kwargs(llm: Any, model: Any) -> dict[str, Any] | None:
    """The kwargs ``model`` (``llm.bind_tools(...)``) adds to ``_generate``, when it can be skipped.

    None unless ``model`` is a plain ``RunnableBinding`` of ``llm`` (no config and no
    ``invoke`` of its own) and ``llm`` is a ``BaseChatModel`` that keeps langchain-core's own
    ``invoke`` -> ``generate`` -> ``_generate_with_cache`` steps (sync and async).
    """
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import RunnableBinding

    if not isinstance(model, RunnableBinding) or model.bound is not llm:
        return None
    if any(getattr(type(model), step) is not getattr(RunnableBinding, step) for step in _BINDING):
        return None  # a binding with its own invoke (langchain-core's own subclass has none)
    if model.config or model.config_factories or not isinstance(llm, BaseChatModel):
        return None
    kind = type(llm)
    if any(getattr(kind, step) is not getattr(BaseChatModel, step) for step in _RUN_STEPS):
        return None
    return {k: v for k, v in model.kwargs.items() if k not in _TRACE_ONLY_KWARGS}


def _plain(llm: Any) -> bool:
    """Whether ``llm.invoke`` would add nothing to ``_generate`` but its callback run.

    Not when the model has callbacks, verbosity, a cache (its own or LangChain's global
    one), a rate limiter, streaming or the v1 output format of its own.
    """
    if llm.callbacks or llm.verbose or llm.rate_limiter is not None:
        return False
    if llm.cache is not False:
        if llm.cache is not None:
            return False
        from langchain_core.globals import get_llm_cache

        if get_llm_cache() is not None:
            return False
    return llm.output_version != "v1" and getattr(llm, "streaming", False) is not True


def _message_of(result: ChatResult) -> Any:
    """The message ``invoke`` returns for a ``_generate`` result, with the same metadata."""
    generation = result.generations[0]
    message = generation.message
    metadata = {**(generation.generation_info or {}), **message.response_metadata}
    if len(result.generations) == 1 and result.llm_output is not None:
        metadata = {**result.llm_output, **metadata}
    message.response_metadata = metadata
    return message


@dataclass(frozen=True)
class JudgeRunner:
    """A prompt and a chat model bound to one output schema, built once and reused.

    With tool calling (``bind_tools``) the model's message is parsed here, outside the
    Runnable: ``with_structured_output(include_raw=True)`` would wrap every call in a
    ``RunnableParallel``, which starts a thread pool per call. Models without ``bind_tools``
    fall back to ``with_structured_output``.
    """

    llm: BaseChatModel
    """The judge the model binding was built from."""
    prompt: ChatPromptTemplate
    """The prompt, formatted directly (no Runnable step: one less run per call)."""
    model: Runnable[Any, Any]
    """The judge bound to the schema."""
    schema: type[BaseModel]
    """The output schema."""
    parse_here: bool
    """True when ``model`` returns the raw message and parsing happens in :meth:`parse`."""
    direct: Mapping[str, Any] | None = None
    """The binding's kwargs (tools, tool choice) when an unobserved call may go to the model's
    ``_generate`` directly (see :meth:`invoke`); None when it always goes through ``invoke``."""

    @property
    def tool_name(self) -> str:
        """The name the judge's tool call carries (what LangChain's tool parser matches)."""
        return str(self.schema.model_config.get("title") or self.schema.__name__)

    @classmethod
    def build(
        cls, llm: BaseChatModel, prompt: ChatPromptTemplate, schema: type[BaseModel]
    ) -> JudgeRunner:
        """Bind ``schema`` to ``llm`` by tool calling, forcing that tool."""
        try:
            # No ``ls_structured_output_format``: LangChain would rebuild the JSON schema from
            # it on every call, only to annotate traces.
            bound: Runnable[Any, Any] = llm.bind_tools([schema], tool_choice=schema.__name__)
        except (NotImplementedError, TypeError, ValueError):
            try:
                bound = llm.with_structured_output(
                    schema, method="function_calling", include_raw=True
                )
            except (TypeError, NotImplementedError, ValueError):
                bound = llm.with_structured_output(schema, include_raw=True)
            return cls(llm, prompt, bound, schema, parse_here=False)
        return cls(llm, prompt, bound, schema, parse_here=True, direct=_direct_kwargs(llm, bound))

    def request_options(self) -> dict[str, Any]:
        """What the binding adds to every request (tool definitions, tool choice), for the cache."""
        kwargs = getattr(self.model, "kwargs", None)
        if isinstance(kwargs, Mapping):
            return dict(kwargs)
        return {"structured_output": type(self.model).__name__}

    def _goes_direct(self, messages: list[BaseMessage], config: RunnableConfig | None) -> bool:
        """Whether this call may skip the model's run: nothing observes it, nothing is lost.

        Inside :func:`unobserved`, with no callbacks in ``config``, a plain binding and model
        (:func:`_plain`) and text messages (``generate`` would convert multimodal blocks).
        """
        return (
            self.direct is not None
            and _UNOBSERVED.get()
            and not (config and config.get("callbacks"))
            and _plain(self.llm)
            and all(isinstance(m.content, str) for m in messages)
        )

    def invoke(self, messages: list[BaseMessage], config: RunnableConfig | None) -> Any:
        """The model's answer to ``messages``.

        An unobserved call (see :meth:`_goes_direct`) goes to the model's ``_generate`` with the
        binding's kwargs: the model's own request, client and response parsing, without the
        callback manager, run ids and result wrapping of ``invoke`` (about a millisecond of
        CPU a call) that no handler would see. Any other call goes through ``invoke``, so
        traces and callbacks are unchanged.
        """
        if self.direct is not None and self._goes_direct(messages, config):
            return _message_of(self.llm._generate(messages, **self.direct))
        return self.model.invoke(messages, config)

    async def ainvoke(self, messages: list[BaseMessage], config: RunnableConfig | None) -> Any:
        """Async twin of :meth:`invoke` (``_agenerate`` when unobserved)."""
        if self.direct is not None and self._goes_direct(messages, config):
            result = await self.llm._agenerate(messages, **self.direct)
            return _message_of(result)
        return await self.model.ainvoke(messages, config)

    def _parse_direct(self, output: Any) -> Any:
        """The schema filled from the first tool call, or None to leave it to the parser.

        The common case (one well-formed call of our tool, no refusal) without the parser's
        copies of every tool call; anything else (no tool call, another tool, arguments that
        do not validate) returns None, and :meth:`parse` runs LangChain's parser, which gives
        the same errors as before.
        """
        from langchain_core.messages import AIMessage
        from langchain_core.output_parsers._refusal import raise_if_refused

        if not isinstance(output, AIMessage) or not output.tool_calls:
            return None
        first = output.tool_calls[0]
        args = first.get("args")
        if first.get("name") != self.tool_name or not isinstance(args, dict):
            return None
        raise_if_refused(output)
        try:
            return self.schema(**args)
        except ValueError:  # pydantic's ValidationError included
            return None

    def parse(self, output: Any) -> Any:
        """Normalise the model's output to ``{raw, parsed, parsing_error}``."""
        if not self.parse_here:
            return output
        parsed = self._parse_direct(output)
        if parsed is not None:
            return {"raw": output, "parsed": parsed, "parsing_error": None}
        from langchain_core.exceptions import OutputParserException
        from langchain_core.output_parsers.openai_tools import PydanticToolsParser
        from langchain_core.outputs import ChatGeneration

        parser = PydanticToolsParser(tools=[self.schema], first_tool_only=True)
        try:
            parsed = parser.parse_result([ChatGeneration(message=output)])
        except (OutputParserException, ValueError) as exc:
            return {"raw": output, "parsed": None, "parsing_error": exc}
        return {"raw": output, "parsed": parsed, "parsing_error": None}


def _tokens_of(raw: Any) -> tuple[int, int]:
    """Input and output tokens the judge reported for one answer (0 when it reported none)."""
    meta = getattr(raw, "usage_metadata", None) or {}
    return int(meta.get("input_tokens", 0) or 0), int(meta.get("output_tokens", 0) or 0)


class _Attempts:
    """Shared bookkeeping of the retry loop (the sync and async loops drive it)."""

    def __init__(self, call: JudgeCall, policy: RetryPolicy) -> None:
        self.call = call
        self.policy = policy
        self.requests = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.transient_used = 0
        self.parse_used = 0

    @property
    def usage(self) -> Usage:
        """Tokens and requests spent so far (one model built per outcome, not per step)."""
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            judge_calls=self.requests,
        )

    def on_exception(self, exc: Exception, admission: Admission | None) -> float | JudgeOutcome:
        """Return a sleep before retrying, or the final failed outcome."""
        if isinstance(exc, DeadlineExceededError):  # never sent: costs no request
            return JudgeOutcome(error=f"{type(exc).__name__}: {exc}", usage=self.usage)
        self.requests += 1
        cause = permanent_cause(exc)
        if cause is not None:  # the same answer however often it is asked: no retry
            return JudgeOutcome(error=f"{cause}: {type(exc).__name__}: {exc}", usage=self.usage)
        if is_transient(exc) and self.transient_used < self.policy.max_retries:
            delay = self.policy.delay(self.transient_used, exc)
            left = None if admission is None else admission.remaining()
            if left is None or delay < left:
                self.transient_used += 1
                return delay
        return JudgeOutcome(error=f"{type(exc).__name__}: {exc}", usage=self.usage)

    def on_output(self, output: Any) -> JudgeOutcome | None:
        """Return the outcome, or None when the answer was invalid and a retry is due."""
        raw = output.get("raw") if isinstance(output, Mapping) else None
        parsed = output.get("parsed") if isinstance(output, Mapping) else output
        problem: Any = output.get("parsing_error") if isinstance(output, Mapping) else None
        self.requests += 1
        if raw is not None:
            tokens_in, tokens_out = _tokens_of(raw)
            self.input_tokens += tokens_in
            self.output_tokens += tokens_out
        if problem is None and parsed is None:
            invalid = getattr(raw, "invalid_tool_calls", None)
            problem = (
                f"malformed tool call: {invalid[0].get('error') or invalid[0].get('args')}"
                if invalid
                else "the judge returned no structured answer"
            )
        if problem is None and self.call.check is not None:
            try:
                self.call.check(parsed)
            except ValueError as exc:
                problem = exc
        if problem is None:
            return JudgeOutcome(parsed=parsed, usage=self.usage)
        if self.parse_used < self.policy.parse_retries:
            self.parse_used += 1
            return None
        return JudgeOutcome(error=f"invalid judge output: {problem}", usage=self.usage)


@dataclass
class CachedCall:
    """One judge request seen through the cache: a hit to return, or a key to store under."""

    cache: VerdictCache
    key: str
    hit: JudgeOutcome | None

    @staticmethod
    def key_of(cache: VerdictCache, runner: JudgeRunner, call: JudgeCall) -> str:
        """The cache key of a call: judge, formatted prompt, schema and bound tool definitions."""
        messages = runner.prompt.format_messages(**call.variables)
        return cache.key(runner.llm, messages, call.schema, request=runner.request_options())

    @classmethod
    def open(
        cls, cache: VerdictCache | None, runner: JudgeRunner, call: JudgeCall
    ) -> CachedCall | None:
        """Look the request up; None when there is no cache (the caller goes on as before)."""
        if cache is None:
            return None
        key = cls.key_of(cache, runner, call)
        stored = cache.get(key)
        hit = None
        if stored is not None:
            try:
                parsed = call.schema.model_validate(stored)
                if call.check is not None:
                    call.check(parsed)
            except ValueError:  # stale or tampered entry: ask the judge again
                parsed = None
            if parsed is not None:
                hit = JudgeOutcome(parsed=parsed, usage=Usage(cache_hits=1))
                cache.record(hits=1)
        return cls(cache, key, hit)

    def store(self, outcome: JudgeOutcome) -> JudgeOutcome:
        """Keep a successful, validated verdict; count the miss in the outcome's usage.

        A failed outcome is counted as a miss too (it was looked up and not found) and
        stores nothing.
        """
        if outcome.error is None and outcome.parsed is not None:
            parsed = outcome.parsed
            data = parsed.model_dump(mode="json") if hasattr(parsed, "model_dump") else parsed
            self.cache.put(self.key, data)
        outcome.usage = outcome.usage + Usage(cache_misses=1)
        self.cache.record(misses=1)
        return outcome


def call_judge(
    runner: JudgeRunner,
    call: JudgeCall,
    config: RunnableConfig | None,
    policy: RetryPolicy,
    cache: VerdictCache | None = None,
) -> JudgeOutcome:
    """Run one judge call synchronously with bounded retries; never raises for judge faults.

    Under the scoring engine each HTTP attempt spends one request of the engine's rate limit,
    and the job gives its concurrency slot back while it sleeps out a backoff.
    """
    cached = CachedCall.open(cache, runner, call)
    if cached is not None and cached.hit is not None:
        return cached.hit
    state = _Attempts(call, policy)
    admission = current_admission()
    messages = runner.prompt.format_messages(**call.variables)
    delay: float | None = None
    while True:
        try:
            if admission is None:
                if delay is not None:
                    time.sleep(delay)
                output = runner.invoke(messages, config)
            else:
                if delay is not None:
                    admission.sleep(delay)  # without the engine's slot
                with admission.request():
                    output = runner.invoke(messages, config)
            output = runner.parse(output)
        except Exception as exc:
            step = state.on_exception(exc, admission)
            if isinstance(step, JudgeOutcome):
                return step if cached is None else cached.store(step)  # a miss all the same
            delay = step
            continue
        delay = None
        outcome = state.on_output(output)
        if outcome is not None:
            return outcome if cached is None else cached.store(outcome)


async def acall_judge(
    runner: JudgeRunner,
    call: JudgeCall,
    config: RunnableConfig | None,
    policy: RetryPolicy,
    cache: VerdictCache | None = None,
) -> JudgeOutcome:
    """Async twin of :func:`call_judge`."""
    cached = CachedCall.open(cache, runner, call)
    if cached is not None and cached.hit is not None:
        return cached.hit
    state = _Attempts(call, policy)
    admission = current_admission()
    messages = runner.prompt.format_messages(**call.variables)
    delay: float | None = None
    while True:
        try:
            if admission is None:
                if delay is not None:
                    await asyncio.sleep(delay)
                output = await runner.ainvoke(messages, config)
            else:
                if delay is not None:
                    await admission.asleep(delay)  # without the engine's slot
                async with admission.arequest():
                    output = await runner.ainvoke(messages, config)
            output = runner.parse(output)
        except Exception as exc:
            step = state.on_exception(exc, admission)
            if isinstance(step, JudgeOutcome):
                return step if cached is None else cached.store(step)  # a miss all the same
            delay = step
            continue
        delay = None
        outcome = state.on_output(output)
        if outcome is not None:
            return outcome if cached is None else cached.store(outcome)
