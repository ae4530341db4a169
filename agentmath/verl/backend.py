"""verl's server manager as an agentmath :class:`~agentmath.backends.base.Backend`.

Inside verl an agent loop generates through ``server_manager.generate(request_id, prompt_ids=...,
sampling_params=...)``: token ids in, a ``TokenOutput`` (``token_ids``, ``log_probs``,
``stop_reason``) out, on one of verl's rollout servers (vLLM by default). That is the shape of
agentmath's own Backend protocol, so this adapter lets an unmodified agentmath
:class:`~agentmath.agent.episode.Episode` run on verl's servers and keep its token-exact
trajectory: the context sent at every turn is the concatenation of recorded ids, and nothing
is re-tokenized.

What verl's reply lacks is made up here, the way agentmath's other backends do it:

* **Stop strings.** The format's stop strings go to the server as ``stop``, with the flag that
  keeps the matched string in the output (agentmath keeps the closing marker in the model's
  text): vLLM's ``include_stop_str_in_output``, or SGLang's ``no_stop_trim`` when verl's
  rollout is SGLang (``rollout.name``; verl's SGLang server passes the sampling dict to
  SGLang as is, and translates only ``max_tokens`` and ``logprobs``).
* **Text and finish reason.** verl returns ids only and says ``completed`` for both a stop and
  a length cut, so the text is decoded from the ids with verl's own tokenizer (as the ``hf``
  backend does) and the reason is read from it: a stop string in the text is ``stop``, an
  end-of-turn id last is ``eos``, ``max_tokens`` ids is ``length``.
* **Prompt rendering and tool output ids** come from the same tokenizer (the chat template
  applied once to the prompt, tool output encoded on its own), off the event loop.

No verl import: the server manager and its reply are used by duck typing, so the adapter is
tested against a fake server manager with verl's interface.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from agentmath.backends.base import (
    FinishReason,
    Generation,
    SamplingParams,
    chat_prompt_ids,
    current_tag,
)
from agentmath.errors import BackendError

#: verl's sampling keys that agentmath's SamplingParams mirrors (verl's AgentLoopWorker sets
#: temperature, top_p, top_k, repetition_penalty and logprobs).
_MIRRORED = ("temperature", "top_p", "top_k")
#: The sampling key that keeps a matched stop string in the output, by rollout engine.
KEEP_STOP_KEY = {"vllm": "include_stop_str_in_output", "sglang": "no_stop_trim"}


def sampling_from_verl(params: Mapping[str, Any]) -> SamplingParams:
    """agentmath's record of verl's sampling params (what the trajectory's meta shows)."""
    values = {k: params[k] for k in _MIRRORED if params.get(k) is not None}
    return SamplingParams(**values, logprobs=bool(params.get("logprobs", True)))


class VerlBackend:
    """A Backend that generates through verl's ``server_manager`` (``LLMServerClient``).

    ``sampling_params`` is the dict verl hands the agent loop's ``run`` (its rollout or
    validation settings); every request sends it plus the turn's ``stop``/``max_tokens``.
    ``request_id`` is the sticky key verl's router keeps the episode on one server with; by
    default the current agentmath request tag's episode id. ``eos_token_ids`` mark the end of
    the model's turn (default: the tokenizer's ``eos_token_id``). ``engine`` is verl's rollout
    name (``vllm`` or ``sglang``): it decides how stop strings are asked to be kept.
    """

    name = "verl"

    def __init__(self, server_manager: Any, tokenizer: Any, sampling_params: Mapping[str, Any],
                 *, request_id: str | None = None,
                 eos_token_ids: Sequence[int] | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 engine: str = "vllm") -> None:
        if engine not in KEEP_STOP_KEY:
            raise BackendError(f"rollout.name: agentmath's verl backend runs on "
                               f"{' or '.join(KEEP_STOP_KEY)}, not {engine!r}")
        self.keep_stop_key = KEEP_STOP_KEY[engine]
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.sampling_params = dict(sampling_params)
        self.request_id = request_id
        eos = eos_token_ids if eos_token_ids is not None else [tokenizer.eos_token_id]
        self.eos_token_ids = frozenset(int(i) for i in eos if i is not None)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.preempted: int | None = None  # server preemptions of its requests (None: unknown)

    async def render_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The chat template applied once (with the generation prompt), then encoded."""
        return await asyncio.to_thread(chat_prompt_ids, self.tokenizer, messages,
                                       **self.chat_template_kwargs)

    async def tokenize(self, text: str) -> list[int]:
        """Ids of ``text`` (tool output) with no special tokens added."""
        return await asyncio.to_thread(
            lambda: list(self.tokenizer.encode(text, add_special_tokens=False)))

    def _request_id(self) -> str:
        if self.request_id is not None:
            return self.request_id
        tag = current_tag.get()
        if tag is None:
            raise BackendError("VerlBackend needs a request_id or an agentmath request tag "
                               "(an Episode sets one around every generate call)")
        return tag.episode_id

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        """One ``server_manager.generate`` call; ``sampling`` is ignored in favour of verl's
        own params (agentmath's record of them comes from :func:`sampling_from_verl`)."""
        params = {**self.sampling_params, "max_tokens": int(max_tokens)}
        if stop:
            params.update({"stop": list(stop), self.keep_stop_key: True})
        try:
            out = await self.server_manager.generate(
                request_id=self._request_id(), prompt_ids=list(prompt_ids),
                sampling_params=params)
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - verl's client raises Ray and server errors
            raise BackendError(f"verl server_manager.generate failed: "
                               f"{type(exc).__name__}: {exc}") from exc
        return self._generation(out, stop, max_tokens)

    def _generation(self, out: Any, stop: Sequence[str], max_tokens: int) -> Generation:
        """A TokenOutput read as agentmath's Generation (text and finish reason rebuilt)."""
        if out.stop_reason in ("aborted", "abort"):
            raise BackendError("the verl server aborted the request (generation paused for a "
                               "weight update); use verl's fully-async client to resume it")
        ids = [int(t) for t in out.token_ids]
        logprobs = [float(x) for x in out.log_probs] if out.log_probs else None
        if logprobs is not None and len(logprobs) != len(ids):
            raise BackendError(f"verl returned {len(logprobs)} logprobs for {len(ids)} tokens")
        if out.num_preempted is not None:
            self.preempted = (self.preempted or 0) + int(out.num_preempted)
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        matched = next((s for s in stop if s in text), None)
        reason: FinishReason
        if matched is not None:
            reason = "stop"
        elif ids and ids[-1] in self.eos_token_ids:
            reason = "eos"
        elif len(ids) >= max_tokens:
            reason = "length"
        else:  # the server ended the turn on its own (a stop token id, the context limit)
            reason = "eos"
        return Generation(ids, text, reason, matched, logprobs,
                          info={"verl_stop_reason": out.stop_reason})

    async def aclose(self) -> None:
        """Nothing to release: verl owns the servers."""
        return None
