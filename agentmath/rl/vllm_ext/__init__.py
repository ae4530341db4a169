"""The server side of weight sync: ``vllm serve``'s flags, and code that runs inside vLLM.

:func:`server_options` gives the flags and environment a vLLM server needs so that
:class:`~agentmath.rl.sync_vllm.VLLMWeightSync` can push to it; :mod:`.agentmath_vllm_ext` is
the worker extension those flags load into the server (it imports nothing of agentmath's, as
the server's interpreter need not have agentmath installed).
"""

from __future__ import annotations

import os
from pathlib import Path

from agentmath.errors import ConfigError
from agentmath.rl.vllm_ext import agentmath_vllm_ext

__all__ = ["EXTENSION_CLS", "EXTENSION_DIR", "server_options"]

_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM 0.32's --max-lora-rank choices
#: Where the worker extension lives, and its class as ``--worker-extension-cls`` names it.
EXTENSION_DIR = Path(agentmath_vllm_ext.__file__).parent
EXTENSION_CLS = "agentmath_vllm_ext.WeightSyncExtension"


def server_options(lora_rank: int | None = None,
                   keep: int = 2) -> tuple[list[str], dict[str, str]]:
    """``(extra_args, env)`` for ``vllm serve`` (e.g. :func:`agentmath.serving.servers.
    start_vllm_server`) so that :class:`~agentmath.rl.sync_vllm.VLLMWeightSync` can push to
    it: dev mode (reload, cache reset) and agentmath's worker extension always (its folder put
    first on the server's ``PYTHONPATH``: nothing else of agentmath's), runtime LoRA loading
    with ``lora_rank`` (rounded up to a rank vLLM accepts) and ``keep`` adapters servable at
    once."""
    path = os.pathsep.join(filter(None, [str(EXTENSION_DIR), os.environ.get("PYTHONPATH")]))
    env = {"VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": path}
    args = ["--worker-extension-cls", EXTENSION_CLS]
    if lora_rank is None:
        return args, env
    rank = next((r for r in _LORA_RANKS if r >= lora_rank), None)
    if rank is None:
        raise ConfigError(f"LoRA rank {lora_rank} is above vLLM's largest, {_LORA_RANKS[-1]}")
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    return [*args, "--enable-lora", "--max-lora-rank", str(rank), "--max-loras", str(keep),
            "--max-cpu-loras", str(keep)], env
