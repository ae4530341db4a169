"""The connection limits of agentmath's HTTP clients: idle connections kept for less time than
the servers keep theirs.

uvicorn, which serves vLLM's API and agentmath's sandbox service, closes a keep-alive
connection after 5 s idle (``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``, uvicorn's ``timeout_keep_alive``),
and httpx keeps an idle connection for 5 s too (``keepalive_expiry``): a request sent on a
connection idle for about 5 s races the server's close and fails with ``ReadError`` or
``RemoteProtocolError`` while the server is fine (the race as agentscope-ai/agentscope-runtime#468
traced it: the server's FIN and the client's next request cross). Two seconds leaves the
server's close well behind the client's. (The drops the rollout benchmark's calibration met on
2026-11-27, connections closed unanswered under a burst of 16-64 requests, went on with this
setting: they are not this race.)
"""

from __future__ import annotations

import httpx

#: Seconds an idle connection is kept (the servers' 5 s, less a margin).
KEEPALIVE_EXPIRY_S = 2.0


def client_limits(max_connections: int) -> httpx.Limits:
    """``max_connections`` connections, all of them reusable, idle ones dropped after
    :data:`KEEPALIVE_EXPIRY_S`."""
    return httpx.Limits(max_connections=max_connections,
                        max_keepalive_connections=max_connections,
                        keepalive_expiry=KEEPALIVE_EXPIRY_S)
