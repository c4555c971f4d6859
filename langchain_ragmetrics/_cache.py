"""A persistent verdict cache: validated judge answers in SQLite, shared by threads and processes.

Why not LangChain's ``BaseCache`` / ``SQLiteCache``: it caches raw generations keyed on the
prompt string and the model's full serialized parameters, so an answer that later fails our
validation would be replayed forever; it is installed globally (``set_llm_cache``) or per
model, with no hit / miss accounting per result; and its SQLite flavour lives in
langchain-community on top of SQLAlchemy. Here only answers that parsed and passed the
metric's checks are stored, keyed by what decides a verdict: the judge's identity (class,
model, base URL, sampling settings), the formatted prompt (template and payload) and the
output schema.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics.errors import CacheError
from langchain_ragmetrics.schema import Usage

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence

    from langchain_core.messages import BaseMessage
    from pydantic import BaseModel

    from langchain_ragmetrics.metrics._judge import JudgeCall, JudgeOutcome, JudgeRunner

__all__ = [
    "CacheError",
    "CacheLike",
    "CachedCall",
    "VerdictCache",
    "default_cache_path",
    "judge_identity",
    "resolve_cache",
]

_BUSY_TIMEOUT_S = 30.0
_SCHEMA_VERSION = 1
_URL_ATTRS = ("openai_api_base", "base_url", "api_base", "endpoint_url")
_Scalar = (str, int, float, bool, type(None))


def default_cache_path() -> Path:
    """``<user cache dir>/ragmetrics/verdicts.sqlite3`` (honours ``$XDG_CACHE_HOME`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("ragmetrics", appauthor=False)) / "verdicts.sqlite3"


def _plain(value: Any) -> bool:
    if isinstance(value, _Scalar):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def judge_identity(llm: Any) -> dict[str, Any]:
    """What makes two judges give the same verdict: class, model, endpoint, sampling settings.

    Taken from the model's ``_identifying_params`` (model name, temperature, top_p, seed,
    max tokens ...) plus its base URL; values that are not plain data (clients, callables)
    are left out so the identity is stable from one process to the next.
    """
    try:
        params = dict(getattr(llm, "_identifying_params", None) or {})
    except Exception:
        params = {}
    identity: dict[str, Any] = {
        "class": f"{type(llm).__module__}.{type(llm).__qualname__}",
        "params": {k: v for k, v in sorted(params.items()) if _plain(v)},
    }
    for attr in _URL_ATTRS:
        url = getattr(llm, attr, None)
        if isinstance(url, str) and url:
            identity["base_url"] = url.rstrip("/")
            break
    return identity


@lru_cache(maxsize=64)
def _schema_text(schema: type[BaseModel]) -> str:
    return json.dumps(schema.model_json_schema(), sort_keys=True, ensure_ascii=False)


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class VerdictCache:
    """Validated judge verdicts in SQLite (WAL, busy timeout), shared by threads and processes.

    Pass one object to ``evaluate(cache=...)``, to a metric (``ContextRecall(cache=...)``) or
    to the online handler's metrics. A cache fault while reading or writing (disk full, a
    lock held too long) never fails a score: it warns once and the call goes to the judge.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, timeout: float = _BUSY_TIMEOUT_S
    ) -> None:
        """Open (or create, parents included) the cache file.

        Args:
            path: The SQLite file; default :func:`default_cache_path`.
            timeout: Seconds to wait for another process's write lock.

        Raises:
            CacheError: The file cannot be created or opened as a cache.
        """
        self.path = Path(path) if path is not None else default_cache_path()
        self.timeout = timeout
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._warned = False
        self.hits = 0
        """Lookups answered from the cache since this object was created."""
        self.misses = 0
        """Lookups that found nothing (the judge was asked)."""
        with self._lock:
            self._connect()

    def __repr__(self) -> str:
        return f"VerdictCache({str(self.path)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as (path, timeout): another process reopens the same file."""
        return (_reopen, (self.path, self.timeout))

    def _connect(self) -> sqlite3.Connection:
        """The connection of this process (reopened after a fork); call with the lock held."""
        import sqlite3

        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
                "created REAL NOT NULL)"
            )
        except (OSError, sqlite3.Error) as exc:
            msg = f"cannot open the verdict cache {self.path}: {exc}"
            raise CacheError(msg) from exc
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _warn(self, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"verdict cache {self.path} unusable, calling the judge instead: {exc}",
                RuntimeWarning,
                stacklevel=3,
            )

    def key(self, llm: Any, messages: Sequence[BaseMessage], schema: type[BaseModel]) -> str:
        """The cache key of one judge request (judge identity, formatted prompt, schema)."""
        prompt = [(m.type, m.content) for m in messages]
        return _digest(
            {
                "v": _SCHEMA_VERSION,
                "judge": judge_identity(llm),
                "prompt": prompt,
                "schema": _schema_text(schema),
            }
        )

    def get(self, key: str) -> Any:
        """The stored JSON value of ``key``, or None."""
        import sqlite3

        try:
            with self._lock:
                row = (
                    self._connect()
                    .execute("SELECT value FROM verdicts WHERE key = ?", (key,))
                    .fetchone()
                )
        except (sqlite3.Error, CacheError) as exc:
            self._warn(exc)
            return None
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under ``key`` (last writer wins)."""
        import sqlite3

        text = json.dumps(value, ensure_ascii=False)
        try:
            with self._lock:
                self._connect().execute(
                    "INSERT OR REPLACE INTO verdicts (key, value, created) VALUES (?, ?, ?)",
                    (key, text, time.time()),
                )
        except (sqlite3.Error, CacheError) as exc:
            self._warn(exc)

    def record(self, *, hit: bool) -> None:
        """Count one lookup in :attr:`hits` or :attr:`misses` (thread-safe)."""
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def __len__(self) -> int:
        with self._lock:
            row = self._connect().execute("SELECT COUNT(*) FROM verdicts").fetchone()
        return int(row[0])

    def clear(self) -> None:
        """Forget every stored verdict."""
        with self._lock:
            self._connect().execute("DELETE FROM verdicts")
            self.hits = self.misses = 0

    def close(self) -> None:
        """Close the connection (the object reopens it when used again)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


def _reopen(path: Path, timeout: float) -> VerdictCache:
    return VerdictCache(path, timeout=timeout)


CacheLike = VerdictCache | str | os.PathLike[str] | bool | None
"""What ``cache=`` accepts: a VerdictCache, a file path, True (the default file) or None/False."""


def resolve_cache(cache: CacheLike) -> VerdictCache | None:
    """Turn a ``cache=`` option into a VerdictCache (or None for no caching)."""
    if cache is None or cache is False:
        return None
    if cache is True:
        return VerdictCache()
    if isinstance(cache, VerdictCache):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return VerdictCache(cache)
    msg = f"cache must be a VerdictCache, a path, True or None, got {type(cache).__name__}"
    raise TypeError(msg)


@dataclass
class CachedCall:
    """One judge request seen through the cache: a hit to return, or a key to store under."""

    cache: VerdictCache
    key: str
    hit: JudgeOutcome | None

    @classmethod
    def open(
        cls, cache: VerdictCache | None, runner: JudgeRunner, call: JudgeCall
    ) -> CachedCall | None:
        """Look the request up; None when there is no cache (the caller goes on as before)."""
        if cache is None:
            return None
        from langchain_ragmetrics.metrics._judge import JudgeOutcome

        messages = runner.prompt.format_messages(**call.variables)
        key = cache.key(runner.llm, messages, call.schema)
        stored = cache.get(key)
        hit = None
        if stored is not None:
            try:
                parsed = call.schema.model_validate(stored)
                if call.check is not None:
                    call.check(parsed)
            except ValueError:  # stale or tampered entry: ask the judge again
                parsed = None
            if parsed is not None:
                hit = JudgeOutcome(parsed=parsed, usage=Usage(cache_hits=1))
                cache.record(hit=True)
        return cls(cache, key, hit)

    def store(self, outcome: JudgeOutcome) -> JudgeOutcome:
        """Keep a successful, validated verdict; count the miss in the outcome's usage."""
        if outcome.error is None and outcome.parsed is not None:
            parsed = outcome.parsed
            data = parsed.model_dump(mode="json") if hasattr(parsed, "model_dump") else parsed
            self.cache.put(self.key, data)
        outcome.usage = outcome.usage + Usage(cache_misses=1)
        self.cache.record(hit=False)
        return outcome
