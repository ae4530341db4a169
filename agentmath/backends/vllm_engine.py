"""An in-process vLLM backend (``AsyncLLMEngine``), for a GPU box without an HTTP server.

vLLM is imported lazily: this module imports without it, and constructing
:class:`VLLMBackend` without it raises :class:`~agentmath.errors.MissingExtraError`
(``pip install 'agentmath[vllm]'``). The prompt is passed as ``TokensPrompt`` token ids and the
sampled ``CompletionOutput.token_ids`` are returned as they are, so it is token-exact like
:class:`~agentmath.backends.openai.OpenAIBackend`.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Sequence
from typing import Any

from agentmath._lazy import require
from agentmath.backends.base import FinishReason, Generation, SamplingParams
from agentmath.config import VLLMEngineConfig
from agentmath.errors import BackendError


def engine_args(settings: VLLMEngineConfig | None) -> dict[str, Any]:
    """The keyword arguments of ``vllm.AsyncEngineArgs`` (the same names as ``vllm.LLM``'s)
    that a run's engine settings give, besides the model path; None: none (vLLM's defaults).
    Pure, so that a test checks what reaches vLLM without importing it."""
    return settings.engine_kwargs() if settings is not None else {}


class VLLMBackend:
    """Token-exact generation with an in-process ``vllm.AsyncLLMEngine``.

    ``engine_kwargs`` go to ``vllm.AsyncEngineArgs`` (``dtype``, ``max_model_len``,
    ``gpu_memory_utilization``, ``enable_prefix_caching``, ...). The engine starts in the
    constructor (it loads the model), so build the backend once and share it.
    """

    name: str = "vllm"

    def __init__(self, model_path: str, **engine_kwargs: Any) -> None:
        self._vllm = require("vllm", "vllm")
        self.model_path = str(model_path)
        args = self._vllm.AsyncEngineArgs(model=self.model_path, **engine_kwargs)
        try:
            self._engine = self._vllm.AsyncLLMEngine.from_engine_args(args)
        except Exception as exc:  # vLLM raises many types; the boundary reports one
            raise BackendError(f"could not start vLLM on {self.model_path}: {exc}") from exc

    async def _tokenizer(self) -> Any:
        """The engine's tokenizer (``get_tokenizer`` is async in older vLLM, sync in newer)."""
        tokenizer = self._engine.get_tokenizer()
        return await tokenizer if inspect.isawaitable(tokenizer) else tokenizer

    async def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""
        tokenizer = await self._tokenizer()
        return [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]

    async def render_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of ``messages`` rendered with the model's chat template. Not
        :func:`~agentmath.backends.base.chat_prompt_ids`: vLLM's tokenizer may be one of its
        own (Mistral's, ``tokenizer_mode="mistral"``) that renders a chat to ids only; for a
        Hugging Face tokenizer both give the same ids (transformers encodes the rendered text
        with no special tokens added)."""
        tokenizer = await self._tokenizer()
        out = tokenizer.apply_chat_template([dict(m) for m in messages],
                                            add_generation_prompt=True, tokenize=True)
        ids = out["input_ids"] if hasattr(out, "keys") else out
        return [int(t) for t in ids]

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        """Continue ``prompt_ids``; the sampled ids are returned exactly (see OpenAIBackend)."""
        params = self._vllm.SamplingParams(
            n=1, max_tokens=max_tokens, stop=list(stop), include_stop_str_in_output=True,
            temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
            seed=sampling.seed, logprobs=0 if sampling.logprobs else None,
            skip_special_tokens=False)
        prompt = self._vllm.TokensPrompt(prompt_token_ids=[int(t) for t in prompt_ids])
        final = None
        try:
            async for output in self._engine.generate(prompt, params, uuid.uuid4().hex):
                final = output
        except Exception as exc:  # engine errors cross the boundary as BackendError
            raise BackendError(f"vLLM generation failed: {exc}") from exc
        if final is None or not final.outputs:
            raise BackendError("vLLM returned no output for the request")
        return _to_generation(final.outputs[0], want_logprobs=sampling.logprobs,
                              num_cached_tokens=getattr(final, "num_cached_tokens", None))

    async def aclose(self) -> None:
        """Shut the engine (and its engine-core process) down."""
        shutdown = getattr(self._engine, "shutdown", None)
        if shutdown is not None:
            shutdown()


def _to_generation(out: Any, *, want_logprobs: bool, num_cached_tokens: int | None) -> Generation:
    """A :class:`Generation` from a vLLM ``CompletionOutput``."""
    token_ids = [int(t) for t in out.token_ids]
    finish: FinishReason
    stop_string = None
    if out.finish_reason == "length":
        finish = "length"
    elif out.finish_reason == "stop" and isinstance(out.stop_reason, str):
        finish, stop_string = "stop", out.stop_reason
    elif out.finish_reason == "stop":
        finish = "eos"
    else:
        raise BackendError(f"vLLM finished with finish_reason={out.finish_reason!r}")
    logprobs = None
    if want_logprobs:
        if out.logprobs is None or len(out.logprobs) != len(token_ids):
            raise BackendError("vLLM returned no per-token logprobs")
        logprobs = [float(out.logprobs[i][tok].logprob) for i, tok in enumerate(token_ids)]
    info: dict[str, Any] = {"stop_reason": out.stop_reason}
    if num_cached_tokens is not None:
        info["cached_tokens"] = num_cached_tokens
    return Generation(token_ids=token_ids, text=out.text, finish_reason=finish,
                      stop_string=stop_string, logprobs=logprobs, info=info)
