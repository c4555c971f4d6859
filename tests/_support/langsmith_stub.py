"""A loopback stand-in for the LangSmith API, good enough for the real ``langsmith.Client``.

It records every request and understands what the SDK sends while tracing and
logging feedback:

* ``GET /info`` advertises multipart batch ingestion (and, when the
  ``zstandard`` package is importable, zstd run compression), so the client
  takes its production code path.
* ``POST /runs/multipart`` bodies (``multipart/form-data``, optionally
  ``Content-Encoding: zstd``/``gzip``) are split into parts named
  ``post.<run_id>[.<field>]``, ``patch.<run_id>[.<field>]``,
  ``attachment.<run_id>.<name>`` and ``feedback.<feedback_id>``.
* ``POST /runs/batch``, ``POST /runs`` and ``PATCH /runs/<id>`` carry runs as JSON.
* ``POST /feedback`` carries feedback as JSON (used when no ``trace_id`` is given).
* Run queries: ``POST /runs/query`` (``Client.list_runs``, every version) and, on a backend
  advertising ``V2_VERSION`` or later in ``/info``, ``POST /api/v2/runs/query``
  (``Client.runs.query``): the same stored runs and filters, each with its own request and
  answer shape and cursor (see :func:`v2_filters` and :meth:`LangSmithStub.v2_run`).
* Projects: ``GET/POST /sessions``, ``GET/PATCH/DELETE /sessions/<id>``, with a
  stable id derived from the project name.

Outages, for the online sink's tests: ``fail`` answers a status (500, 429 ...),
``hang`` accepts a request and never answers it (until ``release_hangs`` or stop), and
the module functions ``refused_url`` (nothing listens) and ``silent_server`` (a port
that accepts connections and never answers) stand for LangSmith unreachable.

What real LangSmith does, and the stub copies (checked against langsmith 0.15's client):

* A second ``POST /feedback`` with an id the service already holds answers **409**: the
  SDK turns it into ``LangSmithConflictError`` and its own batch paths ignore exactly that
  error (``to_ignore=(LangSmithConflictError,)`` in ``Client``). The first feedback is kept
  unchanged.
* ``POST /feedback`` about a run the service has not ingested yet answers **404**: the SDK
  retries exactly that error (``create_feedback`` passes ``retry_on=(LangSmithNotFoundError,)``
  to ``request_with_retries``) because ingestion is asynchronous. The stub answers 404 for a
  run it does not hold (``feedback_needs_run = False`` turns this off), and ``hide_run``
  keeps a run out of query answers for a while (ingestion lag).
* ``GET /sessions?name=<unknown>`` answers an empty list, which ``Client.read_project``
  turns into ``LangSmithNotFoundError``; ``GET /sessions/<unknown id>`` answers 404. A
  project comes into being when a run is traced to it or on ``POST /sessions``.
* A run's ``session_id`` is resolved from its ``session_name`` at ingestion, whichever of
  its post and patch arrives first.

Nothing is ever sent beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import gzip
import json
import re
import socket
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import parse_qs, urlsplit

from tests._support.openai_server import LoopbackHandler, LoopbackServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

__all__ = [
    "V2_VERSION",
    "LangSmithStub",
    "MultipartPart",
    "StubRequest",
    "decode_body",
    "parse_multipart",
    "project_id_for",
    "refused_url",
    "run_matches_query",
    "runs_page",
    "silent_server",
    "v2_filters",
]

_T = TypeVar("_T")

_NAMESPACE = uuid.UUID("6c0b8f5e-4f1e-4c43-9a55-0d5f3b7a1e10")
TENANT_ID = uuid.uuid5(_NAMESPACE, "tenant")
_SERVER_VERSION = "0.10.0"  # feedback batching needs >= 0.8.10
V2_VERSION = "0.16.0"
"""The first backend version serving ``POST /api/v2/runs/query`` (the SDK's minimum for
``Client.runs``); an older ``version`` answers 404 there, as such a backend would."""
_UUID_RE = r"[0-9a-fA-F-]{32,36}"


def project_id_for(name: str) -> str:
    """Stable project id the stub assigns to a project ``name``."""
    return str(uuid.uuid5(_NAMESPACE, f"project:{name}"))


def _now() -> str:
    """Current UTC time in ISO format."""
    return dt.datetime.now(dt.timezone.utc).isoformat()


# --------------------------------------------------------------------------- #
# Body decoding
# --------------------------------------------------------------------------- #


def _zstd_decompress(data: bytes) -> bytes:
    """Decompress one or more concatenated zstd frames."""
    import zstandard

    decompressor = zstandard.ZstdDecompressor()
    out: list[bytes] = []
    while data:
        frame = decompressor.decompressobj()
        out.append(frame.decompress(data))
        data = frame.unused_data
    return b"".join(out)


def _zstd_available() -> bool:
    """Whether zstd bodies can be decoded here."""
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


def decode_body(raw: bytes, content_encoding: str | None) -> bytes:
    """Undo ``Content-Encoding`` (zstd, gzip, deflate or identity)."""
    for encoding in reversed(
        [e.strip().lower() for e in (content_encoding or "").split(",") if e.strip()]
    ):
        if encoding == "zstd":
            raw = _zstd_decompress(raw)
        elif encoding in ("gzip", "x-gzip"):
            raw = gzip.decompress(raw)
        elif encoding == "deflate":
            raw = zlib.decompress(raw)
        elif encoding != "identity":
            msg = f"unsupported Content-Encoding {encoding!r}"
            raise ValueError(msg)
    return raw


@dataclass
class MultipartPart:
    """One part of a ``multipart/form-data`` body."""

    name: str
    data: bytes
    content_type: str | None = None
    filename: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The part body decoded as UTF-8."""
        return self.data.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The part body parsed as JSON."""
        return json.loads(self.data)


def _header_param(value: str, param: str) -> str | None:
    """Extract a (possibly quoted) parameter from a header value."""
    match = re.search(rf'(?:^|;)\s*{param}="([^"]*)"', value) or re.search(
        rf"(?:^|;)\s*{param}=([^;\s]+)", value
    )
    return match.group(1) if match else None


def parse_multipart(body: bytes, content_type: str) -> list[MultipartPart]:
    """Split a ``multipart/form-data`` body into its parts."""
    boundary = _header_param(content_type, "boundary")
    if not boundary:
        msg = f"no boundary in content type {content_type!r}"
        raise ValueError(msg)
    delimiter = b"--" + boundary.encode()
    parts: list[MultipartPart] = []
    for chunk in body.split(delimiter)[1:]:
        if chunk.startswith(b"--"):
            break
        section = chunk.removeprefix(b"\r\n").removesuffix(b"\r\n")
        head, _, data = section.partition(b"\r\n\r\n")
        headers: dict[str, str] = {}
        for line in head.decode("utf-8", errors="replace").split("\r\n"):
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        disposition = headers.get("content-disposition", "")
        parts.append(
            MultipartPart(
                name=_header_param(disposition, "name") or "",
                data=data,
                content_type=headers.get("content-type"),
                filename=_header_param(disposition, "filename"),
                headers=headers,
            ),
        )
    return parts


# --------------------------------------------------------------------------- #
# Records
# --------------------------------------------------------------------------- #


@dataclass
class StubRequest:
    """One request the stub received (headers lower-cased, body decompressed)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    raw: bytes
    body: Any = None
    parts: list[MultipartPart] = field(default_factory=list)
    status: int = 0
    received_at: float = field(default_factory=time.monotonic)


@dataclass
class _FailRule:
    """Scripted failure for requests whose ``METHOD /path`` starts with a prefix."""

    prefix: str
    status: int
    remaining: int | None


class _Route(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by handlers to answer with a specific status and payload."""

    def __init__(self, status: int, payload: object) -> None:
        """Remember the answer to send."""
        super().__init__(status)
        self.status = status
        self.payload = payload


class _StubHandler(LoopbackHandler):
    """Hands every request to the owning ``LangSmithStub``."""

    def handle_request(self, method: str) -> None:
        """Record, route and answer one request."""
        owner = self.server.owner
        if not isinstance(owner, LangSmithStub):  # pragma: no cover - wiring guard
            raise TypeError(owner)
        raw = self.read_body()
        status, payload = owner.handle(method, self.path, dict(self.headers.items()), raw)
        self.send_json(status, payload)


class LangSmithStub(LoopbackServer):
    """Loopback LangSmith API stub; pass ``stub.url`` as ``api_url`` to ``langsmith.Client``.

    Attributes:
        latency: Seconds to wait before answering each request.
    """

    handler_class: ClassVar[type[LoopbackHandler]] = _StubHandler

    def __init__(self, *, zstd: bool | None = None, version: str = _SERVER_VERSION) -> None:
        """Create an unstarted stub.

        Args:
            zstd: Advertise zstd run compression; defaults to "if zstandard is importable".
            version: Server version reported by ``/info``; from ``V2_VERSION`` on, the stub
                also serves ``POST /api/v2/runs/query``.
        """
        super().__init__()
        self.zstd = _zstd_available() if zstd is None else zstd
        self.version = version
        self.latency = 0.0
        self._lock = threading.Lock()
        self._requests: list[StubRequest] = []
        self._runs: dict[str, dict[str, Any]] = {}
        self._run_ops: list[tuple[str, dict[str, Any]]] = []
        self._feedback: dict[str, dict[str, Any]] = {}
        self._feedback_log: list[tuple[str, dict[str, Any]]] = []
        self._projects: dict[str, dict[str, Any]] = {}
        self._fail_rules: list[_FailRule] = []
        self._hang_prefixes: list[list[Any]] = []  # [prefix, requests left to hold or None]
        self._hung = 0
        self._release = threading.Event()
        self.page_size = 100
        """Runs per ``/runs/query`` page at most (the query's ``limit``, or v2 ``page_size``,
        lowers it)."""
        self.feedback_needs_run = True
        """Answer 404 to ``POST /feedback`` about a run the stub does not hold (as LangSmith)."""
        self.empty_v2_pages = 0
        """v2 run queries answered with an empty page and a cursor before the runs, as a
        server whose page scanned a stretch with no match (each cursor is a new one)."""
        self._hidden: dict[str, int] = {}

    # ------------------------------------------------------------- accessors

    @property
    def requests(self) -> list[StubRequest]:
        """Snapshot of every request received, in order."""
        with self._lock:
            return list(self._requests)

    def requests_to(self, method: str, path_prefix: str = "") -> list[StubRequest]:
        """Requests with the given method whose path starts with ``path_prefix``."""
        return [
            r
            for r in self.requests
            if r.method == method.upper() and r.path.startswith(path_prefix)
        ]

    def feedback(
        self, key: str | None = None, run_id: str | uuid.UUID | None = None
    ) -> list[dict[str, Any]]:
        """Feedback payloads from every transport, in arrival order, optionally filtered."""
        return [
            payload
            for _, payload in self.feedback_records()
            if (key is None or payload.get("key") == key)
            and (run_id is None or payload.get("run_id") == str(run_id))
        ]

    def held_feedback(self, key: str | None = None) -> list[dict[str, Any]]:
        """Feedback the stub holds now (deleted feedback gone), optionally with ``key``."""
        with self._lock:
            held = copy.deepcopy(list(self._feedback.values()))
        return [f for f in held if key is None or f.get("key") == key]

    def feedback_records(self) -> list[tuple[str, dict[str, Any]]]:
        """``(transport, payload)`` pairs; transport is ``"multipart"`` or ``"POST /feedback"``."""
        with self._lock:
            return copy.deepcopy(self._feedback_log)

    def runs(self, name: str | None = None) -> list[dict[str, Any]]:
        """Run payloads (posts and patches merged by id), in first-seen order."""
        with self._lock:
            runs = copy.deepcopy(list(self._runs.values()))
        return [r for r in runs if name is None or r.get("name") == name]

    def run(self, run_id: str | uuid.UUID) -> dict[str, Any] | None:
        """One merged run payload, or None if the stub has not seen it."""
        with self._lock:
            found = self._runs.get(str(run_id))
            return copy.deepcopy(found) if found is not None else None

    def run_ops(self) -> list[tuple[str, dict[str, Any]]]:
        """Raw ``("post" | "patch", payload)`` run operations, in arrival order."""
        with self._lock:
            return copy.deepcopy(self._run_ops)

    def projects(self) -> list[dict[str, Any]]:
        """Projects known to the stub."""
        with self._lock:
            return copy.deepcopy(list(self._projects.values()))

    def reset(self) -> None:
        """Forget requests, runs, feedback, projects and failure rules."""
        with self._lock:
            self._requests.clear()
            self._runs.clear()
            self._run_ops.clear()
            self._feedback.clear()
            self._feedback_log.clear()
            self._projects.clear()
            self._fail_rules.clear()
            self._hidden.clear()

    def hide_run(self, run_id: str | uuid.UUID, *, queries: int = 1) -> None:
        """Leave a stored run out of the next ``queries`` run queries (v1 or v2) that match it.

        Stands for LangSmith's ingestion lag: a trace's runs become visible one by one.
        """
        with self._lock:
            self._hidden[str(run_id)] = queries

    def create_project(self, name: str) -> str:
        """Create a project (as ``POST /sessions`` would) and return its id."""
        with self._lock:
            return str(self._ensure_project(name)["id"])

    def fail(self, prefix: str, status: int = 500, times: int | None = 1) -> None:
        """Answer ``status`` to requests matching ``"METHOD /path"`` prefix (None = forever).

        Example: ``stub.fail("POST /feedback", 503, times=2)``.
        """
        with self._lock:
            self._fail_rules.append(_FailRule(prefix, status, times))

    def stop_failing(self, prefix: str) -> None:
        """Drop the :meth:`fail` rules of exactly this prefix: those requests are answered."""
        with self._lock:
            self._fail_rules = [rule for rule in self._fail_rules if rule.prefix != prefix]

    def wait_for(
        self, predicate: Callable[[], _T], timeout: float = 60.0, interval: float = 0.02
    ) -> _T:
        """Poll ``predicate`` until it returns something truthy, and return that.

        Raises:
            TimeoutError: If it is still falsy after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                msg = f"LangSmithStub.wait_for: condition still false after {timeout}s"
                raise TimeoutError(msg)
            time.sleep(interval)

    def wait_for_feedback(
        self, count: int = 1, timeout: float = 60.0, key: str | None = None
    ) -> list[dict[str, Any]]:
        """Wait until at least ``count`` feedback payloads (with ``key``) arrived."""

        def enough() -> list[dict[str, Any]]:
            found = self.feedback(key=key)
            return found if len(found) >= count else []

        return self.wait_for(enough, timeout)

    def wait_for_runs(
        self, count: int = 1, timeout: float = 60.0, name: str | None = None
    ) -> list[dict[str, Any]]:
        """Wait until at least ``count`` runs (named ``name``) arrived."""

        def enough() -> list[dict[str, Any]]:
            found = self.runs(name=name)
            return found if len(found) >= count else []

        return self.wait_for(enough, timeout)

    def info(self) -> dict[str, Any]:
        """The ``GET /info`` payload."""
        return {
            "version": self.version,
            "license_expiration_time": None,
            "batch_ingest_config": {
                "use_multipart_endpoint": True,
                "scale_up_qsize_trigger": 1000,
                "scale_up_nthreads_limit": 16,
                "scale_down_nempty_trigger": 4,
                "size_limit": 100,
                "size_limit_bytes": 20_971_520,
            },
            "instance_flags": {
                "zstd_compression_enabled": self.zstd,
                "dataset_examples_multipart_enabled": True,
            },
            "tenant_handle": "stub",
        }

    # --------------------------------------------------------------- serving

    def handle(
        self, method: str, target: str, headers: Mapping[str, str], raw: bytes
    ) -> tuple[int, object]:
        """Record and answer one request; returns ``(status, json_payload)``."""
        split = urlsplit(target)
        path = split.path.rstrip("/") or "/"
        lowered = {k.lower(): v for k, v in headers.items()}
        record = StubRequest(method, path, parse_qs(split.query), lowered, raw)
        with self._lock:
            self._requests.append(record)
        self.pause(self.latency)
        try:
            record.raw = decode_body(raw, lowered.get("content-encoding"))
            content_type = lowered.get("content-type", "")
            if content_type.startswith("multipart/"):
                record.parts = parse_multipart(record.raw, content_type)
                record.body = record.parts
            elif record.raw:
                with contextlib.suppress(ValueError):
                    record.body = json.loads(record.raw)
            self._hold_if_hung(method, path)
            status, payload = self._failure(method, path) or self._route(record)
        except _Route as answer:
            status, payload = answer.status, answer.payload
        except Exception as exc:
            status, payload = 500, {"detail": f"LangSmithStub error: {type(exc).__name__}: {exc}"}
        record.status = status
        return status, payload

    def _failure(self, method: str, path: str) -> tuple[int, object] | None:
        """Apply a matching scripted failure rule, if any."""
        target = f"{method} {path}"
        with self._lock:
            for rule in self._fail_rules:
                if target.startswith(rule.prefix) and (
                    rule.remaining is None or rule.remaining > 0
                ):
                    if rule.remaining is not None:
                        rule.remaining -= 1
                    return rule.status, {"detail": f"LangSmithStub scripted failure {rule.status}"}
        return None

    def _route(self, req: StubRequest) -> tuple[int, object]:
        """Dispatch on method and path."""
        method, path = req.method, req.path
        table: list[tuple[str, str, Callable[[StubRequest, re.Match[str]], tuple[int, object]]]] = [
            ("GET", r"/(?:api/v1/)?info", lambda _r, _m: (200, self.info())),
            ("GET", r"/settings", lambda _r, _m: (200, self._settings())),
            ("POST", r"/runs/multipart", self._post_multipart),
            ("POST", r"/runs/batch", self._post_batch),
            ("POST", r"/runs/query", self._query_runs),
            ("POST", r"/api/v2/runs/query", self._query_runs_v2),
            ("POST", r"/runs", self._post_run),
            ("PATCH", rf"/runs/(?P<id>{_UUID_RE})", self._patch_run),
            ("GET", rf"/runs/(?P<id>{_UUID_RE})", self._get_run),
            ("POST", r"/feedback", self._post_feedback),
            ("GET", r"/feedback", self._list_feedback),
            ("GET", rf"/feedback/(?P<id>{_UUID_RE})", self._get_feedback),
            ("PATCH", rf"/feedback/(?P<id>{_UUID_RE})", self._patch_feedback),
            ("DELETE", rf"/feedback/(?P<id>{_UUID_RE})", self._delete_feedback),
            ("GET", r"/sessions", self._list_projects),
            ("POST", r"/sessions", self._create_project),
            ("GET", rf"/sessions/(?P<id>{_UUID_RE})", self._get_project),
            ("PATCH", rf"/sessions/(?P<id>{_UUID_RE})", self._patch_project),
            ("DELETE", rf"/sessions/(?P<id>{_UUID_RE})", self._delete_project),
        ]
        for verb, pattern, handler in table:
            match = re.fullmatch(pattern, path)
            if verb == method and match:
                return handler(req, match)
        return 404, {"detail": f"LangSmithStub: no route for {method} {path}"}

    # --------------------------------------------------------------- outages

    def hang(self, prefix: str, times: int | None = None) -> None:
        """Accept requests matching ``"METHOD /path"`` prefix and never answer them.

        They are held until :meth:`release_hangs` or ``stop`` (a hung LangSmith); with
        ``times``, only the next ``times`` such requests are held and later ones answered.
        """
        with self._lock:
            self._release.clear()
            self._hang_prefixes.append([prefix, times])

    def release_hangs(self) -> None:
        """Stop hanging: held requests go on, new ones are answered."""
        with self._lock:
            self._hang_prefixes.clear()
            self._release.set()

    @property
    def hung(self) -> int:
        """Requests currently held by :meth:`hang`."""
        with self._lock:
            return self._hung

    def _hold_if_hung(self, method: str, path: str) -> None:
        target = f"{method} {path}"
        with self._lock:
            rule = next(
                (
                    r
                    for r in self._hang_prefixes
                    if target.startswith(r[0]) and (r[1] is None or r[1] > 0)
                ),
                None,
            )
            if rule is None:
                return
            if rule[1] is not None:
                rule[1] -= 1
            self._hung += 1
        try:
            while not self._release.wait(0.05):
                if self.pause(0):
                    return  # the stub is stopping
        finally:
            with self._lock:
                self._hung -= 1

    def _refuse_duplicate_feedback(self, body: dict[str, Any]) -> None:
        """LangSmith answers 409 to a feedback id it already has (lock held by the caller)."""
        if body.get("id") is not None and str(body["id"]) in self._feedback:
            raise _Route(409, {"detail": f"feedback {body['id']} already exists"})

    # ------------------------------------------------------------------ runs

    def _store_run(self, operation: str, payload: dict[str, Any]) -> None:
        """Record a run post/patch and merge it into the run table (lock held)."""
        run_id = str(payload.get("id"))
        self._run_ops.append((operation, copy.deepcopy(payload)))
        merged = self._runs.setdefault(run_id, {"id": run_id})
        if operation == "post":
            # The client sends its batches on several threads, so a run's post may land after
            # its patch: it fills what the patch left unset and overwrites nothing (an
            # ``outputs: {}`` would wipe the retriever's documents), as LangSmith merges.
            merged.update({k: v for k, v in payload.items() if merged.get(k) is None})
        else:
            merged.update({k: v for k, v in payload.items() if v is not None or k not in merged})
        project = merged.get("session_name")
        # A post or patch may carry ``session_id: null``: LangSmith resolves it from the name.
        if project and merged.get("session_id") is None:
            merged["session_id"] = self._ensure_project(str(project))["id"]

    def _post_multipart(self, req: StubRequest, _m: re.Match[str]) -> tuple[int, object]:
        """Ingest runs, attachments and feedback from a multipart body."""
        runs: dict[tuple[str, str], dict[str, Any]] = {}
        feedback: list[dict[str, Any]] = []
        for part in req.parts:
            kind, _, rest = part.name.partition(".")
            if kind in ("post", "patch"):
                run_id, _, sub = rest.partition(".")
                entry = runs.setdefault((kind, run_id), {"id": run_id})
                if sub:
                    entry[sub] = part.json()
                else:
                    entry.update(part.json())
            elif kind == "attachment":
                run_id, _, name = rest.partition(".")
                entry = runs.setdefault(("post", run_id), {"id": run_id})
                entry.setdefault("attachments", {})[name] = {
                    "content_type": part.content_type,
                    "size": len(part.data),
                }
            elif kind == "feedback":
                feedback.append(part.json())
        with self._lock:
            for (kind, _), payload in runs.items():
                self._store_run(kind, payload)
            for payload in feedback:
                self._store_feedback("multipart", payload)
        return 202, {}

    def _post_batch(self, req: StubRequest, _m: re.Match[str]) -> tuple[int, object]:
        """Ingest ``{"post": [...], "patch": [...]}`` run batches."""
        body = req.body if isinstance(req.body, dict) else {}
        with self._lock:
            for kind in ("post", "patch"):
                for payload in body.get(kind) or []:
                    self._store_run(kind, payload)
        return 202, {}

    def _post_run(self, req: StubRequest, _m: re.Match[str]) -> tuple[int, object]:
        """Ingest a single run creation."""
        if not isinstance(req.body, dict):
            raise _Route(422, {"detail": "run body must be a JSON object"})
        with self._lock:
            self._store_run("post", req.body)
        return 202, {}

    def _patch_run(self, req: StubRequest, match: re.Match[str]) -> tuple[int, object]:
        """Ingest a single run update."""
        body = dict(req.body) if isinstance(req.body, dict) else {}
        body["id"] = match["id"]
        with self._lock:
            self._store_run("patch", body)
        return 202, {}

    def _run_view(self, run: dict[str, Any]) -> dict[str, Any]:
        """A stored run with the fields ``langsmith.schemas.Run`` requires (lock held)."""
        view = copy.deepcopy(run)
        view.setdefault("name", "unnamed")
        view.setdefault("run_type", "chain")
        view.setdefault("start_time", _now())
        view.setdefault("trace_id", view["id"])
        view.setdefault("inputs", {})
        view["child_run_ids"] = [
            rid for rid, r in self._runs.items() if r.get("parent_run_id") == view["id"]
        ]
        return view

    def _get_run(self, _req: StubRequest, match: re.Match[str]) -> tuple[int, object]:
        """Read one run."""
        with self._lock:
            run = self._runs.get(match["id"])
            if run is None:
                return 404, {"detail": f"run {match['id']} not found"}
            return 200, self._run_view(run)

    def _matching_runs(
        self, filters: Mapping[str, Any], until: dt.datetime | None = None
    ) -> tuple[list[dict[str, Any]], set[str]]:
        """Views of the runs a query selects, in start order, and the ids hidden from it.

        ``until``: runs that started after it are left out (v2's ``max_start_time``).
        The caller holds the lock and calls :meth:`_query_over` once the query's last page
        is answered.
        """
        views = [self._run_view(r) for r in self._runs.values()]
        matching = [v for v in views if run_matches_query(v, filters)]
        if until is not None:
            matching = [v for v in matching if (_parse_time(v.get("start_time")) or until) <= until]
        hidden = {v["id"] for v in matching if self._hidden.get(v["id"], 0) > 0}
        selected = sorted(
            (v for v in matching if v["id"] not in hidden),
            key=lambda v: (str(v.get("start_time")), v["id"]),
        )
        return selected, hidden

    def _query_over(self, hidden: set[str]) -> None:
        """A query answered its last page: hidden runs count one answer without them."""
        for run_id in hidden:
            self._hidden[run_id] -= 1

    def _query_runs(self, req: StubRequest, _m: re.Match[str]) -> tuple[int, object]:
        """``/runs/query``: filters (see :func:`run_matches_query`) and cursor pagination."""
        body = req.body if isinstance(req.body, dict) else {}
        with self._lock:
            selected, hidden = self._matching_runs(body)
            page = runs_page(selected, body, self.page_size)
            if page["cursors"]["next"] is None:
                self._query_over(hidden)
        return 200, page

    @property
    def serves_v2(self) -> bool:
        """Whether the advertised ``version`` has ``POST /api/v2/runs/query``."""
        return _version_key(self.version) >= _version_key(V2_VERSION)

    def _query_runs_v2(self, req: StubRequest, _m: re.Match[str]) -> tuple[int, object]:
        """``/api/v2/runs/query``: the v2 body (see :func:`v2_filters`), ``selects``, and
        ``{"items": [...], "next_cursor": ...}`` pages with an opaque cursor."""
        if not self.serves_v2:
            return 404, {"detail": "Not Found"}
        body = req.body if isinstance(req.body, dict) else {}
        filters = v2_filters(body)
        selects = _v2_selects(body.get("selects"))
        size = body.get("page_size", 100)
        if not isinstance(size, int) or not 1 <= size <= 1000:
            raise _Route(422, {"detail": f"page_size must be 1 to 1000, got {size!r}"})
        offset = _v2_offset(body.get("cursor"))
        until = _parse_time(body.get("max_start_time")) or dt.datetime.now(dt.timezone.utc)
        with self._lock:
            if self.empty_v2_pages > 0:
                self.empty_v2_pages -= 1
                return 200, {"items": [], "next_cursor": f"page-{offset}-{self.empty_v2_pages}"}
            selected, hidden = self._matching_runs(filters, until)
            size = min(size, self.page_size)
            page = selected[offset : offset + size]
            more = offset + size < len(selected)
            if not more:
                self._query_over(hidden)
            items = [self.v2_run(view, selects) for view in page]
        return 200, {"items": items, "next_cursor": f"page-{offset + size}" if more else None}

    def v2_run(self, view: Mapping[str, Any], selects: Iterable[str]) -> dict[str, Any]:
        """A run as v2 answers it: only the selected fields, v2 names and values (lock held).

        ``run_type`` and ``status`` are upper case, the parents are ``parent_run_ids`` (root
        first), the project is ``project_id`` and the metadata is also a field of its own.
        """
        parents: list[str] = []
        parent = view.get("parent_run_id")
        while parent is not None and str(parent) not in parents:
            parents.insert(0, str(parent))
            parent = (self._runs.get(str(parent)) or {}).get("parent_run_id")
        extra = view.get("extra") or {}
        status = "ERROR" if view.get("error") else "SUCCESS" if view.get("end_time") else "PENDING"
        fields = {
            **{k: v for k, v in view.items() if k != "child_run_ids"},
            "run_type": str(view.get("run_type")).upper(),
            "status": status,
            "parent_run_ids": parents,
            "project_id": view.get("session_id"),
            "metadata": extra.get("metadata") if isinstance(extra, dict) else None,
            "is_root": view.get("parent_run_id") is None,
        }
        return {name.lower(): fields.get(name.lower()) for name in selects}

    # -------------------------------------------------------------- feedback

    def _store_feedback(self, transport: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Record one feedback payload and return the stored copy (lock held)."""
        payload = copy.deepcopy(payload)
        payload.setdefault("id", str(uuid.uuid4()))
        self._feedback[str(payload["id"])] = payload
        self._feedback_log.append((transport, copy.deepcopy(payload)))
        return payload

    def _post_feedback(self, req: StubRequest, _m: re.Match[str]) -> tuple[int, object]:
        """Create feedback from a JSON body."""
        if not isinstance(req.body, dict) or "key" not in req.body:
            raise _Route(422, {"detail": "feedback body must be a JSON object with a key"})
        with self._lock:  # check and store at once: two racing posts of one id store one
            self._refuse_duplicate_feedback(req.body)
            run_id = req.body.get("run_id")
            if self.feedback_needs_run and run_id is not None and str(run_id) not in self._runs:
                return 404, {"detail": f"run {run_id} not found"}
            return 200, self._feedback_view(self._store_feedback("POST /feedback", req.body))

    @staticmethod
    def _feedback_view(payload: dict[str, Any]) -> dict[str, Any]:
        """Feedback with the fields ``langsmith.schemas.Feedback`` requires."""
        view = copy.deepcopy(payload)
        view.setdefault("id", str(uuid.uuid4()))
        view.setdefault("key", "unnamed")
        view.setdefault("created_at", _now())
        view.setdefault("modified_at", view["created_at"])
        view.setdefault("run_id", None)
        view.setdefault("trace_id", None)
        return view

    def _list_feedback(self, req: StubRequest, _m: re.Match[str]) -> tuple[int, object]:
        """List feedback filtered by ``run``, ``key`` and ``source`` with offset/limit paging."""
        runs, keys, sources = (set(req.query.get(name, [])) for name in ("run", "key", "source"))
        offset = int(req.query.get("offset", ["0"])[0])
        limit = int(req.query.get("limit", ["100"])[0])
        with self._lock:
            items = [
                self._feedback_view(f)
                for f in self._feedback.values()
                if (not runs or str(f.get("run_id")) in runs)
                and (not keys or f.get("key") in keys)
                and (not sources or (f.get("feedback_source") or {}).get("type") in sources)
            ]
        return 200, items[offset : offset + limit]

    def _get_feedback(self, _req: StubRequest, match: re.Match[str]) -> tuple[int, object]:
        """Read one feedback."""
        with self._lock:
            found = self._feedback.get(match["id"])
            if found is None:
                return 404, {"detail": f"feedback {match['id']} not found"}
            return 200, self._feedback_view(found)

    def _patch_feedback(self, req: StubRequest, match: re.Match[str]) -> tuple[int, object]:
        """Update one feedback in place."""
        with self._lock:
            found = self._feedback.get(match["id"])
            if found is None:
                return 404, {"detail": f"feedback {match['id']} not found"}
            found.update(req.body if isinstance(req.body, dict) else {})
            return 200, self._feedback_view(found)

    def _delete_feedback(self, _req: StubRequest, match: re.Match[str]) -> tuple[int, object]:
        """Delete one feedback (the arrival log keeps it)."""
        with self._lock:
            self._feedback.pop(match["id"], None)
        return 200, {}

    # -------------------------------------------------------------- projects

    def _ensure_project(self, name: str, **fields: Any) -> dict[str, Any]:
        """Return the project called ``name``, creating it if needed (lock held)."""
        project = self._projects.get(name)
        if project is None:
            project = {
                "id": project_id_for(name),
                "name": name,
                "tenant_id": str(TENANT_ID),
                "start_time": _now(),
                "end_time": None,
                "description": None,
                "extra": None,
                "reference_dataset_id": None,
            }
            self._projects[name] = project
        project.update({k: v for k, v in fields.items() if v is not None})
        return project

    def _project_view(self, project: dict[str, Any]) -> dict[str, Any]:
        """A project with a live run count (lock held)."""
        view = copy.deepcopy(project)
        view["run_count"] = sum(
            1 for r in self._runs.values() if r.get("session_id") == project["id"]
        )
        return view

    def _project_by_id(self, project_id: str) -> dict[str, Any] | None:
        """Find a project by id (lock held)."""
        return next((p for p in self._projects.values() if p["id"] == project_id), None)

    def _list_projects(self, req: StubRequest, _m: re.Match[str]) -> tuple[int, object]:
        """List projects; a ``name`` filter yields that project if it exists (else nothing)."""
        names = req.query.get("name", [])
        with self._lock:
            if names:
                found: Iterable[dict[str, Any]] = [
                    self._projects[n] for n in names if n in self._projects
                ]
            else:
                if not self._projects:
                    self._ensure_project("default")
                found = list(self._projects.values())
            return 200, [self._project_view(p) for p in found]

    def _create_project(self, req: StubRequest, _m: re.Match[str]) -> tuple[int, object]:
        """Create (or return the existing) project named in the body."""
        body = req.body if isinstance(req.body, dict) else {}
        name = body.get("name")
        if not name:
            raise _Route(422, {"detail": "project name is required"})
        fields = {
            k: body.get(k) for k in ("description", "extra", "reference_dataset_id", "end_time")
        }
        with self._lock:
            return 200, self._project_view(self._ensure_project(str(name), **fields))

    def _get_project(self, _req: StubRequest, match: re.Match[str]) -> tuple[int, object]:
        """Read one project by id."""
        with self._lock:
            project = self._project_by_id(match["id"])
            if project is None:
                return 404, {"detail": f"project {match['id']} not found"}
            return 200, self._project_view(project)

    def _patch_project(self, req: StubRequest, match: re.Match[str]) -> tuple[int, object]:
        """Update one project by id."""
        with self._lock:
            project = self._project_by_id(match["id"])
            if project is None:
                return 404, {"detail": f"project {match['id']} not found"}
            project.update(
                {k: v for k, v in (req.body or {}).items() if k not in ("id", "tenant_id")}
            )
            return 200, self._project_view(project)

    def _delete_project(self, _req: StubRequest, match: re.Match[str]) -> tuple[int, object]:
        """Delete one project by id."""
        with self._lock:
            project = self._project_by_id(match["id"])
            if project is not None:
                del self._projects[project["name"]]
        return 202, {}

    def _settings(self) -> dict[str, Any]:
        """The ``GET /settings`` payload (tenant info)."""
        return {
            "id": str(TENANT_ID),
            "display_name": "LangSmithStub",
            "created_at": _now(),
            "tenant_handle": "stub",
        }


# --------------------------------------------------------------------------- #
# Run queries (``POST /runs/query`` and ``/api/v2/runs/query``): filters and cursors
# --------------------------------------------------------------------------- #


def _parse_time(value: Any) -> dt.datetime | None:
    """An aware datetime from an ISO string (naive values are taken as UTC)."""
    if value is None:
        return None
    parsed = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def run_matches_query(view: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """Whether a run passes the query's filters, as the SDK's ``list_runs`` sends them.

    Understood: ``id``, ``session``, ``trace``, ``parent_run``, ``is_root``, ``run_type``,
    ``error`` and ``start_time`` (runs that started at or after it).
    """
    ids = {str(i) for i in body.get("id") or []}
    sessions = {str(s) for s in body.get("session") or []}
    checks = (
        not ids or view["id"] in ids,
        not sessions or str(view.get("session_id")) in sessions,
        body.get("trace") is None or str(view.get("trace_id")) == str(body["trace"]),
        body.get("parent_run") is None or str(view.get("parent_run_id")) == str(body["parent_run"]),
        body.get("is_root") is None or (view.get("parent_run_id") is None) == bool(body["is_root"]),
        body.get("run_type") is None or view.get("run_type") == body["run_type"],
        body.get("error") is None or bool(view.get("error")) == bool(body["error"]),
    )
    if not all(checks):
        return False
    since = _parse_time(body.get("start_time"))
    started = _parse_time(view.get("start_time"))
    return since is None or (started is not None and started >= since)


def v2_filters(body: Mapping[str, Any]) -> dict[str, Any]:
    """A v2 query body's filters as the v1 ones :func:`run_matches_query` understands.

    ``project_ids`` (required), ``ids``, ``trace_id``, ``is_root``, ``run_type`` (upper
    case), ``has_error`` and ``min_start_time``, which defaults to a day ago as LangSmith's
    does (so a run read by id needs a window that reaches back to it).

    Raises:
        _Route: 422 for a body LangSmith refuses (no ``project_ids``, an unknown run type).
    """
    if not body.get("project_ids"):
        raise _Route(422, {"detail": "project_ids is required"})
    run_type = body.get("run_type")
    if run_type is not None and run_type not in _V2_RUN_TYPES:
        raise _Route(422, {"detail": f"unknown run_type {run_type!r}"})
    since = body.get("min_start_time")
    if since is None:
        since = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)).isoformat()
    return {
        "id": body.get("ids"),
        "session": body.get("project_ids"),
        "trace": body.get("trace_id"),
        "is_root": body.get("is_root"),
        "run_type": run_type.lower() if run_type is not None else None,
        "error": body.get("has_error"),
        "start_time": since,
    }


_V2_RUN_TYPES = ("TOOL", "CHAIN", "LLM", "RETRIEVER", "EMBEDDING", "PROMPT", "PARSER")


def _v2_selects(selects: Any) -> list[str]:
    """The fields a v2 query selects (only ``ID`` when none), checked against the API's enum.

    Raises:
        _Route: 422 naming a field the API does not know.
    """
    from typing import get_args

    from langsmith.types.run_select_field import RunSelectField

    chosen = list(selects or ["ID"])
    unknown = [s for s in chosen if s not in get_args(RunSelectField)]
    if unknown:
        raise _Route(422, {"detail": f"unknown selects {unknown}"})
    return chosen


def _v2_offset(cursor: Any) -> int:
    """The offset an opaque v2 cursor (``page-<offset>``, after an empty page
    ``page-<offset>-<n>``) stands for.

    Raises:
        _Route: 400 for a cursor this stub did not hand out.
    """
    if cursor is None:
        return 0
    match = re.fullmatch(r"page-(\d+)(?:-\d+)?", str(cursor))
    if match is None:
        raise _Route(400, {"detail": f"invalid cursor {cursor!r}"})
    return int(match[1])


def _version_key(version: str) -> tuple[int, ...]:
    """``"0.16.2"`` as ``(0, 16, 2)`` for comparing versions."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def runs_page(
    selected: list[dict[str, Any]], body: Mapping[str, Any], page_size: int
) -> dict[str, Any]:
    """One page of ``selected`` from the body's ``cursor`` (an offset), with the next cursor."""
    offset = int(body.get("cursor") or 0)
    size = min(page_size, int(body.get("limit") or page_size))
    page = selected[offset : offset + size]
    more = offset + size < len(selected)
    return {"runs": page, "cursors": {"next": str(offset + size) if more else None}}


# --------------------------------------------------------------------------- #
# LangSmith unreachable
# --------------------------------------------------------------------------- #


def refused_url() -> str:
    """A loopback URL where nothing listens: connections are refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A loopback URL that accepts connections (kernel backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
