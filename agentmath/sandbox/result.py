"""What one snippet produced, as the host (and later the model) sees it."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

REPLACEMENT_CHAR = "\ufffd"
# Lone surrogates (not valid Unicode: they cannot be encoded as UTF-8) and control characters
# other than newline and tab (terminal escapes, carriage returns, NUL, C1 controls).
_UNSAFE_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def sanitize_text(text: str) -> tuple[str, int]:
    """``text`` as valid, printable, JSON-safe Unicode, and how many characters were replaced.

    Every lone surrogate and every control character except newline and tab becomes U+FFFD,
    so what leaves the sandbox can be encoded, printed to a terminal and written as JSON by any
    consumer. The count is reported as :attr:`ExecResult.sanitized`.
    """
    return _UNSAFE_CHARS.subn(REPLACEMENT_CHAR, text)


@dataclass(slots=True)
class ExecResult:
    """The outcome of running one snippet (a notebook cell) in a sandbox session.

    ``error`` is short and written for a model to read: the exception type and message and the
    offending line of the snippet, never a host traceback. Output over the configured limit
    keeps its head and tail and sets ``truncated``. ``state_lost`` says the session's process
    was restarted (after a timeout or a crash), so the variables of earlier snippets are gone.
    ``infra`` says the failure was the executor's, not the snippet's: the session's process was
    killed from outside (not by its own limits or a fault of its code), its channel was lost,
    or the sandbox service could not be reached; RL leaves such a sample out of its group's
    statistics and evaluation records it as an error, where a snippet's own error, timeout or
    crash stays the model's.
    """

    stdout: str = ""
    stderr: str = ""
    value: str | None = None
    error: str | None = None
    error_type: str | None = None
    error_line: int | None = None
    timed_out: bool = False
    truncated: bool = False
    state_lost: bool = False
    crashed: bool = False
    infra: bool = False
    sanitized: int = 0
    duration_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the snippet ran to completion without an error."""
        return self.error is None and not self.timed_out and not self.crashed

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (used by the CLI, the service and trajectories).

        Written out rather than ``dataclasses.asdict``, which walks every field recursively:
        it was 7% of the sandbox service's CPU per cell (py-spy, paced at 1,000 cells/s).
        A unit test holds it equal to ``asdict`` over every field (``infra`` only when set).
        """
        out = {"stdout": self.stdout, "stderr": self.stderr, "value": self.value,
               "error": self.error, "error_type": self.error_type,
               "error_line": self.error_line, "timed_out": self.timed_out,
               "truncated": self.truncated, "state_lost": self.state_lost,
               "crashed": self.crashed, "infra": self.infra, "sanitized": self.sanitized,
               "duration_ms": self.duration_ms,
               "extra": copy.deepcopy(self.extra) if self.extra else {}}
        if not self.infra:  # only when set: records written before it come back unchanged
            del out["infra"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecResult:
        """Inverse of :meth:`to_dict`; unknown keys are rejected by the constructor."""
        return cls(**data)
