"""``ragmetrics evaluate --ray-address``: the cluster's address is tried before Ray starts."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from langchain_ragmetrics._cli._ray import FETCH_THREAD, _host_port, reach, start_ray, stop_ray


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
