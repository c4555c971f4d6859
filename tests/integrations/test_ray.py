"""``evaluate_ray`` on a real local Ray (2 CPUs, no dashboard, 127.0.0.1) and the loopback judge.

Ray is an extra with its own virtualenv: without it these tests skip, unless
``RAGMETRICS_REQUIRE_EXTRAS=1`` (set by ``.ci/run``), where a missing Ray fails them.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._support.lexical_judge import lexical_judge
from tests._support.openai_server import JudgeRequest, JudgeServer, reply_error
from tests.test_cli import clean_env

if os.environ.get("RAGMETRICS_REQUIRE_EXTRAS") == "1":
    ray = importlib.import_module("ray")  # a missing extra fails here, it does not skip
else:
    ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")

from langchain_ragmetrics.integrations.ray import evaluate_ray, result_from_rows

# The CLI from this interpreter and tree (the shared venv's console script may be stale).
RAGMETRICS = [
    sys.executable,
    "-c",
    "import sys; from langchain_ragmetrics._cli import main; sys.exit(main())",
]

ROWS = 1_000


@pytest.fixture(scope="module")
def local_ray() -> Iterator[str]:
    """A local Ray of 2 CPUs bound to 127.0.0.1, dashboard off; yields its GCS address."""
    context = ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def judge() -> Iterator[JudgeServer]:
    with JudgeServer(lexical_judge()) as server:
        yield server


def rows(count: int) -> list[dict[str, Any]]:
    return [
        {
            "row": i + 1,
            "question": f"Who wrote paper {i}?",
            "contexts": [f"Einstein wrote paper {i}.", "Paris is the capital of France."],
            "reference": f"Einstein wrote paper {i}." + (" Bohr replied." if i % 2 else ""),
        }
        for i in range(count)
    ]


def test_a_thousand_rows_each_come_out_once_failures_as_rows(
    local_ray: str, judge: JudgeServer
) -> None:
    lexical = lexical_judge()

    def script(req: JudgeRequest) -> Any:
        if "Einstein wrote paper 13." in json.dumps(req.body):
            return reply_error(500, "injected")  # every retry fails too: a failed row
        return lexical(req)

    judge.script = script
    judge.reset()
    data = [*rows(ROWS), {"row": ROWS + 1, "question": "no reference", "contexts": ["x"]}]
    out = evaluate_ray(
        ray.data.from_items(data),
        ["context_recall"],
        model="judge-model",
        base_url=judge.base_url,
        api_key="test",
        max_concurrency=16,
    ).take_all()
    assert sorted(r["row"] for r in out) == list(range(1, ROWS + 2))  # each row exactly once
    by_row = {r["row"]: r for r in out}
    statuses = [r["context_recall_status"] for r in out]
    assert statuses.count("scored") == ROWS - 1
    assert statuses.count("failed") == 2
    assert "500" in json.loads(by_row[14]["record"])["results"]["context_recall"]["error"]
    assert (
        "reference" in json.loads(by_row[ROWS + 1]["record"])["results"]["context_recall"]["error"]
    )
    assert by_row[1]["context_recall"] == 1.0
    assert by_row[2]["context_recall"] == 0.5  # "Bohr replied." is not in the contexts
    record = json.loads(by_row[2]["record"])
    assert record["question"] == "Who wrote paper 1?"
    assert set(record["results"]["context_recall"]) >= {"status", "score", "reason", "usage"}
    # The results count each row's judge requests once: 999 rows in one request each, and
    # row 14's request with its 3 retries.
    usage = [json.loads(r["record"])["results"]["context_recall"].get("usage") or {} for r in out]
    assert sum(u.get("judge_calls", 0) for u in usage) == ROWS - 1 + 4
    # Every row reached the judge. Ray runs a lost task at least once: when an actor's
    # connection drops under load, its batch is sent again, so the judge may see more
    # requests than the results count, never fewer.
    papers = {
        int(n) for req in judge.requests for n in re.findall(r"paper (\d+)\.", json.dumps(req.body))
    }
    assert papers == set(range(ROWS))
    assert judge.count() >= ROWS - 1 + 4
    result = result_from_rows(out, ["context_recall"])
    assert len(result.rows) == ROWS + 1
    assert result.rows[0].sample.question == "Who wrote paper 0?"


def actor_pids() -> list[int]:
    """Processes of Ray Data's map actors on this machine (by their process title)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(b"ray::MapWorker"):
            pids.append(int(entry.name))
    return pids


def test_killed_actors_batches_are_retried_and_counted_once(
    local_ray: str, judge: JudgeServer
) -> None:
    release = threading.Event()
    held = threading.Semaphore(0)
    lexical = lexical_judge()
    killed: list[int] = []

    def script(req: JudgeRequest) -> Any:
        if not release.is_set():
            held.release()
            release.wait(60)
        return lexical(req)

    judge.script = script
    judge.reset()
    result: dict[str, Any] = {}

    def run() -> None:
        result["rows"] = evaluate_ray(
            ray.data.from_items(rows(200)),
            ["context_recall"],
            model="judge-model",
            base_url=judge.base_url,
            api_key="test",
            batch_size=50,
            max_concurrency=4,
        ).take_all()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert held.acquire(timeout=120), "no actor reached the judge"
        pids = actor_pids()
        assert pids
        for pid in pids:  # every map actor alive now, so the one holding a request dies too
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    finally:
        release.set()
        thread.join(300)
    assert not thread.is_alive()
    out = result["rows"]
    assert sorted(r["row"] for r in out) == list(range(1, 201))  # retried, and counted once
    assert all(r["context_recall_status"] == "scored" for r in out)
    assert judge.count() > 200  # the killed actor's batch was sent again


def test_the_cli_runs_a_dataset_file_on_ray(
    local_ray: str, judge: JudgeServer, tmp_path: Path
) -> None:
    judge.script = lexical_judge()
    data = tmp_path / "data.jsonl"
    data.write_text(
        "\n".join(json.dumps({k: v for k, v in r.items() if k != "row"}) for r in rows(30)),
        encoding="utf-8",
    )
    out_file = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [*RAGMETRICS, "evaluate", str(data), "--metrics", "context_recall",
         "--ray-address", local_ray, "--workers", "2", "--out", str(out_file)],
        env=clean_env(OPENAI_API_KEY="test", OPENAI_BASE_URL=judge.base_url),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("context_recall "))
    assert line.split()[1] == "0.7500"  # half the rows score 1.0, half 0.5
    header, *records = [json.loads(x) for x in out_file.read_text().splitlines()]
    assert [r["question"] for r in records] == [f"Who wrote paper {i}?" for i in range(30)]
    assert header["ragmetrics_run"]["interrupted"] is False


def evaluate_on_cluster(
    tmp_path: Path, address: str, *, from_env: bool = False
) -> subprocess.CompletedProcess[str]:
    """``ragmetrics evaluate --ray-address address`` (``from_env``: ``--ray`` with
    ``RAY_ADDRESS=address``) on one row, expected to end in the checks."""
    from langchain_ragmetrics._cli import ExitCode

    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"question": "q", "contexts": ["c"], "reference_contexts": ["c"]}))
    where = ["--ray"] if from_env else ["--ray-address", address]
    proc = subprocess.run(
        [*RAGMETRICS, "evaluate", str(data), "--metrics", "non_llm_context_recall", *where],
        env=clean_env(RAY_ADDRESS=address) if from_env else clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert proc.returncode == ExitCode.PREFLIGHT_FAILED, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def test_a_ray_that_cannot_be_reached_is_reported_not_raised(tmp_path: Path) -> None:
    """Before, Ray's own traceback ended the command; now it names the address, no row is
    scored and the exit code says the run failed its checks (an address Ray cannot parse
    fails at once, with no network)."""
    proc = evaluate_on_cluster(tmp_path, "no-such-cluster")
    assert (
        "cannot start or reach the Ray cluster at no-such-cluster, nothing was scored: "
        "ValueError: Invalid address format: no-such-cluster"
    ) in proc.stderr


def test_a_cluster_address_nothing_listens_on_ends_the_run_at_once(tmp_path: Path) -> None:
    """Before, ``ray.init`` retried a refused address for minutes; now one connection is
    tried first and the run ends with the address named, before Ray starts."""
    with socket.socket() as closed:  # bound, not listening: a connection is refused
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        proc = evaluate_on_cluster(tmp_path, address)
        from_env = evaluate_on_cluster(tmp_path, address, from_env=True)
    assert (
        f"cannot start or reach the Ray cluster at {address}, nothing was scored: "
        f"ConnectionError: nothing answers at {address} (ConnectionRefusedError"
    ) in proc.stderr
    # --ray alone joins the cluster RAY_ADDRESS names: the same check, the source named
    assert (
        f"cannot start or reach the Ray cluster at {address} (RAY_ADDRESS), nothing was "
        f"scored: ConnectionError: nothing answers at {address} (ConnectionRefusedError"
    ) in from_env.stderr


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("num_actors", 0, "`num_actors` must be a whole number of at least 1, got 0"),
        ("num_actors", 1.5, "`num_actors` must be a whole number of at least 1, got 1.5"),
        ("max_concurrency", "x", "`max_concurrency` must be a whole number of at least 1"),
        ("batch_size", True, "`batch_size` must be a whole number of at least 1, got True"),
        ("judge_timeout", -1, "`judge_timeout` must be a number above 0, got -1"),
        ("timeout", math.nan, "`timeout` must be a number above 0, got nan"),
        ("rate_limit_per_minute", 0, "`rate_limit_per_minute` must be a number above 0"),
        ("num_cpus", -1, "`num_cpus` must be a number of at least 0, got -1"),
    ],
)
def test_bad_options_are_refused_by_name(
    local_ray: str, option: str, value: object, message: str
) -> None:
    """Before, 1.5 actors passed, "x" raised a comparison error and a bad judge_timeout
    was blamed on `timeout` (the judge recipe's field)."""
    with pytest.raises(ValueError, match=message):
        evaluate_ray(ray.data.from_items(rows(1)), ["context_recall"], **{option: value})


class _Recorder:
    """Stands in for a dataset: records how ``map_batches`` was called."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def map_batches(self, fn: Any, **options: Any) -> _Recorder:
        self.calls.append({"fn": fn, **options})
        return self


def test_the_rate_limit_is_shared_by_the_pool_and_no_live_client_crosses() -> None:
    recorder = _Recorder()
    evaluate_ray(
        recorder,  # type: ignore[arg-type]
        ["context_recall", "context_precision"],
        model="judge-model",
        base_url="http://127.0.0.1:9/v1",
        api_key="test",
        num_actors=4,
        max_concurrency=8,
        rate_limit_per_minute=600,
    )
    (call,) = recorder.calls
    recipe = call["fn_constructor_kwargs"]["recipe"]
    assert recipe.rate_limit_per_minute == 150  # 4 actors x 150 = the pool's 600 a minute
    assert recipe.max_concurrency == 8  # per actor
    assert (call["compute"].min_size, call["compute"].max_size) == (4, 4)  # a fixed pool
    assert all(getattr(m, "llm", None) is None for m in recipe.metrics)  # a recipe, not a client
    assert [r.model for r in recipe.judge_recipes] == ["judge-model"]
    pickle.loads(pickle.dumps(recipe))  # what Ray ships to each actor
