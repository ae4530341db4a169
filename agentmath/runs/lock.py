"""One run at a time per run directory: an advisory ``flock`` on ``RUN_DIR/.lock``.

Two ``agentmath eval`` processes on one directory would both skip the same finished samples
and both run the rest, appending duplicates. The first process takes an exclusive lock on the
lock file and writes who it is (pid, host, command, start time); a second one fails at once
with :class:`RunLockedError` naming that holder. The kernel drops the lock when the holder's
file descriptor closes, so a run killed with ``kill -9`` leaves nothing to clean up: the stale
text in the file is only read when the lock is actually held by someone.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from agentmath.errors import AgentMathError
from agentmath.runs.files import LOCK_FILE


class RunLockedError(AgentMathError):
    """The run directory is in use by another process; the message names the holder."""


def _holder_info() -> dict[str, Any]:
    """Who this process is, as written into the lock file."""
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "command": shlex.join(sys.argv),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _describe(raw: str) -> str:
    """A person-readable holder from the lock file's text (which may be empty or partial)."""
    try:
        info = json.loads(raw)
    except ValueError:
        info = None
    if not isinstance(info, dict):
        return "another process (it has not written its details yet)"
    return (f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started "
            f"{info.get('started', '?')}: {info.get('command', '?')}")


class RunLock:
    """An exclusive, non-blocking lock on a run directory; use as a context manager.

    Locks are per open file, so a second :class:`RunLock` on the same directory fails even in
    the same process (two ``run_eval`` calls on one directory are refused just the same).
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock or raise :class:`RunLockedError` naming the process that holds it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunLockedError(f"cannot open the lock file {self.path}: {exc.strerror}") \
                from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raw = os.pread(fd, 4096, 0).decode("utf-8", "replace")
            os.close(fd)
            raise RunLockedError(
                f"{self.path.parent} is in use by another run ({_describe(raw)}); wait for "
                f"it to finish or stop it, or use another --out") from None
        except OSError as exc:  # e.g. a file system without flock support
            os.close(fd)
            raise RunLockedError(f"cannot lock {self.path}: {exc.strerror}") from exc
        self._fd = fd
        data = (json.dumps(_holder_info()) + "\n").encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    def release(self) -> None:
        """Drop the lock (the holder text goes first, so nobody reads a stale one)."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
