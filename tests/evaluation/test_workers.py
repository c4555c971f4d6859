"""``evaluate(..., workers=N)``: the same results from N spawned processes, whatever happens."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_openai import ChatOpenAI

from langchain_ragmetrics import ContextPrecision, ContextRecall, MetricResult, VerdictCache
from langchain_ragmetrics._cli._common import ExitCode
from langchain_ragmetrics.evaluation import _workers as workers_module
from langchain_ragmetrics.evaluation import evaluate
from langchain_ragmetrics.evaluation._recipe import JudgeRecipe, ScoringRecipe
from tests._support.judges import payload
from tests._support.lexical_judge import lexical_judge
from tests._support.openai_server import JudgeRequest, JudgeServer
from tests._support.processes import interrupt_when
from tests.test_cli import clean_env

# The CLI from this interpreter and tree (the shared venv's console script may be stale).
RAGMETRICS = [
    sys.executable,
    "-c",
    "import sys; from langchain_ragmetrics._cli import main; sys.exit(main())",
]

METRICS = [ContextRecall(), ContextPrecision()]


def rows(count: int) -> list[dict[str, Any]]:
    """Distinct rows whose lexical scores differ from row to row."""
    return [
        {
            "question": f"Who wrote paper {i}?",
            "contexts": [
                f"Einstein wrote paper {i} in {1900 + i}.",
                "Paris is the capital of France.",
            ][:: 1 if i % 2 else -1],
            "reference": f"Einstein wrote paper {i}. It appeared in {1900 + i}."
            + (" Bohr replied." if i % 3 == 0 else ""),
        }
        for i in range(count)
    ]


def scores(result: Any, metric: str) -> list[float]:
    return [round(s, 6) for s in result[metric]]


def test_workers_give_the_same_results_in_input_order(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = lexical_judge()
    data = rows(12)
    seen: list[tuple[int, str]] = []
    one = evaluate(data, METRICS, llm=make_judge(), show_progress=False)
    requests_one = judge_server.count()
    two = evaluate(
        data,
        METRICS,
        llm=make_judge(),
        workers=2,
        max_concurrency=4,
        show_progress=False,
        on_result=lambda row, name, _: seen.append((row, name)),
    )
    assert type(two) is type(one)
    assert two.metrics == one.metrics
    for name in one.metrics:
        assert scores(two, name) == scores(one, name)
        assert not any(math.isnan(s) for s in scores(two, name))
    assert [r.sample.question for r in two.rows] == [r["question"] for r in data]
    assert sorted(seen) == sorted((r, m) for r in range(12) for m in one.metrics)  # once each
    assert two.usage.judge_calls == one.usage.judge_calls == requests_one
    assert judge_server.count() == 2 * requests_one  # no job scored twice
    assert not two.interrupted
    assert not multiprocessing.active_children()


def test_the_verdict_cache_is_shared_across_workers(
    tmp_path: Path, judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    judge_server.script = lexical_judge()
    path = tmp_path / "verdicts.sqlite3"
    data = rows(6)
    first = evaluate(data, METRICS, llm=make_judge(), cache=path, workers=2, show_progress=False)
    assert first.usage.cache_misses == judge_server.count() == 12
    again = evaluate(
        data, METRICS, llm=make_judge(), cache=VerdictCache(path), workers=2, show_progress=False
    )
    assert judge_server.count() == 12  # every answer came from the file the workers share
    assert again.usage.cache_hits == 12
    assert scores(again, "context_recall") == scores(first, "context_recall")


def hold_after(answered: int, release: threading.Event) -> Callable[[JudgeRequest], Any]:
    """Answer the first ``answered`` requests lexically, hold the rest until ``release``."""
    lexical = lexical_judge()
    lock = threading.Lock()
    count = 0

    def script(req: JudgeRequest) -> Any:
        nonlocal count
        with lock:
            count += 1
            mine = count
        if mine <= answered:
            return lexical(req)
        release.wait(30)
        return lexical(req)

    return script


def kill_one_worker(done: list[int]) -> Callable[[int, str, MetricResult], None]:
    """An ``on_result`` that SIGKILLs one worker when the first result arrives."""

    def on_result(_row: int, _name: str, _result: MetricResult) -> None:
        if not done:
            victim = multiprocessing.active_children()[0]
            done.append(victim.pid or 0)
            os.kill(victim.pid or 0, signal.SIGKILL)
            victim.join(10)

    return on_result


def test_a_killed_workers_jobs_go_to_a_replacement_and_are_scored_once(
    judge_server: JudgeServer, make_judge: Callable[..., Any]
) -> None:
    release = threading.Event()
    judge_server.script = hold_after(1, release)
    data = rows(10)
    killed: list[int] = []
    on_kill = kill_one_worker(killed)

    def on_result(row: int, name: str, result: MetricResult) -> None:
        on_kill(row, name, result)
        release.set()  # the victim died holding a request: let everyone go on

    delivered: list[tuple[int, str]] = []
    result = evaluate(
        data,
        [ContextRecall()],
        llm=make_judge(),
        workers=2,
        max_concurrency=2,
        show_progress=False,
        on_result=lambda r, n, res: (delivered.append((r, n)), on_result(r, n, res)),
    )
    assert killed
    assert sorted(delivered) == [(r, "context_recall") for r in range(10)]  # once each
    assert not any(math.isnan(s) for s in result["context_recall"]), [
        row.results["context_recall"] for row in result.rows
    ]
    assert not result.interrupted


def test_a_job_whose_workers_all_die_fails_with_the_cause(
    judge_server: JudgeServer, make_judge: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers_module, "WORKER_RESTARTS", 0)
    release = threading.Event()
    judge_server.script = hold_after(1, release)
    killed: list[int] = []
    on_kill = kill_one_worker(killed)

    def on_result(row: int, name: str, result: MetricResult) -> None:
        on_kill(row, name, result)
        release.set()

    result = evaluate(
        rows(10),
        [ContextRecall()],
        llm=make_judge(),
        workers=2,
        max_concurrency=2,
        show_progress=False,
        on_result=on_result,
    )
    failed = [row.results["context_recall"] for row in result.rows]
    errors = [r.error for r in failed if r is not None and r.error]
    assert errors, "the killed worker's jobs must fail, not vanish"
    assert all("WorkerDiedError" in e and "SIGKILL" in e for e in errors), errors
    assert all(r is not None for r in failed)  # every job accounted for
    assert len(errors) + sum(not math.isnan(s) for s in result["context_recall"]) == 10


def test_ctrl_c_on_the_cli_with_workers_keeps_the_partial_results(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    release = threading.Event()
    lexical = lexical_judge()

    def script(req: JudgeRequest) -> Any:
        if payload(req)["question"] == "Who wrote paper 0?":
            return lexical(req)
        return _held(release, lexical, req)

    judge_server.script = script
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows(4)), encoding="utf-8")
    out_file = tmp_path / "partial.jsonl"
    proc = subprocess.Popen(
        [*RAGMETRICS, "evaluate", str(data), "--metrics", "context_recall",
         "--concurrency", "2", "--workers", "2", "--out", str(out_file), "--no-preflight",
         "--no-cache"],
        env=clean_env(OPENAI_API_KEY="test", OPENAI_BASE_URL=judge_server.base_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:  # row 0 answered; rows 1 and 2 held, one per worker
        stdout, stderr = interrupt_when(proc, lambda: judge_server.count() >= 3)
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert "Interrupted: 1 of 4 jobs finished; 3 did not run." in stdout
    header, *records = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert header["ragmetrics_run"]["interrupted"] is True
    statuses = [r["results"]["context_recall"]["status"] for r in records]
    assert statuses == ["scored", "not_run", "not_run", "not_run"]
    assert judge_server.count() == 3  # the stopped workers sent nothing more


def _held(
    release: threading.Event, lexical: Callable[[JudgeRequest], Any], req: JudgeRequest
) -> Any:
    release.wait(60)
    return lexical(req)


class _Unserializable(ChatOpenAI):
    """A judge LangChain cannot serialize (as many custom wrappers are)."""

    @classmethod
    def is_lc_serializable(cls) -> bool:
        return False


def test_bad_workers_and_what_cannot_cross_are_refused_up_front(
    make_judge: Callable[..., Any],
) -> None:
    data = rows(4)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="`workers` must be a whole number"):
            evaluate(data, METRICS, llm=make_judge(), workers=bad, show_progress=False)  # type: ignore[arg-type]
    base = make_judge()
    private = _Unserializable(model="m", base_url=base.openai_api_base, api_key="test")
    with pytest.raises(ValueError, match="_Unserializable cannot be rebuilt"):
        evaluate(data, [ContextRecall(llm=private)], workers=2, show_progress=False)
    with pytest.raises(ValueError, match="callbacks cannot be sent"):
        evaluate(
            data,
            METRICS,
            llm=make_judge(),
            workers=2,
            config={"callbacks": [BaseCallbackHandler()]},
            show_progress=False,
        )
    assert not multiprocessing.active_children()


def test_a_judge_recipe_rebuilds_the_same_judge(make_judge: Callable[..., Any]) -> None:
    llm = make_judge(timeout=7, model="m-1")
    rebuilt = JudgeRecipe.from_llm(llm).build()
    assert type(rebuilt) is type(llm)
    assert rebuilt.model_name == "m-1"
    assert rebuilt.openai_api_base == llm.openai_api_base
    assert rebuilt.request_timeout == 7
    assert rebuilt.openai_api_key.get_secret_value() == "test"
    assert rebuilt is not llm
    made = JudgeRecipe(model="m-2", base_url="http://127.0.0.1:9/v1", api_key="k").build()
    assert made.model_name == "m-2"  # type: ignore[attr-defined]


def test_a_recipe_shares_concurrency_and_rate_among_workers(
    make_judge: Callable[..., Any],
) -> None:
    metrics = [ContextRecall(llm=make_judge()), ContextPrecision(llm=make_judge())]
    recipe = ScoringRecipe(metrics, max_concurrency=64, rate_limit_per_minute=600)
    share = recipe.split(2)
    assert (share.max_concurrency, share.rate_limit_per_minute) == (32, 300)
    assert (recipe.max_concurrency, recipe.rate_limit_per_minute) == (64, 600)  # unchanged
    assert len(recipe.judge_recipes) == 1  # one judge for both metrics, built once per worker
    built = pickle.loads(pickle.dumps(share)).build_metrics()
    assert built[0].llm is built[1].llm
    assert built[0].llm.openai_api_base == make_judge().openai_api_base
