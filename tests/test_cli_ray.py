"""``ragmetrics evaluate --ray``: reaching the cluster, stopping Ray, and what the user reads.

Most runs here go through "a Ray without Ray" (:class:`FakeRay`): the real CLI and the real
``evaluate_ray``, whose actor class (``_Scorer``) scores the batches in this process, in
order, while Ray's own scheduling is replaced; a Ctrl-C, an actor's environment and Ray's
wrapping of an actor's error are the test's to choose. One test runs a real local Ray.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any
from unittest import mock

import pytest

from langchain_ragmetrics._cli import ExitCode, main
from langchain_ragmetrics._cli._ray import FETCH_THREAD, _host_port, reach, start_ray, stop_ray
from tests._support.extras import require_extra
from tests.test_cli import clean_env


def _ray_or_none() -> ModuleType | None:
    """Ray, or None without the [ray] extra (an error where CI requires the extras)."""
    try:
        return require_extra("ray", "ray")
    except pytest.skip.Exception:
        return None


os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read once, when Ray is imported
RAY = _ray_or_none()
needs_ray = pytest.mark.skipif(RAY is None, reason="needs the [ray] extra")

# The CLI from this interpreter and tree (the shared venv's console script may be stale).
RAGMETRICS = [
    sys.executable,
    "-c",
    "import sys; from langchain_ragmetrics._cli import main; sys.exit(main())",
]


@pytest.fixture
def refusing() -> Iterator[str]:
    """A loopback address bound but not listening: every connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def listening() -> Iterator[str]:
    """A loopback address that accepts connections (the kernel completes them)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def silent() -> Iterator[str]:
    """A loopback address whose accept queue is full: a new connection gets no answer.

    The listener never accepts; connections are opened until one is not completed, so the
    next one waits as a connection to a host that drops packets does.
    """
    held: list[socket.socket] = []
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(0)
        address = sock.getsockname()
        try:
            for _ in range(64):
                client = socket.socket()
                client.settimeout(0.5)
                try:
                    client.connect(address)
                except TimeoutError:
                    client.close()
                    break
                held.append(client)
            else:
                pytest.fail("the accept queue never filled")
            yield f"127.0.0.1:{address[1]}"
        finally:
            for client in held:
                client.close()


class _Ray:
    """Records ``ray.init`` calls (the real Ray is tested in tests/integrations/test_ray.py)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def init(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)

    def shutdown(self) -> None:
        self.calls.append({"shutdown": [t.is_alive() for t in _fetchers()]})


def _fetchers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == FETCH_THREAD]


class _Batches:
    """A batch iterator whose fetch thread, told to stop, takes a while to finish its last
    fetch (0.5 s here): long enough that a shutdown not waiting for it finds it alive."""

    def __init__(self, *, last_fetch: float = 0.5) -> None:
        self.stopped = threading.Event()
        self.never = threading.Event()
        self.thread = threading.Thread(
            target=self._fetch, args=(last_fetch,), name=FETCH_THREAD, daemon=True
        )
        self.thread.start()

    def _fetch(self, last_fetch: float) -> None:
        self.stopped.wait()
        self.never.wait(last_fetch)

    def __iter__(self) -> _Batches:
        return self

    def __next__(self) -> Any:
        raise StopIteration

    def close(self) -> None:
        self.stopped.set()


def test_a_refused_address_is_named_at_once(refusing: str) -> None:
    with pytest.raises(ConnectionError, match=f"nothing answers at {refusing} "):
        reach(refusing)


def test_an_address_that_never_answers_is_bounded(silent: str) -> None:
    with pytest.raises(ConnectionError, match=f"nothing answered at {silent} within 0.5 s"):
        reach(silent, timeout=0.5)


def test_a_listening_address_passes(listening: str) -> None:
    reach(listening)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("head.example:6379", ("head.example", 6379)),
        ("[::1]:6379", ("::1", 6379)),
        ("ray://head:10001", None),  # Ray Client: Ray's own connection
        ("auto", None),
        ("head", None),  # no port: Ray reports the format
        ("head:port", None),
    ],
)
def test_only_host_and_port_addresses_are_tried(
    address: str, expected: tuple[str, int] | None
) -> None:
    assert _host_port(address) == expected


def test_ray_is_not_started_when_the_address_refuses(refusing: str) -> None:
    ray = _Ray()
    with pytest.raises(ConnectionError, match=refusing):
        start_ray(ray, refusing)
    assert ray.calls == []


@pytest.mark.parametrize("from_env", [False, True])
def test_a_ray_client_address_is_refused_with_what_works(
    from_env: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the help suggested ray://head:10001, which the [ray] extra cannot use (no Ray
    Client) and which skipped the connection check; now it is refused, naming what works."""
    ray = _Ray()
    if from_env:
        monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    with pytest.raises(ValueError, match=r"ray://head:10001 is a Ray Client address.*head:6379"):
        start_ray(ray, None if from_env else "ray://head:10001")
    assert ray.calls == []


def test_the_help_names_an_address_that_works(capsys: pytest.CaptureFixture[str]) -> None:
    from langchain_ragmetrics._cli import main

    assert main(["evaluate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "e.g. head:6379, or auto (Ray Client ray:// addresses are not supported)" in text
    assert "ray://head:10001" not in text
    assert "--ray-send-api-key" in text


def test_ray_connects_when_the_address_answers(listening: str) -> None:
    ray = _Ray()
    start_ray(ray, listening)
    assert ray.calls == [{"address": listening, "log_to_driver": False}]


def test_a_local_ray_is_started_without_an_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ray = _Ray()
    start_ray(ray, None)
    assert ray.calls == [{"include_dashboard": False, "log_to_driver": False}]


def test_the_cluster_ray_address_names_is_tried_too(
    refusing: str, listening: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an address, ``ray.init`` joins the cluster ``RAY_ADDRESS`` names (and retried
    a refused one for minutes): that address is tried first as well."""
    ray = _Ray()
    monkeypatch.setenv("RAY_ADDRESS", refusing)
    with pytest.raises(ConnectionError, match=f"nothing answers at {refusing} "):
        start_ray(ray, None)
    assert ray.calls == []
    monkeypatch.setenv("RAY_ADDRESS", listening)
    start_ray(ray, None)
    assert ray.calls == [{"include_dashboard": False, "log_to_driver": False}]


def test_the_time_allowed_is_for_every_address_of_the_host_together(
    silent: str, listening: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host name with several addresses gets one deadline, not one per address: the
    first, silent, address takes it all, and the second is not tried (it would answer)."""
    addresses = [_host_port(silent), _host_port(listening)]

    def resolve(host: str, port: int, **_options: object) -> list[tuple[object, ...]]:
        assert (host, port) == ("cluster.example", 6379)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", a) for a in addresses]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    with pytest.raises(
        ConnectionError, match=re.escape("nothing answered at cluster.example:6379 within 0.5 s")
    ):
        reach("cluster.example:6379", timeout=0.5)


def test_a_name_that_does_not_resolve_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def resolve(*_args: object, **_options: object) -> list[tuple[object, ...]]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    with pytest.raises(
        ConnectionError, match=r"nothing answers at nowhere.example:6379 \(gaierror"
    ):
        reach("nowhere.example:6379")


def test_ray_shuts_down_after_the_fetch_threads_finish() -> None:
    """Before, Ctrl-C on --ray shut Ray down while Ray Data's fetch thread was still at work,
    and Ray's core ended the CLI with status 1 before the rows scored were written (one CI
    run in a dozen); now the iterator is closed and its fetch threads finish first."""
    before = set(threading.enumerate())
    batches = _Batches()
    ray = _Ray()
    stop_ray(ray, batches, before)
    assert batches.stopped.is_set()
    assert ray.calls == [{"shutdown": []}]  # no fetch thread left alive


def test_a_fetch_thread_that_never_finishes_does_not_hold_the_shutdown() -> None:
    before = set(threading.enumerate())
    batches = _Batches(last_fetch=60)
    ray = _Ray()
    try:
        stop_ray(ray, batches, before, timeout=0.2)
        assert ray.calls == [{"shutdown": [True]}]  # given up on, Ray is shut down anyway
    finally:
        batches.never.set()
        batches.thread.join()


def test_threads_of_earlier_runs_are_not_waited_for() -> None:
    """Only the fetch threads the run started: one from before (still alive, say, in another
    dataset's iteration) would cost the whole timeout."""
    joined: list[threading.Thread] = []

    class Recorded(threading.Thread):
        def join(self, timeout: float | None = None) -> None:
            joined.append(self)
            super().join(timeout)

    release = threading.Event()
    earlier = Recorded(target=release.wait, name=FETCH_THREAD, daemon=True)
    earlier.start()
    try:
        ray = _Ray()
        stop_ray(ray, None, set(threading.enumerate()))
        assert joined == []
        assert ray.calls == [{"shutdown": [True]}]
    finally:
        release.set()
        earlier.join()


def test_ray_is_shut_down_when_closing_the_iteration_fails() -> None:
    class Failing(_Batches):
        def close(self) -> None:
            super().close()
            msg = "Ray's own error on the way out"
            raise RuntimeError(msg)

    before = set(threading.enumerate())
    ray = _Ray()
    stop_ray(ray, Failing(), before)
    assert ray.calls == [{"shutdown": []}]


def test_a_ctrl_c_while_ray_stops_waits_until_ray_is_shut_down() -> None:
    """Before, a second Ctrl-C soon after the first (the user's "stop now") raised while the
    fetch threads were waited for: Ray was never shut down and the rows already scored were
    lost with the run; now it waits until Ray is shut down, then is raised."""

    class Interrupting(_Batches):
        def _fetch(self, last_fetch: float) -> None:
            self.stopped.wait()  # the stop has begun: the Ctrl-C comes now, to this process
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    before = set(threading.enumerate())
    batches = Interrupting()
    ray = _Ray()
    with pytest.raises(KeyboardInterrupt):
        stop_ray(ray, batches, before)
    assert ray.calls == [{"shutdown": []}]  # after the fetch thread finished
    batches.thread.join()


def test_ray_is_shut_down_when_a_further_ctrl_c_stops_the_wait() -> None:
    """Only one Ctrl-C is held: the next one ends the wait for the fetch threads at once,
    and Ray is shut down all the same."""

    class Interrupted(threading.Thread):
        def join(self, timeout: float | None = None) -> None:
            raise KeyboardInterrupt  # a Ctrl-C that is not held

    release = threading.Event()
    before = set(threading.enumerate())
    fetcher = Interrupted(target=release.wait, name=FETCH_THREAD, daemon=True)
    fetcher.start()
    ray = _Ray()
    try:
        with pytest.raises(KeyboardInterrupt):
            stop_ray(ray, None, before)
        assert ray.calls == [{"shutdown": [True]}]
    finally:
        release.set()
        threading.Thread.join(fetcher)


# --------------------------------------------------------------------------- a Ray without Ray


def _as_ray_raises(exc: Exception) -> Exception:
    """An actor's error as Ray raises it in the driver: a ``RayTaskError`` that is also of
    the error's class, whose text is the actor's traceback, in colour."""
    from ray.exceptions import RayTaskError

    trace = "".join(traceback.format_exception(exc))
    wrapped: Exception = RayTaskError(
        "MapWorker(MapBatches(_Scorer)).submit",
        trace,
        exc,
        proctitle="ray::MapWorker(MapBatches(_Scorer)).submit()",
        pid=4242,
        ip="127.0.0.1",
    ).as_instanceof_cause()
    return wrapped


@dataclass
class FakeRay:
    """Ray's part of a ``--ray`` run, in this process: the real actor class scores the
    batches one after the other, in the environment the test gives the actors."""

    interrupt_after: int | None = None
    """Ctrl-C (KeyboardInterrupt) once this many batches came back; None: no Ctrl-C."""
    actor_env: dict[str, str | None] = field(default_factory=dict)
    """The actors' environment, changed from this process's (None: unset)."""
    actor_error: Exception | None = None
    """An error every batch raises in the actor, instead of being scored."""
    cpus: float = 2.0
    """The cluster's CPUs."""
    shutdowns: int = 0

    def remote(self, *_args: Any, **_options: Any) -> Any:
        """``ray.remote(...)(cls).remote(...)``: no helper actor (the actors score alone)."""
        return lambda _cls: SimpleNamespace(remote=lambda *_a, **_k: None)

    def from_items(self, rows: list[dict[str, Any]]) -> Any:
        """``ray.data.from_items``: the rows, whose ``map_batches`` scores them here."""

        def map_batches(
            fn: Any, *, fn_constructor_kwargs: dict[str, Any], batch_size: int, **_options: Any
        ) -> Any:
            def iter_batches(**_how: Any) -> Iterator[Any]:
                return self._batches(rows, fn, fn_constructor_kwargs, batch_size)

            return SimpleNamespace(iter_batches=iter_batches)

        return SimpleNamespace(map_batches=map_batches)

    def _batches(
        self, rows: list[dict[str, Any]], actor: Any, kwargs: dict[str, Any], size: int
    ) -> Iterator[Any]:
        import pyarrow as pa

        with mock.patch.dict(os.environ):
            for name, value in self.actor_env.items():
                os.environ.pop(name, None) if value is None else os.environ.update({name: value})
            scorer = actor(**kwargs)
        for done, start in enumerate(range(0, len(rows), size)):
            if done == self.interrupt_after:
                raise KeyboardInterrupt
            try:
                if self.actor_error is not None:
                    raise self.actor_error
                out = scorer(pa.Table.from_pylist(rows[start : start + size]))
            except Exception as exc:
                raise _as_ray_raises(exc) from None
            yield pa.Table.from_pydict(out)
        if self.interrupt_after is not None:
            raise KeyboardInterrupt

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> FakeRay:
    """Ray's part of ``--ray`` in this process (see :class:`FakeRay`); Ray is never started."""
    if RAY is None:
        pytest.skip("needs the [ray] extra")
    import ray.data

    from langchain_ragmetrics._cli import _evaluate

    def no_real_ray(*_args: object, **_options: object) -> None:
        pytest.fail("a real Ray was started")

    fake = FakeRay()
    monkeypatch.setattr(_evaluate, "start_ray", lambda _ray, _address: None)
    monkeypatch.setattr(ray, "init", no_real_ray)
    monkeypatch.setattr(ray, "shutdown", fake.shutdown)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": fake.cpus})
    monkeypatch.setattr(ray, "remote", fake.remote)
    monkeypatch.setattr(ray.data, "from_items", fake.from_items)
    context = ray.data.DataContext.get_current()  # an actor's setup error sets a flag there
    monkeypatch.setattr(
        context, "raise_original_map_exception", context.raise_original_map_exception
    )
    return fake


def _dataset(tmp_path: Path, count: int = 10) -> Path:
    """``count`` rows that ``non_llm_context_recall`` scores, and ``context_recall`` could."""
    path = tmp_path / "data.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "question": f"Who wrote paper {i}?",
                    "contexts": [f"Einstein wrote paper {i}."],
                    "reference_contexts": [f"Einstein wrote paper {i}."],
                    "reference": f"Einstein wrote paper {i}.",
                }
            )
            + "\n"
            for i in range(count)
        ),
        encoding="utf-8",
    )
    return path


def _on_ray(data: Path, *options: str, metric: str = "non_llm_context_recall") -> int:
    """``ragmetrics evaluate data --ray`` in this process; 4 rows per batch."""
    return main(
        ["evaluate", str(data), "--metrics", metric, "--ray", "--no-progress",
         "--concurrency", "1", *options]
    )  # fmt: skip


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()[1:]]


def _not_run_as_a_local_run_writes(data: Path, metric: str) -> list[dict[str, Any]]:
    """The records a local run writes for the rows when none of their jobs ran (the local
    run's result keeps each row, its results None)."""
    from langchain_ragmetrics._dataset import read_dataset
    from langchain_ragmetrics.evaluation._result import EvaluationResult, EvaluationRow

    loaded = read_dataset(data)
    rows = [
        EvaluationRow(
            position=i, location=loaded.describe(i), sample=sample, results={metric: None}
        )
        for i, sample in enumerate(loaded.samples)
    ]
    result = EvaluationResult(metrics=[metric], rows=rows, source=loaded.source, interrupted=True)
    return result.jsonl_records()


def test_ctrl_c_on_ray_keeps_the_rows_not_run_as_a_local_run_does(
    fake_ray: FakeRay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, Ctrl-C with --ray dropped the rows never scored: "Interrupted: 4 of 4 jobs
    finished; 0 did not run." and 4 records; now, as a local run, the summary counts the
    jobs that did not run and --out has every row, those not run as a local run writes them."""
    data = _dataset(tmp_path)
    out = tmp_path / "out.jsonl"
    fake_ray.interrupt_after = 1  # 4 rows came back
    assert _on_ray(data, "--out", str(out)) == ExitCode.INTERRUPTED
    assert "Interrupted: 4 of 10 jobs finished; 6 did not run." in capsys.readouterr().out
    records = _records(out)
    metric = "non_llm_context_recall"
    assert [r["results"][metric]["status"] for r in records] == ["scored"] * 4 + ["not_run"] * 6
    assert records[4:] == _not_run_as_a_local_run_writes(data, metric)[4:]
    assert fake_ray.shutdowns == 1


@pytest.mark.parametrize(("interrupt_after", "finished"), [(1, 4), (None, 10)])
def test_a_second_ctrl_c_while_ray_stops_keeps_what_was_scored(
    interrupt_after: int | None,
    finished: int,
    fake_ray: FakeRay,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, a Ctrl-C while Ray was stopped (a second one soon after the first, or one
    after the last row came) ended the command with "interrupted" only: no summary, --out
    not written; now the run is reported as interrupted with what was scored."""
    from langchain_ragmetrics._cli import _ray

    def stop_then_ctrl_c(ray: Any, *_args: object, **_options: object) -> None:
        ray.shutdown()
        raise KeyboardInterrupt  # as stop_ray raises a Ctrl-C that came meanwhile

    monkeypatch.setattr(_ray, "stop_ray", stop_then_ctrl_c)
    data = _dataset(tmp_path)
    out = tmp_path / "out.jsonl"
    fake_ray.interrupt_after = interrupt_after
    assert _on_ray(data, "--out", str(out)) == ExitCode.INTERRUPTED
    missing = 10 - finished
    summary = f"Interrupted: {finished} of 10 jobs finished; {missing} did not run."
    assert summary in capsys.readouterr().out
    statuses = [r["results"]["non_llm_context_recall"]["status"] for r in _records(out)]
    assert statuses == ["scored"] * finished + ["not_run"] * missing
    assert fake_ray.shutdowns == 1


def test_an_actor_that_cannot_build_the_judge_is_named_in_the_commands_terms(
    fake_ray: FakeRay,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, Ray's error was printed whole: the actor's traceback in colour, and advice in
    evaluate_ray's terms (send_api_key=True); now the cause in one line, then what to do
    with this command."""
    monkeypatch.setenv("OPENAI_API_KEY", "test")  # this process has a key; the actors do not
    fake_ray.actor_env = {"OPENAI_API_KEY": None, "OPENAI_BASE_URL": None}
    code = _on_ray(_dataset(tmp_path), "--no-preflight", "--no-cache", metric="context_recall")
    assert code == ExitCode.NO_API_KEY
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(
        "ragmetrics: error: a Ray actor could not build its judge or metrics: JudgeConfigError: "
    )
    assert "OPENAI_API_KEY is not set" in lines[0]
    assert lines[1] == (
        "  The Ray actors read OPENAI_API_KEY from their own environment: set it on the "
        "cluster's nodes, or add --ray-send-api-key to send this process's key with the job"
    )
    assert "\x1b" not in lines[0]


def test_an_actors_error_is_named_by_itself_in_one_line(
    fake_ray: FakeRay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, the error was named by Ray's wrapper, with the first line of Ray's text:
    "RayTaskError(OSError): <colour>ray::MapWorker(...)..."; now by the actor's error."""
    fake_ray.actor_error = OSError("No space left on device\nwhile writing the verdicts")
    assert _on_ray(_dataset(tmp_path)) == ExitCode.ERROR
    assert capsys.readouterr().err.splitlines() == [
        "ragmetrics: error: the Ray run failed: OSError: No space left on device"
    ]


def test_too_many_workers_for_the_cluster_are_named_as_workers(
    fake_ray: FakeRay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, the warning was evaluate_ray's, a RuntimeWarning telling a command-line user
    to lower num_cpus or num_actors; now it names --workers (and only when they do not fit)."""
    data = _dataset(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _on_ray(data, "--workers", "12") == ExitCode.OK
        assert capsys.readouterr().err.splitlines() == [
            "ragmetrics: warning: --workers 12: 12 Ray actors of 0.25 CPU each reserve 3 of "
            "the cluster's 2 CPUs, leaving less than one for anything else: what does not "
            "fit waits unless the cluster scales up; lower --workers"
        ]
        assert _on_ray(data, "--workers", "2") == ExitCode.OK
    assert [str(w.message) for w in caught if "num_actors" in str(w.message)] == []
    assert "ragmetrics: warning" not in capsys.readouterr().err


@pytest.mark.parametrize("address", ["", "  "])
def test_an_empty_ray_address_is_refused(
    address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, ``--ray-address "$RAY_HEAD"`` with the variable unset ran on a local Ray
    (here: no Ray at all, exit 0) instead of the cluster meant; now it is a usage error."""
    data = _dataset(tmp_path, 2)
    code = main(["evaluate", str(data), "--metrics", "non_llm_context_recall",
                 "--ray-address", address])  # fmt: skip
    assert code == ExitCode.USAGE
    captured = capsys.readouterr()
    assert "argument --ray-address: expected the Ray cluster's address, got an empty one" in (
        captured.err
    )
    assert "Evaluation of" not in captured.out


def test_ray_send_api_key_without_ray_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, --ray-send-api-key without --ray was ignored and the run went local."""
    data = _dataset(tmp_path, 2)
    code = main(["evaluate", str(data), "--metrics", "non_llm_context_recall",
                 "--ray-send-api-key"])  # fmt: skip
    assert code == ExitCode.USAGE
    captured = capsys.readouterr()
    assert captured.err == (
        "ragmetrics: error: --ray-send-api-key only applies to a Ray run: add --ray or "
        "--ray-address\n"
    )
    assert captured.out == ""


def test_the_help_says_a_sent_key_is_also_in_rays_logs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["evaluate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "and written in plain text to Ray's log files on each node, logs/runtime_env_agent.log"
        in text
    )


@needs_ray
def test_on_a_real_ray_an_actor_without_a_key_is_one_error_not_a_traceback(
    tmp_path: Path,
) -> None:
    """Before, the command printed Ray's traceback of the actors' error three times (over 200
    lines, in colour), the last time as its own error; now one error, in the command's terms.

    The actors get an empty OPENAI_API_KEY from the job's runtime_env (which Ray reads from
    RAY_JOB_CONFIG_JSON_ENV_VAR, as a submitted job's driver does), while this command has
    a key; no judge is called (--no-preflight), so none is needed."""
    job = {"runtime_env": {"env_vars": {"OPENAI_API_KEY": ""}}}
    proc = subprocess.run(
        [*RAGMETRICS, "evaluate", str(_dataset(tmp_path, 2)), "--metrics", "context_recall",
         "--ray", "--no-progress", "--no-preflight", "--no-cache"],
        env=clean_env(OPENAI_API_KEY="test", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
                      RAY_JOB_CONFIG_JSON_ENV_VAR=json.dumps(job)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == ExitCode.NO_API_KEY, proc.stderr
    ours = [line for line in proc.stderr.splitlines() if line.startswith("ragmetrics:")]
    assert len(ours) == 1, proc.stderr
    assert ours[0].startswith("ragmetrics: error: a Ray actor could not build its judge")
    assert "--ray-send-api-key" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "\x1b[" not in proc.stderr
    assert "send_api_key=True" not in proc.stderr
