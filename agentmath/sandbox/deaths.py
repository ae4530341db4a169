"""Why a sandbox worker died, in words for the model, and whose doing it was.

A worker that dies while running a snippet is either the snippet's doing (its CPU-time limit,
a C stack overflow, an exit it called, a forbidden system call) or not (a SIGKILL from outside,
the host's OOM killer, a lost channel). The first is the model's outcome; the second is the
infrastructure's (``ExecResult.infra``), which RL leaves out of its statistics and evaluation
records as an error.
"""

from __future__ import annotations

import signal
from typing import Any

#: Signals a worker dies of by its own doing: its CPU-time limit, or a fault of the code it
#: ran (a C stack overflow, an abort, a bad instruction, a call the seccomp filter forbids).
#: Any other death (SIGKILL or SIGTERM from outside, the host's OOM killer, a lost channel)
#: is the infrastructure's.
_CODE_SIGNALS = frozenset({signal.SIGXCPU, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS,
                           signal.SIGFPE, signal.SIGILL, signal.SIGSYS})


def infra_death(status: dict[str, Any] | None, violation: object) -> bool:
    """Whether a worker's death was the infrastructure's rather than its code's: a protocol
    violation or an exit code is the code's doing (it wrote to the channel, it exited), as
    are the signals of ``_CODE_SIGNALS``; no status at all (the channel failed and the
    process said nothing) or another signal is not."""
    if violation is not None:
        return False
    if status is None:
        return True
    sig = status.get("signal")
    return bool(sig) and sig not in _CODE_SIGNALS


def death_reason(status: dict[str, Any] | None) -> str:
    """How a worker died (its exit status from the zygote), for the snippet's error."""
    if status is None:
        return "the sandbox process died"
    sig = status.get("signal")
    if sig == signal.SIGXCPU:
        return "the session used up its CPU-time limit and was killed"
    if sig == signal.SIGSEGV:
        return "the sandbox process crashed (segmentation fault, e.g. C stack overflow)"
    if sig:
        return f"the sandbox process was killed by {signal.Signals(sig).name}"
    return f"the sandbox process exited with code {status.get('code')}"
