"""Secrets kept out of the package's log records: credentials in URLs and keys in queries.

An endpoint configured as ``https://user:password@host`` or ``...?api_key=...`` shows up in
the errors of HTTP clients (httpx, requests, the openai SDK name the URL they failed on), and
those errors are logged when a sink or a judge fails. A filter on the package's logger
rewrites each record's message and traceback text before any handler sees it.
"""

from __future__ import annotations

import logging
import re

__all__ = ["RedactingFilter", "install", "redact"]

_USERINFO = re.compile(r"(?<=://)[^/\s@:'\"]+:[^/\s@'\"]*@")
_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:api[_-]?key|key|token|access[_-]?token|password|secret|sig|signature)=)"
    r"[^&#\s'\"]+"
)


def redact(text: str) -> str:
    """``text`` with URL credentials (``user:password@``) and secret query values masked."""
    if "://" not in text and "=" not in text:
        return text
    return _QUERY_SECRET.sub(r"\1***", _USERINFO.sub("***@", text))


class RedactingFilter(logging.Filter):
    """Masks secrets in a record's message and in its exception's formatted traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record in place when it holds a secret; never drops it."""
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            cleaned = redact(text)
            if cleaned != text:
                record.exc_text = cleaned  # what formatters print instead of formatting again
        return True


def install(logger: logging.Logger) -> None:
    """Add the filter to ``logger`` once."""
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())
