"""What one snippet produced, as the host (and later the model) sees it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
