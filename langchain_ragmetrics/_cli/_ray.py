"""Starting Ray for ``ragmetrics evaluate --ray``, with a bound on reaching a cluster.

``ray.init(address="host:port")`` with nothing listening there retries for minutes on Ray's
own schedule. The address is tried first with one TCP connection, so a wrong host or port is
reported in seconds, by its address, before Ray is started. Ray Client addresses (``ray://``)
are refused: Ray Client is not part of the ``[ray]`` extra (``ray[client]``); the head's
``host:port`` (``ray start --head`` prints it) or ``auto`` on a cluster node is what works.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

__all__ = ["CONNECT_TIMEOUT", "reach", "start_ray"]

CONNECT_TIMEOUT = 10.0
"""Seconds one TCP connection to the cluster's address may take before it counts as down."""


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
