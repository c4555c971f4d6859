import json
import logging
import math
import os
import re
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from langchain_ragmetrics import (
    CallableSink,
    InMemorySink,
    JsonlSink,
    LoggingSink,
    MetricResult,
    OnlineResult,
    RagSample,
    Usage,
)

TRACE = uuid.uuid4()
RUN = uuid.uuid4()


def item(
    score: float | None = 0.75, *, error: str | None = None, metric: str = "context_relevance"
) -> OnlineResult:
    return OnlineResult(
        trace_id=TRACE,
        root_run_id=TRACE,
        run_id=RUN,
        retriever="docs",
        tags=["t"],
        query="q?",
        sample=RagSample(
            question="q?", contexts=["c1", "c2"], context_ids=["1", "2"], answer="ans"
        ),
        result=MetricResult(
            metric=metric,
            score=score,
            reason=None if score is None and error is None else "because",
            error=error,
            details={"relevant_indices": [0]},
            usage=Usage(input_tokens=10, output_tokens=2, judge_calls=1),
            judge="judge-model",
            latency_s=0.1,
        ),
        timestamp=datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    )


def test_in_memory_sink_keeps_and_clears() -> None:
    sink = InMemorySink()
    sink.emit(item())
    sink.emit(item(0.1))
    assert [r.score for r in sink.results] == [0.75, 0.1]
    sink.results.clear()  # a copy: the sink is untouched
    assert len(sink.results) == 2
    sink.clear()
    assert sink.results == []


def test_in_memory_sink_bound() -> None:
    sink = InMemorySink(max_results=2)
    for s in (0.1, 0.2, 0.3):
        sink.emit(item(s))
    assert [r.score for r in sink.results] == [0.2, 0.3]
    with pytest.raises(ValueError, match="max_results"):
        InMemorySink(max_results=0)


def test_callable_sink() -> None:
    got: list[OnlineResult] = []
    sink = CallableSink(got.append)
    sink.emit(item())
    assert got[0].metric == "context_relevance"
    assert "append" in sink.name
    with pytest.raises(TypeError, match="callable"):
        CallableSink("nope")  # type: ignore[arg-type]


def test_logging_sink(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.online")
    sink = LoggingSink(logger)
    with caplog.at_level(logging.INFO, logger="test.online"):
        sink.emit(item())
        sink.emit(item(math.nan, error="RateLimitError: 429"))
        sink.emit(item(None))
    ok, failed, skipped = caplog.records
    assert ok.levelno == logging.INFO
    assert "context_relevance=0.750" in ok.getMessage()
    assert str(TRACE) in ok.getMessage()
    assert ok.ragmetrics["run_id"] == str(RUN)  # type: ignore[attr-defined]
    assert failed.levelno == logging.WARNING
    assert "failed (RateLimitError: 429)" in failed.getMessage()
    assert "skipped" in skipped.getMessage()


def test_jsonl_sink_writes_one_line_per_result(tmp_path: Path) -> None:
    path = tmp_path / "scores.jsonl"
    sink = JsonlSink(path)
    sink.emit(item())
    # written and flushed line by line: readable before close
    first = json.loads(path.read_text(encoding="utf-8"))
    assert first == {
        "timestamp": "2025-01-02T03:04:05+00:00",
        "trace_id": str(TRACE),
        "root_run_id": str(TRACE),
        "run_id": str(RUN),
        "retriever": "docs",
        "tags": ["t"],
        "question": "q?",
        "metric": "context_relevance",
        "score": 0.75,
        "skipped": False,
        "reason": "because",
        "error": None,
        "details": {"relevant_indices": [0]},
        "usage": {
            "input_tokens": 10,
            "output_tokens": 2,
            "judge_calls": 1,
            "cache_hits": 0,
            "cache_misses": 0,
        },
        "judge": "judge-model",
        "latency_s": 0.1,
    }
    sink.emit(item(math.nan, error="boom"))
    sink.emit(item(None))
    sink.close()
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [(x["score"], x["error"], x["skipped"]) for x in lines] == [
        (0.75, None, False),
        (None, "boom", False),
        (None, None, True),
    ]
    assert "contexts" not in lines[0]
    assert "answer" not in lines[0]


def test_jsonl_sink_appends_and_includes_texts_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "scores.jsonl"
    path.write_text('{"previous": true}\n', encoding="utf-8")
    sink = JsonlSink(path, include_contexts=True, include_answer=True)
    sink.emit(item())
    sink.close()
    previous, line = (json.loads(x) for x in path.read_text(encoding="utf-8").splitlines())
    assert previous == {"previous": True}
    assert line["contexts"] == ["c1", "c2"]
    assert line["context_ids"] == ["1", "2"]
    assert line["answer"] == "ans"


def test_jsonl_sink_is_thread_safe(tmp_path: Path) -> None:
    path = tmp_path / "scores.jsonl"
    sink = JsonlSink(path)
    threads = [
        threading.Thread(target=lambda: [sink.emit(item()) for _ in range(50)]) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 200
    assert all(json.loads(line)["score"] == 0.75 for line in lines)


def test_jsonl_sink_validates_the_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        JsonlSink(tmp_path / "missing" / "scores.jsonl")
    with pytest.raises(ValueError, match="is a directory"):
        JsonlSink(tmp_path)
    # A place no file can be created (Linux's /proc): refused when built, the path named.
    with pytest.raises(ValueError, match=r"JsonlSink: cannot write /proc/ragmetrics\.jsonl: "):
        JsonlSink("/proc/ragmetrics.jsonl")
    JsonlSink(tmp_path / "scores.jsonl")  # the check leaves no file behind
    assert not (tmp_path / "scores.jsonl").exists()
    fifo = tmp_path / "scores.fifo"
    os.mkfifo(fifo)
    JsonlSink(fifo)  # not opened when built: that would wait for a reader


def test_jsonl_sink_names_its_file_when_a_write_fails(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    sink = JsonlSink(folder / "scores.jsonl")
    folder.rmdir()  # removed after the sink was built
    with pytest.raises(OSError, match=f"JsonlSink: cannot write {re.escape(str(folder))}"):
        sink.emit(item())


LONE = "broken \ud800 text"


def surrogate_item() -> OnlineResult:
    return OnlineResult(
        trace_id=TRACE,
        root_run_id=TRACE,
        run_id=RUN,
        retriever="docs",
        query=LONE,
        sample=RagSample(question=LONE, contexts=[LONE, "fine"], answer=LONE),
        result=MetricResult(metric="context_relevance", score=0.5, reason=LONE),
        timestamp=datetime.now(timezone.utc),
    )


def test_jsonl_sink_keeps_text_that_cannot_be_encoded(tmp_path: Path) -> None:
    path = tmp_path / "scores.jsonl"
    sink = JsonlSink(path, include_contexts=True, include_answer=True)
    sink.emit(surrogate_item())
    sink.emit(item())
    sink.close()
    first, second = path.read_text(encoding="utf-8").splitlines()
    assert "\\ud800" in first  # escaped in the file ...
    record = json.loads(first)
    assert record["question"] == record["answer"] == record["reason"] == LONE  # ... not lost
    assert record["contexts"] == [LONE, "fine"]
    assert json.loads(second)["score"] == 0.75


def test_logging_sink_keeps_text_that_cannot_be_encoded(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    logger = logging.getLogger(f"test.surrogates.{uuid.uuid4()}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(path, encoding="utf-8")  # strict UTF-8, like most files
    handler.setFormatter(logging.Formatter("%(message)s %(ragmetrics)s"))
    logger.addHandler(handler)
    try:
        LoggingSink(logger).emit(surrogate_item())
    finally:
        handler.close()
        logger.removeHandler(handler)
    (line,) = path.read_text(encoding="utf-8").splitlines()
    assert "question='broken \\\\ud800 text'" in line
    assert "'reason': 'broken \\\\ud800 text'" in line


def test_jsonl_sink_flags_from_pandas_are_plain_bools(tmp_path: Path) -> None:
    """A NumPy bool, as a pandas frame gives it, is taken and kept as a Python bool."""
    import numpy as np

    sink = JsonlSink(
        tmp_path / "s.jsonl",
        include_contexts=np.bool_(True),  # type: ignore[arg-type]
        include_answer=np.bool_(False),  # type: ignore[arg-type]
    )
    assert (sink.include_contexts, type(sink.include_contexts)) == (True, bool)
    assert (sink.include_answer, type(sink.include_answer)) == (False, bool)


def test_escape_unencodable_leaves_encodable_values_alone() -> None:
    from langchain_ragmetrics.callbacks.sinks import escape_unencodable

    data = {"a": ["é", 1, None], "b": ("x\udcff",)}
    assert escape_unencodable(data) == {"a": ["é", 1, None], "b": ["x\\udcff"]}
    assert escape_unencodable("plain") == "plain"


def test_sink_options_of_the_wrong_kind_are_refused_when_built(tmp_path: Path) -> None:
    """Before, ``include_contexts="no"`` wrote the documents, and a logger name or a level
    name was accepted and then failed on every result."""
    with pytest.raises(TypeError, match="`include_contexts` must be True or False, got 'no'"):
        JsonlSink(tmp_path / "s.jsonl", include_contexts="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`include_answer` must be True or False, got 0"):
        JsonlSink(tmp_path / "s.jsonl", include_answer=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`include_answer` must be True or False, got 'yes'"):
        # the flags are checked first: the missing folder is not what is reported
        JsonlSink(tmp_path / "nowhere" / "s.jsonl", include_answer="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"`logger` must be a logging\.Logger or its name"):
        LoggingSink(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`level` must be a logging level"):
        LoggingSink(level="LOUD")


def test_logging_sink_takes_a_logger_name_and_a_level_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = LoggingSink("test.named", level="warning")
    assert (sink.logger.name, sink.level) == ("test.named", logging.WARNING)
    with caplog.at_level(logging.WARNING, logger="test.named"):
        sink.emit(item())
    (record,) = caplog.records
    assert record.levelno == logging.WARNING


def test_a_path_under_home_is_the_users_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~/scores.jsonl`` is under the home folder, not a folder named "~" here."""
    monkeypatch.setenv("HOME", str(tmp_path))
    sink = JsonlSink("~/scores.jsonl")
    assert sink.path == tmp_path / "scores.jsonl"
    sink.emit(item())
    sink.close()
    assert (tmp_path / "scores.jsonl").exists()


def _metrics_in(path: Path) -> list[str]:
    return [json.loads(line)["metric"] for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("how", ["renamed", "removed"])
def test_jsonl_sink_starts_a_new_file_when_its_file_is_rotated(tmp_path: Path, how: str) -> None:
    """Before, it kept writing to the renamed (or deleted) file, counting lines delivered
    that nobody would find at ``path``."""
    path = tmp_path / "scores.jsonl"
    sink = JsonlSink(path)
    sink.emit(item(metric="first"))
    if how == "renamed":
        path.rename(tmp_path / "scores.jsonl.1")  # logrotate's default (create) mode
    else:
        path.unlink()
    sink.emit(item(metric="second"))
    sink.emit(item(metric="third"))
    sink.close()
    assert _metrics_in(path) == ["second", "third"]
    if how == "renamed":
        assert _metrics_in(tmp_path / "scores.jsonl.1") == ["first"]


def test_jsonl_sink_on_a_full_disk_fails_the_line_and_keeps_the_next_ones_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that stops partway (ENOSPC) fails its result and leaves nothing buffered to
    be written later; the next line starts on a line of its own. Before, the failed line
    stayed in the buffer (written later, under an error count) and a close on a full disk
    left half a line the next record was glued to."""
    from langchain_ragmetrics.callbacks import sinks as sinks_module

    path = tmp_path / "scores.jsonl"
    sink = JsonlSink(path)
    sink.emit(item(metric="first"))
    real = sinks_module._write

    def half_then_full(fd: int, data: memoryview) -> int:
        if len(data) > 20:
            return real(fd, data[:20])  # part of the line reaches the disk...
        raise OSError(28, "No space left on device")  # ...then the disk is full

    monkeypatch.setattr(sinks_module, "_write", half_then_full)
    with pytest.raises(OSError, match=r"JsonlSink: cannot write .*No space left on device"):
        sink.emit(item(metric="lost"))
    monkeypatch.setattr(sinks_module, "_write", real)  # space again
    sink.emit(item(metric="second"))
    sink.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    assert json.loads(lines[0])["metric"] == "first"
    assert not lines[1].endswith("}")  # the torn line, on its own
    assert json.loads(lines[2])["metric"] == "second"


def test_jsonl_sink_appending_to_a_file_cut_short_starts_on_a_new_line(tmp_path: Path) -> None:
    path = tmp_path / "scores.jsonl"
    path.write_text('{"metric": "before"}\n{"metric": "cut sh', encoding="utf-8")  # a crash
    sink = JsonlSink(path)
    sink.emit(item(metric="after"))
    sink.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ['{"metric": "before"}', '{"metric": "cut sh']
    assert json.loads(lines[2])["metric"] == "after"
