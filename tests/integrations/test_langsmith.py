import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import langsmith
import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.messages import AIMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langsmith.schemas import Example, Run
from typing_extensions import override

from langchain_ragmetrics import (
    ContextPrecision,
    ContextRecall,
    IDBasedContextPrecision,
    IDBasedContextRecall,
    RagSample,
)
from langchain_ragmetrics.integrations.langsmith import (
    RagMetricEvaluator,
    metric_to_langsmith_evaluator,
)
from tests._support.judges import (
    EINSTEIN_CONTEXT,
    EINSTEIN_REFERENCE,
    EINSTEIN_VERDICTS,
    keyword_precision,
    payload,
)
from tests._support.langsmith_stub import LangSmithStub
from tests._support.openai_server import JudgeServer, reply_error, router

pytestmark = pytest.mark.filterwarnings(
    "ignore::langsmith._internal._beta_decorator.LangSmithBetaWarning"
)

DOCS = {
    "einstein": Document(page_content=EINSTEIN_CONTEXT, id="einstein"),
    "paris": Document(page_content="Paris is the capital of France.", id="paris"),
}
QUESTION = "What can you tell me about Albert Einstein?"


class TwoDocs(BaseRetriever):
    """Always returns the Paris page first, then the Einstein page."""

    @override
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return [DOCS["paris"], DOCS["einstein"]]


def rag_chain() -> Any:
    """question -> {"answer": ...}, with the retriever as a child run (not in the outputs)."""
    answer = RunnableLambda(lambda x: {"answer": f"{len(x['docs'])} documents found."})
    return (
        RunnableLambda(lambda inputs: inputs["question"])
        | {"docs": TwoDocs(), "question": RunnablePassthrough()}
        | answer
    )


def example(outputs: dict[str, Any] | None = None, **inputs: Any) -> Example:
    return Example(
        id=uuid.uuid4(),
        dataset_id=uuid.UUID(int=7),
        inputs=inputs or {"question": QUESTION},
        outputs=outputs,
        created_at=dt.datetime.now(dt.timezone.utc),
    )


def make_run(outputs: dict[str, Any], inputs: dict[str, Any] | None = None, **extra: Any) -> Run:
    return Run(
        id=uuid.uuid4(),
        trace_id=uuid.uuid4(),
        name="target",
        run_type="chain",
        start_time=dt.datetime.now(dt.timezone.utc),
        inputs=inputs or {},
        outputs=outputs,
        **extra,
    )


def judge_script() -> Any:
    return router(RecallStatements=EINSTEIN_VERDICTS, ContextVerdicts=keyword_precision("Einstein"))


def test_langsmith_evaluate_uploads_feedback_from_retriever_child_runs(
    judge_server: JudgeServer,
    make_judge: Callable[..., Any],
    langsmith_stub: LangSmithStub,
    langsmith_client: langsmith.Client,
) -> None:
    judge_server.script = judge_script()
    judge = make_judge()
    evaluators = [
        metric_to_langsmith_evaluator(ContextRecall(llm=judge)),
        metric_to_langsmith_evaluator(ContextPrecision(llm=judge)),
        metric_to_langsmith_evaluator(IDBasedContextRecall()),
        metric_to_langsmith_evaluator(IDBasedContextPrecision(), key="id_precision"),
    ]
    outputs = {"reference": EINSTEIN_REFERENCE, "reference_context_ids": ["einstein"]}
    results = langsmith.evaluate(
        rag_chain(),
        data=[example(outputs)],
        evaluators=evaluators,
        client=langsmith_client,
        experiment_prefix="ragmetrics",
    )
    (row,) = list(results)
    scores = {r.key: r.score for r in row["evaluation_results"]["results"]}
    # The Einstein page is useful but ranked second: average precision 1/2.
    assert scores == {
        "context_recall": 0.5,
        "context_precision": 0.5,
        "id_based_context_recall": 1.0,
        "id_precision": 0.5,
    }
    sent = payload(judge_server.requests[0])
    assert sent["passages"] == [DOCS["paris"].page_content, EINSTEIN_CONTEXT]
    langsmith_client.flush()
    feedback = langsmith_stub.wait_for_feedback(4)
    by_key = {f["key"]: f for f in feedback}
    assert by_key["context_recall"]["score"] == 0.5
    assert by_key["context_recall"]["comment"] == (
        "2 of 4 reference sentences can be attributed to the contexts."
    )
    assert by_key["id_precision"]["comment"] == "1 of 2 retrieved ids are relevant."
    assert {f["run_id"] for f in feedback} == {str(row["run"].id)}


async def test_langsmith_aevaluate_with_contexts_in_the_outputs(
    judge_server: JudgeServer, make_judge: Callable[..., Any], langsmith_client: langsmith.Client
) -> None:
    judge_server.script = judge_script()

    async def target(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"output": AIMessage(content="He was a physicist."), "contexts": [EINSTEIN_CONTEXT]}

    results = await langsmith.aevaluate(
        target,
        data=[example({"answer": EINSTEIN_REFERENCE}), example(None)],
        evaluators=[metric_to_langsmith_evaluator(ContextRecall(llm=make_judge()))],
        client=langsmith_client,
        upload_results=False,
    )
    rows = [row async for row in results]
    found = sorted(
        ((r.score, r.comment) for row in rows for r in row["evaluation_results"]["results"]),
        key=lambda pair: pair[0] is None,
    )
    assert found[0] == (0.5, "2 of 4 reference sentences can be attributed to the contexts.")
    assert found[1] == (None, "skipped: ContextRecall needs `reference`")
    assert judge_server.count() == 1


def test_to_sample_reads_documented_keys_and_serialised_documents() -> None:
    evaluator = RagMetricEvaluator(IDBasedContextRecall())
    run = make_run(
        {
            "result": {"content": "an answer", "type": "ai"},
            "source_documents": [
                {"page_content": "one", "metadata": {"doc_id": "d1"}},
                {
                    "lc": 1,
                    "type": "constructor",
                    "id": ["langchain", "schema", "document", "Document"],
                    "kwargs": {"page_content": "two", "id": "d2"},
                },
                "three",
            ],
        },
        extra={"metadata": {"reference_context_ids": ["d2"]}},
    )
    sample = evaluator.to_sample(run, example({"ground_truth": "ref"}, query="the question"))
    assert sample == RagSample(
        question="the question",
        answer="an answer",
        reference="ref",
        contexts=["one", "two", "three"],
        context_ids=["d1", "d2", None],
        reference_context_ids=["d2"],
    )
    result = evaluator.evaluate_run(run, example({"ground_truth": "ref"}, query="q"))
    assert (result.key, result.score) == ("id_based_context_recall", 1.0)


def test_custom_keys_and_prepare() -> None:
    metric = IDBasedContextRecall()
    evaluator = RagMetricEvaluator(
        metric, question_key="ask", contexts_key="hits", reference_key="gold"
    )
    run = make_run({"hits": [DOCS["paris"]], "contexts": [DOCS["einstein"]]}, {"ask": "q"})
    sample = evaluator.to_sample(run, example({"gold": "g", "reference": "other"}, ask="q"))
    assert isinstance(sample, RagSample)
    assert (sample.question, sample.reference) == ("q", "g")
    assert sample == RagSample.model_validate(
        {"question": "q", "reference": "g", "contexts": [DOCS["paris"]]}
    )
    custom = RagMetricEvaluator(
        metric,
        prepare=lambda run, ex: {"context_ids": ["a", "b"], "reference_context_ids": ["b"]},
    )
    assert custom.evaluate_run(run).score == 1.0
    assert custom.feedback_keys == ["id_based_context_recall"]
    assert repr(custom) == "RagMetricEvaluator(IDBasedContextRecall, key='id_based_context_recall')"


def test_judge_failure_becomes_a_scoreless_error_comment(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = lambda req: reply_error(400, "bad request for the judge")
    evaluator = metric_to_langsmith_evaluator(ContextRecall(llm=make_judge()))
    run = make_run({"answer": "a", "contexts": [EINSTEIN_CONTEXT]})
    result = evaluator.evaluate_run(run, example({"reference": EINSTEIN_REFERENCE}))
    assert result.score is None
    assert result.comment is not None
    assert result.comment.startswith("error: ")
    assert "bad request for the judge" in result.comment


def test_question_falls_back_to_the_retriever_query() -> None:
    retriever_run = make_run({"documents": [DOCS["einstein"]]}, {"query": "from the retriever"})
    retriever_run.run_type = "retriever"
    run = make_run({"answer": "a"}, child_runs=[retriever_run])
    sample = RagMetricEvaluator(IDBasedContextRecall()).to_sample(run, None)
    assert isinstance(sample, RagSample)
    assert sample.question == "from the retriever"
    assert sample.contexts == RagSample(contexts=[DOCS["einstein"]]).contexts
    skipped = RagMetricEvaluator(IDBasedContextRecall()).evaluate_run(run, None)
    assert skipped.score is None
    assert skipped.comment == "skipped: IDBasedContextRecall needs `reference_context_ids`"
