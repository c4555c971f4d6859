"""Pre-flight: find a judge that cannot work before the first paid call, with one message.

Two checks. :func:`check_judge_capability` costs nothing: a model that cannot bind a tool or
give structured output (LangChain's fake models, many small local models behind a plain
text API) is refused up front instead of failing every row. :func:`preflight` sends one tiny
structured request and waits a bounded time, so an unreachable, failing or hanging judge is
reported once instead of as thousands of row failures.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from langchain_ragmetrics._errors import PreflightError
from langchain_ragmetrics._transient import transient_thread

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from langchain_ragmetrics._schema import RagSample
    from langchain_ragmetrics.metrics import BaseRagMetric, JudgedMetric
    from langchain_ragmetrics.metrics._judge import JudgeOutcome

__all__ = [
    "DEFAULT_PREFLIGHT_TIMEOUT",
    "PreflightError",
    "check_judge_capability",
    "preflight",
    "preflight_metrics",
]

DEFAULT_PREFLIGHT_TIMEOUT = 30.0
"""Seconds the test request may take before the judge is declared unresponsive."""

_USE_INSTEAD = (
    "Use a chat model with tool calling, e.g. ChatOpenAI (OpenAI, or any OpenAI-compatible "
    "server through base_url: vLLM, Ollama with llama3.1 / qwen2.5, LM Studio), ChatAnthropic "
    "or ChatOllama with a tool-capable model."
)


class PreflightAnswer(BaseModel):
    """The one-field answer of the pre-flight request."""

    model_config = ConfigDict(extra="forbid")

    ok: bool = Field(description="Always true.")
    """Set to true by a judge that understood the request."""


def _label(llm: Any) -> str:
    from langchain_ragmetrics.metrics._judge import judge_name

    name = judge_name(llm) or "?"
    cls = type(llm).__name__
    return name if name == cls else f"{name} ({cls})"


def _endpoint(llm: Any) -> str:
    from langchain_ragmetrics._cache import judge_endpoint

    url = judge_endpoint(llm)
    return f" at {url}" if url else ""


def check_judge_capability(llm: BaseChatModel) -> None:
    """Refuse a judge that can neither bind a tool nor give structured output (no call made).

    Raises:
        PreflightError: The model has no tool calling and no structured output.
    """
    from langchain_core.prompts import ChatPromptTemplate

    from langchain_ragmetrics.metrics._judge import JudgeRunner

    prompt = ChatPromptTemplate.from_messages([("human", "ok")])
    try:
        JudgeRunner.build(llm, prompt, PreflightAnswer)
    except (NotImplementedError, TypeError, ValueError) as exc:
        msg = (
            f"the judge {_label(llm)} cannot do tool calling or structured output, which every "
            f"LLM-judged metric needs ({type(exc).__name__}: {exc}). {_USE_INSTEAD}"
        )
        raise PreflightError(msg) from exc


def _hint(error: str) -> str:
    from langchain_ragmetrics.metrics._judge import PERMANENT_CAUSES, cause_of

    cause = cause_of(error)
    if cause is not None:
        return f" {PERMANENT_CAUSES[cause]}"
    text = error.lower()
    if "connect" in text or "refused" in text:
        return " Is the server running? Check --base-url / OPENAI_BASE_URL."
    if "invalid judge output" in text or "no structured answer" in text:
        return f" The model does not produce valid structured output. {_USE_INSTEAD}"
    return ""


def preflight(llm: BaseChatModel, *, timeout: float = DEFAULT_PREFLIGHT_TIMEOUT) -> None:
    """Check a judge with one tiny structured request (a few tokens), waiting at most ``timeout``.

    Raises:
        PreflightError: The model cannot do structured output, the request failed (refused
            connection, HTTP error, unparseable answer) or no answer came within ``timeout``.
            When no retry can heal the failure (no quota, a bad key, no permission, an
            unknown model), the message starts with that cause and ``exc.cause`` holds it.
    """
    from langchain_core.prompts import ChatPromptTemplate

    from langchain_ragmetrics.metrics._judge import (
        JudgeCall,
        JudgeRunner,
        RetryPolicy,
        call_judge,
        cause_of,
    )

    check_judge_capability(llm)
    prompt = ChatPromptTemplate.from_messages(
        [("human", "Connectivity test: call the tool with ok=true.")]
    )
    runner = JudgeRunner.build(llm, prompt, PreflightAnswer)
    call = JudgeCall(prompt, PreflightAnswer, {})
    policy = RetryPolicy(max_retries=0, parse_retries=0)
    box: dict[str, JudgeOutcome | BaseException] = {}
    done = threading.Event()

    def ask() -> None:
        try:
            box["outcome"] = call_judge(runner, call, None, policy)
        except BaseException as exc:
            box["outcome"] = exc
        finally:
            done.set()

    # A daemon thread: a judge that never answers must not hold the caller or its exit.
    transient_thread(ask, name="ragmetrics-preflight").start()
    where = f"the judge {_label(llm)}{_endpoint(llm)}"
    if not done.wait(timeout):
        msg = (
            f"{where} did not answer a one-line test request within {timeout:g} s. "
            "Is the server overloaded or the address wrong? (--no-preflight skips this check)"
        )
        raise PreflightError(msg)
    outcome = box["outcome"]
    if isinstance(outcome, BaseException):
        msg = f"{where} failed a one-line test request: {type(outcome).__name__}: {outcome}"
        raise PreflightError(msg) from outcome
    if outcome.error is not None:
        cause = cause_of(outcome.error)
        if cause is not None:
            detail = outcome.error.split(":", 1)[1].strip()
            msg = f"{where} cannot be used: {cause} ({detail}).{_hint(outcome.error)}"
        else:
            msg = f"{where} failed a one-line test request: {outcome.error}.{_hint(outcome.error)}"
        raise PreflightError(msg, cause=cause)


def _all_cached(metric: JudgedMetric, samples: Sequence[RagSample]) -> bool:
    """True when every judge call the metric would make first is already in its cache."""
    from langchain_ragmetrics.metrics._base import Verdict
    from langchain_ragmetrics.metrics._judge import CachedCall

    cache = metric.cache
    if cache is None:
        return False
    for sample in samples:
        try:
            plan = metric.plan(metric.validate_sample(sample))
        except ValueError:  # this row fails on its own, without a call
            continue
        if isinstance(plan, Verdict):
            continue
        for call in plan.calls:
            if cache.get(CachedCall.key_of(cache, metric.runner(call), call)) is None:
                return False
    return True


def preflight_metrics(
    metrics: Sequence[BaseRagMetric],
    *,
    call: bool,
    samples: Sequence[RagSample] = (),
    timeout: float = DEFAULT_PREFLIGHT_TIMEOUT,
) -> None:
    """Check each distinct judge of ``metrics``: capability always, a test request if ``call``.

    The test request is skipped for a judge whose every call on ``samples`` is already in
    the verdict cache: an unchanged re-run sends nothing at all.

    Raises:
        PreflightError: A judge cannot be used (the message names it and what to do).
    """
    from langchain_ragmetrics.metrics import JudgedMetric

    judged: dict[int, list[JudgedMetric]] = {}
    for metric in metrics:
        if isinstance(metric, JudgedMetric):
            judged.setdefault(id(metric.judge), []).append(metric)
    for group in judged.values():
        llm = group[0].judge
        check_judge_capability(llm)
        if call and not all(_all_cached(m, samples) for m in group):
            preflight(llm, timeout=timeout)
