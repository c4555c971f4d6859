import threading
import uuid

import pytest
from langchain_core.documents import Document

from langchain_ragmetrics.callbacks._tracker import TraceTracker

DOCS = [Document(page_content="a", id="1")]


def ids(n: int) -> list[uuid.UUID]:
    return [uuid.uuid4() for _ in range(n)]


def test_nested_retrieval_is_attributed_to_the_root() -> None:
    tracker = TraceTracker(max_open_traces=10)
    root, seq, par, ret = ids(4)
    tracker.start(root, None, inputs="q?", metadata={"reference": "r"})
    tracker.start(seq, root)
    tracker.start(par, seq)
    tracker.start(ret, par, metadata={"k": 1}, retrieval=("query", "MyRetriever", ["t"]))
    assert tracker.end(ret, documents=DOCS) is None
    assert tracker.end(par, outputs={"x": 1}) is None
    assert tracker.end(seq, outputs="ans") is None
    finished = tracker.end(root, outputs="ans")
    assert finished is not None
    assert not finished.errored
    (capture,) = finished.captures
    assert capture.root_run_id == root
    assert capture.trace_id == root
    assert capture.run_id == ret
    assert capture.parent_run_id == par
    assert (capture.query, capture.retriever, list(capture.tags)) == ("query", "MyRetriever", ["t"])
    assert capture.documents == DOCS
    assert capture.root_inputs == "q?"
    assert capture.root_outputs == "ans"
    assert capture.root_metadata == {"reference": "r"}
    assert capture.metadata == {"k": 1}
    assert tracker.open_traces == 0
    assert tracker.open_runs == 0


def test_state_is_released_even_when_children_never_end() -> None:
    tracker = TraceTracker(max_open_traces=10)
    root, child, ret = ids(3)
    tracker.start(root, None)
    tracker.start(child, root)
    tracker.start(ret, child, retrieval=("q", None, ()))
    finished = tracker.end(root, outputs="a")
    assert finished is not None
    assert finished.captures == []  # the retriever never ended: nothing to score
    assert (tracker.open_traces, tracker.open_runs) == (0, 0)


def test_a_retriever_on_its_own_is_its_own_root() -> None:
    tracker = TraceTracker(max_open_traces=10)
    (ret,) = ids(1)
    tracker.start(ret, None, inputs="q", retrieval=("q", "R", ()))
    finished = tracker.end(ret, documents=DOCS)
    assert finished is not None
    (capture,) = finished.captures
    assert capture.root_run_id == capture.run_id == capture.trace_id == ret
    assert capture.root_outputs is None


def test_two_retrievals_in_one_trace_come_out_in_start_order() -> None:
    tracker = TraceTracker(max_open_traces=10)
    root, r1, r2 = ids(3)
    tracker.start(root, None)
    tracker.start(r1, root, retrieval=("q1", "first", ()))
    tracker.start(r2, root, retrieval=("q2", "second", ()))
    tracker.end(r2, documents=DOCS)
    tracker.end(r1, documents=DOCS)
    finished = tracker.end(root, outputs="a")
    assert finished is not None
    assert [c.retriever for c in finished.captures] == ["first", "second"]
    assert {c.trace_id for c in finished.captures} == {root}


def test_root_error_is_reported_and_releases_state() -> None:
    tracker = TraceTracker(max_open_traces=10)
    root, ret = ids(2)
    tracker.start(root, None)
    tracker.start(ret, root, retrieval=("q", None, ()))
    tracker.end(ret, documents=DOCS)
    finished = tracker.fail(root)
    assert finished is not None
    assert finished.errored
    assert finished.captures == []
    assert (tracker.open_traces, tracker.open_runs) == (0, 0)


def test_a_failed_retrieval_is_dropped_but_the_trace_goes_on() -> None:
    tracker = TraceTracker(max_open_traces=10)
    root, bad, good = ids(3)
    tracker.start(root, None)
    tracker.start(bad, root, retrieval=("q", "bad", ()))
    tracker.start(good, root, retrieval=("q", "good", ()))
    assert tracker.fail(bad) is None
    tracker.end(good, documents=DOCS)
    finished = tracker.end(root, outputs="a")
    assert finished is not None
    assert [c.retriever for c in finished.captures] == ["good"]


def test_deferred_inputs_of_a_stream_replace_the_placeholder() -> None:
    tracker = TraceTracker(max_open_traces=10)
    root, ret = ids(2)
    tracker.start(root, None, inputs={"input": ""})
    tracker.start(ret, root, retrieval=("q", None, ()))
    tracker.end(ret, documents=DOCS)
    finished = tracker.end(root, outputs="a", inputs="the real question")
    assert finished is not None
    assert finished.captures[0].root_inputs == "the real question"


def test_handler_attached_below_the_root_has_no_trace_id() -> None:
    tracker = TraceTracker(max_open_traces=10)
    unseen_parent, sub, ret = ids(3)
    tracker.start(sub, unseen_parent)
    tracker.start(ret, sub, retrieval=("q", None, ()))
    tracker.end(ret, documents=DOCS)
    finished = tracker.end(sub, outputs="a")
    assert finished is not None
    assert finished.captures[0].root_run_id == sub
    assert finished.captures[0].trace_id is None


def test_oldest_open_trace_is_evicted_at_the_bound() -> None:
    tracker = TraceTracker(max_open_traces=2)
    a, b, c, a_child = ids(4)
    assert tracker.start(a, None) == 0
    tracker.start(a_child, a)
    assert tracker.start(b, None) == 0
    assert tracker.start(c, None) == 1
    assert tracker.open_traces == 2
    assert tracker.end(a) is None  # forgotten
    assert tracker.open_runs == 2  # b and c; a's child went with it


def test_unknown_events_are_ignored() -> None:
    tracker = TraceTracker(max_open_traces=2)
    assert tracker.end(uuid.uuid4(), outputs="x") is None
    assert tracker.fail(uuid.uuid4()) is None


def test_rejects_a_non_positive_bound() -> None:
    with pytest.raises(ValueError, match="max_open_traces"):
        TraceTracker(max_open_traces=0)


def test_concurrent_traces_from_many_threads_do_not_mix() -> None:
    tracker = TraceTracker(max_open_traces=1000)
    results: dict[int, list[str]] = {}
    barrier = threading.Barrier(8)

    def run(worker: int) -> None:
        barrier.wait()
        for i in range(50):
            root, ret = ids(2)
            tracker.start(root, None, inputs=f"{worker}-{i}")
            tracker.start(ret, root, retrieval=(f"{worker}-{i}", None, ()))
            tracker.end(ret, documents=[Document(page_content=f"{worker}-{i}")])
            finished = tracker.end(root, outputs=f"{worker}-{i}")
            assert finished is not None
            c = finished.captures[0]
            results.setdefault(worker, []).append(
                f"{c.query}|{c.root_inputs}|{c.documents[0].page_content}"
            )

    threads = [threading.Thread(target=run, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for worker, lines in results.items():
        assert lines == [f"{worker}-{i}|{worker}-{i}|{worker}-{i}" for i in range(50)]
    assert (tracker.open_traces, tracker.open_runs) == (0, 0)


def test_trace_id_of_an_unseen_parent_can_be_found_externally() -> None:
    real_trace, unseen_parent, sub, other = ids(4)
    tracker = TraceTracker(
        max_open_traces=10,
        find_trace_id=lambda parent: real_trace if parent == unseen_parent else None,
    )
    tracker.start(sub, unseen_parent)
    tracker.start(other, uuid.uuid4())
    children = {run: uuid.uuid4() for run in (sub, other)}
    for run, child in children.items():
        tracker.start(child, run, retrieval=("q", None, ()))
    found = {}
    for run, child in children.items():
        tracker.end(child, documents=DOCS)
        finished = tracker.end(run, outputs="a")
        assert finished is not None
        found[run] = finished.captures[0].trace_id
    assert found == {sub: real_trace, other: None}


def test_a_failing_trace_id_lookup_is_ignored() -> None:
    def broken(parent: uuid.UUID) -> uuid.UUID | None:
        raise RuntimeError("context unavailable")

    tracker = TraceTracker(max_open_traces=10, find_trace_id=broken)
    sub, ret = ids(2)
    tracker.start(sub, uuid.uuid4())
    tracker.start(ret, sub, retrieval=("q", None, ()))
    tracker.end(ret, documents=DOCS)
    finished = tracker.end(sub, outputs="a")
    assert finished is not None
    assert finished.captures[0].trace_id is None


def test_a_stream_closed_early_finishes_the_trace_with_the_streamed_tokens() -> None:
    tracker = TraceTracker(max_open_traces=10)
    root, ret, model, first_model = ids(4)
    tracker.start(root, None, inputs="q?")
    tracker.start(ret, root, retrieval=("q", None, ()))
    tracker.end(ret, documents=DOCS)
    tracker.token(first_model, root, "draft")  # an earlier model run (e.g. a rewrite step)
    for piece in ("Par", "tial"):
        tracker.token(model, root, piece)  # the last model run streaming the answer
    tracker.token(model, uuid.uuid4(), "elsewhere")  # a parent the tracker never saw
    finished = tracker.fail(root, closed_early=True)  # GeneratorExit at the root
    assert finished is not None
    assert not finished.errored
    (capture,) = finished.captures
    assert capture.root_outputs is None
    assert capture.streamed_answer == "Partial"
    assert (tracker.open_traces, tracker.open_runs) == (0, 0)


def test_a_retriever_called_by_a_tool_belongs_to_the_trace() -> None:
    tracker = TraceTracker(max_open_traces=10)
    root, agent, tool_run, ret = ids(4)
    tracker.start(root, None, inputs={"messages": []})
    tracker.start(agent, root)
    tracker.start(tool_run, agent, inputs={"query": "q"})  # on_tool_start
    tracker.start(ret, tool_run, retrieval=("q", "docs", ()))
    tracker.end(ret, documents=DOCS)
    tracker.end(tool_run, outputs="fact")  # on_tool_end
    tracker.end(agent, outputs={})
    finished = tracker.end(root, outputs={"messages": ["final"]})
    assert finished is not None
    (capture,) = finished.captures
    assert capture.root_run_id == root
    assert capture.parent_run_id == tool_run
    assert capture.streamed_answer is None


def test_runs_match_by_value_not_by_object() -> None:
    # LangChain may hand the same run id over as different UUID objects (copies, round trips
    # through uuid_utils): the tracker keys runs by the id's value.
    tracker = TraceTracker(max_open_traces=10)
    root, ret, model = ids(3)
    tracker.start(root, None, inputs="q")
    tracker.start(ret, uuid.UUID(str(root)), retrieval=("q", None, ()))
    tracker.token(model, uuid.UUID(str(root)), "partial")
    assert tracker.end(uuid.UUID(str(ret)), documents=DOCS) is None
    finished = tracker.fail(uuid.UUID(str(root)), closed_early=True)
    assert finished is not None
    (capture,) = finished.captures
    assert (capture.run_id, capture.root_run_id) == (ret, root)
    assert capture.streamed_answer == "partial"
    assert (tracker.open_traces, tracker.open_runs) == (0, 0)


def test_a_failed_retriever_is_not_captured_but_its_siblings_are() -> None:
    tracker = TraceTracker(max_open_traces=10)
    root, good, bad = ids(3)
    tracker.start(root, None, inputs="q")
    tracker.start(good, root, retrieval=("good", None, ()))
    tracker.start(bad, root, retrieval=("bad", None, ()))
    assert tracker.fail(bad) is None
    tracker.end(good, documents=DOCS)
    finished = tracker.end(root, outputs="a")
    assert finished is not None
    assert [c.query for c in finished.captures] == ["good"]
    assert (tracker.open_traces, tracker.open_runs) == (0, 0)
