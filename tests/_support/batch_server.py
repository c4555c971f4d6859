"""A loopback OpenAI Batch API (``/v1/files``, ``/v1/batches``) on top of ``JudgeServer``.

Every line of a batch is answered by the same script that answers direct chat completions,
so one deterministic judge serves both paths. Statuses move one step per status read
(``validating -> in_progress -> finalizing -> completed``) unless ``auto_advance`` is off, in
which case the test calls :meth:`BatchServer.advance`; ``hold_at`` stops the automatic steps at
a status until :meth:`BatchServer.release` (``polled`` tells the test a client saw it there).
Knobs make lines fail (error file), disappear (a missing line), expire or get cancelled, and
make the file and batch endpoints themselves answer with errors.

Example::

    with BatchServer(lexical_judge()) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test")
        ...
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any, ClassVar

from tests._support.openai_server import (
    MAX_HOLD_SECONDS,
    JudgeRequest,
    JudgeServer,
    LoopbackHandler,
    Reply,
    _as_reply,
    _error_payload,
    reply_error,
)

__all__ = ["STEPS", "BatchServer", "StoredBatch", "StoredFile"]

STEPS = ("validating", "in_progress", "finalizing", "completed")
"""The statuses of a batch that goes well, in order."""
_TERMINAL = frozenset({"completed", "expired", "cancelled", "failed"})


@dataclass
class StoredFile:
    """A file held by the server."""

    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int

    def card(self) -> dict[str, Any]:
        """The file object of the API."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
        }


@dataclass
class StoredBatch:
    """A batch held by the server."""

    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None
    lines: list[dict[str, Any]]
    created_at: int
    status: str = "validating"
    problems: list[dict[str, Any]] = field(default_factory=list)
    output_file_id: str | None = None
    error_file_id: str | None = None
    completed: int = 0
    failed: int = 0
    ends_as: str = "completed"
    """How the batch ends: completed, expired (after ``partial`` lines) or cancelled."""

    def card(self) -> dict[str, Any]:
        """The batch object of the API."""
        errors = {"object": "list", "data": self.problems} if self.problems else None
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": errors,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "request_counts": {
                "total": len(self.lines),
                "completed": self.completed,
                "failed": self.failed,
            },
            "metadata": self.metadata,
        }


class _BatchHandler(LoopbackHandler):
    """Routes the file and batch endpoints to the owner; the rest to ``JudgeServer``."""

    def handle_request(self, method: str) -> None:
        owner = self.server.owner
        if not isinstance(owner, BatchServer):  # pragma: no cover - wiring guard
            raise TypeError(owner)
        raw = self.read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        query = self.path.split("?", 1)[1] if "?" in self.path else ""
        if method == "POST" and path.endswith("/chat/completions"):
            owner.record_raw(raw)
            owner.serve_chat(self, path, raw)
            return
        status, payload = owner.route(method, path, query, raw, self.headers.get("Content-Type"))
        owner.hold_reply(method, path)
        if isinstance(payload, bytes):
            self.send_bytes(status, payload, "application/octet-stream")
        else:
            self.send_json(status, payload)


class BatchServer(JudgeServer):
    """``JudgeServer`` plus an in-memory Batch API answered by the same script."""

    handler_class: ClassVar[type[LoopbackHandler]] = _BatchHandler

    def __init__(self, script: Any = None, *, latency: float = 0.0) -> None:
        """An unstarted server; knobs are plain attributes, set them before the client acts."""
        super().__init__(script, latency=latency)
        self._batch_lock = threading.Lock()
        self._ids = itertools.count(1)
        self.files: dict[str, StoredFile] = {}
        self.batches: dict[str, StoredBatch] = {}
        self.uploads = 0
        """Files uploaded with purpose ``batch``."""
        self.created = 0
        """Batches created."""
        self.cancels = 0
        """Cancel requests received."""
        self.raw_chat_bodies: list[bytes] = []
        """The exact bytes of every direct chat-completion request."""
        self.line_requests: list[JudgeRequest] = []
        """Every batch line the script answered."""
        self.auto_advance = True
        """Each status read moves a non-final batch one step."""
        self.instant = False
        """With ``auto_advance``, a status read moves a batch all the way to its end."""
        self.hold_at: str | None = None
        """A status at which automatic steps stop until :meth:`release`."""
        self.polled = threading.Event()
        """Set when a status read saw a batch held at ``hold_at``."""
        self.reads: list[tuple[str, str]] = []
        """Every status read: (batch id, status answered)."""
        self._read = threading.Condition(self._batch_lock)
        self.drop: set[str] = set()
        """custom_ids left out of both output and error files (a missing line)."""
        self.fail: dict[str, Reply] = {}
        """custom_ids answered with this error reply (lines of the error file), once each."""
        self.partial = 0
        """Lines answered before a batch expires or is cancelled."""
        self.expire = False
        """New batches expire after answering ``partial`` lines."""
        self.reject: str | None = None
        """New batches fail validation with this message (the service fails the batch)."""
        self.faults: dict[str, list[int]] = {}
        """Per operation (upload, create, retrieve, cancel, content, list_files,
        list_batches), HTTP statuses to answer with before serving it normally (0: serve
        that request normally, so ``[0, 400]`` refuses only the second one)."""
        self.lost: dict[str, list[int]] = {}
        """Per operation, HTTP statuses answered *after* serving it (the file or batch
        exists but the client never learns its id: a response lost on the way back)."""
        self.hold_after: dict[str, threading.Event] = {}
        """Per operation, an event the next such request waits for after it was served,
        before its answer is sent (bounded, released on stop): a client timeout loses the
        answer, or the test holds a run mid-upload. Used once per operation."""
        self.holding = threading.Event()
        """Set when a request is held by ``hold_after``."""
        self.operations: list[str] = []
        """Every file and batch request served or refused, by operation name."""

    # ------------------------------------------------------------------ test controls

    def record_raw(self, raw: bytes) -> None:
        """Keep a direct request's bytes."""
        with self._batch_lock:
            self.raw_chat_bodies.append(raw)

    def release(self) -> None:
        """Let held batches move on."""
        with self._batch_lock:
            self.hold_at = None

    def advance(self, batch_id: str | None = None) -> str:
        """Move one batch (default: the only one not finished) a step; its new status."""
        with self._batch_lock:
            if batch_id is None:
                (batch_id,) = [b.id for b in self.batches.values() if b.status not in _TERMINAL]
            batch = self.batches[batch_id]
            self._step(batch)
            return batch.status

    def wait_for_read(self, status: str, *, count: int = 1, timeout: float = 30.0) -> bool:
        """Wait until a client has read ``count`` batches in ``status`` (False on timeout)."""
        with self._read:
            return self._read.wait_for(
                lambda: sum(1 for _, s in self.reads if s == status) >= count, timeout
            )

    def input_lines(self, batch_id: str) -> list[dict[str, Any]]:
        """The parsed lines of a batch's input file."""
        return list(self.batches[batch_id].lines)

    # ------------------------------------------------------------------ routing

    def route(
        self, method: str, path: str, query: str, raw: bytes, content_type: str | None
    ) -> tuple[int, Any]:
        """Answer a file or batch request: (status, JSON payload or bytes)."""
        parts = path.split("/")
        tail = parts[parts.index("v1") + 1 :] if "v1" in parts else parts[1:]
        op = self._operation(method, tail)
        with self._batch_lock:
            self.operations.append(op or f"{method} {path}")
            pending = self.faults.get(op or "")
            status = pending.pop(0) if pending else 0
            if status:
                return status, _error_payload(status, f"scripted {status} on {op}")
            served = self._serve(op, method, path, tail, query, raw, content_type)
            lost = self.lost.get(op or "")
            if lost:
                status = lost.pop(0)
                return status, _error_payload(status, f"scripted {status} after {op}")
            return served

    def hold_reply(self, method: str, path: str) -> None:
        """Wait out a ``hold_after`` event of this request's operation (bounded, cut by stop)."""
        parts = path.split("/")
        tail = parts[parts.index("v1") + 1 :] if "v1" in parts else parts[1:]
        with self._batch_lock:
            event = self.hold_after.pop(self._operation(method, tail) or "", None)
        if event is None:
            return
        self.holding.set()
        deadline = time.monotonic() + MAX_HOLD_SECONDS
        while not event.is_set() and time.monotonic() < deadline:
            if self.pause(0.02):
                return

    def _serve(
        self,
        op: str | None,
        method: str,
        path: str,
        tail: list[str],
        query: str,
        raw: bytes,
        content_type: str | None,
    ) -> tuple[int, Any]:
        """Serve one file or batch request (the batch lock held)."""
        if op == "upload":
            return self._upload(raw, content_type or "")
        if op == "list_files":
            purpose = dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("purpose")
            cards = [f.card() for f in self.files.values() if purpose in (None, f.purpose)]
            return 200, _page(cards[::-1])
        if op in ("file", "content"):
            stored = self.files.get(tail[1])
            if stored is None:
                return 404, _error_payload(404, f"no file {tail[1]}")
            return 200, stored.content if op == "content" else stored.card()
        if op == "create":
            return self._create(raw)
        if op == "list_batches":
            return 200, _page([b.card() for b in self.batches.values()][::-1])
        if op in ("retrieve", "cancel"):
            batch = self.batches.get(tail[1])
            if batch is None:
                return 404, _error_payload(404, f"no batch {tail[1]}")
            if op == "cancel":
                self.cancels += 1
                if batch.status not in _TERMINAL:
                    batch.status, batch.ends_as = "cancelling", "cancelled"
            elif self.auto_advance and batch.status != self.hold_at:
                self._step(batch)
                while self.instant and batch.status not in _TERMINAL:
                    self._step(batch)
            if batch.status == self.hold_at:
                self.polled.set()
            if op == "retrieve":
                self.reads.append((batch.id, batch.status))
                self._read.notify_all()
            return 200, batch.card()
        return 404, _error_payload(404, f"BatchServer: unknown route {method} {path}")

    @staticmethod
    def _operation(method: str, tail: list[str]) -> str | None:
        head = tail[0] if tail else ""
        shapes = {
            ("POST", "files", 1): "upload",
            ("GET", "files", 1): "list_files",
            ("GET", "files", 2): "file",
            ("GET", "files", 3): "content",
            ("POST", "batches", 1): "create",
            ("GET", "batches", 1): "list_batches",
            ("GET", "batches", 2): "retrieve",
            ("POST", "batches", 3): "cancel",
        }
        return shapes.get((method, head, len(tail)))

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    def _upload(self, raw: bytes, content_type: str) -> tuple[int, Any]:
        message = BytesParser(policy=HTTP).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw
        )
        fields: dict[str, tuple[str | None, bytes]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            data = part.get_payload(decode=True)
            fields[str(name)] = (part.get_filename(), data if isinstance(data, bytes) else b"")
        if "file" not in fields:
            return 400, _error_payload(400, "upload without a file field")
        filename, content = fields["file"]
        purpose = fields.get("purpose", (None, b""))[1].decode()
        stored = StoredFile(
            self._new_id("file"), filename or "upload", purpose, content, int(time.time())
        )
        self.files[stored.id] = stored
        self.uploads += purpose == "batch"
        return 200, stored.card()

    def _create(self, raw: bytes) -> tuple[int, Any]:
        body = json.loads(raw or b"{}")
        source = self.files.get(str(body.get("input_file_id")))
        if source is None:
            return 400, _error_payload(400, f"no input file {body.get('input_file_id')}")
        lines, problems, seen = [], [], set()
        for number, text in enumerate(source.content.splitlines(), start=1):
            try:
                line = json.loads(text)
            except ValueError:
                problems.append({"code": "invalid_json", "message": "not JSON", "line": number})
                continue
            custom_id = line.get("custom_id")
            if custom_id in seen or line.get("url") != body.get("endpoint"):
                problems.append(
                    {"code": "invalid_line", "message": "duplicate id or url", "line": number}
                )
            seen.add(custom_id)
            lines.append(line)
        if self.reject is not None:
            problems.append({"code": "rejected", "message": self.reject, "line": None})
        batch = StoredBatch(
            id=self._new_id("batch"),
            input_file_id=source.id,
            endpoint=str(body.get("endpoint")),
            completion_window=str(body.get("completion_window")),
            metadata=body.get("metadata"),
            lines=lines,
            created_at=int(time.time()),
            problems=problems,
            ends_as="expired" if self.expire else "completed",
        )
        self.batches[batch.id] = batch
        self.created += 1
        return 200, batch.card()

    # ------------------------------------------------------------------ answering

    def _step(self, batch: StoredBatch) -> None:
        """Move ``batch`` one status forward (answering its lines on the way to finalizing)."""
        if batch.status in _TERMINAL:
            return
        if batch.status == "validating" and batch.problems:
            batch.status = "failed"
        elif batch.status == "cancelling" or (
            batch.status == "in_progress" and batch.ends_as == "expired"
        ):
            self._answer_lines(batch, limit=self.partial)
            batch.status = batch.ends_as
        elif batch.status == "in_progress":
            self._answer_lines(batch, limit=None)
            batch.status = "finalizing"
        else:
            batch.status = STEPS[STEPS.index(batch.status) + 1]

    def _answer_lines(self, batch: StoredBatch, *, limit: int | None) -> None:
        outputs: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for number, line in enumerate(batch.lines):
            custom_id = line.get("custom_id")
            if custom_id in self.drop:
                continue
            if limit is not None and number >= limit:
                code = "batch_expired" if batch.ends_as == "expired" else "batch_cancelled"
                errors.append(_line(custom_id, None, {"code": code, "message": code}))
                continue
            status, body = self._answer_one(str(custom_id), line.get("body") or {})
            target = outputs if status == 200 else errors
            target.append(_line(custom_id, {"status_code": status, "body": body}, None))
        batch.completed = len(outputs)
        batch.failed = sum(1 for e in errors if e["response"] is not None)
        if outputs:
            batch.output_file_id = self._store_output(batch, "output", outputs)
        if errors:
            batch.error_file_id = self._store_output(batch, "errors", errors)

    def _answer_one(self, custom_id: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        req = JudgeRequest.from_body(body)
        self.line_requests.append(req)
        forced = self.fail.pop(custom_id, None)
        try:
            reply = forced if forced is not None else _as_reply(self.script(req))
        except Exception as exc:  # the script's fault: a 500 line, as the direct path gets
            reply = reply_error(500, f"script raised {type(exc).__name__}: {exc}")
        if reply.status != 200:
            return reply.status, _error_payload(reply.status, reply.error_message)
        answer = self._answer(req, reply)
        usage = self._usage(req, answer, reply)
        return 200, self._completion(req, answer, usage)

    def _store_output(self, batch: StoredBatch, kind: str, lines: list[dict[str, Any]]) -> str:
        content = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        stored = StoredFile(
            self._new_id("file"),
            f"{batch.id}_{kind}.jsonl",
            f"batch_{kind}",
            content,
            int(time.time()),
        )
        self.files[stored.id] = stored
        return stored.id


def _line(custom_id: Any, response: dict[str, Any] | None, error: Any) -> dict[str, Any]:
    if response is not None:
        response = {"request_id": f"req_{uuid.uuid4().hex[:12]}", **response}
    return {
        "id": f"batch_req_{uuid.uuid4().hex[:12]}",
        "custom_id": custom_id,
        "response": response,
        "error": error,
    }


def _page(data: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": False,
    }
