"""Generation backends: ``openai`` (any OpenAI-compatible server; a router over several),
``hf`` (local transformers), ``vllm`` (vLLM's offline engine), registered by name in
``registry.py`` (:data:`BACKENDS`, :func:`make_backend`). Each is imported only when asked for."""

from __future__ import annotations

from typing import Any

from agentmath.backends.base import (
    Backend,
    Generation,
    ModelNamed,
    RequestTag,
    SamplingParams,
    tagged,
)
from agentmath.backends.registry import (
    BACKENDS,
    BackendSettings,
    build_backend,
    check_backend,
    make_backend,
)

__all__ = ["BACKENDS", "Backend", "BackendSettings", "Generation", "RequestTag", "SamplingParams",
           "build_backend", "check_backend", "make_backend", "tagged", "use_model"]


def use_model(backend: Any, name: str) -> None:
    """Make ``backend`` send ``name`` as the model of its requests (it must be
    :class:`~agentmath.backends.base.ModelNamed`: an
    :class:`~agentmath.backends.openai.OpenAIBackend`, or a
    :class:`~agentmath.backends.router.Router` over such backends); TypeError otherwise."""
    if not isinstance(backend, ModelNamed):
        raise TypeError(f"{type(backend).__name__} has no model name to set")
    backend.use_model(name)
