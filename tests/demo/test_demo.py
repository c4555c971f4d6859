import os
import re
import socket
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from langchain_core.prompts import ChatPromptTemplate

from langchain_ragmetrics._cli import ExitCode, main
from langchain_ragmetrics.demo import load_corpus
from langchain_ragmetrics.demo._answerer import CONTEXT_MARK, QUESTION_MARK, extractive_answerer
from langchain_ragmetrics.evaluation import metric_names
from tests._support.lexical_judge import lexical_judge
from tests._support.openai_server import JudgeServer

ROOT = Path(__file__).resolve().parents[2]
LLM_METRICS = tuple(metric_names(judged=True))


def metric_line(out: str, question_no: int, metric: str) -> list[str]:
    block = out.split(f"[{question_no}] ", 1)[1].split("\n\n", 1)[0]
    return next(ln.split()[:2] for ln in block.splitlines() if ln.strip().startswith(metric + " "))


def mean_of(out: str, metric: str) -> str:
    block = out.split("Mean over 6 retrievals:", 1)[1]
    return next(ln.split()[1] for ln in block.splitlines() if ln.strip().startswith(metric + " "))


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: socket.socket, address: Any) -> None:
        raise AssertionError(f"the offline demo tried to connect to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def test_offline_demo_needs_no_key_and_no_network(
    no_network: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert out.startswith("ragmetrics demo: a RAG chain over 8 bundled documents (retriever k=2)")
    assert "Mode: offline (no OPENAI_API_KEY or OPENAI_BASE_URL is set)." in out
    assert "only the deterministic metrics run: id_based_*, non_llm_*." in out
    assert "export OPENAI_API_KEY=sk-..." in out
    assert "export OPENAI_BASE_URL=http://localhost:11434/v1" in out
    assert "vLLM is http://localhost:8000/v1" in out
    assert "[5] Which volcano erupted in the early eighteenth century?" in out
    assert "retrieved: einstein, taj_mahal   (expected: mount_fuji)" in out
    assert metric_line(out, 5, "id_based_context_recall") == ["id_based_context_recall", "0.00"]
    assert metric_line(out, 4, "id_based_context_precision") == [
        "id_based_context_precision",
        "0.50",
    ]
    assert metric_line(out, 4, "non_llm_context_precision") == ["non_llm_context_precision", "0.50"]
    # The extractive model quotes the context sentence that fits the question best.
    assert "answer:    In 1933 he moved to the United States, where he worked at the" in out
    assert mean_of(out, "id_based_context_recall") == "0.83"
    assert mean_of(out, "non_llm_context_precision") == "0.75"
    for metric in LLM_METRICS:
        assert not re.search(rf"^\s+{metric}\s", out, re.M)
    assert "Handler: 6 retrievals seen, 24 results scored, 0 failed, 0 skipped" in out


def test_offline_flag_wins_over_a_configured_llm(
    judge_server: JudgeServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", judge_server.base_url)
    assert main(["demo", "--offline"]) == ExitCode.OK
    assert "Mode: offline (--offline)." in capsys.readouterr().out
    assert judge_server.count() == 0


def test_llm_mode_answers_with_the_model_and_adds_the_judged_metrics(
    judge_server: JudgeServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    judge_server.script = lexical_judge(answer="A scripted answer.")
    monkeypatch.setenv("OPENAI_BASE_URL", judge_server.base_url)  # a local server: no key
    assert main(["demo", "--model", "judge-model"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert f"Mode: LLM (judge-model at {judge_server.base_url})." in out
    assert out.count("answer:    A scripted answer.") == 6
    assert judge_server.stats.by_schema == {
        "RecallStatements": 6,
        "ContextVerdicts": 6,
        "EntityList": 12,  # reference and passages read in two independent calls
        "RelevantSentences": 6,
    }
    assert judge_server.count(None) == 36  # 6 answers + 30 judge calls
    assert metric_line(out, 4, "context_precision") == ["context_precision", "0.50"]
    assert metric_line(out, 5, "context_recall") == ["context_recall", "0.00"]
    assert mean_of(out, "context_recall") == "0.83"
    assert "judge calls: 30." in out
    assert {r.headers["authorization"] for r in judge_server.requests} == {"Bearer not-needed"}


def test_unreachable_model_says_how_to_run_offline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    assert main(["demo"]) == ExitCode.ERROR
    out = capsys.readouterr().out
    assert "The answering model failed: " in out
    assert "ConnectionError: Connection error." in out
    url = f"http://127.0.0.1:{port}/v1"
    assert f"Check OPENAI_API_KEY and {url}, or run `ragmetrics demo --offline`" in out


def test_corpus_questions_point_at_real_documents() -> None:
    corpus = load_corpus()
    ids = [d.id for d in corpus.documents]
    assert len(ids) == len(set(ids)) == 8
    assert all(d.metadata["title"] and d.page_content for d in corpus.documents)
    for question in corpus.questions:
        assert set(question.reference_context_ids) <= set(ids)
        assert corpus.texts(question.reference_context_ids)


def test_extractive_answerer_quotes_the_best_sentence() -> None:
    prompt = ChatPromptTemplate.from_messages(
        [("human", CONTEXT_MARK + "{context}" + QUESTION_MARK + "{question}")]
    )
    chain = prompt | extractive_answerer()
    context = "Paris is in France. The Nile flows through Egypt and Sudan."
    answer = chain.invoke({"context": context, "question": "Which countries does the Nile cross?"})
    assert answer.content == "The Nile flows through Egypt and Sudan."
    nothing = chain.invoke({"context": context, "question": "Who wrote Hamlet?"})
    assert nothing.content == "The context does not say."


def test_the_built_wheel_ships_the_demo_and_runs_it(tmp_path: Path) -> None:
    from hatchling.builders.wheel import WheelBuilder

    (wheel,) = WheelBuilder(str(ROOT)).build(directory=str(tmp_path / "dist"))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "ragmetrics = langchain_ragmetrics._cli:main" in archive.read(entry_points).decode()
    for data in ("corpus.jsonl", "questions.jsonl", "_embeddings.py"):
        assert f"langchain_ragmetrics/demo/{data}" in names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--target", str(target), wheel],
        check=True,
        capture_output=True,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LANGSMITH_"))}
    env["PYTHONPATH"] = str(target)
    code = (
        "import sys, langchain_ragmetrics as m; from langchain_ragmetrics._cli import main;"
        "print(m.__file__); sys.exit(main(['demo']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(str(target))  # the installed wheel, not the source tree
    assert "Mean over 6 retrievals:" in proc.stdout
