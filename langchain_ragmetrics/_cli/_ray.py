"""Starting Ray for ``ragmetrics evaluate --ray``, with a bound on reaching a cluster.

``ray.init(address="host:port")`` with nothing listening there retries for minutes on Ray's
own schedule. The address is tried first with one TCP connection, so a wrong host or port is
reported in seconds, by its address, before Ray is started. Ray Client addresses (``ray://``)
are refused: Ray Client is not part of the ``[ray]`` extra (``ray[client]``); the head's
``host:port`` (``ray start --head`` prints it) or ``auto`` on a cluster node is what works.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["CONNECT_TIMEOUT", "FETCH_THREAD", "SETTLE_TIMEOUT", "reach", "start_ray", "stop_ray"]

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
    """
    close = getattr(batches, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):  # Ray failing on the way out: shut down anyway
            close()
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread.name == FETCH_THREAD and thread not in threads_before:
            thread.join(max(0.0, deadline - time.monotonic()))
    ray.shutdown()
