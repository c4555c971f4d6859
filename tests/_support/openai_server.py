"""A scriptable OpenAI-compatible chat server bound to 127.0.0.1 for tests.

The server speaks enough of the Chat Completions wire format for the real
``langchain_openai.ChatOpenAI`` (and the ``openai`` SDK underneath it) to run
against it: plain text answers, tool-call and ``json_schema`` structured
answers, SSE streaming, error statuses, slow and held answers.  A *script*
(a callable run on the server thread) decides every answer.

Example::

    with JudgeServer(router(Verdict={"score": 1, "reason": "ok"})) as server:
        llm = ChatOpenAI(model="judge", base_url=server.base_url, api_key="test")
        llm.with_structured_output(Verdict, method="function_calling").invoke("rate")

The module also holds ``LoopbackServer``, the small threading-server base that
``tests._support.langsmith_stub`` reuses.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeAlias, cast

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from types import TracebackType

    from typing_extensions import Self

__all__ = [
    "MAX_HOLD_SECONDS",
    "OPENAI_ERRORS",
    "JudgeRequest",
    "JudgeServer",
    "JudgeStats",
    "LoopbackHandler",
    "LoopbackServer",
    "Reply",
    "ReplyValue",
    "Script",
    "reply_delay",
    "reply_error",
    "reply_garbage",
    "reply_hold",
    "reply_invalid",
    "reply_openai_error",
    "reply_raw_body",
    "reply_text",
    "router",
    "sequence",
    "static_script",
    "text_script",
]

MAX_HOLD_SECONDS = 30.0
"""Upper bound on how long a ``Reply.hold`` may keep a request waiting."""

_CONNECTION_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)
_STREAM_PIECES = 3
_CHARS_PER_TOKEN = 4

Mode = Literal["tools", "json_schema", "text"]


# --------------------------------------------------------------------------- #
# Generic loopback threading server (shared with the LangSmith stub)
# --------------------------------------------------------------------------- #


class _TrackingHTTPServer(ThreadingHTTPServer):
    """Threading HTTP server that remembers open connections so stop can cut them."""

    daemon_threads = True
    block_on_close = False  # keep-alive handler threads must not block shutdown
    # The default listen backlog (5) drops SYNs when a client opens many connections at
    # once (16 concurrent judge calls); the client then retries only after a 1 s timeout.
    request_queue_size = 128

    def __init__(self, handler: type[BaseHTTPRequestHandler], owner: LoopbackServer) -> None:
        """Bind to an ephemeral port on 127.0.0.1 and remember the owning server."""
        super().__init__(("127.0.0.1", 0), handler)
        self.owner = owner
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Track the connection before handing it to a worker thread."""
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        """Forget the connection once its worker thread is done with it."""
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet: clients hanging up mid-answer is routine in these tests."""

    def cut_connections(self) -> None:
        """Shut down every open client socket so idle keep-alive threads exit now."""
        with self._open_lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _shut_down_now(httpd: ThreadingHTTPServer) -> None:
    """``httpd.shutdown()`` without waiting out the serving loop's poll interval.

    The loop only sees the request to stop when its ``select`` returns: a connection to the
    listening socket wakes it at once (it stops before accepting it). Tests start and stop
    hundreds of servers, and 50 ms each adds up to seconds of the suite's wall time.
    """
    asking = threading.Thread(target=httpd.shutdown, name="loopback-shutdown", daemon=True)
    asking.start()
    address = httpd.server_address[:2]
    while asking.is_alive():
        with contextlib.suppress(OSError), socket.create_connection(address, timeout=1):
            pass
        asking.join(0.005)


class LoopbackHandler(BaseHTTPRequestHandler):
    """Request handler base: HTTP/1.1 keep-alive, silent logs, body and reply helpers."""

    protocol_version = "HTTP/1.1"
    timeout = 60  # idle keep-alive sockets give up eventually
    # Headers and body go out in separate writes; with Nagle's algorithm on, the body waits
    # for the client's delayed ACK (~40 ms on Linux) and every answer arrives 40 ms late.
    disable_nagle_algorithm = True
    server: _TrackingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Suppress the default access log on stderr."""

    def read_body(self) -> bytes:
        """Read the request body, honouring Content-Length or chunked encoding."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def send_bytes(
        self,
        status: int,
        data: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Send a complete response with an exact Content-Length."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def send_json(
        self, status: int, payload: object, headers: Mapping[str, str] | None = None
    ) -> None:
        """Serialise ``payload`` as JSON and send it."""
        data = json.dumps(payload, default=str).encode()
        self.send_bytes(status, data, "application/json", headers)

    def dispatch(self, method: str) -> None:
        """Route a request to ``handle_request``; subclasses implement the latter."""
        try:
            self.handle_request(method)
        except _CONNECTION_ERRORS:
            self.close_connection = True

    def handle_request(self, method: str) -> None:
        """Answer one request; the default is a 404."""
        self.read_body()
        self.send_json(404, {"detail": f"{method} {self.path} not found"})

    def do_GET(self) -> None:
        """Handle GET."""
        self.dispatch("GET")

    def do_POST(self) -> None:
        """Handle POST."""
        self.dispatch("POST")

    def do_PATCH(self) -> None:
        """Handle PATCH."""
        self.dispatch("PATCH")

    def do_PUT(self) -> None:
        """Handle PUT."""
        self.dispatch("PUT")

    def do_DELETE(self) -> None:
        """Handle DELETE."""
        self.dispatch("DELETE")


class LoopbackServer:
    """Owns a ``ThreadingHTTPServer`` on 127.0.0.1 running in a background thread.

    Subclasses set ``handler_class``; handlers reach the owner as ``self.server.owner``.
    """

    handler_class: ClassVar[type[LoopbackHandler]] = LoopbackHandler

    def __init__(self) -> None:
        """Prepare an unstarted server."""
        self._httpd: _TrackingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def running(self) -> bool:
        """Whether the server is currently accepting requests."""
        return self._httpd is not None

    @property
    def port(self) -> int:
        """The ephemeral port the server listens on."""
        if self._httpd is None:
            msg = f"{type(self).__name__} is not started"
            raise RuntimeError(msg)
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Root URL of the server, without a trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        """Bind the socket and begin serving in a daemon thread."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _TrackingHTTPServer(self.handler_class, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def cut_connections(self) -> None:
        """Close the clients' open (idle keep-alive) connections; the server keeps serving."""
        if self._httpd is not None:
            self._httpd.cut_connections()

    def stop(self) -> None:
        """Stop serving, release waiting requests and cut open connections."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        _shut_down_now(httpd)
        httpd.server_close()
        httpd.cut_connections()
        if thread is not None:
            thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def pause(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` unless the server stops first; True if it stopped."""
        if seconds <= 0:
            return self._stopping.is_set()
        return self._stopping.wait(seconds)

    def __enter__(self) -> Self:
        """Start the server for a ``with`` block."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server when the ``with`` block ends."""
        self.stop()


# --------------------------------------------------------------------------- #
# Requests, replies and scripts
# --------------------------------------------------------------------------- #


def _content_text(content: object) -> str:
    """Flatten OpenAI message content (a string or a list of parts) into text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
        return "\n".join(pieces)
    return str(content)


def _pick_tool(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return the function definition the client asked for, if any."""
    tools = [
        t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"
    ]
    if not tools or body.get("tool_choice") == "none":
        return None
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        for tool in tools:
            if tool.get("function", {}).get("name") == wanted:
                return dict(tool["function"])
    return dict(tools[0].get("function") or {})


@dataclass
class JudgeRequest:
    """One chat-completion request as the script sees it (header names lower-cased)."""

    body: dict[str, Any]
    path: str = "/v1/chat/completions"
    headers: dict[str, str] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    system: str = ""
    user: str = ""
    text: str = ""
    schema_name: str | None = None
    schema: dict[str, Any] | None = None
    mode: Mode = "text"
    stream: bool = False
    model: str | None = None
    tool_names: list[str] = field(default_factory=list)
    received_at: float = field(default_factory=time.monotonic)
    client_port: int | None = None
    """The client's TCP port: requests on one kept-alive connection share it."""

    @classmethod
    def from_body(
        cls,
        body: dict[str, Any],
        *,
        path: str = "/v1/chat/completions",
        headers: Mapping[str, str] | None = None,
    ) -> JudgeRequest:
        """Digest a parsed request body into the convenient fields."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        system = [
            _content_text(m.get("content"))
            for m in messages
            if m.get("role") in ("system", "developer")
        ]
        user = [
            _content_text(m.get("content")) for m in messages if m.get("role") in ("user", "human")
        ]
        every = [_content_text(m.get("content")) for m in messages]
        tool = _pick_tool(body)
        response_format = body.get("response_format")
        json_schema = (
            response_format.get("json_schema") or {}
            if isinstance(response_format, dict) and response_format.get("type") == "json_schema"
            else None
        )
        mode: Mode
        if tool is not None:
            mode, schema_name, schema = "tools", tool.get("name"), tool.get("parameters")
        elif json_schema is not None:
            mode, schema_name, schema = (
                "json_schema",
                json_schema.get("name"),
                json_schema.get("schema"),
            )
        else:
            mode, schema_name, schema = "text", None, None
        return cls(
            body=body,
            path=path,
            headers=dict(headers or {}),
            messages=messages,
            system="\n".join(system),
            user="\n".join(user),
            text="\n".join(every),
            schema_name=schema_name,
            schema=schema,
            mode=mode,
            stream=bool(body.get("stream")),
            model=body.get("model"),
            tool_names=[
                str(t.get("function", {}).get("name"))
                for t in body.get("tools") or []
                if isinstance(t, dict) and t.get("type") == "function"
            ],
        )


@dataclass
class Reply:
    """A scripted answer with the knobs plain dicts and strings cannot express.

    Attributes:
        obj: Structured answer (sent as tool-call arguments or JSON content).
        text: Plain assistant text; used when ``obj`` is None.
        status: HTTP status; anything but 200 sends an OpenAI-style error body.
        delay: Seconds to wait before answering (on top of the server latency).
        hold: Event to wait for before answering (bounded, released on stop).
        raw_arguments: Verbatim (typically malformed) tool-call arguments or content.
        raw_body: Verbatim HTTP 200 body sent instead of a completion.
        usage: Overrides merged into the computed ``usage`` block.
        error_message: Message of the error body when ``status`` is not 200.
        tool_name: Function name for the tool call (defaults to the requested one).
        finish_reason: Overrides the finish reason of the answer.
        content_type: Content type used with ``raw_body``.
        headers: Extra response headers (e.g. ``Retry-After``); on a 429 they replace the
            default ``retry-after-ms: 1``.
        error_code: ``error.code`` of the error body (default: one per status).
        error_type: ``error.type`` of the error body (default: one per status).
        error_param: ``error.param`` of the error body.
    """

    obj: Any = None
    text: str | None = None
    status: int = 200
    delay: float = 0.0
    hold: threading.Event | None = None
    raw_arguments: str | None = None
    raw_body: str | None = None
    usage: dict[str, int] | None = None
    error_message: str = "scripted error from JudgeServer"
    tool_name: str | None = None
    finish_reason: str | None = None
    content_type: str = "application/json"
    headers: dict[str, str] | None = None
    error_code: str | None = None
    error_type: str | None = None
    error_param: str | None = None


class _ModelLike(Protocol):
    """Anything with a pydantic-style ``model_dump`` (answered as a JSON object)."""

    def model_dump(self, *, mode: str = ...) -> dict[str, Any]:
        """Return the object as JSON-compatible data."""
        ...


ReplyValue: TypeAlias = Reply | dict[str, Any] | list[Any] | str | _ModelLike
"""What a script may return: a ``Reply``, a JSON object, or assistant text."""

Script: TypeAlias = Callable[[JudgeRequest], ReplyValue]
"""A script decides the answer to each chat-completion request."""


def reply_error(
    status: int = 500, message: str | None = None, *, headers: dict[str, str] | None = None
) -> Reply:
    """Answer with an OpenAI-style error body, the given HTTP status and extra headers."""
    return Reply(
        status=status,
        error_message=message or f"scripted {status} from JudgeServer",
        headers=headers,
    )


OPENAI_ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "insufficient_quota": (
        429,
        {
            "message": "You exceeded your current quota, please check your plan and billing "
            "details. For more information on this error, read the docs: "
            "https://platform.openai.com/docs/guides/error-codes/api-errors.",
            "type": "insufficient_quota",
            "param": None,
            "code": "insufficient_quota",
        },
    ),
    "invalid_api_key": (
        401,
        {
            "message": "Incorrect API key provided: sk-test. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        },
    ),
    "unsupported_region": (
        403,
        {
            "message": "Country, region, or territory not supported",
            "type": "request_forbidden",
            "param": None,
            "code": "unsupported_country_region_territory",
        },
    ),
    "model_not_found": (
        404,
        {
            "message": "The model `gpt-4o-mni` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        },
    ),
    "context_length_exceeded": (
        400,
        {
            "message": "This model's maximum context length is 128000 tokens. However, your "
            "messages resulted in 131072 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        },
    ),
    "rate_limit_exceeded": (
        429,
        {
            "message": "Rate limit reached for gpt-4o-mini in organization org-test on requests "
            "per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms.",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        },
    ),
}
"""Error bodies as OpenAI's API sends them (status, ``error`` object), by ``error.code`` name.

Copied from what the real service answers: a 429 for an account out of credit
(``insufficient_quota``, no ``Retry-After``), a 429 for a rate limit, a 401 for a bad key,
a 403 for a refused region, a 404 for an unknown model, a 400 for a prompt over the context
window.
"""


def reply_openai_error(name: str) -> Reply:
    """Answer with one of :data:`OPENAI_ERRORS`: its status and its exact ``error`` object."""
    status, error = OPENAI_ERRORS[name]
    return Reply(
        status=status,
        error_message=error["message"],
        error_code=error["code"],
        error_type=error["type"],
        error_param=error["param"],
        headers={} if name == "insufficient_quota" else None,
    )


def reply_garbage(text: str = '{"score": 0.5, "reason": "unterminated') -> Reply:
    """Answer with tool-call arguments (or content) that are not valid JSON.

    langchain-openai 1.x files such a call under ``AIMessage.invalid_tool_calls``, so
    ``include_raw=True`` gives ``parsed=None`` with ``parsing_error=None``; with
    ``method="json_schema"`` the openai SDK raises a pydantic ``ValidationError`` instead.
    """
    return Reply(raw_arguments=text)


def reply_invalid(obj: Any = None) -> Reply:
    """Answer with well-formed JSON that should fail the requested schema.

    Unlike ``reply_garbage`` this makes ``include_raw=True`` report a ``parsing_error``.
    """
    return Reply(obj={"__judge_server__": "schema violation"} if obj is None else obj)


def reply_hold(event: threading.Event, obj: Any = None, *, text: str | None = None) -> Reply:
    """Answer only once ``event`` is set (or the hold bound or server stop hits)."""
    return Reply(obj=obj, text=text, hold=event)


def reply_delay(seconds: float, obj: Any = None, *, text: str | None = None) -> Reply:
    """Answer after sleeping ``seconds``."""
    return Reply(obj=obj, text=text, delay=seconds)


def reply_text(text: str) -> Reply:
    """Answer with plain assistant text, even when a tool was requested."""
    return Reply(text=text)


def reply_raw_body(body: str, content_type: str = "application/json") -> Reply:
    """Answer HTTP 200 with a verbatim (typically non-JSON) body."""
    return Reply(raw_body=body, content_type=content_type)


def _as_reply(value: object) -> Reply:
    """Normalise whatever a script returned into a ``Reply``."""
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(text=value)
    if isinstance(value, (dict, list)):
        return Reply(obj=value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return Reply(obj=dump(mode="json"))
    return reply_error(500, f"JudgeServer script returned an unsupported value: {value!r}")


def _resolve(value: object, req: JudgeRequest) -> ReplyValue:
    """Call ``value`` when it is a script, otherwise return it as a constant reply."""
    if callable(value) and not isinstance(value, Reply):
        return cast("ReplyValue", value(req))
    return cast("ReplyValue", value)


def static_script(value: ReplyValue) -> Script:
    """Build a script that gives the same answer to every request."""

    def script(_req: JudgeRequest) -> ReplyValue:
        return value

    return script


def text_script(answer: str) -> Script:
    """Build a script for a plain answering model that always says ``answer``."""
    return static_script(answer)


def router(
    handlers: Mapping[str, object] | None = None,
    /,
    **named: object,
) -> Script:
    """Build a script dispatching on ``req.schema_name``, falling back to ``default``.

    Values may be scripts or constant replies. Requests without a schema use the
    ``default`` entry too; with no match and no default the answer is a 500.
    """
    table = {**(handlers or {}), **named}

    def script(req: JudgeRequest) -> ReplyValue:
        key = req.schema_name if req.schema_name in table else "default"
        if key not in table:
            return reply_error(
                500, f"JudgeServer router has no handler for schema {req.schema_name!r}"
            )
        return _resolve(table[key], req)

    return script


def sequence(*replies: object, repeat_last: bool = True) -> Script:
    """Build a script returning ``replies`` in call order (thread-safe).

    After the last one it keeps repeating it, or answers 500 when ``repeat_last``
    is False. Entries may be scripts or constant replies.
    """
    lock = threading.Lock()
    position = 0

    def script(req: JudgeRequest) -> ReplyValue:
        nonlocal position
        with lock:
            index = position
            position += 1
        if index >= len(replies):
            if not repeat_last or not replies:
                return reply_error(500, "JudgeServer sequence is exhausted")
            index = len(replies) - 1
        return _resolve(replies[index], req)

    return script


def _no_script(_req: JudgeRequest) -> ReplyValue:
    """Default script: fail loudly so a forgotten script is obvious."""
    return reply_error(500, "JudgeServer has no script set; assign server.script before calling it")


# --------------------------------------------------------------------------- #
# Statistics
# --------------------------------------------------------------------------- #


def _tokens(chars: int) -> int:
    """Approximate token count of ``chars`` characters."""
    return math.ceil(chars / _CHARS_PER_TOKEN)


@dataclass
class JudgeStats:
    """Running totals over chat-completion requests (a snapshot when read)."""

    requests: int = 0
    errors: int = 0
    prompt_chars: int = 0
    completion_chars: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    by_schema: dict[str, int] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens reported in ``usage`` blocks."""
        return self.prompt_tokens + self.completion_tokens


# --------------------------------------------------------------------------- #
# The server
# --------------------------------------------------------------------------- #


@dataclass
class _Answer:
    """The assistant message worked out from a reply, before wire encoding."""

    content: str | None
    tool_name: str | None
    arguments: str | None
    finish_reason: str

    @property
    def output(self) -> str:
        """The text that counts as completion output."""
        return (self.arguments if self.tool_name is not None else self.content) or ""


_ERROR_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "not_found"),
    429: ("requests", "rate_limit_exceeded"),
    503: ("server_error", "service_unavailable"),
}


def _error_payload(
    status: int,
    message: str,
    *,
    code: str | None = None,
    kind: str | None = None,
    param: str | None = None,
) -> dict[str, Any]:
    """Build an OpenAI-style error body (type and code default to ones typical of ``status``)."""
    default_kind, default_code = _ERROR_TYPES.get(status, ("server_error", "server_error"))
    return {
        "error": {
            "message": message,
            "type": kind or default_kind,
            "param": param,
            "code": code or default_code,
        }
    }


def _pieces(text: str, count: int = _STREAM_PIECES) -> list[str]:
    """Split ``text`` into up to ``count`` roughly equal, non-empty pieces."""
    if not text:
        return [""]
    size = max(1, math.ceil(len(text) / count))
    return [text[i : i + size] for i in range(0, len(text), size)]


class _JudgeHandler(LoopbackHandler):
    """Routes OpenAI-style paths to the owning ``JudgeServer``."""

    def handle_request(self, method: str) -> None:
        """Serve chat completions and the model list; 404 for the rest."""
        owner = self.server.owner
        if not isinstance(owner, JudgeServer):  # pragma: no cover - wiring guard
            raise TypeError(owner)
        raw = self.read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        if method == "POST" and path.endswith("/chat/completions"):
            owner.serve_chat(self, path, raw)
        elif method == "GET" and path.endswith("/models"):
            self.send_json(200, {"object": "list", "data": [owner.model_card()]})
        else:
            self.send_json(404, _error_payload(404, f"JudgeServer: unknown route {method} {path}"))


class JudgeServer(LoopbackServer):
    """Scriptable OpenAI-compatible chat-completions server on 127.0.0.1.

    ``script`` and ``latency`` are plain attributes and may be changed at any
    time; the script runs on server threads, possibly concurrently.
    """

    handler_class: ClassVar[type[LoopbackHandler]] = _JudgeHandler

    def __init__(self, script: Script | None = None, *, latency: float = 0.0) -> None:
        """Create an unstarted server with an optional script and base latency."""
        super().__init__()
        self.script: Script = script or _no_script
        self.latency = latency
        self._lock = threading.Lock()
        self._requests: list[JudgeRequest] = []
        self._stats = JudgeStats()
        self._script_errors: list[BaseException] = []

    # ----------------------------------------------------------------- public

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL (ending in ``/v1``) to give to clients."""
        return f"{self.url}/v1"

    @property
    def requests(self) -> list[JudgeRequest]:
        """Snapshot of every chat-completion request received, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def stats(self) -> JudgeStats:
        """Snapshot of the running request, character and token totals."""
        with self._lock:
            return replace(self._stats, by_schema=dict(self._stats.by_schema))

    @property
    def script_errors(self) -> list[BaseException]:
        """Exceptions raised by the script (each was answered with a 500)."""
        with self._lock:
            return list(self._script_errors)

    def count(self, schema_name: str | None = None) -> int:
        """Number of chat-completion requests, optionally only for one schema."""
        with self._lock:
            if schema_name is None:
                return len(self._requests)
            return sum(1 for r in self._requests if r.schema_name == schema_name)

    def reset(self) -> None:
        """Forget recorded requests, statistics and script errors."""
        with self._lock:
            self._requests.clear()
            self._stats = JudgeStats()
            self._script_errors.clear()

    def model_card(self) -> dict[str, Any]:
        """The single entry listed by ``GET /v1/models``."""
        return {"id": "judge-model", "object": "model", "created": 0, "owned_by": "judge-server"}

    # --------------------------------------------------------------- serving

    def serve_chat(self, handler: LoopbackHandler, path: str, raw: bytes) -> None:
        """Answer one chat-completion request through the script."""
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            handler.send_json(
                400, _error_payload(400, "JudgeServer: request body is not a JSON object")
            )
            return
        req = JudgeRequest.from_body(
            body, path=path, headers={k.lower(): v for k, v in handler.headers.items()}
        )
        req.client_port = handler.client_address[1]
        with self._lock:
            self._requests.append(req)
            self._stats.requests += 1
            self._stats.prompt_chars += len(req.text)
            if req.schema_name is not None:
                self._stats.by_schema[req.schema_name] = (
                    self._stats.by_schema.get(req.schema_name, 0) + 1
                )

        try:
            reply = _as_reply(self.script(req))
        except Exception as exc:
            with self._lock:
                self._script_errors.append(exc)
            reply = reply_error(500, f"JudgeServer script raised {type(exc).__name__}: {exc}")

        self._wait_before_answer(reply)
        if reply.status != HTTPStatus.OK:
            with self._lock:
                self._stats.errors += 1
            extra = (
                {"retry-after-ms": "1", "retry-after": "0"}
                if reply.status == HTTPStatus.TOO_MANY_REQUESTS and reply.headers is None
                else reply.headers or {}
            )
            body = _error_payload(
                reply.status,
                reply.error_message,
                code=reply.error_code,
                kind=reply.error_type,
                param=reply.error_param,
            )
            handler.send_json(reply.status, body, extra)
            return
        if reply.raw_body is not None:
            handler.send_bytes(200, reply.raw_body.encode(), reply.content_type)
            return

        answer = self._answer(req, reply)
        usage = self._usage(req, answer, reply)
        with self._lock:
            self._stats.completion_chars += len(answer.output)
            self._stats.prompt_tokens += usage["prompt_tokens"]
            self._stats.completion_tokens += usage["completion_tokens"]
        if req.stream:
            self._send_stream(handler, req, answer, usage)
        else:
            handler.send_json(200, self._completion(req, answer, usage))

    def _wait_before_answer(self, reply: Reply) -> None:
        """Apply server latency, the reply delay and any hold, all cut short by stop."""
        if self.pause(self.latency + reply.delay):
            return
        if reply.hold is not None:
            deadline = time.monotonic() + MAX_HOLD_SECONDS
            while not reply.hold.is_set() and time.monotonic() < deadline:
                if self.pause(0.02):
                    return

    @staticmethod
    def _answer(req: JudgeRequest, reply: Reply) -> _Answer:
        """Decide the assistant message for a successful reply."""
        wants_call = reply.obj is not None or reply.raw_arguments is not None
        if req.mode == "tools" and wants_call and reply.text is None:
            arguments = (
                reply.raw_arguments if reply.raw_arguments is not None else json.dumps(reply.obj)
            )
            name = reply.tool_name or req.schema_name or "tool"
            return _Answer(None, name, arguments, reply.finish_reason or "tool_calls")
        if reply.raw_arguments is not None:
            content = reply.raw_arguments
        elif reply.obj is not None:
            content = json.dumps(reply.obj)
        else:
            content = reply.text or ""
        return _Answer(content, None, None, reply.finish_reason or "stop")

    @staticmethod
    def _usage(req: JudgeRequest, answer: _Answer, reply: Reply) -> dict[str, int]:
        """Approximate token usage from character counts, with reply overrides."""
        usage = {
            "prompt_tokens": _tokens(len(req.text)),
            "completion_tokens": _tokens(len(answer.output)),
        }
        usage.update(reply.usage or {})
        if "total_tokens" not in (reply.usage or {}):
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return usage

    @staticmethod
    def _envelope(req: JudgeRequest, completion_id: str, obj: str) -> dict[str, Any]:
        """Fields shared by completions and stream chunks."""
        return {
            "id": completion_id,
            "object": obj,
            "created": int(time.time()),
            "model": req.model or "judge-model",
            "system_fingerprint": "fp_judge",
        }

    def _completion(
        self, req: JudgeRequest, answer: _Answer, usage: dict[str, int]
    ) -> dict[str, Any]:
        """Build a non-streamed ``chat.completion`` body."""
        message: dict[str, Any] = {"role": "assistant", "content": answer.content, "refusal": None}
        if answer.tool_name is not None:
            message["tool_calls"] = [
                {
                    "id": f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": answer.tool_name, "arguments": answer.arguments},
                },
            ]
        return {
            **self._envelope(req, f"chatcmpl-{uuid.uuid4().hex}", "chat.completion"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": answer.finish_reason,
                }
            ],
            "usage": usage,
        }

    def _chunks(
        self, req: JudgeRequest, answer: _Answer, usage: dict[str, int]
    ) -> Iterator[dict[str, Any]]:
        """Yield the ``chat.completion.chunk`` payloads for a streamed answer."""
        head = self._envelope(req, f"chatcmpl-{uuid.uuid4().hex}", "chat.completion.chunk")

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                **head,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                ],
            }

        if answer.tool_name is not None:
            call_id = f"call_{uuid.uuid4().hex[:24]}"
            first = {
                "index": 0,
                "id": call_id,
                "type": "function",
                "function": {"name": answer.tool_name, "arguments": ""},
            }
            yield chunk({"role": "assistant", "content": None, "tool_calls": [first]})
            for piece in _pieces(answer.arguments or ""):
                yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        else:
            yield chunk({"role": "assistant", "content": "", "refusal": None})
            for piece in _pieces(answer.content or ""):
                yield chunk({"content": piece})
        yield chunk({}, answer.finish_reason)
        options = req.body.get("stream_options") or {}
        if isinstance(options, dict) and options.get("include_usage"):
            yield {**head, "choices": [], "usage": usage}

    def _send_stream(
        self, handler: LoopbackHandler, req: JudgeRequest, answer: _Answer, usage: dict[str, int]
    ) -> None:
        """Send the answer as Server-Sent Events over chunked transfer encoding."""
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def emit(data: str) -> None:
            event = f"data: {data}\n\n".encode()
            handler.wfile.write(f"{len(event):X}\r\n".encode() + event + b"\r\n")
            handler.wfile.flush()

        for payload in self._chunks(req, answer, usage):
            emit(json.dumps(payload))
        emit("[DONE]")
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
