"""``ragmetrics evaluate --batch-api``: killed while polling, it resumes without a second upload."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_ragmetrics._cli import ExitCode, main
from langchain_ragmetrics.evaluation import EvaluationResult
from tests._support.batch_server import BatchServer
from tests._support.lexical_judge import lexical_judge

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "cookbook" / "data" / "rag_eval.jsonl"
METRICS = "context_recall,context_precision,context_entity_recall,context_relevance"
PROCESS_BOUND_S = 120  # generous: only proves nothing hangs


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[BatchServer]:
    with BatchServer(lexical_judge()) as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        yield running


def command(out: Path, *extra: str) -> list[str]:
    return [
        "evaluate",
        str(DATA),
        "--metrics",
        METRICS,
        "--no-cache",
        "--no-progress",
        "--out",
        str(out),
        *extra,
    ]


def batch_command(out: Path, *extra: str) -> list[str]:
    return command(out, "--batch-api", "--poll-interval", "0.02", *extra)


def console_script() -> str:
    found = shutil.which("ragmetrics", path=str(Path(sys.executable).parent))
    assert found, "the ragmetrics console script is not installed next to the interpreter"
    return found


def start(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [console_script(), *argv],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def scores(path: Path) -> dict[str, list[float | None]]:
    result = EvaluationResult.load(path)
    return {m: result[m] for m in result.metrics}


def kill_while_polling(server: BatchServer, argv: list[str]) -> None:
    """Start the CLI, SIGKILL it while its batch is held in progress."""
    server.hold_at = "in_progress"
    proc = start(argv)
    try:
        if not server.polled.wait(PROCESS_BOUND_S):
            proc.kill()
            pytest.fail(f"the CLI never polled its batch in progress: {proc.communicate()}")
        assert proc.poll() is None
        proc.kill()  # SIGKILL: no handler, no clean-up
        proc.wait(PROCESS_BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -9
    server.polled.clear()


def test_killed_while_polling_then_started_again_uploads_nothing_twice(
    server: BatchServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(command(tmp_path / "direct.jsonl")) == ExitCode.OK
    server.reset()
    out = tmp_path / "batch.jsonl"
    kill_while_polling(server, batch_command(out))
    assert (server.uploads, server.created) == (1, 1)
    assert [r.schema_name for r in server.requests] == ["PreflightAnswer"]
    assert not out.exists()

    server.release()
    capsys.readouterr()
    assert main(batch_command(out)) == ExitCode.OK
    printed = capsys.readouterr().out
    assert (server.uploads, server.created) == (1, 1)  # the restart picked the batch up
    assert [r.schema_name for r in server.requests] == ["PreflightAnswer"]  # none on resume
    assert "(resumed)" in printed
    assert "0 file(s) uploaded by this run" in printed
    assert scores(out) == scores(tmp_path / "direct.jsonl")


def test_cancel_after_a_kill_scores_what_the_batch_completed(
    server: BatchServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "batch.jsonl"
    argv = [*batch_command(out), "--metrics", "context_recall"]
    kill_while_polling(server, argv)
    server.partial = 1
    capsys.readouterr()
    assert main([*argv, "--cancel"]) == ExitCode.OK
    printed = capsys.readouterr().out
    assert server.cancels == 1
    assert "cancelled, 1/4 completed" in printed
    assert "run the same evaluation again to resubmit them" in printed
    result = EvaluationResult.load(out)
    assert [r.status("context_recall") for r in result.rows] == ["scored"] + ["failed"] * 3

    server.release()
    assert main(argv) == ExitCode.OK  # the rest is resubmitted
    assert scores(out)["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert server.uploads == 2
    assert len(list(server.batches.values())[-1].lines) == 3


def test_cost_estimate_is_printed_with_prices(
    server: BatchServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = batch_command(tmp_path / "out.jsonl", "--price-input", "0.15", "--price-output", "0.6")
    assert main(argv) == ExitCode.OK
    printed = capsys.readouterr().out
    assert "tokens: " in printed
    line = next(x for x in printed.splitlines() if "estimated cost" in x)
    found = re.search(r"([\d.]+) through the Batch API, ([\d.]+) through the direct path", line)
    assert found, line
    batch, direct = float(found.group(1)), float(found.group(2))
    assert batch == pytest.approx(direct / 2, abs=1e-4)


def test_cancel_needs_batch_api_and_a_running_batch(
    server: BatchServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command(tmp_path / "x.jsonl"), "--cancel"]) == ExitCode.USAGE
    assert "add --batch-api" in capsys.readouterr().err
    assert main(batch_command(tmp_path / "x.jsonl", "--cancel")) == ExitCode.ERROR
    assert "no running batch to cancel" in capsys.readouterr().err
    assert server.uploads == server.count() == 0


@pytest.mark.parametrize(
    ("batch", "extra", "message"),
    [
        (
            False,
            ["--batch-dir", "b", "--retry-direct", "--price-input", "0.15"],
            "--batch-dir, --retry-direct, --price-input only apply to a Batch API run: "
            "add --batch-api",
        ),
        (False, ["--poll-interval", "5"], "--poll-interval only applies to a Batch API run"),
        (True, ["--batch-discount", "0"], "--batch-discount: Input should be greater than 0"),
        (True, ["--max-bytes-per-file", "100"], "--max-bytes-per-file: Input should be greater"),
        (True, ["--workers", "4"], "--workers spreads direct judge calls over processes"),
    ],
)
def test_a_bad_batch_option_is_a_usage_error_before_the_data_is_read(
    server: BatchServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    batch: bool,
    extra: list[str],
    message: str,
) -> None:
    """Before: Batch API options without --batch-api were ignored (the run went direct, at
    twice the price), and a value BatchOptions refuses ended in a traceback."""
    build = batch_command if batch else command
    argv = build(tmp_path / "x.jsonl", *extra)
    argv[1] = str(tmp_path / "no-such-file.jsonl")  # not read: the options fail first
    assert main(argv) == ExitCode.USAGE
    assert message in capsys.readouterr().err
    assert server.count() == 0


def test_ctrl_c_while_polling_leaves_the_batch_running_for_the_next_run(
    server: BatchServer, tmp_path: Path
) -> None:
    out = tmp_path / "batch.jsonl"
    argv = [*batch_command(out), "--metrics", "context_recall"]
    server.hold_at = "in_progress"
    proc = start(argv)
    try:
        assert server.polled.wait(PROCESS_BOUND_S), "the CLI never polled its batch in progress"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=PROCESS_BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert "the batches keep running at the service" in stderr, (stdout, stderr)
    assert "Interrupted: 0 of 4 jobs finished" in stdout
    # context_recall is judged: the summary no longer says there is no judged metric
    assert "Judge calls: 0 counted (no job finished before the interruption)" in stdout
    assert server.cancels == 0

    server.release()
    assert main(argv) == ExitCode.OK
    assert scores(out)["context_recall"] == [0.5, 0.5, 0.0, 1.0]
    assert (server.uploads, server.created) == (1, 1)


def test_an_error_after_a_batch_was_created_says_how_to_resume_or_cancel(
    server: BatchServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, the command printed the bare service error: nothing about the paid batch."""
    server.faults = {"create": [0, 400]}  # part 1 is created, part 2 refused
    jobs = tmp_path / "jobs"
    argv = batch_command(
        tmp_path / "out.jsonl",
        "--metrics",
        "context_recall",
        "--max-requests-per-file",
        "2",
        "--batch-dir",
        str(jobs),
    )
    assert main(argv) == ExitCode.ERROR
    err = capsys.readouterr().err
    (state_file,) = jobs.glob("*.json")
    assert "failed to create a batch" in err
    assert "the batches keep running at the service" in err
    assert "Run the same command again to pick them up without paying twice" in err
    assert "--cancel" in err
    assert str(state_file) in err
    server.partial = 1  # the cancelled batch answered one line: not every row fails
    assert main([*argv, "--cancel"]) == ExitCode.OK
    assert server.cancels == 1
    assert server.created == 1


def test_max_poll_failures_ends_the_wait_from_the_command_line(
    server: BatchServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The option had no flag: a long outage could only be waited out from Python."""
    server.faults = {"retrieve": [503] * 3}
    jobs = tmp_path / "jobs"
    argv = batch_command(
        tmp_path / "out.jsonl",
        "--metrics",
        "context_recall",
        "--batch-dir",
        str(jobs),
        "--max-poll-failures",
        "1",
    )
    assert main(argv) == ExitCode.ERROR
    err = capsys.readouterr().err
    assert "1 status checks in a row failed: max_poll_failures" in err
    assert "the batches keep running at the service" in err
    assert main(argv) == ExitCode.OK  # the same command picks the batch up
    assert (server.uploads, server.created) == (1, 1)
