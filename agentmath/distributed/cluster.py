"""Connecting to a Ray cluster, and the one place that imports Ray (lazily).

Ray is an optional extra (``pip install 'agentmath[ray]'``); every entry point that needs it
goes through :func:`import_ray`, which names the extra when it is missing (MissingExtraError)
instead of failing with a bare ImportError deep inside a run.
"""

from __future__ import annotations

import logging
from typing import Any

from agentmath._lazy import require
from agentmath.errors import ConfigError

log = logging.getLogger(__name__)


def import_ray() -> Any:
    """The ``ray`` module, or a MissingExtraError naming the extra to install."""
    return require("ray", "ray")


def connect(address: str) -> bool:
    """Join the cluster at ``address`` ('auto', 'local' or a cluster address); True when this
    call started Ray (the caller shuts it down), False when it was already running here.

    Ray's own logs stay in its session directory rather than being echoed to the driver's
    terminal, and 'local' starts Ray without its dashboard (no extra server on the local machine).
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    try:
        if address == "local":
            ray.init(include_dashboard=False, **kwargs)
        else:
            ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"cannot join the Ray cluster at {address!r}: {exc}") from exc
    return True


def cpu_nodes() -> list[str]:
    """Ids of the alive nodes that have CPUs (where rollout workers can run)."""
    ray = import_ray()
    return [n["NodeID"] for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
