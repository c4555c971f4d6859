"""``ragmetrics monitor``: exit summary and codes, and a worker killed mid-run then restarted."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_openai import ChatOpenAI

from langchain_ragmetrics._cli import ExitCode, main
from langchain_ragmetrics._ids import feedback_id
from langchain_ragmetrics.integrations import monitor
from langchain_ragmetrics.integrations.monitor import LangSmithMonitor
from tests._support.langsmith_stub import V2_VERSION, LangSmithStub
from tests._support.openai_server import JudgeServer
from tests._support.rag import rag_app
from tests._support.traces import trace_questions
from tests.integrations.test_monitor import (
    CR,
    DAY_S,
    checkpoint_rows,
    fail_listing_after_page_one,
    fake_run,
    read_only_checkpoints,
    settle_aged,
    stop_after_page_one,
)

JudgeFactory = Callable[..., ChatOpenAI]
PROJECT = "rag-prod"
_ROOT = Path(__file__).resolve().parents[2]


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


@pytest.fixture
def cli_env(
    judge_server: JudgeServer, langsmith_stub: LangSmithStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``main()`` in this process talks to the loopback servers, its retry rounds sped up.

    The rounds and their count are kept; only the wait before each (1 s, 2 s, 4 s in
    production, which the monitor's own tests check) shrinks to a few milliseconds.
    """
    for name, value in env_for(judge_server, langsmith_stub).items():
        if name.startswith(("OPENAI_", "LANGSMITH_")):
            monkeypatch.setenv(name, value)
    quick = functools.partial(LangSmithMonitor, retry_backoff=0.01)
    monkeypatch.setattr(monitor, "LangSmithMonitor", quick)  # the CLI imports it lazily


# (step, feedback POSTs that reached LangSmith when the 3rd pair's worker died there)
_KILL_STEPS = [("before_intent", 2), ("after_intent", 2), ("after_post", 3), ("before_settle", 3)]


@pytest.mark.parametrize(("step", "posted"), _KILL_STEPS)
def test_worker_killed_at_each_step_resumes_without_gaps_or_resends(
    step: str,
    posted: int,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(6))
    checkpoint = tmp_path / "worker.sqlite"
    env = env_for(judge_server, langsmith_stub)
    killer = [sys.executable, "-m", "tests._support.monitor_worker", step, "3"]
    killed = subprocess.run(
        [*killer, str(checkpoint), PROJECT],
        check=False,
        env=env,
        cwd=_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert len(langsmith_stub.requests_to("POST", "/feedback")) == posted

    # The restart runs in this process: a new monitor over the same checkpoint file.
    code = main(monitor_args(checkpoint))
    out, err = capsys.readouterr()
    assert code == ExitCode.OK, out + err
    assert "runs seen 6 (of 6 listed)" in out
    held = langsmith_stub.held_feedback("context_relevance")
    assert sorted(f["run_id"] for f in held) == sorted(r["id"] for r in runs)  # no gap, no dup
    assert len(langsmith_stub.requests_to("POST", "/feedback")) == 6  # nothing posted twice
    assert {f["id"] for f in held} == {str(feedback_id(r["id"], "context_relevance")) for r in runs}


def test_unsent_feedback_exits_12_and_a_rerun_finishes(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = rag_app(judge_server, make_judge, max_retries=2)
    runs = trace_questions(langsmith_stub, app.chain, PROJECT, range(3))
    langsmith_stub.fail("POST /feedback", 500, times=None)
    args = monitor_args(tmp_path / "cp.sqlite")
    assert main(args) == ExitCode.UNSENT
    captured = capsys.readouterr()
    assert "3 run(s) still have unsent feedback" in captured.err
    assert "unsent 3 after 3 retry rounds" in captured.out
    with langsmith_stub._lock:
        langsmith_stub._fail_rules.clear()
    assert main(args) == ExitCode.OK
    held = langsmith_stub.held_feedback()
    assert sorted(f["run_id"] for f in held) == sorted(r["id"] for r in runs)


def test_a_misspelled_project_exits_13(
    judge_server: JudgeServer,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    langsmith_stub.create_project(PROJECT)
    args = monitor_args(tmp_path / "cp.sqlite")
    args[args.index(PROJECT)] = "rag-prdo"
    assert main(args) == ExitCode.UNKNOWN_PROJECT
    assert "LangSmith has no project named 'rag-prdo' (check --project)" in capsys.readouterr().err
    assert langsmith_stub.requests_to("POST", "/runs/query") == []  # nothing listed


def test_an_overlapping_run_on_one_checkpoint_exits_2_naming_the_lock(
    judge_server: JudgeServer,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from langchain_ragmetrics.integrations._monitor_checkpoint import Checkpoint

    langsmith_stub.create_project(PROJECT)
    checkpoint = tmp_path / "cp.sqlite"
    held = Checkpoint(checkpoint, project=PROJECT)  # the run still going
    try:
        assert main(monitor_args(checkpoint)) == ExitCode.USAGE
    finally:
        held.close()
    err = capsys.readouterr().err
    lock = f"{checkpoint}.lock"
    assert f"checkpoint {checkpoint} is in use by another monitor run (lock {lock})" in err
    assert langsmith_stub.requests_to("POST", "/runs/query") == []  # nothing listed
    assert main(monitor_args(checkpoint)) == ExitCode.OK  # once that run has ended


@pytest.mark.parametrize("version", [None, V2_VERSION], ids=["list_runs", "runs.query"])
def test_exit_summary_and_code(
    version: str | None,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The command's own client reads the server's version and lists with what it serves."""
    langsmith_stub.version = version or langsmith_stub.version
    app = rag_app(judge_server, make_judge, max_retries=2)
    trace_questions(langsmith_stub, app.chain, PROJECT, range(4))
    code = main(monitor_args(tmp_path / "cp.sqlite", "--shard", "0/1", "--since", "1h"))
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    assert "ragmetrics monitor: project 'rag-prod', shard 0/1, 1 poll" in out
    assert "runs seen 4 (of 4 listed), scored 4" in out
    assert "results scored 4, failed 0, skipped 0" in out
    assert "feedback sent 4, failed 0" in out
    v1, v2 = (langsmith_stub.requests_to("POST", p) for p in ("/runs/query", "/api/v2/runs/"))
    assert (len(v1) > 0, len(v2) > 0) == ((False, True) if version else (True, False))


def test_unreachable_langsmith_exits_with_error(
    judge_server: JudgeServer,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
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
        (["--lookback", "soon"], ExitCode.USAGE, "`lookback` must be a duration such as 30m"),
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


@pytest.mark.parametrize("lookback", ["0s", "10m"])
def test_lookback_sets_where_a_following_poll_starts(
    lookback: str,
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
) -> None:
    """The second poll lists from the first poll's start minus ``--lookback``."""
    import datetime as dt

    from tests.integrations.test_monitor import run_queries

    app = rag_app(judge_server, make_judge, max_retries=2)
    trace_questions(langsmith_stub, app.chain, PROJECT, range(1))
    before = dt.datetime.now(dt.timezone.utc)
    follow = ["--follow", "--max-polls", "2", "--poll-interval", "0.01", "--lookback", lookback]
    assert main(monitor_args(tmp_path / "cp.sqlite", *follow)) == ExitCode.OK
    listings = [q for q in run_queries(langsmith_stub) if not q.get("id") and not q.get("trace")]
    second = dt.datetime.fromisoformat(str(listings[-1]["start_time"]))
    second = second if second.tzinfo else second.replace(tzinfo=dt.timezone.utc)
    shift = dt.timedelta(minutes=10) if lookback == "10m" else dt.timedelta(0)
    assert before - shift <= second <= dt.datetime.now(dt.timezone.utc) - shift


def test_judged_metrics_without_a_judge(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "--project", PROJECT]) == ExitCode.NO_API_KEY
    assert "need an LLM judge" in capsys.readouterr().err


def test_a_listing_that_failed_partway_exits_12(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = rag_app(judge_server, make_judge)
    trace_questions(langsmith_stub, app.chain, PROJECT, range(5))
    fail_listing_after_page_one(monkeypatch, times=99)  # every retry round fails too
    assert main(monitor_args(tmp_path / "cp.sqlite")) == ExitCode.UNSENT
    captured = capsys.readouterr()
    assert "listing the project's runs failed partway" in captured.err
    assert "run the monitor again" in captured.err
    assert "the listing of runs failed partway" in captured.out


@pytest.mark.parametrize(
    ("argv", "pruned"),
    [
        (["--retention", "7d"], 1),
        (["--retention", "none", "--since", "40d"], 0),
        (["--retention", "None"], 0),
    ],
    ids=["7d", "none", "None"],
)
def test_retention_option_prunes_or_keeps_for_ever(
    argv: list[str],
    pruned: int,
    judge_server: JudgeServer,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    langsmith_stub.create_project(PROJECT)
    checkpoint = tmp_path / "cp.sqlite"
    old = fake_run("old")
    settle_aged(checkpoint, {(old, CR): 10 * DAY_S})
    assert main(monitor_args(checkpoint, *argv)) == ExitCode.OK
    assert f"settled pairs pruned {pruned}" in capsys.readouterr().out
    assert checkpoint_rows(checkpoint, "settled") == (set() if pruned else {(old, CR)})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--retention", "forever"], "`retention` must be a duration such as 30m, 24h or 7d"),
        (["--retention=-1d"], "`retention` must be a duration such as 30m"),
        (["--since", "40d"], "`since` ('40d') reaches further back than `retention` ('30d')"),
        (
            ["--since", "8d", "--retention", "7d"],
            "or `retention=None` to keep every settled pair (`--retention none`)",
        ),
    ],
)
def test_bad_retention_options_exit_2(
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As a bad ``--since``: refused before anything is read, exit 2, the rule named."""
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    args = ["monitor", "--project", PROJECT, "--checkpoint", str(tmp_path / "c.db"), *argv]
    assert main(args) == ExitCode.USAGE
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c.db").exists()


def test_a_checkpoint_that_stops_taking_writes_exits_1_with_the_summary(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stopped mid-run by its checkpoint, the command prints what it did, names the file, and
    exits 1 (the results could not be written), not 2 (a bad option: the file opened)."""
    app = rag_app(judge_server, make_judge, max_retries=2)
    trace_questions(langsmith_stub, app.chain, PROJECT, range(2))
    read_only_checkpoints(monkeypatch)
    checkpoint = tmp_path / "cp.sqlite"
    code = main(monitor_args(checkpoint, "--retention", "none", "--concurrency", "1"))
    out, err = capsys.readouterr()
    assert code == ExitCode.ERROR
    assert "ragmetrics monitor: project 'rag-prod', shard 0/1, 1 poll" in out
    assert "feedback sent 0, failed 0" in out
    assert f"checkpoint {checkpoint} cannot be read or written (OperationalError: " in err


def test_a_checkpoint_that_takes_no_writes_at_its_opening_exits_2_naming_it(
    judge_server: JudgeServer,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The prune at the opening is its first write: refused there, nothing was judged."""
    langsmith_stub.create_project(PROJECT)
    read_only_checkpoints(monkeypatch)
    checkpoint = tmp_path / "cp.sqlite"
    code = main(monitor_args(checkpoint))
    out, err = capsys.readouterr()
    assert code == ExitCode.USAGE
    assert out == ""
    assert f"checkpoint {checkpoint} cannot be read or written (OperationalError: " in err
    assert judge_server.requests == []


def test_sigterm_while_listing_prints_the_summary_and_exits_12(
    judge_server: JudgeServer,
    make_judge: JudgeFactory,
    langsmith_stub: LangSmithStub,
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod stopped while the first page of runs is in hand: that page is scored and sent,
    the rest is left for the next run, and the exit code says to run it again."""
    app = rag_app(judge_server, make_judge, max_retries=2)
    trace_questions(langsmith_stub, app.chain, PROJECT, range(4))
    before = signal.getsignal(signal.SIGTERM)

    def sigterm() -> None:  # what the interpreter runs on SIGTERM: the CLI's handler
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        assert handler is not before, "the CLI installed no SIGTERM handler"
        handler(signal.SIGTERM, None)

    stop_after_page_one(monkeypatch, sigterm)
    code = main(monitor_args(tmp_path / "cp.sqlite"))
    out, err = capsys.readouterr()
    assert code == ExitCode.UNSENT
    assert "runs seen 2 (of 2 listed), scored 2" in out
    assert "feedback sent 2, failed 0" in out
    assert "stopped while listing runs" in out
    assert "stopped before the listing of runs ended; run the monitor again" in err
    assert signal.getsignal(signal.SIGTERM) is before  # the CLI's handler is gone
