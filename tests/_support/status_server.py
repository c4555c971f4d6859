"""Loopback servers that answer every request alike: a gateway's refusal, an outage, silence."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, ClassVar

from tests._support.openai_server import LoopbackHandler, LoopbackServer

__all__ = ["SilentServer", "StatusServer"]


class _Handler(LoopbackHandler):
    server: Any

    def handle_request(self, method: str) -> None:
        owner: StatusServer = self.server.owner
        self.read_body()
        with owner.lock:
            owner.requests.append((method, self.path))
            owner.times.append(time.monotonic())
        if isinstance(owner.payload, bytes):  # as it comes: a body that may not parse
            self.send_bytes(owner.status, owner.payload, "application/json", owner.headers)
        elif isinstance(owner.payload, str):  # a web server's or a proxy's page, not JSON
            page = owner.payload.encode()
            self.send_bytes(owner.status, page, "text/html; charset=utf-8", owner.headers)
        else:
            self.send_json(owner.status, owner.payload, owner.headers)


class StatusServer(LoopbackServer):
    """Answers ``status`` with ``payload`` and ``headers`` to everything.

    The payload goes out as JSON; as an HTML page when it is a ``str``; as it is (with a
    JSON content type) when it is ``bytes``. ``requests`` records each request's
    ``(method, path)`` and ``times`` when it came (``time.monotonic()``).
    """

    handler_class: ClassVar[type[LoopbackHandler]] = _Handler

    def __init__(
        self, status: int, payload: object, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__()
        self.status = status
        self.payload = payload
        self.headers = dict(headers or {})
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.times: list[float] = []

    def count_since(self, moment: float) -> int:
        """Requests that came after ``moment`` (``time.monotonic()``)."""
        with self.lock:
            return sum(t > moment for t in self.times)


class SilentServer:
    """Accepts connections on 127.0.0.1 and never answers (a hung server or proxy).

    Use as a context manager; ``url`` is its base URL, ``accepted`` the monotonic times of
    the connections it accepted. Connections are held until the server stops.
    """

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.accepted: list[float] = []
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="SilentServer", daemon=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted.append(time.monotonic())
                self._held.append(conn)

    def count_since(self, moment: float) -> int:
        """Connections accepted after ``moment`` (``time.monotonic()``)."""
        with self._lock:
            return sum(t > moment for t in self.accepted)

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()
        with self._lock:
            for conn in self._held:
                conn.close()
