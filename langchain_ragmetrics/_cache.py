"""A persistent verdict cache: validated judge answers in SQLite, shared by threads and processes.

Why not LangChain's ``BaseCache`` / ``SQLiteCache``: it caches raw generations keyed on the
prompt string and the model's full serialized parameters, so an answer that later fails our
validation would be replayed forever; it is installed globally (``set_llm_cache``) or per
model, with no hit / miss accounting per result; and its SQLite flavour lives in
langchain-community on top of SQLAlchemy. Here only answers that parsed and passed the
metric's checks are stored, keyed by what decides a verdict: the judge's identity (class,
model, the endpoint its client really calls, sampling and reasoning settings), the formatted
prompt (template and payload), the output schema and the tool definition sent with it.

This module knows nothing of metrics or judge calls (``metrics._judge.CachedCall`` puts the
two together), so the layers import downward only.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import warnings
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._errors import CacheError

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Mapping, Sequence

    from langchain_core.messages import BaseMessage
    from pydantic import BaseModel

__all__ = [
    "CacheError",
    "CacheLike",
    "VerdictCache",
    "default_cache_path",
    "judge_endpoint",
    "judge_identity",
    "reads_as_a_switch",
    "resolve_cache",
]

_BUSY_TIMEOUT_S = 30.0
_SCHEMA_VERSION = 2  # 2: endpoint from the client, bound tool definitions
_URL_ATTRS = (
    "openai_api_base",
    "base_url",
    "api_base",
    "endpoint_url",
    "azure_endpoint",
    "anthropic_api_url",
)
_CLIENT_ATTRS = ("root_client", "root_async_client")
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
        return all(isinstance(k, (str, int)) and _plain(v) for k, v in value.items())
    return False


def _as_json(value: Any) -> Any:
    """A plain value with every dict key as text (``logit_bias`` keys are ints).

    Keys then sort, and the identity reads the same whatever type the client gave them.
    """
    if isinstance(value, dict):
        return {str(k): _as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_json(v) for v in value]
    return value


_SECRET_HEADERS = frozenset(
    {"authorization", "api-key", "x-api-key", "cookie", "proxy-authorization"}
)
_REQUEST_ATTRS = ("default_headers", "default_query", "use_responses_api")
"""Client settings that change what the judge answers (a proxy's route header, an API
version in the query, the Responses API) but are not in ``_identifying_params``."""


def _request_settings(llm: Any) -> dict[str, Any]:
    """The set ones of :data:`_REQUEST_ATTRS`; secret headers count by name, not value."""
    found: dict[str, Any] = {}
    for name in _REQUEST_ATTRS:
        value = getattr(llm, name, None)
        if not value or not _plain(value):
            continue
        if name == "default_headers" and isinstance(value, dict):
            value = {
                k: ("<secret>" if str(k).lower() in _SECRET_HEADERS else v)
                for k, v in value.items()
            }
        found[name] = _as_json(value)
    return found


def _client_url(llm: Any) -> str | None:
    """The base URL the model's own HTTP client resolved (from arguments or the environment)."""
    for holder in _CLIENT_ATTRS:
        client = getattr(llm, holder, None)
        url = getattr(client, "base_url", None)
        if url is not None and str(url):
            return str(url)
    return None


def judge_endpoint(llm: Any) -> str | None:
    """Where the judge's requests really go, or None when the model shows no URL.

    The client's resolved URL comes first: langchain-openai leaves ``openai_api_base`` empty
    when the URL comes from ``OPENAI_BASE_URL``, but its ``root_client`` holds the one used.
    """
    url = _client_url(llm)
    if url is None:
        for attr in _URL_ATTRS:
            value = getattr(llm, attr, None)
            if isinstance(value, str) and value:
                url = value
                break
    return None if url is None else url.rstrip("/")


def judge_identity(llm: Any) -> dict[str, Any]:
    """What makes two judges give the same verdict: class, model, endpoint, sampling settings.

    Taken from the model's ``_identifying_params`` (model name, temperature, top_p, seed,
    max tokens, reasoning settings ...), the client's default headers and query and the
    Responses API switch when set, plus the endpoint its client really calls; values
    that are not plain data (clients, callables) are left out so the identity is stable from
    one process to the next. The API key is a secret, not an identity: it is never read.
    """
    try:
        params = dict(getattr(llm, "_identifying_params", None) or {})
    except Exception:
        params = {}
    identity: dict[str, Any] = {
        "class": f"{type(llm).__module__}.{type(llm).__qualname__}",
        "params": {k: _as_json(v) for k, v in sorted(params.items()) if _plain(v)},
    }
    settings = _request_settings(llm)
    if settings:  # only when set: the identity of an ordinary judge stays what it was
        identity["client"] = settings
    endpoint = judge_endpoint(llm)
    if endpoint is not None:
        identity["base_url"] = endpoint
    return identity


@lru_cache(maxsize=64)
def _schema_text(schema: type[BaseModel]) -> str:
    return json.dumps(schema.model_json_schema(), sort_keys=True, ensure_ascii=False)


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
    # surrogatepass: a lone surrogate in a custom prompt must not make the key raise
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


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
            path: The SQLite file (relative to the current directory, taken now); default
                :func:`default_cache_path`.
            timeout: Seconds to wait for another process's write lock.

        Raises:
            CacheError: The file cannot be created or opened as a cache.
        """
        chosen = Path(path).expanduser() if path is not None else default_cache_path()
        # Absolute from here on: a copy pickled to another process (a Ray actor, whose working
        # directory is the cluster's, not this one's) opens this file, not a namesake there.
        self.path = chosen.absolute()
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

    def key(
        self,
        llm: Any,
        messages: Sequence[BaseMessage],
        schema: type[BaseModel],
        *,
        request: Mapping[str, Any] | None = None,
    ) -> str:
        """The cache key of one judge request.

        Args:
            llm: The judge (its identity: class, settings, endpoint).
            messages: The formatted prompt.
            schema: The output schema.
            request: What else goes into the request: the tool definitions and tool choice
                the schema was bound with (entries that are not plain data are left out).
        """
        prompt = [(m.type, m.content) for m in messages]
        options = {k: v for k, v in sorted((request or {}).items()) if _plain(v)}
        return _digest(
            {
                "v": _SCHEMA_VERSION,
                "judge": judge_identity(llm),
                "prompt": prompt,
                "schema": _schema_text(schema),
                "request": options,
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
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except (TypeError, ValueError) as exc:  # a damaged entry is a miss: the judge is asked
            self._warn(CacheError(f"entry {key[:12]} is damaged ({exc}); asking the judge"))
            return None

    def put(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable value under ``key`` (last writer wins)."""
        import sqlite3

        text = json.dumps(value)  # ASCII: a lone surrogate in a verdict cannot break SQLite
        try:
            with self._lock:
                self._connect().execute(
                    "INSERT OR REPLACE INTO verdicts (key, value, created) VALUES (?, ?, ?)",
                    (key, text, time.time()),
                )
        except (sqlite3.Error, CacheError) as exc:
            self._warn(exc)

    def record(self, *, hits: int = 0, misses: int = 0) -> None:
        """Count lookups in :attr:`hits` and :attr:`misses` (thread-safe).

        A worker process looks up in a copy of this object: its lookups are counted here
        too, from its results' usage, when they come back.
        """
        with self._lock:
            self.hits += hits
            self.misses += misses

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


_SWITCH_WORDS = frozenset({"", "true", "false", "yes", "no", "on", "off", "0", "1", "none", "null"})


def reads_as_a_switch(text: str) -> bool:
    """True when ``text`` is blank or a switch word ("false", "off", "0", "none", any case).

    Such a string, often read from an environment variable, means "cache or not", never a
    file: taken as a path it would quietly create a cache file named ``false`` in the
    working directory. A path with a folder part (``./false``) is never one.
    """
    return text.strip().lower() in _SWITCH_WORDS


def resolve_cache(cache: CacheLike) -> VerdictCache | None:
    """Turn a ``cache=`` option into a VerdictCache (or None for no caching).

    Raises:
        ValueError: ``cache`` is a string that is blank or reads as a switch (see
            :func:`reads_as_a_switch`); the message names the option and the value.
        TypeError: ``cache`` is none of the accepted kinds.
    """
    if cache is None or cache is False:
        return None
    if cache is True:
        return VerdictCache()
    if isinstance(cache, VerdictCache):
        return cache
    if isinstance(cache, str) and reads_as_a_switch(cache):
        msg = f"`cache` must be True, False, None or a file path, got {cache!r}"
        if cache.strip():
            msg += ", which reads as a switch: pass cache=True, False or None to turn the "
            msg += f"verdict cache on or off, or write {'./' + cache.strip()!r} if a file of "
            msg += "that name is meant"
        else:
            msg += " (a blank string names no file): pass cache=False or None for no cache"
        raise ValueError(msg)
    if isinstance(cache, (str, os.PathLike)):
        return VerdictCache(cache)
    msg = f"`cache` must be True, False, None, a file path or a VerdictCache, got {cache!r}"
    raise TypeError(msg)
