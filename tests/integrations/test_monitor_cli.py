"""``ragmetrics monitor``: exit summary and codes, and a worker killed mid-run then restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_openai import ChatOpenAI

from langchain_ragmetrics._ids import feedback_id
from langchain_ragmetrics.cli import ExitCode, main
from tests._support.langsmith_stub import LangSmithStub
from tests._support.openai_server import JudgeServer
from tests._support.rag import rag_app
from tests._support.traces import trace_questions

JudgeFactory = Callable[..., ChatOpenAI]
PROJECT = "rag-prod"
_MAIN = "import sys; from langchain_ragmetrics.cli import main; sys.exit(main())"


def env_for(judge: JudgeServer, stub: LangSmithStub) -> dict[str, str]:
    leaky = ("OPENAI_", "LANGSMITH_", "LANGCHAIN_", "RAGMETRICS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(leaky)}
    env.update(
        OPENAI_API_KEY="test",
        OPENAI_BASE_URL=judge.base_url,
        LANGSMITH_API_KEY="test",
        LANGSMITH_ENDPOINT=stub.url,
        PYTHONUNBUFFERED="1",
    )
    return env


def monitor_args(checkpoint: Path, *extra: str) -> list[str]:
    return [
        "monitor",
        "--project",
        PROJECT,
        "--metrics",
        "context_relevance",
        "--model",
        "judge-model",
        "--checkpoint",
        str(checkpoint),
        "--request-timeout",
        "5",
        *extra,
    ]


def test_worker_killed_mid_run_resumes_without_gaps_or_resends(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(24))
    checkpoint = tmp_path / "worker.sqlite"
    command = [sys.executable, "-c", _MAIN, *monitor_args(checkpoint, "--concurrency", "2")]
    env = env_for(judge_server, langsmith_stub)

    judge_server.latency = 0.1  # slow enough to be killed half way
    worker = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        langsmith_stub.wait_for_feedback(6, timeout=60)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.communicate(timeout=30)
    assert worker.returncode == -signal.SIGKILL
    sent_before = len(langsmith_stub.feedback())
    assert 6 <= sent_before < 24

    judge_server.latency = 0.0
    done = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "runs seen 24 (of 24 listed)" in done.stdout
    # every run whose feedback arrived before the kill counts as already scored: settled, or
    # found in LangSmith through its send intent (never sent twice)
    assert f"already scored {sent_before}," in done.stdout

    feedback = langsmith_stub.feedback(key="context_relevance")
    assert sorted(f["run_id"] for f in feedback) == sorted(r["id"] for r in runs)  # no gap
    assert len(langsmith_stub.requests_to("POST", "/feedback")) == 24  # no resend
    assert {f["id"] for f in feedback} == {
        str(feedback_id(r["id"], "context_relevance")) for r in runs
    }


def test_exit_summary_and_code(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    trace_questions(langsmith_stub, app.chain, PROJECT, range(4))
    for name, value in env_for(judge_server, langsmith_stub).items():
        if name.startswith(("OPENAI_", "LANGSMITH_")):
            monkeypatch.setenv(name, value)
    code = main(monitor_args(tmp_path / "cp.sqlite", "--shard", "0/1", "--since", "1h"))
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    assert "ragmetrics monitor: project 'rag-prod', shard 0/1, 1 poll" in out
    assert "runs seen 4 (of 4 listed), scored 4" in out
    assert "results scored 4, failed 0, skipped 0" in out
    assert "feedback sent 4, failed 0" in out


def test_unreachable_langsmith_exits_with_error(
    judge_server: JudgeServer,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env_for(judge_server, langsmith_stub).items():
        if name.startswith(("OPENAI_", "LANGSMITH_")):
            monkeypatch.setenv(name, value)
    langsmith_stub.create_project(PROJECT)
    langsmith_stub.fail("POST /runs/query", 503, times=None)
    code = main(monitor_args(tmp_path / "cp.sqlite"))
    assert code == ExitCode.ERROR
    assert "cannot read project 'rag-prod' from LangSmith" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--metrics", "nope"], ExitCode.UNKNOWN_METRIC, "unknown metric 'nope'"),
        (["--shard", "3/3"], ExitCode.USAGE, "I/N"),
        (["--since", "yesterday"], ExitCode.USAGE, "30m, 24h or 7d"),
        (["--sample-rate", "2"], ExitCode.USAGE, "between 0 and 1"),
    ],
)
def test_bad_options(
    argv: list[str],
    code: int,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    args = ["monitor", "--project", PROJECT, "--checkpoint", str(tmp_path / "c.db"), *argv]
    assert main(args) == code
    assert message in capsys.readouterr().err


def test_judged_metrics_without_a_judge(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "--project", PROJECT]) == ExitCode.NO_API_KEY
    assert "need an LLM judge" in capsys.readouterr().err
