import json
import math
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import ContextRecall, EvaluationResult, IDBasedContextRecall, RagSample
from langchain_ragmetrics._dataset import load_dataset
from langchain_ragmetrics.evaluation import ResultFileError, evaluate, sample_id
from langchain_ragmetrics.evaluation._saved import dataset_fingerprint, sample_ids
from tests._support.judges import EINSTEIN_CONTEXT, EINSTEIN_REFERENCE, EINSTEIN_VERDICTS
from tests._support.openai_server import JudgeServer, router
from tests._support.results import FAILED, build_result


def test_round_trip_keeps_scores_reasons_details_usage_and_status(tmp_path: Path) -> None:
    original = build_result(
        {"context_recall": [0.5, FAILED, None], "context_precision": [1.0, 0.0, 0.25]},
        elapsed_s=2.5,
        interrupted=True,
    )
    original.rows[1].sample.metadata.update({"topic": "x", "results": "clash", "row": 9})
    path = original.to_jsonl(tmp_path / "deep" / "run.jsonl")
    loaded = EvaluationResult.load(path)
    assert loaded.metrics == original.metrics
    assert (loaded.source, loaded.elapsed_s, loaded.interrupted) == ("data.jsonl", 2.5, True)
    assert [r.location for r in loaded.rows] == [r.location for r in original.rows]
    assert loaded["context_precision"] == [1.0, 0.0, 0.25]
    recall = loaded["context_recall"]
    assert recall[0] == 0.5
    assert math.isnan(recall[1] or 0.0)
    assert recall[2] is None
    assert [r.status("context_recall") for r in loaded.rows] == ["scored", "failed", "not_run"]
    for old, new in zip(original.rows, loaded.rows, strict=True):
        assert new.sample == old.sample
        for name in original.metrics:
            a, b = old.results[name], new.results[name]
            if a is None or b is None:
                assert a is b is None
                continue
            assert (b.reason, b.details, b.usage, b.error, b.judge) == (
                a.reason,
                a.details,
                a.usage,
                a.error,
                a.judge,
            )
    assert loaded.aggregates == original.aggregates
    assert loaded.usage == original.usage


def test_a_results_file_is_still_a_dataset(tmp_path: Path) -> None:
    path = build_result({"context_recall": [0.5, 1.0]}).to_jsonl(tmp_path / "r.jsonl")
    samples = load_dataset(path)  # the header line is skipped
    assert [s.question for s in samples] == ["question 0", "question 1"]


def test_a_file_without_header_loads_too(tmp_path: Path) -> None:
    path = build_result({"context_recall": [0.5, 1.0]}).to_jsonl(tmp_path / "r.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    plain = tmp_path / "plain.jsonl"
    plain.write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    loaded = EvaluationResult.load(plain)
    assert loaded.metrics == ["context_recall"]
    assert loaded["context_recall"] == [0.5, 1.0]
    assert loaded.info is None


def test_bad_files_name_the_file_and_line(tmp_path: Path) -> None:
    path = build_result({"context_recall": [0.5, 1.0]}).to_jsonl(tmp_path / "r.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([lines[0], lines[1], "{oops"]) + "\n", encoding="utf-8")
    with pytest.raises(ResultFileError, match=r"broken\.jsonl, line 3: cannot read the result"):
        EvaluationResult.load(broken)
    dataset = tmp_path / "dataset.jsonl"
    dataset.write_text('{"question": "q", "contexts": ["c"]}\n', encoding="utf-8")
    with pytest.raises(ResultFileError, match=r"line 1: .*not a ragmetrics results file"):
        EvaluationResult.load(dataset)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(ResultFileError, match="no results in the file"):
        EvaluationResult.load(empty)
    with pytest.raises(FileNotFoundError):
        EvaluationResult.load(tmp_path / "missing.jsonl")


def test_evaluate_records_run_metadata(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI], tmp_path: Path
) -> None:
    judge_server.script = router(RecallStatements=EINSTEIN_VERDICTS)
    rows = [
        {"question": "q", "contexts": [EINSTEIN_CONTEXT], "reference": EINSTEIN_REFERENCE,
         "reference_context_ids": ["a"], "retrieved_context_ids": ["a"]},
    ]  # fmt: skip
    result = evaluate(rows, [ContextRecall(), IDBasedContextRecall()], llm=make_judge())
    info = result.info
    assert info is not None
    assert info.package_version == "0.1.0"
    assert info.judges == ["judge-model"]
    assert info.metrics["context_recall"].judge == "judge-model"
    assert info.metrics["context_recall"].class_name == "ContextRecall"
    assert info.metrics["id_based_context_recall"].prompt_hash is None
    assert info.dataset_fingerprint == dataset_fingerprint(load_dataset(rows))
    assert info.created_at.tzinfo is not None
    # a different prompt is a different hash
    custom = ContextRecall(prompt=ContextRecall.default_prompt().partial(language="Welsh"))
    again = evaluate(rows, [custom], llm=make_judge(), show_progress=False)
    assert again.info is not None
    assert (
        again.info.metrics["context_recall"].prompt_hash
        != info.metrics["context_recall"].prompt_hash
    )
    loaded = EvaluationResult.load(result.to_jsonl(tmp_path / "r.jsonl"))
    assert loaded.info == info
    header = json.loads((tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert header["ragmetrics_run"]["info"]["package_version"] == "0.1.0"


def test_sample_ids_are_given_or_derived_from_question_and_reference() -> None:
    given = build_result({"m": [1.0, 1.0]}, ids=["a-1", None])
    assert sample_id(given.rows[0].sample) == "a-1"
    derived = sample_id(given.rows[1].sample)
    assert len(derived) == 16
    other_contexts = given.rows[1].sample.model_copy(update={"contexts": ["changed"]})
    assert sample_id(other_contexts) == derived  # contexts are what a comparison varies
    other_question = given.rows[1].sample.model_copy(update={"question": "changed"})
    assert sample_id(other_question) != derived
    twice = [given.rows[1].sample, given.rows[1].sample]
    assert sample_ids(twice) == [derived, f"{derived}#2"]


def test_the_fingerprint_of_rows_holding_live_objects_is_stable_and_keeps_their_type() -> None:
    """A row's extra key may hold anything (kept in its metadata): the fingerprint no longer
    fails on it (evaluate() used to raise after scoring the whole run), and counts its type."""

    def make(value: object) -> list[RagSample]:
        return [RagSample(question="q", contexts=["c"], metadata={"handle": value})]

    first = dataset_fingerprint(make(lambda: None))
    assert first == dataset_fingerprint(make(lambda: 1))  # same type, another object
    assert first != dataset_fingerprint(make(threading.Lock()))
    assert first != dataset_fingerprint(make("text"))


def test_a_lone_surrogate_in_a_sample_keeps_the_run_and_its_files(tmp_path: Path) -> None:
    """A cut emoji (``"\\ud83d"``) loads and scores; before, the run's fingerprint raised
    after every job was scored (nothing returned), and writing the files raised too."""
    sample = RagSample(
        question="cut \ud83d emoji",
        contexts=["a \ud83d", "b"],
        context_ids=["1", "2"],
        reference_context_ids=["1"],
    )
    result = evaluate([sample], [IDBasedContextRecall()], show_progress=False)
    assert result["id_based_context_recall"] == [1.0]
    back = EvaluationResult.load(result.to_jsonl(tmp_path / "r.jsonl"))
    assert back.rows[0].sample.question == "cut \ud83d emoji"
    assert sample_id(back.rows[0].sample) == sample_id(sample)
    assert "cut \\ud83d emoji" in result.to_csv(tmp_path / "r.csv").read_text(encoding="utf-8")


def test_a_write_that_fails_midway_leaves_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, ``to_jsonl`` truncated the target first: a crash mid-write lost the old run."""
    one = RagSample(question="q", contexts=["c"], context_ids=["1"], reference_context_ids=["1"])
    result = evaluate([one], [IDBasedContextRecall()], show_progress=False)
    target = result.to_jsonl(tmp_path / "r.jsonl")
    before = target.read_text(encoding="utf-8")

    def broken(self: EvaluationResult) -> list[dict[str, object]]:
        return [{"fine": 1}, {"bad": object()}]  # the second line cannot be written

    monkeypatch.setattr(EvaluationResult, "jsonl_records", broken)
    # json.dumps (no default=str) raises on the object
    monkeypatch.setattr("langchain_ragmetrics.evaluation._result.json_text", json.dumps)
    with pytest.raises(TypeError):
        result.to_jsonl(target)
    assert target.read_text(encoding="utf-8") == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]  # no temporary file left


def test_metadata_named_like_a_field_or_prefixed_round_trips(tmp_path: Path) -> None:
    """Before, ``{"metadata.team": "x", "team": "y"}`` came back as ``{"team": "y"}``, and a
    key named like a RAGAS column (``response``) became the answer when the results file
    was loaded as a dataset."""
    metadata = {"metadata.team": "x", "team": "y", "response": "not the answer"}
    one = RagSample(
        question="q",
        contexts=["c"],
        context_ids=["1"],
        reference_context_ids=["1"],
        metadata=metadata,
    )
    result = evaluate([one], [IDBasedContextRecall()], show_progress=False)
    path = result.to_jsonl(tmp_path / "r.jsonl")
    assert EvaluationResult.load(path).rows[0].sample.metadata == metadata
    (again,) = load_dataset(path)
    assert again.answer is None
