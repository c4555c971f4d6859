"""A loopback HTTP proxy in front of a real server, that can lose the server's answer.

What a gateway in front of a tracking server does on a bad day: the request reaches the
server, which stores it, but the client gets an error instead of the server's answer (a 502
from an overloaded proxy, a 504 after the proxy's own timeout). ``answer`` decides, per
request, whether the client gets the server's reply (None) or, after the request was
forwarded and answered, a status of its own.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

__all__ = ["LossyProxy"]

_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


class LossyProxy:
    """Forwards every request to ``upstream``; ``answer(method, path)`` may replace the reply.

    Use as a context manager; ``url`` is the proxy's base URL and ``forwarded`` lists the
    ``(method, path, status the server gave)`` of every request it forwarded.
    """

    def __init__(self, upstream: str, answer: Callable[[str, str], int | None]) -> None:
        parts = urlsplit(upstream)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.answer = answer
        self.forwarded: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
                conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    reply = conn.getresponse()
                    data = reply.read()
                finally:
                    conn.close()
                with proxy._lock:
                    proxy.forwarded.append((self.command, self.path, reply.status))
                replaced = proxy.answer(self.command, self.path)
                if replaced is not None:
                    payload = b'{"error_code": "TEMPORARILY_UNAVAILABLE", "message": "lost"}'
                    self.send_response(replaced)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in _HOP_HEADERS:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _relay  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LossyProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def requests_to(self, fragment: str, method: str = "POST") -> list[tuple[str, str, int]]:
        """The forwarded requests of ``method`` whose path contains ``fragment``."""
        with self._lock:
            return [r for r in self.forwarded if r[0] == method and fragment in r[1]]
