"""Starting the isolated mode's child: a fresh interpreter that never runs the user's script.

``multiprocessing``'s ``spawn`` re-imports the application's ``__main__`` in the child (as
``__mp_main__``), which runs a script's top-level code a second time unless it is guarded by
``if __name__ == "__main__":``. That is acceptable when the user opted in and was told
(``ProcessIsolation(setup=...)`` with a setup defined in the script needs it), not for a
default. So when what the child receives does not name ``__main__``, the child is started with
``subprocess`` instead: ``python -c`` with the parent's ``sys.path``, the two pipe ends passed
as inherited descriptors, and a third pipe whose end of file tells the parent the child exited.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.spawn
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from langchain_ragmetrics.callbacks._messages import ChildStart

__all__ = ["ChildProcess", "ScriptProcess", "interpreter", "needs_main", "start_child"]

_BOOTSTRAP = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from langchain_ragmetrics.callbacks._child import bootstrap; "
    "bootstrap(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])"
)


class ChildProcess(Protocol):
    """What the parent needs of a child process (``multiprocessing.Process`` has it too)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def sentinel(self) -> int: ...

    @property
    def exitcode(self) -> int | None: ...

    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def close(self) -> None: ...


class ScriptProcess:
    """A child started with ``subprocess``, shaped like a ``multiprocessing.Process``."""

    def __init__(self, popen: subprocess.Popen[bytes], sentinel: int) -> None:
        self._popen = popen
        self._sentinel = sentinel

    @property
    def pid(self) -> int | None:
        return self._popen.pid

    @property
    def sentinel(self) -> int:
        """Readable (end of file) once the child exited: it held the pipe's other end."""
        return self._sentinel

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout)

    def close(self) -> None:
        """Release the sentinel; only its reader calls this, so no wait meets a reused fd.

        Unlike ``multiprocessing.Process.close`` it never refuses: a child still running is
        left to be reaped by ``subprocess``.
        """
        sentinel, self._sentinel = self._sentinel, -1
        if sentinel >= 0:
            with contextlib.suppress(OSError):
                os.close(sentinel)

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def terminate(self) -> None:
        with contextlib.suppress(OSError):
            self._popen.terminate()

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self._popen.kill()


def interpreter() -> str:
    """The Python to start the child with: ``multiprocessing``'s (``set_executable`` honoured)."""
    return os.fsdecode(multiprocessing.spawn.get_executable() or sys.executable)


def needs_main(start: object) -> bool:
    """Whether unpickling ``start`` in the child needs the application's ``__main__``."""
    try:
        return b"__main__" in pickle.dumps(start, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return True  # let multiprocessing try, and report its error


def start_child(
    target: Callable[..., None], start: ChildStart, *, name: str
) -> tuple[ChildProcess, Connection, Connection, ChildStart | None]:
    """Start the child; return it, the parent's pipe ends (receive, send), its first message.

    The first message is ``start`` for a script child, None for a ``multiprocessing`` one
    (which received it as an argument).
    The first message is sent by the caller outside its locks: it may exceed a pipe's buffer
    and then waits for the child to read it.

    Raises:
        OSError, ValueError, RuntimeError: the child could not be started.
    """
    context = multiprocessing.get_context("spawn")
    parent_recv, child_send = context.Pipe(duplex=False)
    child_recv, parent_send = context.Pipe(duplex=False)
    try:
        process: ChildProcess
        first: ChildStart | None = None
        if os.name == "posix" and not needs_main(start):
            process = _script(child_recv, child_send, name)
            first = start
        else:
            mp_process = context.Process(
                target=target, args=(child_recv, child_send, start), name=name, daemon=True
            )
            mp_process.start()
            process = mp_process
    except BaseException:
        for conn in (parent_recv, child_send, child_recv, parent_send):
            conn.close()
        raise
    child_send.close()
    child_recv.close()
    return process, parent_recv, parent_send, first


def _script(child_recv: Connection, child_send: Connection, name: str) -> ScriptProcess:
    alive_read, alive_write = os.pipe()
    fds = (child_recv.fileno(), child_send.fileno(), alive_write)
    try:
        popen = subprocess.Popen(  # noqa: S603 - our own interpreter and code
            [interpreter(), "-c", _BOOTSTRAP, json.dumps(sys.path), *map(str, fds), name],
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
        )
    except BaseException:
        os.close(alive_read)
        raise
    finally:
        os.close(alive_write)
    return ScriptProcess(popen, alive_read)
