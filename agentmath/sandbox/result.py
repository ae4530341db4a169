"""What one snippet produced, as the host (and later the model) sees it."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
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
    sanitized: int = 0
    duration_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the snippet ran to completion without an error."""
        return self.error is None and not self.timed_out and not self.crashed

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (used by the CLI and by trajectories)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecResult:
        """Inverse of :meth:`to_dict`; unknown keys are rejected by the constructor."""
        return cls(**data)
