"""Driving a child process from a test: interrupt it at a point the test chooses."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

__all__ = ["interrupt_when"]


def interrupt_when(
    proc: subprocess.Popen[str], ready: Callable[[], bool], *, timeout: float = 120.0
) -> tuple[str, str]:
    """Send SIGINT to ``proc`` once ``ready()`` holds, then return its (stdout, stderr).

    Fails the test when ``proc`` exits before that point or ``ready()`` never holds.
    """
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, "the process never reached the point to interrupt"
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    return proc.communicate(timeout=timeout)
