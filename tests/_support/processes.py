"""Driving a child process from a test: run a script, interrupt it at a point of our choosing."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["interrupt_when", "script_output"]

_REPO = Path(__file__).resolve().parents[2]


def script_output(script: str, *, timeout: float = 120.0) -> list[str]:
    """Run ``python -c script`` from the repository root; its output lines (it must exit 0).

    For what a test cannot do in its own process, such as forking a process that has no
    test runner's threads.
    """
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=_REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


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
