"""Configuration of the sandbox service (``agentmath sandbox serve``); no torch import."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from agentmath.config import SandboxConfig, StrictModel
from agentmath.errors import ConfigError


class ServiceConfig(StrictModel):
    """Where the service listens, who may use it, and the bounds that keep it responsive.

    Every bound answers 429 (with ``Retry-After``) when reached rather than queueing without
    limit, so an overloaded service sheds load instead of growing its memory and latency.
    """

    host: str = Field("127.0.0.1", min_length=1, description=(
        "Address to listen on; 127.0.0.1 keeps the service local, 0.0.0.0 exposes it."))
    port: int = Field(8080, ge=0, le=65535, description="TCP port (0: any free port).")
    token_file: Path | None = Field(None, description=(
        "File holding the accepted bearer tokens, one per line (blank lines and lines starting "
        "with # ignored). Required unless allow_no_auth."))
    allow_no_auth: bool = Field(False, description=(
        "Serve without authentication (only for a trusted, local network)."))
    access_log: bool = Field(True, description=(
        "Log every request at level info (off saves CPU at thousands of cells per second)."))
    idle_timeout_s: float = Field(600.0, gt=0, le=86_400, description=(
        "A session unused for this long is closed and its worker killed; later requests to it "
        "get 404."))
    max_sessions_per_client: int = Field(256, ge=1, le=100_000, description=(
        "Open sessions one client (token) may hold; one more gets 429."))
    max_inflight_per_client: int = Field(64, ge=1, le=100_000, description=(
        "Cells one client may have running at once (sessions and /run_code); more get 429."))
    max_inflight_total: int = Field(256, ge=1, le=100_000, description=(
        "Cells running at once over all clients: the backpressure bound; more get 429."))
    max_body_bytes: int = Field(1_048_576, ge=1024, le=1 << 30, description=(
        "Largest request body accepted; a larger one gets 413 before any code runs."))
    retry_after_s: int = Field(1, ge=1, le=3600, description=(
        "Seconds sent in the Retry-After header of a 429 or 503 reply."))
    shutdown_grace_s: float = Field(30.0, ge=0, le=3600, description=(
        "On shutdown, how long running cells may take to finish before their sessions are "
        "closed (a cell's own time limit still applies)."))
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description=(
        "The sandbox pool behind the service (its max_sessions bounds open sessions)."))

    @model_validator(mode="after")
    def _auth_configured(self) -> ServiceConfig:
        if self.token_file is None and not self.allow_no_auth:
            raise ValueError("token_file is required unless allow_no_auth is set")
        return self


def load_tokens(path: Path) -> list[str]:
    """The tokens in ``path``: one per line, blank lines and ``#`` comments skipped.

    Raises :class:`ConfigError` naming the file when it cannot be read or holds no token.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"{path}: cannot read token file: {exc}") from exc
    tokens = [line.strip() for line in text.splitlines()
              if line.strip() and not line.strip().startswith("#")]
    if not tokens:
        raise ConfigError(f"{path}: token file holds no token")
    return tokens
