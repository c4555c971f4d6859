"""Every entry point builds the same sample from the same retrieval: one row per (entry, field).

The four ways a retrieval reaches the metrics (a live trace scored in this process, a live
trace scored in the isolated child, a LangSmith retriever run joined with its root by the
real ``LangSmithMonitor``, and a ``langsmith.evaluate`` run with its example) are fed one
Japanese RAG interaction; every sample field must come out the same, so a field one path
forgets fails its own row.
"""

from __future__ import annotations

import datetime as dt
import enum
import pickle
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import langsmith
import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough
from langchain_core.tracers import LangChainTracer
from langsmith.evaluation import EvaluationResult, RunEvaluator
from langsmith.schemas import Example, Run
from typing_extensions import override

from langchain_ragmetrics import IDBasedContextRecall, InMemorySink, RagMetricsCallbackHandler
from langchain_ragmetrics._retrieval import Capture, Retrieval, RetrievedDocument
from langchain_ragmetrics._schema import RagSample
from langchain_ragmetrics._text import segment
from langchain_ragmetrics.callbacks import ProcessIsolation
from langchain_ragmetrics.integrations.langsmith import RagMetricEvaluator
from langchain_ragmetrics.integrations.monitor import LangSmithMonitor
from tests._support import isolated_setups
from tests._support.captures import make_capture
from tests._support.langsmith_stub import LangSmithStub

QUESTION = "日本の首都はどこですか？"
ANSWER = "日本の首都は東京です。"
REFERENCE = "「東京が首都です。」と教科書は言う。大阪は西日本の中心です。"
DOCS = [
    Document(page_content="東京は日本の首都である。", id="d1"),
    Document(page_content="大阪は西日本の中心都市である。", id="d2"),
]
METADATA = {"reference": REFERENCE, "reference_context_ids": ["d1"], "language": "ja"}
"""What the caller puts in the run metadata (online) or the example (evaluator)."""
EXPECTED = {
    "question": QUESTION,
    "answer": ANSWER,
    "contexts": [doc.page_content for doc in DOCS],
    "context_ids": ["d1", "d2"],
    "language": "ja",
    "reference": REFERENCE,
    "reference_context_ids": ["d1"],
}
ENTRIES = ("live-in-process", "live-isolated-child", "langsmith-run-and-root", "run-and-example")
MONITORED = "fields"
"""The LangSmith project the monitor row traces to and scores."""
START_TIMEOUT = 120.0
"""A child's start (a fresh interpreter importing the stack) on a loaded machine."""


class _Fixed(BaseRetriever):
    """Returns the same two Japanese documents for any query."""

    @override
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return list(DOCS)


def _chain() -> Runnable[dict[str, str], dict[str, str]]:
    retrieve = RunnableLambda(lambda x: x["question"]) | _Fixed()
    return (RunnablePassthrough.assign(docs=retrieve) | RunnableLambda(_answer)).with_config(
        run_name="rag"
    )


def _answer(state: dict[str, Any]) -> dict[str, str]:
    return {"answer": ANSWER}


def _ask(handler: Any) -> None:
    _chain().invoke({"question": QUESTION}, config={"callbacks": [handler], "metadata": METADATA})


def _live_in_process() -> RagSample:
    sink = InMemorySink()
    with RagMetricsCallbackHandler(metrics=[IDBasedContextRecall()], sinks=[sink]) as handler:
        _chain().invoke(
            {"question": QUESTION}, config={"callbacks": [handler], "metadata": METADATA}
        )
        assert handler.flush(30)
    (result,) = sink.results
    return result.sample


def _live_isolated(tmp: Path) -> RagSample:
    path = tmp / "samples.jsonl"
    setup = partial(isolated_setups.sample_dump_setup, str(path))
    with RagMetricsCallbackHandler(isolation=ProcessIsolation(setup=setup)) as handler:
        _chain().invoke(
            {"question": QUESTION}, config={"callbacks": [handler], "metadata": METADATA}
        )
        assert handler.flush(START_TIMEOUT)
    (line,) = path.read_text(encoding="utf-8").splitlines()
    return RagSample.model_validate_json(line)


def _langsmith_run_and_root(stub: LangSmithStub, tmp: Path) -> RagSample:
    """Traced to the LangSmith stub, then scored by the real monitor (one retriever run)."""
    client = langsmith.Client(api_url=stub.url, api_key="test")
    try:
        tracer = LangChainTracer(project_name=MONITORED, client=client)
        _chain().invoke(
            {"question": QUESTION}, config={"callbacks": [tracer], "metadata": METADATA}
        )
        tracer.wait_for_futures()
        client.flush()

        def finished() -> list[dict[str, Any]]:
            runs = [r for r in stub.runs() if r.get("run_type") == "retriever"]
            roots = [stub.run(r["trace_id"]) or {} for r in runs if r.get("end_time")]
            return runs if roots and all(root.get("end_time") for root in roots) else []

        (stored,) = stub.wait_for(finished, timeout=30)
        sink = InMemorySink()
        summary = LangSmithMonitor(
            MONITORED,
            client=client,
            metrics=[IDBasedContextRecall()],
            sinks=[sink],
            checkpoint=tmp / "monitor.sqlite",
            request_timeout=10.0,
        ).run()
    finally:
        client.close(timeout=10)
    assert summary.errors == [], summary.errors
    (result,) = sink.results
    assert str(result.run_id) == stored["id"]
    assert result.query == QUESTION  # the retriever's query
    return result.sample


class _Keep(RunEvaluator):
    """Keeps the sample the evaluator builds from each run and example."""

    def __init__(self) -> None:
        self.evaluator = RagMetricEvaluator(IDBasedContextRecall())
        self.samples: list[RagSample] = []

    @override
    def evaluate_run(
        self, run: Run, example: Example | None = None, evaluator_run_id: uuid.UUID | None = None
    ) -> EvaluationResult:
        sample = self.evaluator.to_sample(run, example)
        assert isinstance(sample, RagSample)
        self.samples.append(sample)
        return self.evaluator.evaluate_run(run, example)


def _run_and_example(stub: LangSmithStub) -> RagSample:
    example = Example(
        id=uuid.uuid4(),
        dataset_id=uuid.UUID(int=7),
        inputs={"question": QUESTION},
        outputs={"reference": REFERENCE, "reference_context_ids": ["d1"]},
        metadata={"language": "ja"},
        created_at=dt.datetime.now(dt.timezone.utc),
    )
    keep = _Keep()
    client = langsmith.Client(api_url=stub.url, api_key="test")
    try:
        list(
            langsmith.evaluate(
                _chain(), data=[example], evaluators=[keep], client=client, upload_results=False
            )
        )
    finally:
        client.close(timeout=10)
    (sample,) = keep.samples
    return sample


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Callable[[], Any]]]:
    """Each entry point's sample, built once (on first use) for all its field rows."""
    built: dict[str, RagSample] = {}
    with LangSmithStub() as stub:
        makers: dict[str, Callable[[], RagSample]] = {
            "live-in-process": _live_in_process,
            "live-isolated-child": partial(_live_isolated, tmp_path_factory.mktemp("child")),
            "langsmith-run-and-root": partial(
                _langsmith_run_and_root, stub, tmp_path_factory.mktemp("monitor")
            ),
            "run-and-example": partial(_run_and_example, stub),
        }

        def getter(entry: str) -> Callable[[], RagSample]:
            def get() -> RagSample:
                if entry not in built:
                    built[entry] = makers[entry]()
                return built[entry]

            return get

        yield {entry: getter(entry) for entry in ENTRIES}


@pytest.mark.parametrize("field", list(EXPECTED))
@pytest.mark.parametrize("entry", ENTRIES)
def test_every_entry_point_fills_every_sample_field(
    samples: dict[str, Callable[[], RagSample]], entry: str, field: str
) -> None:
    sample = samples[entry]()
    assert getattr(sample, field) == EXPECTED[field]


# --------------------------------------------------------------------------- the value itself


def _capture(**overrides: Any) -> Capture:
    fields: dict[str, Any] = {"tags": ("t",), "root_outputs": {"answer": ANSWER}}
    return make_capture(QUESTION, DOCS, **{**fields, **overrides})


def test_language_in_run_metadata_chooses_the_segmenter_per_request() -> None:
    japanese = Retrieval.from_trace(_capture(metadata={"language": "ja", "reference": REFERENCE}))
    english = Retrieval.from_trace(_capture(metadata={"reference": REFERENCE}))
    assert japanese.to_sample().language == "ja"
    assert english.to_sample().language is None
    # Japanese rules keep the quoted sentence inside its clause; English rules cut it out.
    assert len(segment(REFERENCE, "ja")) == 2
    assert len(segment(REFERENCE, "en")) == 3


def test_a_retrieval_is_frozen_and_survives_pickling() -> None:
    retrieval = Retrieval.from_trace(_capture(metadata=METADATA))
    assert pickle.loads(pickle.dumps(retrieval)) == retrieval
    with pytest.raises(AttributeError):
        retrieval.query = "changed"  # type: ignore[misc]
    first, second = (RetrievedDocument(doc.page_content, doc.id) for doc in DOCS)
    assert retrieval.documents == (first, second)


class _Tier(str, enum.Enum):
    GOLD = "gold"


class _Level(enum.IntEnum):
    HIGH = 3


class _Text(str):
    """An app's own text type: it pickles as its class."""


class _Ratio(float):
    pass


def _leaf_types(value: Any) -> Iterator[type]:
    """The type of every value inside ``value`` (named tuples and containers walked)."""
    yield type(value)
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaf_types(key)
            yield from _leaf_types(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaf_types(item)


def test_a_live_retrieval_holds_only_built_in_types_whatever_the_app_passed() -> None:
    """Subclasses of ``str``, ``int`` and ``float`` (enums, an app's text type) become the
    built-in: another process (the isolated child) may be unable to import their class."""
    capture = make_capture(
        _Text("Where?"),
        [_Text("plain text document"), Document(page_content=_Text("a"), id=_Text("d1"))],
        retriever=_Text("docs"),
        tags=(_Text("t"),),
        metadata={"tier": _Tier.GOLD, "nested": [{"level": _Level.HIGH}], "ratio": _Ratio(0.5)},
        root_metadata={"reference": _Text("ref")},
        root_outputs={"answer": _Text("Here.")},
    )
    retrieval = Retrieval.from_trace(capture, question_from=lambda _inputs: _Text("Asked?"))
    allowed = {str, int, float, bool, type(None), tuple, list, dict, uuid.UUID}
    allowed |= {Retrieval, RetrievedDocument}
    assert set(_leaf_types(retrieval)) <= allowed
    assert (retrieval.query, retrieval.question, retrieval.answer) == ("Where?", "Asked?", "Here.")
    assert retrieval.metadata == {
        "reference": "ref", "tier": "gold", "nested": [{"level": 3}], "ratio": 0.5,
    }  # fmt: skip
    assert retrieval.documents == (
        RetrievedDocument("plain text document"), RetrievedDocument("a", "d1"),
    )  # fmt: skip
    assert (retrieval.tags, retrieval.retriever, retrieval.reference) == (("t",), "docs", "ref")
    data = pickle.dumps(retrieval)
    assert all(name.encode() not in data for name in ("_Tier", "_Level", "_Text", "_Ratio"))


def test_an_unsupported_language_fails_the_sample_naming_the_field() -> None:
    retrieval = Retrieval.from_trace(_capture(metadata={"language": "xx-unknown"}))
    with pytest.raises(ValueError, match="language"):
        retrieval.to_sample()
