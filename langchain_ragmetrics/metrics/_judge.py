"""Calling a chat model for a structured verdict: retries, parse checks and usage accounting."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from langchain_ragmetrics._cache import CachedCall
from langchain_ragmetrics.schema import Usage

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import Runnable, RunnableConfig

    from langchain_ragmetrics._cache import VerdictCache

__all__ = [
    "DEFAULT_JUDGE_MODEL",
    "DEFAULT_JUDGE_TIMEOUT",
    "JudgeCall",
    "JudgeConfigError",
    "JudgeOutcome",
    "JudgeRunner",
    "RetryPolicy",
    "acall_judge",
    "call_judge",
    "default_judge",
    "is_transient",
    "judge_name",
]

DEFAULT_JUDGE_MODEL = "gpt-4o-mini"
DEFAULT_JUDGE_TIMEOUT = 60.0
_TRANSIENT_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
_TRANSIENT_NAMES = ("Timeout", "APIConnectionError", "ConnectError", "RemoteProtocolError")


class JudgeConfigError(RuntimeError):
    """The judge could not be built (e.g. no API key for the default judge)."""


def default_judge() -> BaseChatModel:
    """Build the default judge, importing langchain-openai only now (keeps import light).

    ``ChatOpenAI`` reads ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` from the environment.
    """
    from langchain_openai import ChatOpenAI

    try:
        # A bounded timeout: a hung judge must not hold a worker (or interpreter exit) forever.
        return ChatOpenAI(model=DEFAULT_JUDGE_MODEL, temperature=0, timeout=DEFAULT_JUDGE_TIMEOUT)
    except Exception as exc:
        msg = (
            f"could not build the default judge ChatOpenAI(model={DEFAULT_JUDGE_MODEL!r}): {exc}. "
            "Set OPENAI_API_KEY, or OPENAI_BASE_URL (with any OPENAI_API_KEY) to use a local "
            "OpenAI-compatible server, or pass llm=<any chat model> to the metric."
        )
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

    max_retries: int = Field(default=3, ge=0)
    """Retries after a transient error (HTTP 429, 5xx, timeouts, dropped connections)."""
    parse_retries: int = Field(default=1, ge=0)
    """Retries after an answer that fails to parse or validate."""
    initial_backoff: float = Field(default=1.0, ge=0)
    """Seconds before the first transient retry; doubles each time, with jitter."""
    max_backoff: float = Field(default=30.0, ge=0)
    """Upper bound of one backoff sleep, in seconds."""

    def backoff(self, attempt: int) -> float:
        """Sleep before transient retry number ``attempt`` (0-based), with full jitter."""
        ceiling = min(self.max_backoff, self.initial_backoff * (2**attempt))
        return float(ceiling * (0.5 + random.random() / 2))  # noqa: S311 - jitter, not crypto


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: rate limits, server errors, timeouts, lost connections."""
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status in _TRANSIENT_STATUS
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int) and status in _TRANSIENT_STATUS:
        return True
    return any(part in type(exc).__name__ for part in _TRANSIENT_NAMES)


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

    @classmethod
    def build(
        cls, llm: BaseChatModel, prompt: ChatPromptTemplate, schema: type[BaseModel]
    ) -> JudgeRunner:
        """Bind ``schema`` to ``llm`` by tool calling, forcing that tool."""
        try:
            # No ``ls_structured_output_format``: LangChain would rebuild the JSON schema from
            # it on every call, only to annotate traces.
            bound: Runnable[Any, Any] = llm.bind_tools([schema], tool_choice=schema.__name__)
            return cls(llm, prompt, bound, schema, parse_here=True)
        except (NotImplementedError, TypeError, ValueError):
            try:
                bound = llm.with_structured_output(
                    schema, method="function_calling", include_raw=True
                )
            except (TypeError, NotImplementedError, ValueError):
                bound = llm.with_structured_output(schema, include_raw=True)
            return cls(llm, prompt, bound, schema, parse_here=False)

    def parse(self, output: Any) -> Any:
        """Normalise the model's output to ``{raw, parsed, parsing_error}``."""
        if not self.parse_here:
            return output
        from langchain_core.exceptions import OutputParserException
        from langchain_core.output_parsers.openai_tools import PydanticToolsParser
        from langchain_core.outputs import ChatGeneration

        parser = PydanticToolsParser(tools=[self.schema], first_tool_only=True)
        try:
            parsed = parser.parse_result([ChatGeneration(message=output)])
        except (OutputParserException, ValueError) as exc:
            return {"raw": output, "parsed": None, "parsing_error": exc}
        return {"raw": output, "parsed": parsed, "parsing_error": None}


def _usage_of(raw: Any) -> Usage:
    meta = getattr(raw, "usage_metadata", None) or {}
    return Usage(
        input_tokens=int(meta.get("input_tokens", 0) or 0),
        output_tokens=int(meta.get("output_tokens", 0) or 0),
        judge_calls=1,
    )


class _Attempts:
    """Shared bookkeeping of the retry loop (sync and async variants drive it)."""

    def __init__(self, call: JudgeCall, policy: RetryPolicy) -> None:
        self.call = call
        self.policy = policy
        self.usage = Usage()
        self.transient_used = 0
        self.parse_used = 0

    def on_exception(self, exc: Exception) -> float | JudgeOutcome:
        """Return a sleep before retrying, or the final failed outcome."""
        self.usage = self.usage + Usage(judge_calls=1)
        if is_transient(exc) and self.transient_used < self.policy.max_retries:
            delay = self.policy.backoff(self.transient_used)
            self.transient_used += 1
            return delay
        return JudgeOutcome(error=f"{type(exc).__name__}: {exc}", usage=self.usage)

    def on_output(self, output: Any) -> JudgeOutcome | None:
        """Return the outcome, or None when the answer was invalid and a retry is due."""
        raw = output.get("raw") if isinstance(output, Mapping) else None
        parsed = output.get("parsed") if isinstance(output, Mapping) else output
        problem: Any = output.get("parsing_error") if isinstance(output, Mapping) else None
        self.usage = self.usage + (_usage_of(raw) if raw is not None else Usage(judge_calls=1))
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


def call_judge(
    runner: JudgeRunner,
    call: JudgeCall,
    config: RunnableConfig | None,
    policy: RetryPolicy,
    cache: VerdictCache | None = None,
) -> JudgeOutcome:
    """Run one judge call synchronously with bounded retries; never raises for judge faults."""
    cached = CachedCall.open(cache, runner, call)
    if cached is not None and cached.hit is not None:
        return cached.hit
    state = _Attempts(call, policy)
    while True:
        try:
            messages = runner.prompt.format_messages(**call.variables)
            output = runner.parse(runner.model.invoke(messages, config))
        except Exception as exc:
            step = state.on_exception(exc)
            if isinstance(step, JudgeOutcome):
                return step
            time.sleep(step)
            continue
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
    while True:
        try:
            messages = runner.prompt.format_messages(**call.variables)
            output = runner.parse(await runner.model.ainvoke(messages, config))
        except Exception as exc:
            step = state.on_exception(exc)
            if isinstance(step, JudgeOutcome):
                return step
            await asyncio.sleep(step)
            continue
        outcome = state.on_output(output)
        if outcome is not None:
            return outcome if cached is None else cached.store(outcome)
