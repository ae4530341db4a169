"""Lazy imports of optional heavy dependencies, with a clear message when one is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from agentmath.errors import MissingExtraError


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(module, extra) from exc
