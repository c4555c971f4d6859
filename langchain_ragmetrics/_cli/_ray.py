"""Starting Ray for ``ragmetrics evaluate --ray``, with a bound on reaching a cluster.

``ray.init(address="host:port")`` with nothing listening there retries for minutes on Ray's
own schedule. The address is tried first with one TCP connection, so a wrong host or port is
reported in seconds, by its address, before Ray is started.
"""

from __future__ import annotations

import socket
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

    Raises:
        ConnectionError: Nothing accepted a connection there within ``timeout`` seconds
            (refused, unreachable, or no answer); the message names the address.
    """
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout):
            pass
    except TimeoutError as exc:
        msg = f"nothing answered at {address} within {timeout:g} s"
        raise ConnectionError(msg) from exc
    except OSError as exc:
        msg = f"nothing answers at {address} ({type(exc).__name__}: {exc})"
        raise ConnectionError(msg) from exc


def start_ray(ray: Any, address: str | None) -> None:
    """Start a local Ray (``address`` None) or connect to the cluster at ``address``.

    Raises:
        ConnectionError: The cluster's address does not accept a connection (see
            :func:`reach`); Ray was not started.
        Exception: Whatever ``ray.init`` raises.
    """
    if address:
        reach(address)
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, log_to_driver=False)
