"""``evaluate_ray`` on a real local Ray (2 CPUs, no dashboard, 127.0.0.1) and the loopback judge.

Ray is an extra with its own virtualenv: without it these tests skip, unless
``RAGMETRICS_REQUIRE_EXTRAS=1`` (set by ``.ci/run``), where a missing Ray fails them.

Linux Ray turns ``_node_ip_address="127.0.0.1"`` into the machine's own address (it takes
loopback for a developer machine only where ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` is off,
``ray._private.services.get_node_ip_address``); the variable is set to 0 before Ray is
imported, so the local Ray, its workers and the CLI's Ray listen on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import csv
import gc
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
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read once, when Ray is imported

from tests._support.clock import HandClock
from tests._support.lexical_judge import lexical_judge
from tests._support.openai_server import JudgeRequest, JudgeServer, reply_error
from tests.test_cli import clean_env

if os.environ.get("RAGMETRICS_REQUIRE_EXTRAS") == "1":
    ray = importlib.import_module("ray")  # a missing extra fails here, it does not skip
else:
    ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")

from langchain_openai import ChatOpenAI

from langchain_ragmetrics import evaluate
from langchain_ragmetrics._errors import JudgeSetupError
from langchain_ragmetrics.integrations import ray as ray_module
from langchain_ragmetrics.integrations.ray import (
    _RemoteRateLimiter,
    _SharedBucket,
    evaluate_ray,
    result_from_rows,
)
from langchain_ragmetrics.metrics import ContextPrecision, ContextRecall, NonLLMContextRecall
from langchain_ragmetrics.metrics._judge import make_judge
from tests._support.ray_poison import POISON, ClosedProxy, CrashOnRow

# The CLI from this interpreter and tree (the shared venv's console script may be stale).
RAGMETRICS = [
    sys.executable,
    "-c",
    "import sys; from langchain_ragmetrics._cli import main; sys.exit(main())",
]

ROWS = 1_000


LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""For a CLI run that starts its own Ray: keep it on loopback too."""


@pytest.fixture(scope="module")
def crash_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file ``tests._support.ray_poison`` counts its crashes in (set before Ray starts)."""
    path = tmp_path_factory.mktemp("ray") / "crashes.log"
    os.environ["RAGMETRICS_TEST_CRASH_LOG"] = str(path)
    return path


@pytest.fixture(scope="module")
def local_ray(crash_log: Path) -> Iterator[str]:
    """A local Ray of 2 CPUs bound to 127.0.0.1, dashboard off; yields its GCS address.

    Its workers start without OPENAI_* variables: a judge they build uses the base URL it
    is given (the loopback judge, with a placeholder key), never OpenAI.
    """
    saved = {k: os.environ.pop(k) for k in ("OPENAI_API_KEY", "OPENAI_BASE_URL") if k in os.environ}
    try:
        context = ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            _node_ip_address="127.0.0.1",
        )
    finally:
        os.environ.update(saved)
    try:
        address = context.address_info["gcs_address"]
        assert address.startswith("127.0.0.1:"), address  # not the machine's eth0 address
        yield address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def judge() -> Iterator[JudgeServer]:
    with JudgeServer(lexical_judge()) as server:
        yield server


def hold_until_released(judge: JudgeServer) -> tuple[threading.Event, threading.Semaphore]:
    """Script ``judge`` to hold each request (counted on the semaphore) until the event is
    set, then answer as the lexical judge does."""
    release = threading.Event()
    held = threading.Semaphore(0)
    lexical = lexical_judge()

    def script(req: JudgeRequest) -> Any:
        if not release.is_set():
            held.release()
            release.wait(60)
        return lexical(req)

    judge.script = script
    return release, held


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
    release, held = hold_until_released(judge)
    killed: list[int] = []
    judge.reset()
    result: dict[str, Any] = {}

    def run() -> None:
        result["rows"] = evaluate_ray(
            ray.data.from_items(rows(200)),
            ["context_recall"],
            model="judge-model",
            base_url=judge.base_url,
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


def run_cli(
    data: Path, judge: JudgeServer, *options: str, out: Path, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``ragmetrics evaluate data --metrics context_recall --out out`` against the judge."""
    return subprocess.run(
        [*RAGMETRICS, "evaluate", str(data), "--metrics", "context_recall", "--no-progress",
         "--out", str(out), *options],
        env=clean_env(OPENAI_API_KEY="test", OPENAI_BASE_URL=judge.base_url, **LOOPBACK),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip


def test_a_relative_cache_on_ray_is_the_file_named_where_the_cli_ran(
    local_ray: str, judge: JudgeServer, tmp_path: Path
) -> None:
    """Before, ``--cache verdicts.sqlite3`` reached the actors as a relative path, which they
    opened in the cluster's working directory (here: the test process's, where the local Ray
    was started), not where the command ran; now it is the file the user named."""
    from langchain_ragmetrics import VerdictCache

    judge.script = lexical_judge()
    here = tmp_path / "here"
    here.mkdir()
    data = here / "data.jsonl"
    data.write_text(
        "\n".join(json.dumps({k: v for k, v in r.items() if k != "row"}) for r in rows(4)),
        encoding="utf-8",
    )
    namesake = Path.cwd() / "verdicts.sqlite3"  # the cluster's working directory
    assert not namesake.exists()
    try:
        where = ["--ray-address", local_ray, "--cache", "verdicts.sqlite3"]
        proc = run_cli(Path("data.jsonl"), judge, *where, out=Path("out.jsonl"), cwd=here)
        assert proc.returncode == 0, proc.stderr
        assert not namesake.exists()
    finally:
        for leftover in (namesake, *namesake.parent.glob(f"{namesake.name}-*")):  # -wal, -shm
            leftover.unlink(missing_ok=True)
    cache = VerdictCache(here / "verdicts.sqlite3")
    try:
        assert len(cache) == 4  # one verdict per row, written by the actors
    finally:
        cache.close()


def test_the_cli_on_ray_names_the_same_file_rows_as_a_local_run(
    local_ray: str, judge: JudgeServer, tmp_path: Path
) -> None:
    """Before, --ray renumbered the rows after --sample and dropped file and line; now the
    results name each row's file, row and line, as the local run does."""
    judge.script = lexical_judge()
    data = tmp_path / "data.jsonl"
    lines = []
    for i, r in enumerate(rows(10)):
        r.pop("row")
        if i == 7:
            r.pop("reference")  # line 8 cannot be scored by context_recall
        lines.append(json.dumps(r))
    data.write_text("\n".join(lines), encoding="utf-8")
    sample = ["--sample", "6", "--seed", "3"]
    local = run_cli(data, judge, *sample, "--workers", "1", out=tmp_path / "local.jsonl")
    on_ray = run_cli(data, judge, *sample, "--ray-address", local_ray, out=tmp_path / "ray.jsonl")
    assert local.returncode == on_ray.returncode, on_ray.stderr

    def seen(name: str) -> list[tuple[str, str, str]]:
        records = [json.loads(x) for x in (tmp_path / name).read_text().splitlines()[1:]]
        return [
            (r["question"], r["location"], r["results"]["context_recall"]["status"])
            for r in records
        ]

    assert seen("ray.jsonl") == seen("local.jsonl")
    assert all(f"{data}, row " in location and "(line " in location for _, location, _ in
               seen("ray.jsonl"))  # fmt: skip


def test_the_cli_on_ray_takes_metadata_of_mixed_types(
    local_ray: str, judge: JudgeServer, tmp_path: Path
) -> None:
    """Before, a metadata key holding a number in one row and text in another crashed
    Arrow (a traceback, exit 1); the metadata now travels as JSON text."""
    judge.script = lexical_judge()
    data = tmp_path / "data.jsonl"
    lines = []
    for i, r in enumerate(rows(6)):
        r.pop("row")
        r["source_id"] = i if i % 2 else f"doc-{i}"
        lines.append(json.dumps(r))
    data.write_text("\n".join(lines), encoding="utf-8")
    local = run_cli(data, judge, "--workers", "1", out=tmp_path / "local.jsonl")
    on_ray = run_cli(data, judge, "--ray-address", local_ray, out=tmp_path / "ray.jsonl")
    assert on_ray.returncode == local.returncode == 0, on_ray.stderr
    assert "Traceback" not in on_ray.stderr
    local_records = (tmp_path / "local.jsonl").read_text().splitlines()[1:]
    ray_records = (tmp_path / "ray.jsonl").read_text().splitlines()[1:]
    assert (
        [json.loads(x)["source_id"] for x in ray_records]
        == [json.loads(x)["source_id"] for x in local_records]
        == ["doc-0", 1, "doc-2", 3, "doc-4", 5]
    )


def test_ctrl_c_on_ray_keeps_what_was_scored(
    local_ray: str, judge: JudgeServer, tmp_path: Path
) -> None:
    """Before, Ctrl-C threw away every row already scored on Ray; now, as in a local run,
    --out gets them, marked interrupted, the rows not scored yet as not run, and the exit
    code is 130.

    The judge answers 36 requests (one per row) and holds the rest. The 40 rows are 5 batches
    of 8, and Ray may have all 5 in flight at once (each actor takes several batches ahead),
    so only more than 5 x 7 answers make one batch complete whatever the scheduling (with 16,
    a CI run once spread them so that none was); the CLI says when rows arrive."""
    release = threading.Event()
    lexical = lexical_judge()
    answered = 0
    lock = threading.Lock()

    def script(req: JudgeRequest) -> Any:
        nonlocal answered
        with lock:
            answered += 1
            hold = answered > 36
        if hold:
            release.wait(120)
        return lexical(req)

    judge.script = script
    data = tmp_path / "data.jsonl"
    data.write_text(
        "\n".join(json.dumps({k: v for k, v in r.items() if k != "row"}) for r in rows(40)),
        encoding="utf-8",
    )
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen(
        [*RAGMETRICS, "evaluate", str(data), "--metrics", "context_recall", "--concurrency", "2",
         "--workers", "2", "--no-preflight", "--ray-address", local_ray, "--out", str(out)],
        env=clean_env(OPENAI_API_KEY="test", OPENAI_BASE_URL=judge.base_url, **LOOPBACK),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # waits for the CLI's word that rows arrived
            seen.append(line)
            if "rows scored" in line:
                break
        else:
            pytest.fail("no rows arrived: " + "".join(seen))
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=120)
        seen.append(rest)
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, "".join(seen)
    header, *records = [json.loads(x) for x in out.read_text().splitlines()]
    assert header["ragmetrics_run"]["interrupted"] is True
    assert len(records) == 40  # every row, those not scored yet as not run (as a local run)
    statuses = [r["results"]["context_recall"]["status"] for r in records]
    assert 8 <= statuses.count("scored") < 40
    assert set(statuses) == {"scored", "not_run"}
    assert all(r["location"].startswith(f"{data}, row ") for r in records)


def test_ray_data_fetches_on_the_threads_the_cli_waits_for(local_ray: str) -> None:
    """The CLI's stop waits for Ray Data's fetch threads by their name (``stop_ray``): a Ray
    that renamed them would bring back status 1 on Ctrl-C, and fails here instead."""
    from langchain_ragmetrics._cli._ray import FETCH_THREAD

    names: set[str] = set()
    for _ in ray.data.range(8, override_num_blocks=4).iter_batches(batch_size=2):
        names.update(t.name for t in threading.enumerate())
    assert FETCH_THREAD in names


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
        ("max_retries", -1, "`max_retries` must be a whole number of at least 0, got -1"),
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


def test_no_live_client_and_no_key_cross_by_default(
    local_ray: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the driver's key was pickled into every actor's recipe (Ray's object store);
    now the recipe holds none unless the caller opts in, and the actors read their own
    OPENAI_API_KEY. (A metric's judge holds this process's key, read from its environment:
    its own key is refused, see the test below.)"""
    secret = "sk-test-not-for-the-object-store"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    own_judge = ChatOpenAI(model="own-judge", base_url="http://127.0.0.1:9/v1")
    recorder = _Recorder()
    evaluate_ray(
        recorder,  # type: ignore[arg-type]
        ["context_recall", ContextPrecision(llm=own_judge)],
        model="judge-model",
        base_url="http://127.0.0.1:9/v1",
        num_actors=4,
        max_concurrency=8,
    )
    (call,) = recorder.calls
    recipe = call["fn_constructor_kwargs"]["recipe"]
    assert recipe.max_concurrency == 8  # per actor
    assert (call["compute"].min_size, call["compute"].max_size) == (4, 4)  # a fixed pool
    assert all(getattr(m, "llm", None) is None for m in recipe.metrics)  # a recipe, not a client
    assert recipe.judge_recipes[0].model == "judge-model"
    shipped = pickle.dumps(call["fn_constructor_kwargs"])  # what Ray ships to each actor
    assert secret.encode() not in shipped
    assert "runtime_env" not in call
    assert secret not in repr(recipe.judge_recipes)
    pickle.loads(shipped)
    with pytest.raises(ValueError, match="`api_key` is sent to the Ray actors only with"):
        evaluate_ray(recorder, ["context_recall"], api_key=secret)  # type: ignore[arg-type]


def test_the_key_is_sent_only_when_asked(local_ray: str) -> None:
    recorder = _Recorder()
    evaluate_ray(
        recorder,  # type: ignore[arg-type]
        ["context_recall"],
        base_url="http://127.0.0.1:9/v1",
        api_key="sk-opted-in",
        send_api_key=True,
    )
    (call,) = recorder.calls
    assert b"sk-opted-in" not in pickle.dumps(call["fn_constructor_kwargs"])
    assert call["runtime_env"] == {"env_vars": {"OPENAI_API_KEY": "sk-opted-in"}}
    other = ChatOpenAI(model="own-judge", base_url="http://127.0.0.1:9/v1", api_key="sk-other")
    with pytest.raises(ValueError, match="two judges hold different keys for OPENAI_API_KEY"):
        evaluate_ray(
            recorder,  # type: ignore[arg-type]
            ["context_recall", ContextPrecision(llm=other)],
            base_url="http://127.0.0.1:9/v1",
            api_key="sk-opted-in",
            send_api_key=True,
        )


def test_a_missing_key_is_named_up_front(local_ray: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, evaluate_ray returned a lazy dataset whatever the judge; with the key to come
    from here, a missing one is now a JudgeSetupError before anything runs, as in evaluate()."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(JudgeSetupError, match="OPENAI_API_KEY is not set"):
        evaluate_ray(ray.data.from_items(rows(2)), ["context_recall"], send_api_key=True)


def test_an_actor_without_a_key_names_the_cause(local_ray: str) -> None:
    """Before, an actor that could not build its judge died in its constructor and the run
    ended in an ActorDiedError with the cause buried in Ray's logs; now the first batch
    raises a JudgeSetupError naming it. (The local Ray's workers have no OPENAI_* variables,
    and no base URL is given here.)"""
    with pytest.raises(Exception, match="could not build its judge") as caught:
        evaluate_ray(ray.data.from_items(rows(2)), ["context_recall"], num_actors=1).take_all()
    assert "OPENAI_API_KEY is not set" in str(caught.value)
    assert isinstance(caught.value, JudgeSetupError)


def test_a_row_that_kills_its_actor_fails_alone(local_ray: str, crash_log: Path) -> None:
    """Before, a row that crashed its process every time was retried forever (Ray's
    unlimited restarts) and the run never ended; now the crashed batch is re-run one row at
    a time and only that row comes back failed, after max_retries (3) deaths alone."""
    crash_log.write_text("", encoding="utf-8")
    data = [
        {"row": i + 1, "question": POISON if i == 3 else f"q{i}", "contexts": ["c"],
         "reference_contexts": ["c"]}
        for i in range(6)
    ]  # fmt: skip
    box: dict[str, Any] = {}

    def run() -> None:
        box["rows"] = evaluate_ray(
            ray.data.from_items(data), [CrashOnRow()], batch_size=2
        ).take_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(100)  # a bound for the old, endless loop (pytest-timeout is 120 s)
    assert not thread.is_alive(), "the poison row was retried forever"
    out = sorted(box["rows"], key=lambda r: r["row"])
    assert [r["row"] for r in out] == [1, 2, 3, 4, 5, 6]
    statuses = {r["row"]: r["non_llm_context_recall_status"] for r in out}
    assert statuses == {1: "scored", 2: "scored", 3: "scored", 4: "failed", 5: "scored",
                        6: "scored"}  # fmt: skip
    error = json.loads(out[3]["record"])["results"]["non_llm_context_recall"]["error"]
    assert "the Ray actor died each of the 3 times it scored this row" in error
    # the batch once, then the row alone max_retries (3) times: then it is reported
    assert crash_log.read_text(encoding="utf-8").split() == ["crash"] * 4


def test_a_lazily_read_dataset_runs_with_the_default_actors(
    local_ray: str, judge: JudgeServer, tmp_path: Path
) -> None:
    """Before, 2 actors of 1 CPU took both CPUs of the cluster and the read task of
    read_json never ran; the actors now reserve little CPU (they wait on the judge)."""
    judge.script = lexical_judge()
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows(8)), encoding="utf-8")
    assert ray.cluster_resources().get("CPU") == 2
    box: dict[str, Any] = {}

    def run() -> None:
        box["rows"] = evaluate_ray(
            ray.data.read_json(str(path)), ["context_recall"], base_url=judge.base_url
        ).take_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(100)  # a bound for the old hang (pytest-timeout is 120 s)
    assert not thread.is_alive(), "the read task never got a CPU"
    assert sorted(r["row"] for r in box["rows"]) == list(range(1, 9))


def test_a_pool_that_leaves_no_cpu_to_the_reads_is_named(local_ray: str) -> None:
    """Before, 4 actors of 1 CPU on a 2-CPU Ray waited for ever without a word."""
    with pytest.warns(RuntimeWarning, match=r"num_actors=4 x num_cpus=1 reserve 4 of the "
                      r"cluster's 2 CPUs"):  # fmt: skip
        evaluate_ray(_Recorder(), ["context_recall"], num_actors=4, num_cpus=1)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluate_ray(_Recorder(), ["context_recall"], num_actors=4)  # type: ignore[arg-type]


def test_a_csv_read_by_ray_scores_as_evaluate_reads_the_file(
    local_ray: str, judge: JudgeServer, tmp_path: Path
) -> None:
    """Before, read_csv rows skipped the cell clean-up of evaluate(path): a JSON list cell
    was one context, a blank cell was a value. Now both read the file alike."""
    judge.script = lexical_judge()
    path = tmp_path / "data.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["question", "contexts", "reference"])
        writer.writeheader()
        for r in rows(4):
            writer.writerow({"question": r["question"], "contexts": json.dumps(r["contexts"][::-1]),
                             "reference": r["reference"]})  # fmt: skip
        writer.writerow({"question": "blank reference", "contexts": '["x"]', "reference": ""})
    names = ["context_recall", "context_precision"]
    local = evaluate(
        path, names, llm=make_judge("judge-model", base_url=judge.base_url), show_progress=False
    )
    out = evaluate_ray(
        ray.data.read_csv(str(path)),
        names,
        model="judge-model",
        base_url=judge.base_url,
        num_cpus=0.25,  # as the default now is: the CSV read needs a CPU (see the test above)
    ).take_all()
    by_question = {json.loads(r["record"])["question"]: r for r in out}
    assert len(out) == len(local.rows) == 5
    for record in local.jsonl_records():
        ray_row = by_question[record["question"]]
        for name in names:
            expected = record["results"][name]
            assert ray_row[f"{name}_status"] == expected["status"], (record["question"], name)
            if expected["score"] is None:
                assert math.isnan(ray_row[name])
            else:
                assert ray_row[name] == expected["score"], (record["question"], name)
    assert json.loads(by_question["Who wrote paper 0?"]["record"])["contexts"] == [
        "Paris is the capital of France.",
        "Einstein wrote paper 0.",
    ]
    blank = json.loads(by_question["blank reference"]["record"])
    assert blank["reference"] is None  # a blank cell is missing, as in evaluate(path)
    assert "needs `reference`" in blank["results"]["context_recall"]["error"]


def test_bad_rows_are_named_by_their_row_column_or_question(
    local_ray: str, judge: JudgeServer
) -> None:
    """Before, every bad row was "row 1 (index 0)" (its place in a one-row list); now the
    error names the input's `row`, or without one the row's question."""
    judge.script = lexical_judge()
    data = rows(6)
    data[3]["language"] = "zz"
    data[5]["contexts"] = [None, "x"]
    out = evaluate_ray(
        ray.data.from_items(data), ["context_recall"], base_url=judge.base_url, batch_size=3
    ).take_all()
    errors = {
        r["row"]: json.loads(r["record"])["results"]["context_recall"]["error"]
        for r in out
        if r["context_recall_status"] == "failed"
    }
    assert set(errors) == {4, 6}
    assert errors[4].startswith("invalid row: ray dataset, row 4: field `language`")
    assert errors[6].startswith("invalid row: ray dataset, row 6: field `contexts`: `contexts[0]`")
    for item in data:
        item.pop("row")
    out = evaluate_ray(
        ray.data.from_items(data), ["context_recall"], base_url=judge.base_url, batch_size=3
    ).take_all()
    failed = [json.loads(r["record"]) for r in out if r["context_recall_status"] == "failed"]
    assert sorted(r["location"] for r in failed) == [
        "ray dataset, row with question 'Who wrote paper 3?'",
        "ray dataset, row with question 'Who wrote paper 5?'",
    ]
    assert all("row 1 (index 0)" not in r["results"]["context_recall"]["error"] for r in failed)


def test_the_rate_limit_holds_for_the_pool_from_the_first_request(
    local_ray: str, judge: JudgeServer
) -> None:
    """Before, each actor metered rate / num_actors with a bucket that started full: with 3
    actors ready, each sent its first request at once. Now one bucket serves the pool: in the
    first half interval after the first request (5 s at 6 a minute) only that one arrives.

    Ray Data waits for all 3 actors before it hands out the 3 one-row batches, so each actor
    has a row to send at the start."""
    judge.script = lexical_judge()
    judge.reset()
    context = ray.data.DataContext.get_current()
    saved = context.wait_for_min_actors_s
    context.wait_for_min_actors_s = 100
    try:
        evaluate_ray(
            ray.data.from_items(rows(3), override_num_blocks=3),
            ["context_recall"],
            base_url=judge.base_url,
            num_actors=3,
            num_cpus=0.1,
            batch_size=1,
            rate_limit_per_minute=6,
        ).take_all()
    finally:
        context.wait_for_min_actors_s = saved
    arrivals = sorted(req.received_at for req in judge.requests)
    assert len(arrivals) == 3
    assert sum(1 for t in arrivals if t - arrivals[0] < 5.0) == 1


def test_the_shared_bucket_gives_one_turn_per_interval() -> None:
    bucket = _SharedBucket(per_minute=60)
    waits = [bucket.reserve() for _ in range(3)]
    assert waits[0] == 0
    assert 0.9 < waits[1] <= 1.0
    assert 1.9 < waits[2] <= 2.0


def test_a_row_with_an_unusual_cell_comes_out_as_its_own_row(local_ray: str) -> None:
    """Before, one cell holding a dict keyed by both ints and text made the batch's ledger
    key (``json.dumps(..., sort_keys=True)``) raise, and the whole dataset failed; now the key
    is taken from a form any cell has, a row whose record JSON cannot write directly is
    written with text keys, and a row whose reading raises something other than a field's
    ValueError fails alone, named."""
    loop: list[Any] = []
    loop.append(loop)
    data: list[dict[str, Any]] = [
        {"row": i + 1, "question": f"q{i}", "contexts": ["c"], "reference_contexts": ["c"]}
        for i in range(5)
    ]
    data[1]["extra"] = {1: "a", "b": 2}  # sort_keys cannot order 1 and "b"
    data[2]["extra"] = {(1, 2): "x"}  # json cannot write a tuple key
    data[3]["extra"] = loop  # json cannot write a cycle
    data[4]["user_input"] = ClosedProxy()  # reading it raises a RuntimeError
    out = evaluate_ray(
        ray.data.from_items(data), ["non_llm_context_recall"], num_actors=1, batch_size=5
    ).take_all()
    by_row = {r["row"]: r for r in out}
    assert sorted(by_row) == [1, 2, 3, 4, 5]  # each row once
    statuses = {n: r["non_llm_context_recall_status"] for n, r in by_row.items()}
    assert statuses == {1: "scored", 2: "scored", 3: "scored", 4: "scored", 5: "failed"}
    records = {n: json.loads(r["record"]) for n, r in by_row.items()}
    assert records[2]["extra"] == {"1": "a", "b": 2}
    assert records[3]["extra"] == {"(1, 2)": "x"}
    assert json.dumps(records[4]["extra"]).strip("[]") == '"..."'  # the cycle, cut
    error = records[5]["results"]["non_llm_context_recall"]["error"]
    assert error.startswith("invalid row: ray dataset, row 5: RuntimeError: the proxy's source")


def test_identical_batches_at_once_are_not_taken_for_a_dead_actors_retry(
    local_ray: str, judge: JudgeServer
) -> None:
    """Before, two actors scoring batches of the same content at once shared one ledger key,
    and the second took the first, still at work, for an attempt whose actor had died: with
    max_retries=0 its row came back failed ("the Ray actor died ...") though none died. Now
    an open attempt counts as a death only when its actor's process is gone.

    The judge holds every request until both actors have sent theirs, or a row came out
    without one (the old failure): no timing decides the outcome."""
    lexical = lexical_judge()
    progress = threading.Condition()
    release = threading.Event()
    held = 0
    out: list[dict[str, Any]] = []

    def script(req: JudgeRequest) -> Any:
        nonlocal held
        with progress:
            held += 1
            progress.notify_all()
        release.wait(60)
        return lexical(req)

    judge.script = script
    judge.reset()
    same = {"question": "Who wrote paper 1?", "contexts": ["Einstein wrote paper 1."],
            "reference": "Einstein wrote paper 1."}  # fmt: skip
    context = ray.data.DataContext.get_current()
    saved = context.wait_for_min_actors_s
    context.wait_for_min_actors_s = 100  # both actors are up before the batches go out

    def run() -> None:
        scored = evaluate_ray(
            ray.data.from_items([dict(same), dict(same)], override_num_blocks=2),
            ["context_recall"],
            model="judge-model",
            base_url=judge.base_url,
            num_actors=2,
            num_cpus=0.1,
            batch_size=1,
            max_retries=0,
        )
        for row in scored.iter_rows():
            with progress:
                out.append(row)
                progress.notify_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        with progress:
            assert progress.wait_for(lambda: held == 2 or bool(out), timeout=100)
    finally:
        release.set()
        thread.join(100)
        context.wait_for_min_actors_s = saved
    assert not thread.is_alive()
    errors = [json.loads(r["record"])["results"]["context_recall"].get("error") for r in out]
    assert [r["context_recall_status"] for r in out] == ["scored", "scored"], errors


def kill_helper_mid_run(
    judge: JudgeServer, helper: str, count: int, **options: Any
) -> tuple[list[dict[str, Any]], Any, int]:
    """Score ``count`` rows, SIGKILL the ``helper`` actor ("ledger", "bucket") once a request
    reached the judge (all held until then), and return the rows, the helper and its old pid.

    Fails when the run raised or did not end.
    """
    release, held = hold_until_released(judge)
    judge.reset()
    scored = evaluate_ray(
        ray.data.from_items(rows(count)),
        ["context_recall"],
        model="judge-model",
        base_url=judge.base_url,
        batch_size=4,
        max_concurrency=4,
        **options,
    )
    actor = scored._logical_plan.dag.fn_constructor_kwargs[helper]
    pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["rows"] = scored.take_all()
        except Exception as exc:  # the old failure, reported below
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert held.acquire(timeout=100), "no actor reached the judge"
        os.kill(pid, signal.SIGKILL)  # while a batch is at work
    finally:
        release.set()
        thread.join(100)
    assert not thread.is_alive()
    assert "error" not in box, box.get("error")
    return box["rows"], actor, pid


def test_a_ledger_that_dies_is_restarted_and_the_run_goes_on(
    local_ray: str, judge: JudgeServer
) -> None:
    """Before, the ledger actor had no restarts: killed (out of memory, say) mid-run, the next
    call to it raised ActorDiedError out of a batch and the whole dataset failed. Now Ray
    restarts it and the rows come out. (Killed while a batch is at work: its finish() finds
    it dead.)"""
    out, _, _ = kill_helper_mid_run(judge, "ledger", 8)
    assert sorted(r["row"] for r in out) == list(range(1, 9))
    assert all(r["context_recall_status"] == "scored" for r in out)


def test_without_its_ledger_a_batch_is_scored_unprotected_with_one_warning(
    local_ray: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, a ledger call that failed (the ledger gone for good) raised out of the batch;
    now the batch is scored without the ledger's protection and a WARNING says so, once."""
    import pyarrow as pa

    from langchain_ragmetrics.evaluation._recipe import ScoringRecipe
    from langchain_ragmetrics.evaluation._run import prepare_metrics
    from langchain_ragmetrics.integrations.ray import _Ledger, _Scorer

    ledger = ray.remote(num_cpus=0)(_Ledger).remote()
    ray.kill(ledger, no_restart=True)
    recipe = ScoringRecipe(prepare_metrics(["non_llm_context_recall"], language=None, cache=None))
    scorer = _Scorer(recipe, ledger=ledger)
    data = [{"row": i + 1, "question": f"q{i}", "contexts": ["c"], "reference_contexts": ["c"]}
            for i in range(4)]  # fmt: skip
    with caplog.at_level("WARNING", logger="langchain_ragmetrics.integrations.ray"):
        first = scorer(pa.Table.from_pylist(data[:2]))
        second = scorer(pa.Table.from_pylist(data[2:]))
    assert first["row"] + second["row"] == [1, 2, 3, 4]
    assert set(first["non_llm_context_recall_status"] + second["non_llm_context_recall_status"]) \
        == {"scored"}  # fmt: skip
    warnings_logged = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings_logged) == 1
    assert "without the ledger" in warnings_logged[0].getMessage()


def test_a_csv_column_of_years_scores_as_evaluate_reads_it(
    local_ray: str, judge: JudgeServer, tmp_path: Path
) -> None:
    """Before, ``ray.data.read_csv`` typed a `reference` column of years as integers and
    every row failed ("Input should be a valid string"), where evaluate(path) reads each
    cell as text; now such cells are text again (a number as the file wrote it). Read with
    the text columns typed as strings (the docs' way), the rows match evaluate(path) exactly,
    a `true` answer included (pyarrow's bool says `True`)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    judge.script = lexical_judge()
    path = tmp_path / "data.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["question", "contexts", "answer", "reference"])
        writer.writeheader()
        for i in range(3):
            writer.writerow({"question": f"When did event {i} happen?",
                             "contexts": json.dumps([f"Event {i} happened in 19{10 + i}."]),
                             "answer": "true" if i % 2 else "false",
                             "reference": f"19{10 + 2 * i}"})  # fmt: skip
    local = evaluate(
        path,
        ["context_recall"],
        llm=make_judge("judge-model", base_url=judge.base_url),
        show_progress=False,
        workers=1,
    )
    expected = {r["question"]: r for r in local.jsonl_records()}
    assert [r["reference"] for r in expected.values()] == ["1910", "1912", "1914"]

    def on_ray(**read_options: Any) -> dict[str, dict[str, Any]]:
        out = evaluate_ray(
            ray.data.read_csv(str(path), **read_options),
            ["context_recall"],
            model="judge-model",
            base_url=judge.base_url,
        ).take_all()
        records = [json.loads(r["record"]) for r in out]
        return {r["question"]: r for r in records}

    inferred = on_ray()
    as_text = on_ray(
        convert_options=pacsv.ConvertOptions(
            column_types={"answer": pa.string(), "reference": pa.string()}
        )
    )
    for question, record in expected.items():
        result = record["results"]["context_recall"]
        for got in (inferred[question], as_text[question]):
            assert got["reference"] == record["reference"]
            assert got["results"]["context_recall"]["status"] == result["status"] == "scored"
            assert got["results"]["context_recall"]["score"] == result["score"]
        assert as_text[question]["answer"] == record["answer"]  # "true", as in the file
        assert inferred[question]["answer"] == record["answer"].capitalize()  # pyarrow's bool
    assert [r["results"]["context_recall"]["score"] for r in expected.values()] == [1.0, 0.0, 0.0]


def test_a_row_that_cannot_be_read_has_the_fields_of_a_scored_row(local_ray: str) -> None:
    """Before, a row that failed before scoring came out with its input's own keys (RAGAS
    ``user_input`` where every other record says ``question``) and a short result; now it
    has the fields ``to_jsonl`` writes for any row, its input mapped the same way."""
    data = [
        {"row": i + 1, "user_input": f"q{i}", "retrieved_contexts": ["c"],
         "reference_contexts": ["c"], "language": "zz" if i == 1 else "en", "source": "s"}
        for i in range(2)
    ]  # fmt: skip
    out = evaluate_ray(
        ray.data.from_items(data), ["non_llm_context_recall"], num_actors=1
    ).take_all()
    scored, failed = (json.loads(r["record"]) for r in sorted(out, key=lambda r: r["row"]))
    assert failed["results"]["non_llm_context_recall"]["status"] == "failed"
    assert list(failed) == list(scored)
    assert list(failed["results"]["non_llm_context_recall"]) == list(
        scored["results"]["non_llm_context_recall"]
    )
    assert failed["row"] == 2
    assert (failed["question"], failed["contexts"], failed["language"]) == ("q1", ["c"], "zz")
    assert failed["source"] == "s"
    assert failed["location"] == "ray dataset, row 2"


def test_a_rate_limiter_that_dies_is_restarted_and_the_run_goes_on(
    local_ray: str, judge: JudgeServer
) -> None:
    """Before, the pool's rate-limit actor had no restarts: killed mid-run (out of memory,
    say), every request after it failed with ActorDiedError, and so did every row left (8 of
    16). Now Ray restarts it, a request waits for it, and every row is scored.

    The judge holds the first batches' requests until the bucket is dead: each actor's next
    batch (batch_size 4, 16 rows, 2 actors) reserves its turns after the kill."""
    out, bucket, pid = kill_helper_mid_run(judge, "bucket", 16, rate_limit_per_minute=600)
    errors = [json.loads(r["record"])["results"]["context_recall"].get("error") for r in out]
    assert sorted(r["row"] for r in out) == list(range(1, 17))
    assert [r["context_recall_status"] for r in out] == ["scored"] * 16, errors
    assert ray.get(bucket.__ray_call__.remote(lambda self: os.getpid())) != pid  # restarted


class _SteppedClock:
    """Stands in for the ``time`` module: a wall clock a test steps, a monotonic one apart."""

    def __init__(self) -> None:
        self.wall = 1_800_000_000.0
        self.steady = 1000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.steady


def test_the_shared_bucket_is_not_delayed_by_a_step_of_the_wall_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, the bucket kept its turns on the wall clock: set back an hour (an NTP step),
    the next request waited an hour. Turns are now on the monotonic clock."""
    clock = _SteppedClock()
    monkeypatch.setattr(ray_module, "time", clock)
    bucket = _SharedBucket(per_minute=60)
    assert bucket.reserve() == 0
    clock.wall -= 3600
    assert bucket.reserve() == 1.0


class _FakeBucket:
    """Stands in for the bucket actor: each reservation waits ``wait`` seconds; counted."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.calls = 0
        self.reserve = self

    def remote(self) -> Any:
        self.calls += 1
        return ray.put(self.wait)


def test_a_turn_given_up_does_not_let_a_later_request_out_of_turn(
    local_ray: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a thread whose job passed its deadline while it waited for its turn kept that
    turn: its next request, a minute later, found it long past and went at once, beside the
    request whose turn it was. Now a turn not taken soon after it came is dropped and the
    request reserves a new one; a turn asked for as it comes is taken."""
    clock = HandClock()
    monkeypatch.setattr(ray_module, "time", clock)
    bucket = _FakeBucket(wait=10.0)
    limiter = _RemoteRateLimiter(bucket)
    assert limiter.acquire(blocking=False) is False  # its turn is in 10 s
    clock.now += 10.0
    assert limiter.acquire(blocking=False) is True  # the waiter's next poll: its turn
    assert bucket.calls == 1
    assert limiter.acquire(blocking=False) is False  # the next request: a turn in 10 s
    clock.now += 60.0  # its job gave up at its deadline; the thread's next request comes
    assert limiter.acquire(blocking=False) is False  # a new turn, not the old one
    assert bucket.calls == 3


def test_a_finished_tasks_turn_is_not_kept(local_ray: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, an asyncio task whose job passed its deadline while it waited kept its turn,
    and the limiter the task itself, for the life of the actor; now both go."""
    monkeypatch.setattr(ray_module, "time", HandClock())
    limiter = _RemoteRateLimiter(_FakeBucket(wait=10.0))
    gone: list[weakref.ref[asyncio.Task[bool]]] = []

    async def waits_once() -> bool:
        return await limiter.aacquire(blocking=False)  # then its job gives up

    async def tasks() -> None:
        for _ in range(3):
            task = asyncio.ensure_future(waits_once())
            gone.append(weakref.ref(task))
            assert await task is False

    asyncio.run(tasks())
    assert limiter.acquire(blocking=False) is False  # another request
    gc.collect()
    assert [ref() for ref in gone] == [None, None, None]


def test_a_metrics_own_judge_key_is_not_replaced_by_the_actors(
    local_ray: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a metric whose judge held its own key was scored with the actors'
    OPENAI_API_KEY instead, without a word (another account billed). Now that is refused by
    the metric's name unless the key is sent; sent, it is the key the actors use."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-account-a")
    own = ChatOpenAI(model="own", base_url="http://127.0.0.1:9/v1", api_key="sk-own-account-b")
    metrics = ["context_precision", ContextRecall(llm=own)]
    with pytest.raises(ValueError, match=r"`metrics\[1\]` \(context_recall\): its judge holds "
                       r"its own key \(OPENAI_API_KEY\).*send_api_key=True"):  # fmt: skip
        evaluate_ray(_Recorder(), metrics)  # type: ignore[arg-type]
    recorder = _Recorder()
    evaluate_ray(recorder, [ContextRecall(llm=own)], send_api_key=True)  # type: ignore[arg-type]
    assert recorder.calls[0]["runtime_env"] == {"env_vars": {"OPENAI_API_KEY": "sk-own-account-b"}}


def test_a_metric_that_cannot_reach_the_actors_gets_advice_for_ray(local_ray: str) -> None:
    """Before, the error advised ``workers=1``, an option evaluate_ray does not have; now
    it gives the reason and what to do on Ray."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    class LocalMetric(NonLLMContextRecall):  # defined in a function: stdlib pickle refuses it
        pass

    for metric, reason in (
        (LocalMetric(), "Can't pickle local object"),
        (ContextRecall(llm=FakeListChatModel(responses=["x"])), "FakeListChatModel cannot be"),
    ):
        with pytest.raises(ValueError, match="score in this process with evaluate") as caught:
            evaluate_ray(_Recorder(), [metric])  # type: ignore[arg-type]
        assert reason in str(caught.value)
        assert "workers" not in str(caught.value)
        assert type(caught.value) is ValueError


def test_metadata_read_by_arrow_has_only_its_own_keys(local_ray: str, tmp_path: Path) -> None:
    """Before, Arrow gave each row's metadata the keys of every other row's, as None (an
    Arrow struct has every key of its column): ``{"source": "wiki", "id": None, ...}``
    where evaluate(path) read ``{"source": "wiki"}``. Now a None under a key is left out,
    nested ones too."""
    path = tmp_path / "data.jsonl"
    data = [
        {"question": "q1", "contexts": ["c"], "reference_contexts": ["c"],
         "metadata": {"source": "wiki", "links": [{"url": "u1"}]}},
        {"question": "q2", "contexts": ["c"], "reference_contexts": ["c"],
         "metadata": {"id": "s-2", "tags": ["x"], "links": [{"title": "t2"}]}},
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in data), encoding="utf-8")
    local = evaluate(path, ["non_llm_context_recall"], show_progress=False, workers=1)
    out = evaluate_ray(ray.data.read_json(str(path)), ["non_llm_context_recall"]).take_all()
    records = {r["question"]: r for r in (json.loads(x["record"]) for x in out)}
    for expected in local.jsonl_records():  # the fields but location, results and row
        got = records[expected["question"]]
        fields = set(expected) - {"location", "results", "row"}
        assert set(got) - {"location", "results", "row"} == fields
        assert {k: got[k] for k in fields} == {k: expected[k] for k in fields}
    assert records["q1"]["links"] == [{"url": "u1"}]
    result = result_from_rows(out, ["non_llm_context_recall"])
    assert [r.sample.metadata for r in result.rows] == [r.sample.metadata for r in local.rows]


def _output_row(number: int, score: float) -> dict[str, Any]:
    """One output row of evaluate_ray, as its actors write it (context_recall scored)."""
    record = {
        "row": number,
        "question": f"q{number}",
        "contexts": ["c"],
        "reference": "c",
        "location": f"ray dataset, row {number}",
        "results": {
            "context_recall": {"status": "scored", "metric": "context_recall", "score": score}
        },
    }
    return {"record": json.dumps(record), "row": number, "context_recall": score,
            "context_recall_status": "scored"}  # fmt: skip


def test_result_from_rows_takes_the_metrics_evaluate_ray_takes() -> None:
    """Before, a bare name was taken letter by letter (metrics c, o, n, t, e, ...) and a
    metric object raised "unhashable type"; now both are what evaluate_ray takes them for,
    and anything else is a TypeError naming it."""
    rows_out = [_output_row(2, 0.5), _output_row(1, 1.0)]
    for metrics in ("context_recall", ["context_recall"], ContextRecall(), [ContextRecall()]):
        result = result_from_rows(rows_out, metrics)
        assert result.metrics == ["context_recall"], metrics
        results = [r.results["context_recall"] for r in result.rows]
        assert [r.score if r else None for r in results] == [1.0, 0.5]
    with pytest.raises(TypeError, match=r"`metrics\[1\]` must be a metric name or a metric "
                       r"object, got int"):  # fmt: skip
        result_from_rows(rows_out, ["context_recall", 3])  # type: ignore[list-item]


def test_result_from_rows_keeps_the_run_time_and_info() -> None:
    """Before, a result made of Ray's rows had no info (version, data fingerprint, per metric
    class and prompt hash) and took 0 s; now it has the info a local run writes and the time
    it is given."""
    from langchain_ragmetrics.evaluation import RunInfo
    from langchain_ragmetrics.evaluation._saved import dataset_fingerprint, metric_info

    rows_out = [_output_row(1, 1.0), _output_row(2, 0.5)]
    result = result_from_rows(rows_out, ["context_recall"], elapsed_s=12.5)
    assert result.elapsed_s == 12.5
    assert result.info is not None
    assert result.info.dataset_fingerprint == dataset_fingerprint(r.sample for r in result.rows)
    assert result.info.metrics == {"context_recall": metric_info(ContextRecall())}
    given = result.info.model_copy(update={"dataset_fingerprint": "given"})
    assert result_from_rows(rows_out, ["context_recall"], info=given).info == given
    assert isinstance(given, RunInfo)
    with pytest.raises(ValueError, match="`elapsed_s` must be a number of at least 0"):
        result_from_rows(rows_out, ["context_recall"], elapsed_s=-1)


def test_the_cli_on_ray_writes_the_run_info_and_time_as_a_local_run(
    local_ray: str, judge: JudgeServer, tmp_path: Path
) -> None:
    """Before, --ray wrote ``"elapsed_s": 0.0, "info": null`` in the results' header and
    said "... jobs in 0.00 s"; now the header has the run's time and the info a local run
    writes (the judge, the prompts' hash, the data's fingerprint)."""
    judge.script = lexical_judge()
    data = tmp_path / "data.jsonl"
    data.write_text(
        "\n".join(json.dumps({k: v for k, v in r.items() if k != "row"}) for r in rows(4)),
        encoding="utf-8",
    )
    local = run_cli(data, judge, "--workers", "1", out=tmp_path / "local.jsonl")
    on_ray = run_cli(data, judge, "--ray-address", local_ray, out=tmp_path / "ray.jsonl")
    assert on_ray.returncode == local.returncode == 0, on_ray.stderr

    def header(name: str) -> dict[str, Any]:
        line = (tmp_path / name).read_text(encoding="utf-8").splitlines()[0]
        run: dict[str, Any] = json.loads(line)["ragmetrics_run"]
        return run

    ray_run, local_run = header("ray.jsonl"), header("local.jsonl")
    assert ray_run["elapsed_s"] > 0
    assert " jobs in 0.00 s" not in on_ray.stdout
    assert ray_run["info"] is not None
    for run in (ray_run, local_run):
        run["info"].pop("created_at")
    assert ray_run["info"] == local_run["info"]
    assert ray_run["info"]["metrics"]["context_recall"]["prompt_hash"]
