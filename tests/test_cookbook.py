"""Every cookbook script runs for real, offline: a subprocess against loopback servers.

The scripts start together (they spend most of their time importing) and each test then
checks one script's output and what its servers saw. A script without a case here fails
``test_every_script_has_a_case``, so none can rot unnoticed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests._support.judges import keyword_precision
from tests._support.langsmith_datasets import LangSmithDatasetStub
from tests._support.lexical_judge import lexical_judge
from tests._support.openai_server import JudgeServer, router
from tests._support.otlp_receiver import OtlpReceiver

COOKBOOK = Path(__file__).resolve().parents[1] / "cookbook"
TIMEOUT_S = 180


@dataclass
class Case:
    """How to run one script and what its output must contain."""

    expect: list[str | re.Pattern[str]]
    judge: Callable[[], Any] = lexical_judge
    langsmith: bool = False
    otlp: bool = False
    """Start a loopback OTLP/HTTP receiver and point OTEL_EXPORTER_OTLP_ENDPOINT at it."""
    writes: dict[str, int] = field(default_factory=dict)
    """Files the script writes in its working directory, with their line counts."""


def line(*cells: str) -> re.Pattern[str]:
    """A stdout line holding these cells in order, separated by spaces."""
    return re.compile(r"^\s*" + r"\s+".join(re.escape(c) for c in cells) + r"\s*$", re.M)


TAJ = "Who commissioned the Taj Mahal, and for whom?"
JA_PRECISION = keyword_precision("岸田", "営業部", "研究開発部")

CASES: dict[str, Case] = {
    "01_score_one_sample.py": Case(
        expect=[
            "context_recall = 0.50  (2 of 4 reference sentences can be attributed to the "
            "contexts.)",
            "  supported  He received the 1921 Nobel Prize in Physics for his services to "
            "theoretical physics.",
            "  missing    He published 4 papers in 1905.",
            "context_precision = 1.00  (The only useful passage is at rank 1, so precision@1 = "
            "1/1: 1.00.)",
            re.compile(r"^judge calls: 2, tokens: \d+ in / \d+ out$", re.M),
        ]
    ),
    "02_lcel_rag_callback.py": Case(
        expect=[
            "Q: When did Albert Einstein receive the Nobel Prize, and for what?\nA: ",
            line("Which scientist moved to Princeton?", "context_precision", "0.50"),
            line("Which scientist moved to Princeton?", "id_based_context_recall", "1.00"),
            line("Where is the Eiffel Tower?", "context_recall", "skipped"),
            line("Where is the Eiffel Tower?", "id_based_context_recall", "skipped"),
            "retrievals seen: 5, scored: 18, skipped: 2",
        ],
        writes={"online_scores.jsonl": 20},
    ),
    "03_langgraph_rag_callback.py": Case(
        expect=[
            "answered  Which scientist won Nobel Prizes in two different sciences?  ->  ",
            line("scored", TAJ, "context_recall", "1.00"),
            line("scored", TAJ, "id_based_context_precision", "0.50"),
            "retrievals seen: 3, results scored: 9, failed: 0",
        ]
    ),
    "04_evaluate_dataset.py": Case(
        expect=[
            "4 samples x 5 metrics = 20 jobs",
            line("context_recall", "0.5000", "0.4082", "0.0000", "1.0000", *"4000"),
            line("non_llm_context_recall", "0.7500", "0.5000", "0.0000", "1.0000", *"4000"),
            re.compile(r"^Judge calls: 16 \(gpt-4o-mini\); tokens: [\d,]+ in \+ [\d,]+ out$", re.M),
            "context_entity_recall per row: [",
            "low recall (0.00): Who built the Taj Mahal, and where is it?",
            "per-row results written to rag_eval_results.jsonl",
        ],
        writes={"rag_eval_results.jsonl": 5},  # the run's header line, then 4 rows
    ),
    "05_langsmith_evaluators.py": Case(
        langsmith=True,
        expect=[
            "Which scientist moved to Princeton?\n    context_precision=0.50  context_recall=1.00"
            "  id_based_context_recall=1.00",
            "Which volcano erupted in the early eighteenth century?\n    context_precision=0.00"
            "  context_recall=0.00  id_based_context_recall=0.00",
            "Scores sent to LangSmith as feedback of experiment 'ragmetrics-cookbook-",
        ],
    ),
    "09_cache_gate_report.py": Case(
        expect=[
            "first run: 8 judge calls, 0 cache hits, 8 misses; context_recall mean 0.5000",
            "second run: 0 judge calls, 8 cache hits, 0 misses; context_recall mean 0.5000",
            "quality gate failed:\n  - context_precision: mean ",
            "saved run: judge gpt-4o-mini, data ",
            "report written to report.html (one file, opens offline)",
        ],
        writes={"runs/today.jsonl": 5},
    ),
    "06_japanese_dataset.py": Case(
        judge=lambda: router(ContextVerdicts=JA_PRECISION, default=lexical_judge()),
        expect=[
            line("context_recall", "1.0000", "0.0000", "1.0000", "1.0000", *"3000"),
            "日本の首相は誰ですか?  context_precision = 0.5833",  # the seed's (0 + 1/2 + 2/3) / 2
            "田中部長の部署はどこですか?  context_precision = 1.0000",
        ],
    ),
    "07_opentelemetry_export.py": Case(
        otlp=True,
        expect=[
            re.compile(
                r"^gen_ai\.evaluation\.result context_relevance=\d\.\d\d -> trace [0-9a-f]{32} "
                r"span [0-9a-f]{16}$",
                re.M,
            ),
            "events sent: 6",
        ],
    ),
    "08_langsmith_monitor.py": Case(
        langsmith=True,
        expect=[
            re.compile(
                r"^ragmetrics monitor: project 'ragmetrics-cookbook-monitor-\w+', "
                r"shard 0/1, 1 poll$",
                re.M,
            ),
            "  runs seen 4 (of 4 listed), scored 4, already scored 0",
            "  feedback sent 8, failed 0",
            "second run: already scored 4, sent 0",
            re.compile(r"context_precision=\d\.\d\d  context_relevance=\d\.\d\d$", re.M),
        ],
        writes={},
    ),
}


@dataclass
class Started:
    """A running script with its servers and working directory."""

    proc: subprocess.Popen[str]
    judge: JudgeServer
    cwd: Path
    langsmith: LangSmithDatasetStub | None = None
    receiver: OtlpReceiver | None = None
    output: tuple[str, str] | None = None

    def finish(self) -> tuple[int, str, str]:
        if self.output is None:
            try:
                self.output = self.proc.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.output = self.proc.communicate()
        return self.proc.returncode, self.output[0], self.output[1]


def _env(
    judge: JudgeServer,
    langsmith: LangSmithDatasetStub | None,
    receiver: OtlpReceiver | None = None,
) -> dict[str, str]:
    leaky = ("OPENAI_", "LANGSMITH_", "LANGCHAIN_", "RAGMETRICS_", "OTEL_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(leaky)}
    env.update(OPENAI_API_KEY="test", OPENAI_BASE_URL=judge.base_url, PYTHONUNBUFFERED="1")
    if langsmith is not None:
        env.update(LANGSMITH_API_KEY="test", LANGSMITH_ENDPOINT=langsmith.url)
    if receiver is not None:
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url)
    return env


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Started]]:
    with ExitStack() as stack:
        started: dict[str, Started] = {}
        for name, case in CASES.items():
            judge = stack.enter_context(JudgeServer(case.judge()))
            stub = stack.enter_context(LangSmithDatasetStub()) if case.langsmith else None
            receiver = stack.enter_context(OtlpReceiver()) if case.otlp else None
            cwd = tmp_path_factory.mktemp(name.removesuffix(".py"))
            proc = subprocess.Popen(
                [sys.executable, str(COOKBOOK / name)],
                cwd=cwd,
                env=_env(judge, stub, receiver),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            stack.callback(lambda p=proc: p.poll() is None and p.kill())
            started[name] = Started(proc, judge, cwd, stub, receiver)
        yield started


def test_every_script_has_a_case() -> None:
    assert sorted(p.name for p in COOKBOOK.glob("*.py")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_script_runs_offline(name: str, runs: dict[str, Started]) -> None:
    run = runs[name]
    code, out, err = run.finish()
    assert code == 0, f"{name} failed:\n{out}\n{err}"
    case = CASES[name]
    for expected in case.expect:
        if isinstance(expected, re.Pattern):
            assert expected.search(out), f"{name}: no line matching {expected.pattern!r}:\n{out}"
        else:
            assert expected in out, f"{name}: {expected!r} not in:\n{out}"
    for filename, count in case.writes.items():
        written = (run.cwd / filename).read_text(encoding="utf-8").splitlines()
        assert len(written) == count, filename
        assert all(json.loads(row) for row in written)
    assert run.judge.count() > 0
    assert not run.judge.script_errors


def test_japanese_script_judges_in_japanese(runs: dict[str, Started]) -> None:
    run = runs["06_japanese_dataset.py"]
    assert run.finish()[0] == 0
    assert all("Japanese" in r.system for r in run.judge.requests)


def test_langsmith_script_uploads_dataset_experiment_and_feedback(
    runs: dict[str, Started],
) -> None:
    run = runs["05_langsmith_evaluators.py"]
    assert run.finish()[0] == 0
    assert run.langsmith is not None
    (dataset,) = run.langsmith.datasets()
    assert dataset["name"] == "ragmetrics-cookbook"
    assert len(run.langsmith.examples(dataset["id"])) == 6
    feedback = run.langsmith.wait_for_feedback(18)
    assert {f["key"] for f in feedback} == {
        "context_recall",
        "context_precision",
        "id_based_context_recall",
    }
    assert all(f["comment"] for f in feedback)


def test_opentelemetry_script_exports_parented_events_and_metrics(
    runs: dict[str, Started],
) -> None:
    run = runs["07_opentelemetry_export.py"]
    assert run.finish()[0] == 0
    assert run.receiver is not None
    events = run.receiver.logs()
    assert len(events) == 6
    assert {e.event_name for e in events} == {"gen_ai.evaluation.result"}
    request_spans = {s.span_id for s in run.receiver.spans() if s.name == "POST /ask"}
    assert {e.span_id for e in events} == request_spans
    (histogram, *rest) = run.receiver.points("ragmetrics.evaluation.score")
    assert histogram.count + sum(p.count for p in rest) == 6


def test_monitor_script_posts_feedback_on_retriever_runs(runs: dict[str, Started]) -> None:
    run = runs["08_langsmith_monitor.py"]
    assert run.finish()[0] == 0
    assert run.langsmith is not None
    retrievers = {r["id"] for r in run.langsmith.runs() if r.get("run_type") == "retriever"}
    feedback = run.langsmith.feedback()
    assert len(feedback) == 8
    assert {f["run_id"] for f in feedback} == retrievers


def test_cache_script_pays_for_the_first_run_only(runs: dict[str, Started]) -> None:
    run = runs["09_cache_gate_report.py"]
    assert run.finish()[0] == 0
    assert run.judge.count() == 8  # 4 rows x 2 metrics, once: the second run was all cache hits
    assert (run.cwd / "verdicts.sqlite3").exists()
    assert "<svg" in (run.cwd / "report.html").read_text(encoding="utf-8")
