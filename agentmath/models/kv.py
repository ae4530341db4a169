"""The keyword under which a transformers causal LM's forward takes a KV cache.

transformers renamed it: ``past_key_values`` is deprecated from 5.24 (a warning on every
forward) and removed in 5.40; ``cache`` is the new name. The in-process generator and the RL
update (a group's shared prompt run once) both hand a cache to the forward; this module is
the one place that knows which name the installed version takes.
"""

from __future__ import annotations

from functools import cache

from agentmath._lazy import require

__all__ = ["cache_argument", "version_tuple"]


@cache
def cache_argument() -> str:
    """``"cache"`` on transformers >= 5.24, else ``"past_key_values"``."""
    transformers = require("transformers", "train")
    return "cache" if version_tuple(transformers.__version__) >= (5, 24) else "past_key_values"


def version_tuple(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``5.24.0`` or ``5.3.0.dev0``."""
    major, minor = (text.split(".") + ["0"])[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
