"""Event loops for our own threads: quiet about one harmless error, and how their tasks end.

The openai SDK closes an async HTTP client it garbage-collects by starting ``aclose()`` on
whatever loop runs in the collecting thread. When the client's pooled connections belong to
a loop that has ended, that task fails with "Event loop is closed" and asyncio logs it at
ERROR as "Task exception was never retrieved". On our worker and monitor loops the client is
usually not even ours (langchain-openai caches one per endpoint and evicts the oldest), and
nothing is lost: the sockets close when collected. That one case goes to DEBUG; every other
unhandled error of the loop still reaches asyncio's default handler.

``cancel_and_wait`` is the one way our loops stop the tasks they started.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import PurePath
from typing import Any

__all__ = ["cancel_and_wait", "new_event_loop", "quiet_stale_closes"]

logger = logging.getLogger(__name__)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop whose exception handler drops a stale client's failed ``aclose()``."""
    loop = asyncio.new_event_loop()
    quiet_stale_closes(loop)
    return loop


def quiet_stale_closes(loop: asyncio.AbstractEventLoop) -> None:
    """Give ``loop`` (one of ours: ``asyncio.run``'s inside our own ``run()``) the handler."""
    loop.set_exception_handler(_handle)


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and return once each has ended (their errors and results are dropped).

    ``tasks`` is copied first: a set that done callbacks shrink can be passed as it is.
    """
    pending = list(tasks)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


def _handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if _stale_aclose(context):
        logger.debug("a collected HTTP client could not close connections of an ended loop")
        return
    loop.default_exception_handler(context)


def _stale_aclose(context: dict[str, Any]) -> bool:
    """True when an ``aclose()`` task failed only because its connections' loop had ended."""
    exc = context.get("exception")
    task = context.get("future")
    if not (isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed"):
        return False
    if not isinstance(task, asyncio.Task):
        return False
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", "")
    if not (isinstance(name, str) and name.rsplit(".", 1)[-1] == "aclose"):
        return False
    code = getattr(coro, "cr_code", None)  # where aclose is defined: httpx (or httpx2)
    path = PurePath(getattr(code, "co_filename", ""))
    return any(part.startswith("httpx") for part in path.parts[:-1])
