"""The sandbox client of a command, from its config: one place for eval, synth (and rl).

With service URLs (``--sandbox-url``) the client is a :class:`RemoteSandbox` on those sandbox
services; without, a local :class:`SandboxPool` from the ``sandbox`` section. The token of the
services comes from ``token_file`` (its first token) or else the ``AGENTMATH_SANDBOX_TOKEN``
environment variable, so it never appears on a command line or in a saved config.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from agentmath.config import SandboxConfig
from agentmath.sandbox.client import SandboxClient

TOKEN_ENV = "AGENTMATH_SANDBOX_TOKEN"


def sandbox_token(token_file: str | Path | None) -> str | None:
    """The service token: the first token of ``token_file``, else ``$AGENTMATH_SANDBOX_TOKEN``
    (None when neither is set). Raises :class:`~agentmath.errors.ConfigError` naming a token
    file that cannot be read or holds no token."""
    if token_file is not None:
        from agentmath.sandbox.service.config import load_tokens

        return load_tokens(Path(token_file))[0]
    return os.environ.get(TOKEN_ENV) or None


@contextlib.asynccontextmanager
async def open_sandbox(config: SandboxConfig, urls: Sequence[str] | None = None,
                       token_file: str | Path | None = None) -> AsyncIterator[SandboxClient]:
    """``async with open_sandbox(...) as sandbox``: a remote client when ``urls`` are given,
    else a started local pool; closed on exit."""
    if urls:
        from agentmath.sandbox.remote import RemoteSandbox

        async with RemoteSandbox(list(urls), sandbox_token(token_file)) as remote:
            yield remote
    else:
        from agentmath.sandbox.pool import SandboxPool

        async with SandboxPool(config) as pool:
            yield pool
