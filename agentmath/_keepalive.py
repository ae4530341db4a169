"""The connection limits of agentmath's HTTP clients: idle connections kept for less time than
the servers keep theirs.

uvicorn, which serves vLLM's API and agentmath's sandbox service, closes a keep-alive
connection after 5 s idle (``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``, uvicorn's ``timeout_keep_alive``),
and httpx keeps an idle connection for 5 s too (``keepalive_expiry``): a request sent on a
connection idle for about 5 s races the server's close and fails with ``ReadError`` or
``RemoteProtocolError`` while the server is fine (the race as agentscope-ai/agentscope-runtime#468
traced it: the server's FIN and the client's next request cross). Two seconds leaves the
server's close well behind the client's. (Connections a busy server closes unanswered under a
burst of requests are not this race; the servers agentmath starts raise their own keep-alive
for those (``SERVER_KEEP_ALIVE_S``).)
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
