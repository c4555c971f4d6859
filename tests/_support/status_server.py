"""A loopback server that answers every request with one status: a gateway's refusal."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from tests._support.openai_server import LoopbackHandler, LoopbackServer

__all__ = ["StatusServer"]


class _Handler(LoopbackHandler):
    server: Any

    def handle_request(self, method: str) -> None:
        owner: StatusServer = self.server.owner
        self.read_body()
        with owner.lock:
            owner.requests.append((method, self.path))
        if isinstance(owner.payload, str):  # a web server's or a proxy's page, not JSON
            self.send_bytes(owner.status, owner.payload.encode(), "text/html; charset=utf-8")
        else:
            self.send_json(owner.status, owner.payload)


class StatusServer(LoopbackServer):
    """Answers ``status`` with ``payload`` to everything; records ``(method, path)``.

    The payload goes out as JSON, or as an HTML page when it is a ``str``.
    """

    handler_class: ClassVar[type[LoopbackHandler]] = _Handler

    def __init__(self, status: int, payload: object) -> None:
        super().__init__()
        self.status = status
        self.payload = payload
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
