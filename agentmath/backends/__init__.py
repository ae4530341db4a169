"""Generation backends: ``openai`` (any OpenAI-compatible server), ``hf`` (local transformers),
``vllm`` (vLLM's offline engine). Each is imported only when asked for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentmath.backends.base import (
    Backend,
    Generation,
    ModelNamed,
    RequestTag,
    SamplingParams,
    tagged,
)

BACKENDS = ("openai", "hf", "vllm")


def make_backend(kind: str, model: str, *, base_url: str | Sequence[str] | None = None,
                 **kwargs: Any) -> Backend:
    """Build a backend by name. ``model`` is a served model name (openai) or a path (hf, vllm).

    For ``openai``, several URLs give a :class:`~agentmath.backends.router.Router` over one
    server backend per URL (a malformed or duplicate URL is a ConfigError naming it).
    """
    if kind == "openai":
        urls = [base_url] if isinstance(base_url, str) else list(base_url or [])
        if not urls:
            raise ValueError("the openai backend needs --base-url (e.g. http://127.0.0.1:8000)")
        if len(urls) > 1:
            from agentmath.backends.router import Router

            return Router.from_urls(urls, model, **kwargs)
        from agentmath.backends.openai import OpenAIBackend

        return OpenAIBackend(urls[0], model, **kwargs)
    if kind == "hf":
        from agentmath.backends.hf import HFBackend

        return HFBackend(model, **kwargs)
    if kind == "vllm":
        from agentmath.backends.vllm_engine import VLLMBackend

        return VLLMBackend(model, **kwargs)
    raise ValueError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "Generation", "RequestTag", "SamplingParams", "make_backend",
           "tagged", "use_model"]


def use_model(backend: Any, name: str) -> None:
    """Make ``backend`` send ``name`` as the model of its requests (it must be
    :class:`~agentmath.backends.base.ModelNamed`: an
    :class:`~agentmath.backends.openai.OpenAIBackend`, or a
    :class:`~agentmath.backends.router.Router` over such backends); TypeError otherwise."""
    if not isinstance(backend, ModelNamed):
        raise TypeError(f"{type(backend).__name__} has no model name to set")
    backend.use_model(name)
