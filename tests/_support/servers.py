"""Real observability servers (MLflow, Phoenix) as child processes on 127.0.0.1, for tests.

Started by session-scoped fixtures: a free port, readiness polled on a health URL with a
deadline, the server's log shown when it does not come up, killed on teardown.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["ServerProcess", "free_port"]

_READY_TIMEOUT_S = 120.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """A server started as a child process, its output in ``log``.

    Args:
        command: The command line.
        url: The server's base URL.
        health_url: Polled until it answers 200.
        log: File the server's stdout and stderr go to.
        env: Extra environment variables.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        url: str,
        health_url: str,
        log: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.command = list(command)
        self.url = url
        self.health_url = health_url
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        """Start the server and wait until its health URL answers (raises with the log)."""
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._fail(f"exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(self.health_url, timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        self._fail(f"did not answer {self.health_url} within {_READY_TIMEOUT_S:.0f} s")
        return self  # unreachable

    def kill(self) -> None:
        """Kill the server and everything it started (its own process group)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def output(self) -> str:
        """What the server logged so far."""
        return self.log.read_text(encoding="utf-8", errors="replace")

    def _fail(self, why: str) -> None:
        self.kill()
        msg = f"{self.command[0]} {why}; its log:\n{self.output()[-6000:]}"
        raise RuntimeError(msg)
