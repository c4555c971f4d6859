import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from langchain_ragmetrics._cli import ExitCode, main
from langchain_ragmetrics.evaluation import EvaluationResult
from tests._support.judges import EINSTEIN_VERDICTS, keyword_precision, payload
from tests._support.openai_server import (
    JudgeRequest,
    JudgeServer,
    reply_error,
    reply_hold,
    router,
    static_script,
)
from tests._support.processes import interrupt_when

DATA = Path(__file__).parent / "data"
EINSTEIN = DATA / "einstein.jsonl"


def recall_script(req: JudgeRequest) -> Any:
    """Einstein verdicts when an Einstein passage was retrieved, else nothing is supported."""
    if any("Einstein" in p for p in payload(req)["passages"]):
        return EINSTEIN_VERDICTS
    return {"statements": [{**s, "attributed": False} for s in EINSTEIN_VERDICTS["statements"]]}


@pytest.fixture
def judge(judge_server: JudgeServer, monkeypatch: pytest.MonkeyPatch) -> JudgeServer:
    judge_server.script = router(
        RecallStatements=recall_script,
        ContextVerdicts=keyword_precision("Einstein"),
        PreflightAnswer={"ok": True},
    )
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", judge_server.base_url)
    return judge_server


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def table_row(out: str, metric: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.startswith(metric + " "))


def test_evaluate_prints_the_table_and_writes_jsonl(
    judge: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "results.jsonl"
    code, out, err = run(
        capsys,
        "evaluate",
        str(EINSTEIN),
        "--metrics",
        "context_recall, context_precision,id_based_context_recall",
        "--model",
        "judge-model",
        "--concurrency",
        "4",
        "--out",
        str(out_file),
    )
    assert code == ExitCode.OK, err
    assert out.startswith(f"Evaluation of {EINSTEIN}: 3 samples x 3 metrics = 9 jobs")
    assert table_row(out, "context_recall")[:2] == ["context_recall", "0.3333"]
    assert table_row(out, "context_precision")[:2] == ["context_precision", "0.5000"]
    assert table_row(out, "id_based_context_recall")[:2] == ["id_based_context_recall", "0.6667"]
    assert "Judge calls: 6 (judge-model)" in out
    assert f"Results written to {out_file}" in out
    header, *records = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert header["ragmetrics_run"]["info"]["metrics"]["context_recall"]["judge"] == "judge-model"
    assert [r["results"]["context_precision"]["score"] for r in records] == [1.0, 0.5, 0.0]
    assert records[2]["topic"] == "physics"
    assert {r.model for r in judge.requests} == {"judge-model"}


def test_evaluate_writes_csv_and_uses_a_base_url_without_a_key(
    judge_server: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge_server.script = router(RecallStatements=recall_script, PreflightAnswer={"ok": True})
    out_file = tmp_path / "results.csv"
    code, _, err = run(
        capsys,
        "evaluate",
        str(EINSTEIN),
        "--metrics=context_recall",
        "--base-url",
        judge_server.base_url,
        "--out",
        str(out_file),
        "--no-progress",
    )
    assert code == ExitCode.OK, err
    with out_file.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["context_recall"] for r in rows] == ["0.5", "0.5", "0.0"]
    assert judge_server.requests[0].headers["authorization"] == "Bearer not-needed"


def test_language_option_reaches_the_prompt(
    judge: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "evaluate", str(DATA / "japanese.jsonl"), "--metrics", "context_precision",
        "--language", "ja",
    )  # fmt: skip
    assert code == ExitCode.OK, err
    scoring = [r for r in judge.requests if r.schema_name != "PreflightAnswer"]
    assert scoring
    assert all("Japanese" in r.system for r in scoring)


def test_deterministic_metrics_need_no_key(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "evaluate",
        str(EINSTEIN),
        "--metrics",
        "non_llm_context_recall,id_based_context_precision",
    )
    assert code == ExitCode.OK, err
    assert table_row(out, "non_llm_context_recall")[:2] == ["non_llm_context_recall", "0.6667"]
    assert "Judge calls: 0 (no LLM-judged metric)" in out


def test_no_api_key_says_how_to_set_one_or_use_a_local_server(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall,id_based_context_recall"
    )
    assert code == ExitCode.NO_API_KEY == 7
    assert out == ""
    assert "context_recall need an LLM judge, but OPENAI_API_KEY is not set." in err
    assert "export OPENAI_API_KEY=" in err
    assert "--base-url http://localhost:11434/v1" in err
    assert "vLLM" in err
    assert "OPENAI_BASE_URL" in err
    assert "need no judge: non_llm_context_recall" in err


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    code, _, err = run(capsys, "evaluate", str(missing), "--metrics", "context_recall")
    assert code == ExitCode.FILE_NOT_FOUND == 3
    assert f"dataset file not found: {missing}" in err


def test_unknown_metric_lists_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall,faithful")
    assert code == ExitCode.UNKNOWN_METRIC == 4
    assert "unknown metric 'faithful'; known metrics: context_entity_recall, " in err
    assert "non_llm_context_precision" in err


def test_bad_rows_are_all_listed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q", "contexts": ["c"]}\n{oops\n{"contexts": 5}\n')
    code, _, err = run(capsys, "evaluate", str(path), "--metrics", "non_llm_context_recall")
    assert code == ExitCode.INVALID_DATASET == 5
    assert f"{path}, row 2 (line 2): invalid JSON" in err
    assert f"{path}, row 3 (line 3), field `contexts`" in err


def test_missing_columns_name_the_metric_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "no_reference.csv"
    path.write_text('question,contexts\nq1,"[""a""]"\nq2,"[""b""]"\n')
    code, _, err = run(capsys, "evaluate", str(path), "--metrics", "context_recall")
    assert code == ExitCode.MISSING_COLUMNS == 6
    assert f"{path}: none of the 2 rows has what these metrics need" in err
    assert "context_recall: ContextRecall needs `reference`" in err
    assert "`ground_truth`" in err


def test_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall", "--out", "r.parquet"
    )
    assert code == ExitCode.USAGE
    assert "--out must end in .jsonl or .csv" in err
    code, _, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall", "--language", "xx"
    )
    assert code == ExitCode.USAGE
    assert "`--language`: unsupported language 'xx'" in err
    code, _, err = run(capsys, "evaluate", str(EINSTEIN), "--metrics", "a", "--concurrency", "0")
    assert code == ExitCode.USAGE
    assert "must be at least 1" in err
    code, _, err = run(capsys, "evaluate", str(EINSTEIN), "--metrics", "a", "--timeout", "nan")
    assert code == ExitCode.USAGE
    assert "--timeout: must be a number above 0, got nan" in err
    code, _, err = run(capsys, "evaluate", str(EINSTEIN), "--metrics", " , ")
    assert code == ExitCode.USAGE
    assert code == run(capsys)[0]  # no subcommand
    code, out, _ = run(capsys, "evaluate", "--help")
    assert code == ExitCode.OK
    assert "exit codes:" in out
    assert "130  Ctrl-C" in out
    code, out, _ = run(capsys, "--version")
    assert (code, out.strip()) == (0, "ragmetrics 0.1.0")


def test_out_in_a_missing_directory_is_created(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "new" / "dir" / "out.jsonl"
    code, out, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "id_based_context_recall", "--out",
        str(target),
    )  # fmt: skip
    assert code == ExitCode.OK, err
    assert f"Results written to {target}" in out
    assert len(target.read_text().splitlines()) == 4  # header + 3 rows


@pytest.mark.parametrize("ray_option", [["--ray"], ["--ray-address", "127.0.0.1:1"]])
def test_a_ray_run_makes_the_local_checks_before_it_needs_ray(
    judge_server: JudgeServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ray_option: list[str],
) -> None:
    """No key, a missing field, a failing judge or --batch-api stop a --ray run here, as
    they stop a local one (before, the actors found out, one failed row at a time). None of
    these needs Ray: without it the run would end with "--ray needs Ray Data" instead."""
    evaluate = ["evaluate", str(EINSTEIN), "--metrics", "context_recall", *ray_option]
    code, _, err = run(capsys, *evaluate, "--batch-api")
    assert (code, err.strip()) == (
        ExitCode.USAGE,
        "ragmetrics: error: --batch-api and --ray are two ways to run the jobs: pick one",
    )
    code, _, err = run(capsys, *evaluate)
    assert code == ExitCode.NO_API_KEY
    assert "context_recall need an LLM judge, but OPENAI_API_KEY is not set." in err

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", judge_server.base_url)
    no_reference = tmp_path / "no_reference.csv"
    no_reference.write_text('question,contexts\nq1,"[""a""]"\n')
    code, _, err = run(capsys, *evaluate[:1], str(no_reference), *evaluate[2:])
    assert code == ExitCode.MISSING_COLUMNS
    assert "context_recall: ContextRecall needs `reference`" in err

    judge_server.script = lambda req: reply_error(500, "down")
    code, out, err = run(capsys, *evaluate, "--no-cache")
    assert code == ExitCode.PREFLIGHT_FAILED
    assert "pre-flight check failed, nothing was scored" in err
    assert out == ""
    assert judge_server.count() >= 1  # the pre-flight request, from this process


def test_unwritable_output_fails_before_any_judge_call(
    judge: JudgeServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    target = blocker / "out.jsonl"
    code, out, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall", "--out", str(target)
    )
    assert code == ExitCode.PREFLIGHT_FAILED == 8
    assert out == ""  # nothing was scored
    assert f"cannot write --out {target}" in err
    assert judge.count() == 0


def console_script() -> str:
    found = shutil.which("ragmetrics", path=str(Path(sys.executable).parent))
    assert found, "the ragmetrics console script is not installed next to the interpreter"
    return found


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LANGSMITH_"))}
    env.update(extra)
    return env


def test_console_script_end_to_end(judge: JudgeServer, tmp_path: Path) -> None:
    out_file = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [console_script(), "evaluate", str(EINSTEIN), "--metrics", "context_recall",
         "--out", str(out_file)],
        env=clean_env(OPENAI_API_KEY="test", OPENAI_BASE_URL=judge.base_url),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert table_row(proc.stdout, "context_recall")[:2] == ["context_recall", "0.3333"]
    assert proc.stderr == ""  # no progress bar when stderr is not a terminal
    assert len(out_file.read_text().splitlines()) == 4  # the run's header, then 3 rows


def test_ctrl_c_prints_and_writes_the_partial_results(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    release = threading.Event()

    def script(req: JudgeRequest) -> Any:
        if payload(req)["question"] == "What can you tell me about Albert Einstein?":
            return EINSTEIN_VERDICTS
        return reply_hold(release, EINSTEIN_VERDICTS)

    judge_server.script = script
    out_file = tmp_path / "partial.jsonl"
    proc = subprocess.Popen(
        [console_script(), "evaluate", str(EINSTEIN), "--metrics", "context_recall",
         "--concurrency", "2", "--out", str(out_file), "--no-preflight", "--no-cache"],
        env=clean_env(OPENAI_API_KEY="test", OPENAI_BASE_URL=judge_server.base_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        # row 1 answered, rows 2 and 3 held (a fresh interpreter may be slow to get there)
        stdout, stderr = interrupt_when(proc, lambda: judge_server.count() >= 3)
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED == 130, stderr
    assert "Interrupted: 1 of 3 jobs finished; 2 did not run." in stdout, (stdout, stderr)
    assert table_row(stdout, "context_recall")[1:2] == ["0.5000"]
    header, *records = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert header["ragmetrics_run"]["interrupted"] is True
    assert [r["results"]["context_recall"]["status"] for r in records] == [
        "scored",
        "not_run",
        "not_run",
    ]


# --------------------------------------------------------------------------- CI gates


def test_fail_under_exits_9_and_names_what_missed(
    judge: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall,context_precision",
        "--fail-under", "context_recall=0.5,context_precision=0.4",
    )  # fmt: skip
    assert code == ExitCode.QUALITY_GATE == 9
    assert table_row(out, "context_recall")[:2] == ["context_recall", "0.3333"]  # still printed
    assert "quality gate: context_recall: mean 0.3333 is below 0.5" in err
    assert "context_precision" not in err  # 0.5 >= 0.4 passed
    code, _, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall,context_precision",
        "--fail-under", "context_recall=0.3,context_precision=0.5",
    )  # fmt: skip
    assert code == ExitCode.OK, err


def failing_on_paris(req: JudgeRequest) -> Any:
    if any("Einstein" in p for p in payload(req)["passages"]):
        return EINSTEIN_VERDICTS
    return reply_error(400, "the judge refused this row")


def test_max_failed_rate(judge: JudgeServer, capsys: pytest.CaptureFixture[str]) -> None:
    judge.script = router(RecallStatements=failing_on_paris, PreflightAnswer={"ok": True})
    argv = ["evaluate", str(EINSTEIN), "--metrics", "context_recall", "--max-failed-rate"]
    code, _, err = run(capsys, *argv, "0.5")
    assert code == ExitCode.OK, err  # 1 of 3 failed
    code, _, err = run(capsys, *argv, "0.2")
    assert code == ExitCode.QUALITY_GATE
    assert "quality gate: 1 of 3 jobs failed (33.3%), more than the allowed 20.0%" in err
    code, _, err = run(capsys, *argv, "1.5")
    assert code == ExitCode.USAGE
    assert "must be between 0 and 1" in err


def test_a_run_where_every_job_failed_exits_non_zero(
    judge: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    judge.script = static_script(reply_error(400, "bad request"))
    code, out, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall", "--no-preflight"
    )
    assert code == ExitCode.QUALITY_GATE
    assert "Failed jobs (3):" in out
    assert "quality gate: every job failed (3 of 3); first error: " in err


def test_bad_fail_under(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", str(EINSTEIN), "--metrics", "id_based_context_recall", "--fail-under"]
    code, _, err = run(capsys, *argv, "context_recall")
    assert code == ExitCode.USAGE
    assert "--fail-under: expected metric=threshold" in err
    code, _, err = run(capsys, *argv, "context_recall=0.5")
    assert code == ExitCode.USAGE
    assert (
        "--fail-under names context_recall, not among the metrics: id_based_context_recall" in err
    )


# --------------------------------------------------------------------------- pre-flight


def test_unreachable_judge_fails_before_scoring(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall",
        "--base-url", f"http://127.0.0.1:{port}/v1",
    )  # fmt: skip
    assert code == ExitCode.PREFLIGHT_FAILED == 8
    assert out == ""
    assert "pre-flight check failed, nothing was scored" in err
    assert "Is the server running? Check --base-url / OPENAI_BASE_URL." in err


def test_failing_judge_fails_preflight_with_one_call(
    judge: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    judge.script = router(RecallStatements=EINSTEIN_VERDICTS, PreflightAnswer=reply_error(500))
    code, out, err = run(capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall")
    assert code == ExitCode.PREFLIGHT_FAILED
    assert out == ""
    assert "Error code: 500" in err
    assert judge.count() == 1
    judge.reset()
    code, _, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall", "--no-preflight"
    )
    assert code == ExitCode.OK, err
    assert judge.count("PreflightAnswer") == 0


def test_unusable_cache_fails_preflight(
    judge: JudgeServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "cache.sqlite3"
    bad.write_bytes(b"not sqlite" * 100)
    code, _, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall", "--cache", str(bad)
    )
    assert code == ExitCode.PREFLIGHT_FAILED
    assert "cannot open the verdict cache" in err
    assert "--no-cache" in err
    assert judge.count() == 0


@pytest.mark.parametrize("text", ["false", "0", " "])
def test_a_cache_switch_word_is_a_usage_error_not_a_file(
    judge: JudgeServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
) -> None:
    """``--cache false`` used to create a cache file named false and score with it."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recall", "--cache", text
    )
    assert code == ExitCode.USAGE
    assert out == ""
    assert f"argument --cache: expected a file path, got {text!r}" in err
    assert "use --no-cache to run without the cache" in err
    assert (f"or write ./{text.strip()} for a file of that name" in err) == bool(text.strip())
    assert judge.count() == 0
    assert list(tmp_path.iterdir()) == []


def test_a_cache_file_named_like_a_switch_is_written_with_its_folder(
    judge: JudgeServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["evaluate", str(EINSTEIN), "--metrics", "context_recall", "--cache", "./false"]
    code, out, err = run(capsys, *argv)
    assert code == ExitCode.OK, err
    assert "Verdict cache: 0 hits, 3 misses" in out
    assert (tmp_path / "false").is_file()


# --------------------------------------------------------------------------- convenience


def test_default_metrics_are_what_the_columns_allow(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "evaluate", str(EINSTEIN))
    assert code == ExitCode.OK, err
    assert out.splitlines()[0] == (
        "No --metrics given; scoring what the dataset's columns allow: non_llm_context_recall, "
        "non_llm_context_precision, id_based_context_recall, id_based_context_precision (not "
        "context_recall, context_precision, context_entity_recall, context_relevance: no judge "
        "configured, see OPENAI_API_KEY)"
    )
    assert table_row(out, "id_based_context_recall")[:2] == ["id_based_context_recall", "0.6667"]


def test_default_metrics_leave_out_what_the_columns_lack(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "ids_only.jsonl"
    path.write_text('{"question": "q", "contexts": ["a"], "reference_context_ids": ["1"]}\n')
    code, out, err = run(capsys, "evaluate", str(path))
    assert code == ExitCode.MISSING_COLUMNS
    assert "no metric can score these columns; pass --metrics" in err
    assert "nothing (not context_relevance: no judge configured" in out


def test_default_metrics_with_a_judge() -> None:
    from langchain_ragmetrics._cli._evaluate import _default_metrics
    from langchain_ragmetrics._dataset import read_dataset

    metrics, note = _default_metrics(read_dataset(EINSTEIN), judge_available=True)
    assert [m.metric_name for m in metrics] == [
        "context_recall",
        "context_precision",
        "context_entity_recall",
        "context_relevance",
        "non_llm_context_recall",
        "non_llm_context_precision",
        "id_based_context_recall",
        "id_based_context_precision",
    ]
    assert "no judge" not in note


def test_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "evaluate", str(EINSTEIN), "--metrics", "context_recal")
    assert code == ExitCode.UNKNOWN_METRIC
    assert "unknown metric 'context_recal' (did you mean 'context_recall'" in err


def test_limit_and_sample(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["evaluate", str(EINSTEIN), "--metrics", "id_based_context_recall"]
    code, out, _ = run(capsys, *argv, "--limit", "2")
    assert code == ExitCode.OK
    assert "2 samples x 1 metrics" in out
    picks = []
    for seed in ("1", "1", "2", "3", "4"):
        target = tmp_path / f"s{seed}.jsonl"
        code, out, _ = run(capsys, *argv, "--sample", "2", "--seed", seed, "--out", str(target))
        assert code == ExitCode.OK
        assert "2 samples x 1 metrics" in out
        loaded = EvaluationResult.load(target)
        picks.append([row.location for row in loaded.rows])
    assert picks[0] == picks[1]  # same seed, same rows
    assert len({tuple(p) for p in picks}) > 1  # other seeds, other rows
    assert all(p == sorted(p) for p in picks)  # kept in dataset order
    code, _, err = run(capsys, *argv, "--limit", "1", "--sample", "1")
    assert code == ExitCode.USAGE
    assert "not allowed with argument" in err


# --------------------------------------------------------------------------- verdict cache


def test_an_unchanged_rerun_makes_no_judge_call(
    judge: JudgeServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["evaluate", str(EINSTEIN), "--metrics", "context_recall,context_precision"]
    code, out, err = run(capsys, *argv)
    assert code == ExitCode.OK, err
    assert judge.count() == 7  # the pre-flight check and 6 verdicts
    assert "Verdict cache: 0 hits, 6 misses" in out
    cache_dir = Path(os.environ["XDG_CACHE_HOME"]) / "ragmetrics"
    assert (cache_dir / "verdicts.sqlite3").exists()
    judge.reset()
    code, out, err = run(capsys, *argv)
    assert code == ExitCode.OK, err
    assert judge.count() == 0  # everything was cached: not even the pre-flight call
    assert "Verdict cache: 6 hits, 0 misses" in out
    assert "Judge calls: 0" in out
    assert table_row(out, "context_recall")[:2] == ["context_recall", "0.3333"]
    code, out, _ = run(capsys, *argv, "--no-cache")
    assert judge.count() == 7
    assert "Verdict cache" not in out
    own = tmp_path / "own" / "cache.sqlite3"
    judge.reset()
    run(capsys, *argv, "--cache", str(own))
    assert judge.count() == 7
    assert own.exists()


# --------------------------------------------------------------------------- compare, report


def saved_run(capsys: pytest.CaptureFixture[str], path: Path, data: Path) -> Path:
    code, _, err = run(
        capsys, "evaluate", str(data), "--metrics", "context_recall", "--out", str(path)
    )
    assert code == ExitCode.OK, err
    return path


def test_compare_exits_10_on_a_regression(
    judge: JudgeServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = saved_run(capsys, tmp_path / "base.jsonl", EINSTEIN)
    # the new retriever lost the Einstein passage on the first row
    rows = [json.loads(line) for line in EINSTEIN.read_text().splitlines()]
    rows[0]["retrieved_contexts"] = ["Paris is the capital and most populous city of France."]
    worse = tmp_path / "worse.jsonl"
    worse.write_text("".join(json.dumps(r) + "\n" for r in rows))
    new = saved_run(capsys, tmp_path / "new.jsonl", worse)
    code, out, err = run(capsys, "compare", str(base), str(new), "--max-drop", "0.05")
    assert code == ExitCode.REGRESSION == 10
    assert out.startswith("Comparison: ")
    assert "3 samples matched" in out
    assert table_row(out, "context_recall")[:4] == ["context_recall", "0.3333", "0.1667", "-0.1667"]
    assert "  - [context_recall] 0.50 -> 0.00 " in out
    assert "regression: context_recall: dropped by 0.1667" in err
    code, _, err = run(capsys, "compare", str(base), str(new), "--max-drop", "0.2")
    assert code == ExitCode.OK, err
    code, _, _ = run(capsys, "compare", str(base), str(base), "--max-drop", "0")
    assert code == ExitCode.OK
    code, _, err = run(capsys, "compare", str(base), str(tmp_path / "nope.jsonl"))
    assert code == ExitCode.FILE_NOT_FOUND
    assert "results file not found" in err
    code, _, err = run(capsys, "compare", str(EINSTEIN), str(new))
    assert code == ExitCode.INVALID_DATASET
    assert "not a ragmetrics results file" in err
    code, _, err = run(capsys, "compare", str(tmp_path / "run.csv"), str(new))
    assert code == ExitCode.USAGE
    assert "a CSV export cannot be read back as a run" in err


def test_report_writes_one_html_file(
    judge: JudgeServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = saved_run(capsys, tmp_path / "base.jsonl", EINSTEIN)
    code, out, err = run(capsys, "report", str(base))
    assert code == ExitCode.OK, err
    default = tmp_path / "base.html"
    assert out.strip() == f"Report written to {default}"
    assert "<svg" in default.read_text(encoding="utf-8")
    target = tmp_path / "site" / "report.html"
    code, out, err = run(capsys, "report", str(base), "--compare", str(base), "-o", str(target))
    assert code == ExitCode.OK, err
    html = target.read_text(encoding="utf-8")
    assert 'id="comparison"' in html
    code, _, err = run(capsys, "report", str(tmp_path / "missing.jsonl"))
    assert code == ExitCode.FILE_NOT_FOUND


def test_help_lists_the_new_commands_and_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == ExitCode.OK
    assert "{evaluate,compare,report," in out
    code, out, _ = run(capsys, "evaluate", "--help")
    for line in ("  8  checked before any paid call", "  9  a --fail-under"):
        assert line in out
    assert " 10  compare:" not in out  # evaluate never returns it
    assert "--fail-under METRIC=MIN,..." in out
    code, out, _ = run(capsys, "compare", "--help")
    assert " 10  compare:" in out


def test_report_to_an_unwritable_place(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    code, _, _ = run(
        capsys, "evaluate", str(EINSTEIN), "--metrics", "id_based_context_recall", "--out",
        str(results),
    )  # fmt: skip
    assert code == ExitCode.OK
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run(capsys, "report", str(results), "-o", str(blocker / "report.html"))
    assert code == ExitCode.ERROR
    assert f"cannot write {blocker / 'report.html'}" in err
