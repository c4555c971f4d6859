"""The LangSmith clients we build read the environment's HTTP settings once, not per request."""

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from langsmith import Client

from langchain_ragmetrics import LangSmithFeedbackSink
from langchain_ragmetrics._langsmith_feedback import read_environment_once
from langchain_ragmetrics.integrations.monitor import LangSmithMonitor
from tests._support.langsmith_stub import LangSmithStub
from tests._support.proxy import LossyProxy
from tests._support.sink_checks import run_item

_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture
def environment(langsmith_stub: LangSmithStub, monkeypatch: pytest.MonkeyPatch) -> LangSmithStub:
    """LangSmith (the stub) from ``LANGSMITH_*``, project "app", and no proxy variables."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANGSMITH_ENDPOINT", langsmith_stub.url)
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    langsmith_stub.feedback_needs_run = False
    langsmith_stub.create_project("app")
    return langsmith_stub


@pytest.fixture
def proxy(environment: LangSmithStub) -> Iterator[LossyProxy]:
    """A forward proxy on loopback in front of the stub, that passes every answer on."""
    with LossyProxy(environment.url, lambda method, path: None) as running:
        yield running


def _posts(proxy: LossyProxy) -> list[str]:
    return [path for method, path, _ in proxy.forwarded if method == "POST"]


def test_the_sink_sends_through_the_proxy_read_when_its_client_was_built(
    environment: LangSmithStub, proxy: LossyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    sink = LangSmithFeedbackSink(project_name="app")
    sink.emit(run_item(uuid.uuid4()))
    monkeypatch.delenv("HTTP_PROXY")  # read once: a later change is not seen
    sink.emit(run_item(uuid.uuid4()))
    # An absolute URL as the request target: the request went through the proxy.
    assert _posts(proxy) == [f"{environment.url}/feedback"] * 2
    assert len(environment.feedback()) == 2
    assert sink.client.session.trust_env is False  # nothing is read per request any more
    sink.close(5)


def test_no_proxy_is_honoured(
    environment: LangSmithStub, proxy: LossyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    sink = LangSmithFeedbackSink(project_name="app")
    sink.emit(run_item(uuid.uuid4()))
    assert proxy.forwarded == []  # straight to LangSmith
    assert len(environment.feedback()) == 1
    sink.close(5)


def test_the_ca_bundle_and_netrc_are_read_too(
    environment: LangSmithStub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    session = LangSmithFeedbackSink(project_name="app").client.session
    assert session.verify == "/etc/ssl/certs/ca-certificates.crt"
    assert session.auth == ("someone", "secret")


def test_a_client_the_user_passes_is_left_as_it_is(environment: LangSmithStub) -> None:
    client = Client(api_url=environment.url, api_key="test")
    sink = LangSmithFeedbackSink(client=client, project_name="app")
    sink.emit(run_item(uuid.uuid4()))
    sink.flush(5)  # (a client of the user's may batch in the background)
    assert client.session.trust_env is True
    assert len(environment.feedback()) == 1
    client.close()


def test_the_monitor_client_reads_it_once_too(
    environment: LangSmithStub, proxy: LossyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monitor = LangSmithMonitor(project_name="app")
    session = monitor.client.session
    assert session.trust_env is False
    assert session.proxies["http"] == proxy.url


def test_read_environment_once_leaves_a_pinned_session_alone(environment: LangSmithStub) -> None:
    client = Client(api_url=environment.url, api_key="test")
    client.session.trust_env = False
    client.session.proxies = {"http": "http://127.0.0.1:9"}
    assert read_environment_once(client) is client
    assert client.session.proxies == {"http": "http://127.0.0.1:9"}
