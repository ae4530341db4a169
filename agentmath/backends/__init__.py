"""Generation backends: ``openai`` (any OpenAI-compatible server), ``hf`` (local transformers),
``vllm`` (vLLM's offline engine). Each is imported only when asked for."""

from __future__ import annotations

from typing import Any

from agentmath.backends.base import Backend, Generation, RequestTag, SamplingParams, tagged

BACKENDS = ("openai", "hf", "vllm")


def make_backend(kind: str, model: str, *, base_url: str | None = None,
                 **kwargs: Any) -> Backend:
    """Build a backend by name. ``model`` is a served model name (openai) or a path (hf, vllm)."""
    if kind == "openai":
        if not base_url:
            raise ValueError("the openai backend needs --base-url (e.g. http://127.0.0.1:8000)")
        from agentmath.backends.openai import OpenAIBackend

        return OpenAIBackend(base_url, model, **kwargs)
    if kind == "hf":
        from agentmath.backends.hf import HFBackend

        return HFBackend(model, **kwargs)
    if kind == "vllm":
        from agentmath.backends.vllm_engine import VLLMBackend

        return VLLMBackend(model, **kwargs)
    raise ValueError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "Generation", "RequestTag", "SamplingParams", "make_backend",
           "tagged"]
