"""Host-wide leases of worker uids, so that no two live pools ever share a uid.

When the host is root, each worker runs as its own unprivileged uid. Two pools on one host
(two evaluation runs, a trainer and an evaluator) must never hand out the same uid: a worker of
one would be the *same user* as a worker of the other. A pool therefore leases a block of uids
for its lifetime: one lock file per block of 64 uids in a root-only directory, held with
``flock``. The kernel drops the lock when the holder exits however it exits (``kill -9``
included), so a crashed pool never strands its uids; and a block is taken only if no live
process still runs as one of its uids (a dying worker of a killed pool, say).

Written by hand: it is a few lines over ``fcntl.flock``, and no library leases id ranges.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from agentmath.errors import SandboxError

BLOCK = 64
LOCK_DIR = "/run/agentmath/sandbox-uids"
MAX_UID = 2**31 - 2  # below the kernel's (uid_t)-1 "no uid"


class UidLease:
    """``count`` uids from ``start``, reserved host-wide until :meth:`release`."""

    def __init__(self, start: int, count: int, fds: list[int]) -> None:
        self.start = start
        self.count = count
        self._fds = fds

    @property
    def held(self) -> bool:
        """Whether the range is locked host-wide (False: no lock needed, e.g. not root)."""
        return bool(self._fds)

    def release(self) -> None:
        """Give the uids back (idempotent); call it once every worker has been reaped."""
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def live_uids() -> set[int]:
    """Real and effective uids of every process on the host (from /proc/PID/status).

    Not the owner of /proc/PID: a process that changed uid is not dumpable, and its /proc
    entry then belongs to root.
    """
    uids: set[int] = set()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{name}/status") as fh:
                    for line in fh:
                        if line.startswith("Uid:"):
                            uids.update(int(v) for v in line.split()[1:3])
                            break
    return uids


def _try_block(lock_dir: str, block_start: int) -> int | None:
    path = os.path.join(lock_dir, f"{block_start // BLOCK}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def lease_uids(base: int, count: int, lock_dir: str = LOCK_DIR,
               max_tries: int = 4096) -> UidLease:
    """Reserve ``count`` consecutive uids at or above ``base`` for this pool.

    Not root: no uid is ever switched to, so nothing is locked and ``base`` is returned.
    Raises :class:`SandboxError` if no free range is found within ``max_tries`` blocks.
    """
    if os.geteuid() != 0:
        return UidLease(base, count, [])
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    blocks = -(-count // BLOCK)
    busy = live_uids()
    # Blocks are aligned to multiples of BLOCK host-wide, so any two overlapping ranges share
    # a lock file, whatever base each pool was configured with.
    start = -(-base // BLOCK) * BLOCK
    for _ in range(max_tries):
        if start + blocks * BLOCK > MAX_UID:
            break
        if not any(start <= uid < start + blocks * BLOCK for uid in busy):
            fds = []
            for i in range(blocks):
                fd = _try_block(lock_dir, start + i * BLOCK)
                if fd is None:
                    break
                fds.append(fd)
            if len(fds) == blocks:
                return UidLease(start, count, fds)
            UidLease(start, count, fds).release()
        start += BLOCK
    raise SandboxError(f"no free range of {count} sandbox uids at or above {base} "
                       f"(every block is leased by another pool or still has live processes)")
