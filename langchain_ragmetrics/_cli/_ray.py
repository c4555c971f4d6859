"""Starting Ray for ``ragmetrics evaluate --ray``, with a bound on reaching a cluster.

``ray.init(address="host:port")`` with nothing listening there retries for minutes on Ray's
own schedule. The address is tried first with one TCP connection, so a wrong host or port is
reported in seconds, by its address, before Ray is started. Ray Client addresses (``ray://``)
are refused: Ray Client is not part of the ``[ray]`` extra (``ray[client]``); the head's
``host:port`` (``ray start --head`` prints it) or ``auto`` on a cluster node is what works.

Also here: stopping Ray after a run (Ctrl-C included), the error an actor raised out of
Ray's wrapping, and ``evaluate_ray``'s pool warning in the command line's terms.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

from langchain_ragmetrics._errors import JudgeSetupError
from langchain_ragmetrics._interrupts import DeferredInterrupt

__all__ = [
    "CONNECT_TIMEOUT",
    "FETCH_THREAD",
    "SETTLE_TIMEOUT",
    "actor_error",
    "first_line",
    "pool_warning",
    "quiet_setup_errors",
    "reach",
    "start_ray",
    "stop_ray",
]

CONNECT_TIMEOUT = 10.0
"""Seconds one TCP connection to the cluster's address may take before it counts as down."""

FETCH_THREAD = "iter_threaded"
"""The name Ray Data gives the threads that fetch a dataset's batches for its consumer."""

SETTLE_TIMEOUT = 10.0
"""Seconds a stopped run's iteration threads get to finish before Ray is shut down anyway."""


def _host_port(address: str) -> tuple[str, int] | None:
    """``("host", port)`` of a ``host:port`` address; None for what Ray resolves itself.

    ``ray://`` (Ray Client), ``auto`` and ``local`` are left to Ray, as is anything without a
    port (Ray reports a malformed address at once).
    """
    if "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def reach(address: str, *, timeout: float = CONNECT_TIMEOUT) -> None:
    """Open and close one TCP connection to a Ray cluster's ``host:port`` address.

    ``timeout`` bounds the connection attempts to all the addresses the host name resolves
    to, together (the name lookup itself is the system resolver's).

    Raises:
        ConnectionError: Nothing accepted a connection there within ``timeout`` seconds
            (refused, unreachable, or no answer); the message names the address.
    """
    target = _host_port(address)
    if target is None:
        return
    deadline = time.monotonic() + timeout
    try:
        candidates = socket.getaddrinfo(*target, type=socket.SOCK_STREAM)
    except OSError as exc:
        msg = f"nothing answers at {address} ({type(exc).__name__}: {exc})"
        raise ConnectionError(msg) from exc
    error: OSError = TimeoutError()
    for family, kind, proto, _name, sockaddr in candidates:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(left)
                sock.connect(sockaddr)
        except TimeoutError as exc:  # it had all the time left
            error = exc
            break
        except OSError as exc:  # refused or unreachable: the next address may answer
            error = exc
            continue
        return
    if isinstance(error, TimeoutError):
        msg = f"nothing answered at {address} within {timeout:g} s"
    else:
        msg = f"nothing answers at {address} ({type(error).__name__}: {error})"
    raise ConnectionError(msg) from error


def start_ray(ray: Any, address: str | None) -> None:
    """Start a local Ray, or connect to the cluster at ``address`` (or at ``RAY_ADDRESS``).

    Without ``address``, ``ray.init`` joins the cluster that ``RAY_ADDRESS`` names, if set;
    that address is tried first too.

    Raises:
        ValueError: A Ray Client address (``ray://``); Ray was not started.
        ConnectionError: The cluster's address does not accept a connection (see
            :func:`reach`); Ray was not started.
        Exception: Whatever ``ray.init`` raises.
    """
    given = address or os.environ.get("RAY_ADDRESS") or ""
    if given.startswith("ray://"):
        msg = (
            f"{given} is a Ray Client address, which --ray does not support (Ray Client is "
            "not part of the [ray] extra): give the head's host:port, e.g. head:6379 as "
            "`ray start --head` prints it, or run on a cluster node with --ray-address auto"
        )
        raise ValueError(msg)
    if address:
        reach(address)
        ray.init(address=address, log_to_driver=False)
    else:
        reach(os.environ.get("RAY_ADDRESS") or "auto")
        ray.init(include_dashboard=False, log_to_driver=False)


def stop_ray(
    ray: Any,
    batches: Iterator[Any] | None,
    threads_before: set[threading.Thread],
    *,
    timeout: float = SETTLE_TIMEOUT,
) -> None:
    """Close a run's batch iterator, let Ray Data's fetch threads finish, then shut Ray down.

    Ray Data fetches batches on threads of its own (named ``iter_threaded``). Stopped mid-run
    (Ctrl-C), one may still be fetching a block when ``ray.shutdown()`` runs, and Ray's core
    then ends the whole process with status 1 ("the core worker has already been shutdown")
    before the rows already scored are written. Closing the iterator tells those threads to
    stop (they look every 0.1 s); the ones started since ``threads_before`` are waited for,
    ``timeout`` seconds in all, before Ray goes. Its other threads (the prefetcher, parked
    until the iterator is collected) never call into Ray's core once stopped and are not
    waited for.

    A Ctrl-C while this runs (the user's second, after the one that stopped the run) waits
    until Ray is shut down; a further one raises at once, and Ray is shut down all the same.

    Raises:
        KeyboardInterrupt: Ctrl-C came meanwhile; Ray is shut down.
    """
    with DeferredInterrupt():
        try:
            close = getattr(batches, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # Ray failing on the way out: shut down
                    close()
            deadline = time.monotonic() + timeout
            for thread in threading.enumerate():
                if thread.name == FETCH_THREAD and thread not in threads_before:
                    thread.join(max(0.0, deadline - time.monotonic()))
        finally:
            ray.shutdown()


_COLOURS = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
"""Terminal colour codes, which Ray puts in the text of its errors."""


def actor_error(exc: BaseException) -> BaseException:
    """The error a Ray actor raised, out of Ray's wrapping (``RayTaskError.cause``)."""
    seen = {id(exc)}
    cause = getattr(exc, "cause", None)
    while isinstance(cause, BaseException) and id(cause) not in seen:
        exc = cause
        seen.add(id(exc))
        cause = getattr(exc, "cause", None)
    return exc


def first_line(exc: BaseException) -> str:
    """An error's text up to its first line break, without colour codes: what a user reads.

    Ray's errors carry the actor's whole traceback in their text, in colour.
    """
    text = _COLOURS.sub("", str(exc)).strip()
    return text.splitlines()[0] if text else ""


def _not_named_here(record: logging.LogRecord) -> bool:
    """A logging filter: False for a record of a JudgeSetupError, which the command names.

    Ray's error wrapping an actor's JudgeSetupError is one too. The error is the record's,
    else the one being handled where it was logged.
    """
    error = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
    return not isinstance(error, JudgeSetupError)


@contextlib.contextmanager
def quiet_setup_errors() -> Iterator[None]:
    """Keep the traceback of an actor's JudgeSetupError off Ray Data's console, meanwhile.

    Ray Data prints the actor's error twice, with Ray's traceback (200 lines), before it
    raises it; the command names it in one line, with what to do. Ray Data's log file
    still has it all.
    """
    handlers = [
        handler
        for handler in logging.getLogger("ray.data").handlers
        if isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
    ]
    for handler in handlers:
        handler.addFilter(_not_named_here)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(_not_named_here)


def pool_warning(ray: Any, workers: int) -> tuple[str, str] | None:
    """``evaluate_ray``'s warning that ``workers`` actors fill the cluster, and the CLI's.

    None when they fit; else the warning's text and the same in the command line's terms.
    The fit is ``evaluate_ray``'s own check, with its actors' CPUs; its warning names
    ``num_actors`` and ``num_cpus``, which a command-line user cannot set.
    """
    from langchain_ragmetrics.integrations.ray import ACTOR_CPUS, _check_pool_fits

    cpus = ACTOR_CPUS
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check_pool_fits(ray, num_actors=workers, num_cpus=cpus)
    if not caught:
        return None
    total = float(ray.cluster_resources().get("CPU", 0))
    said = (
        f"--workers {workers}: {workers} Ray actors of {cpus:g} CPU each reserve "
        f"{workers * cpus:g} of the cluster's {total:g} CPUs, leaving less than one for "
        "anything else: what does not fit waits unless the cluster scales up; lower --workers"
    )
    return str(caught[-1].message), said
