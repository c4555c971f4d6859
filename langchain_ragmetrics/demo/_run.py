"""``ragmetrics demo``: a RAG chain over the bundled corpus, scored online as it runs.

Builds an LCEL chain (InMemoryVectorStore + LexicalEmbeddings retriever, a prompt, an
answering model), attaches :class:`RagMetricsCallbackHandler`, asks the bundled questions and
prints the scores of every retrieval. Without an OpenAI key or base URL it stays offline: an
extractive answering model and the deterministic metrics only, and it says how to enable the
LLM-judged ones.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_ragmetrics._errors import JudgeConfigError
from langchain_ragmetrics.callbacks import InMemorySink, OnlineResult, RagMetricsCallbackHandler
from langchain_ragmetrics.demo._answerer import CONTEXT_MARK, QUESTION_MARK, extractive_answerer
from langchain_ragmetrics.demo._corpus import Corpus, load_corpus
from langchain_ragmetrics.demo._embeddings import LexicalEmbeddings
from langchain_ragmetrics.evaluation import metric_from_name, metric_names
from langchain_ragmetrics.metrics._judge import make_judge

if TYPE_CHECKING:
    from langchain_core.documents import Document
    from langchain_core.language_models import BaseChatModel

    from langchain_ragmetrics.metrics import BaseRagMetric

__all__ = ["TOP_K", "build_chain", "demo_metrics", "run_demo"]

TOP_K = 2
"""Documents retrieved per question."""
_FLUSH_TIMEOUT_S = 300.0
_LLM_METRICS = tuple(metric_names(judged=True))


def _format_docs(docs: list[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


def build_chain(corpus: Corpus, answerer: Runnable[Any, Any]) -> Runnable[str, str]:
    """Build question -> answer: retrieve ``TOP_K`` documents, fill the prompt, ask ``answerer``."""
    store = InMemoryVectorStore.from_documents(corpus.documents, LexicalEmbeddings())
    retriever = store.as_retriever(search_kwargs={"k": TOP_K})
    prompt = ChatPromptTemplate.from_messages(
        [
            (
                "system",
                "Answer the question in one or two sentences, using only the context. If the "
                "context does not contain the answer, say so.",
            ),
            ("human", CONTEXT_MARK + "{context}" + QUESTION_MARK + "{question}"),
        ]
    )
    chain = (
        {"context": retriever | _format_docs, "question": RunnablePassthrough()}
        | prompt
        | answerer
        | StrOutputParser()
    )
    return chain.with_config(run_name="ragmetrics-demo")


def demo_metrics(judge: BaseChatModel | None) -> list[BaseRagMetric]:
    """The deterministic metrics, plus the LLM-judged ones when there is a judge."""
    names = metric_names(judged=False)
    if judge is not None:
        names += metric_names(judged=True)
    return [metric_from_name(name, llm=judge) for name in names]


class _Printer:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()


def _score(result: OnlineResult) -> str:
    score = result.result.score
    if result.result.failed:
        return "failed"
    if score is None:
        return "skipped"
    return "n/a" if math.isnan(score) else f"{score:.2f}"


def _endpoint(judge: BaseChatModel | None) -> str | None:
    base = getattr(judge, "openai_api_base", None)
    return base if isinstance(base, str) else None


def _explain_mode(say: _Printer, judge: BaseChatModel | None, model: str, why: str) -> None:
    if judge is not None:
        say(f"Mode: LLM ({model} at {_endpoint(judge) or 'OpenAI'}).")
        say("  The model answers, and the LLM-judged metrics run next to the deterministic ones.")
        return
    say(f"Mode: offline ({why}).")
    say("  Answers come from a small extractive model (it quotes the best-matching context")
    say("  sentence) and only the deterministic metrics run: id_based_*, non_llm_*.")
    say(f"  To add the LLM-judged metrics ({', '.join(_LLM_METRICS[:2])},")
    say(f"  {', '.join(_LLM_METRICS[2:])}), run `ragmetrics demo` again after either")
    say("    export OPENAI_API_KEY=sk-...")
    say("    export OPENAI_BASE_URL=http://localhost:11434/v1   (a local OpenAI-compatible")
    say("                  server: Ollama; vLLM is http://localhost:8000/v1; no key needed)")
    say(f"  --model picks the model (default {model}).")


def _print_results(
    say: _Printer, corpus: Corpus, answers: Sequence[str], results: Sequence[OnlineResult]
) -> None:
    by_query: dict[str, list[OnlineResult]] = {}
    for item in results:
        by_query.setdefault(item.query, []).append(item)
    width = max((len(r.result.metric) for r in results), default=0)
    totals: dict[str, list[float]] = {}
    for n, (question, answer) in enumerate(zip(corpus.questions, answers, strict=True), 1):
        found = by_query.get(question.question, [])
        say()
        say(f"[{n}] {question.question}")
        if found:
            ids = [i or "?" for i in found[0].sample.context_ids or []]
            expected = ", ".join(question.reference_context_ids)
            say(f"    retrieved: {', '.join(ids)}   (expected: {expected})")
        say(f"    answer:    {answer}")
        for item in found:
            result = item.result
            detail = result.reason if not result.failed else result.error
            say(f"    {result.metric.ljust(width)}  {_score(item):>7}  {detail or ''}".rstrip())
            if result.score is not None and not math.isnan(result.score):
                totals.setdefault(result.metric, []).append(result.score)
    say()
    say(f"Mean over {len(answers)} retrievals:")
    for metric, scores in totals.items():
        say(f"    {metric.ljust(width)}  {sum(scores) / len(scores):>7.2f}")


def run_demo(
    *,
    model: str = "gpt-4o-mini",
    base_url: str | None = None,
    offline: bool = False,
    out: TextIO | None = None,
) -> int:
    """Run the demo and print per-retrieval scores; returns the exit status (0 = fine).

    Args:
        model: Chat model for answers and judging when an LLM is configured.
        base_url: OpenAI-compatible endpoint (default ``$OPENAI_BASE_URL`` or OpenAI).
        offline: Never call an LLM, even when a key or base URL is set.
        out: Where to print (default stdout).
    """
    say = _Printer(out or sys.stdout)
    corpus = load_corpus()
    judge: BaseChatModel | None = None
    if not offline:
        with contextlib.suppress(JudgeConfigError):
            judge = make_judge(model, base_url=base_url)
    why = "--offline" if offline else "no OPENAI_API_KEY or OPENAI_BASE_URL is set"
    answerer: Runnable[Any, Any] | None = None
    if judge is not None:
        # The same model answers; it is no judge, so the SDK's retries are its only layer.
        answerer = make_judge(model, base_url=base_url, max_retries=2)
    chain = build_chain(corpus, answerer if answerer is not None else extractive_answerer())
    sink = InMemorySink()
    handler = RagMetricsCallbackHandler(
        metrics=demo_metrics(judge), sinks=[sink], max_concurrency=8, exit_timeout=None
    )

    say(
        f"ragmetrics demo: a RAG chain over {len(corpus.documents)} bundled documents "
        f"(retriever k={TOP_K}), scored online by RagMetricsCallbackHandler."
    )
    _explain_mode(say, judge, model, why)
    answers: list[str] = []
    try:
        for question in corpus.questions:
            metadata = {
                "reference": question.reference,
                "reference_context_ids": question.reference_context_ids,
                "reference_contexts": corpus.texts(question.reference_context_ids),
            }
            config: RunnableConfig = {"callbacks": [handler], "metadata": metadata}
            answers.append(chain.invoke(question.question, config=config))
        say()
        say("Scoring in the background (the chain never waited for a judge) ...")
        if not handler.flush(_FLUSH_TIMEOUT_S):
            say("Some scores did not arrive in time; showing what did.")
    except Exception as exc:
        say()
        where = _endpoint(judge) or "OPENAI_BASE_URL"
        say(f"The answering model failed: {type(exc).__name__}: {exc}")
        say(f"Check OPENAI_API_KEY and {where}, or run `ragmetrics demo --offline`.")
        return 1
    finally:
        handler.close(timeout=10)
    _print_results(say, corpus, answers, sink.results)
    stats = handler.stats
    say(
        f"Handler: {stats.seen} retrievals seen, {stats.scored} results scored, "
        f"{stats.failed} failed, {stats.skipped} skipped; judge calls: {stats.usage.judge_calls}."
    )
    return 0
