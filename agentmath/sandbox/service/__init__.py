"""The sandbox as a network service (issue 12).

``agentmath sandbox serve`` runs :func:`create_app` under uvicorn: a bearer-token protected HTTP
API with stateful sessions (one sandbox worker each, cells numbered by the client so that a
retried request never runs a cell twice) and a SandboxFusion-compatible ``POST /run_code``, so
trainers that speak SandboxFusion (verl's sandbox tool, the ``sandbox-fusion`` client) can use
this sandbox unchanged.
"""

from __future__ import annotations

from agentmath.sandbox.service.app import create_app
from agentmath.sandbox.service.config import ServiceConfig, load_tokens

__all__ = ["ServiceConfig", "create_app", "load_tokens"]
