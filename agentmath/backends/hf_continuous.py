"""Continuous batching for the in-process transformers backend (``HFBackend(continuous=True)``).

Episodes that wait for the model share one decode batch whatever turn they are in: a request
joins the running batch at the next decode step (its prompt prefilled on its own, then its KV
cache merged in), and a row leaves it as soon as it ends (end of turn, stop string or
``max_tokens``). Batched ``generate`` calls instead ran to the end of their longest row, so an
episode back from a tool call waited for the whole batch, and episodes at different turns ended
up in many small calls, each paying the per-step cost of the model for a few rows.

Why a hand-written loop over the model's own forward and cache (transformers' ``DynamicCache``
with layers that append, add and drop rows in place: :mod:`~agentmath.backends.hf_kv`) rather
than a library's: on CPUs transformers' ``ContinuousBatchingManager`` / ``generate_batch``
is several times slower than one plain batched ``model.generate`` (its CPU path attends over
the whole flattened batch with a dense mask, so each decode step costs O(batch tokens x
queries); docs/benchmarks.md has the figures); vLLM's CPU engine needs its own 3.5 GB
environment (it pins transformers < 5.20) and a server process.
The loop here is plain batched decoding with a left-padded cache, as ``generate`` does,
with rows added and removed between steps.

The state of the running batch (:class:`_DecodeBatch`) is touched only on the backend's model
thread, one short call at a time (admission and one decode step), so that an RL trainer that
shares the model runs its update on that thread between steps. Rows in flight then continue
under the new weights with the KV cache of the old ones (as a server with in-flight weight
updates does); their logprobs are still those of the distribution each token was sampled from.

Sampling is per request (:mod:`agentmath.backends.hf_sampling`): each row has its own
``torch.Generator`` seeded from ``SamplingParams.seed`` and draws one uniform per token, so a
request's sampled tokens depend on its own seed and prompt, not on what else is in the batch
(the gathered ``generate`` calls seed one generator per batch). Greedy when temperature is 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

from agentmath._lazy import require
from agentmath.backends.base import Generation, SamplingParams, nothing_sampled
from agentmath.backends.hf_decode import DecodeBatch, Row, RunOnModelThread
from agentmath.backends.hf_prefix import PrefixStash
from agentmath.backends.hf_sampling import RowRandom
from agentmath.errors import BackendError, RequestRejected

log = logging.getLogger(__name__)
class ContinuousBatcher:
    """Requests in, generations out, with one running decode batch (see the module docstring).

    ``run`` calls a function on the model thread (``HFBackend.run_on_model_thread``). At most
    ``max_batch`` rows decode together; others wait, first come first served. Each call into
    the model admits what waits and decodes ``steps_per_call`` steps. ``prefix_rows`` finished
    rows keep their KV for the request that continues them (:mod:`~agentmath.backends.hf_prefix`;
    0: every prompt is prefilled whole)."""

    def __init__(self, model: Any, tokenizer: Any, *, eos_ids: Sequence[int], pad_id: int,
                 device: Any, max_batch: int, run: RunOnModelThread,
                 steps_per_call: int = 1, prefix_rows: int = 0) -> None:
        self._prefixes = PrefixStash(model, prefix_rows)
        self._make_batch = lambda: DecodeBatch(model, tokenizer, eos_ids, pad_id, device,
                                                self._prefixes)
        self.vocab = model.get_input_embeddings().num_embeddings
        self.max_batch = max_batch
        self.steps_per_call = steps_per_call
        self._run = run
        self._batch = self._make_batch()
        self._waiting: deque[Row] = deque()
        self._active: set[Row] = set()
        self._wake: asyncio.Event | None = None  # made with the loop's task (its event loop)
        self._task: asyncio.Task[None] | None = None
        transformers = require("transformers", "train")
        layers = transformers.DynamicCache(config=model.config).layers
        if any(type(layer) is not transformers.DynamicLayer for layer in layers):
            raise BackendError("continuous batching needs a model whose layers all use full "
                               "attention (a DynamicLayer cache); use continuous=False")

    @property
    def prefix_reuse(self) -> tuple[int, int]:
        """(requests that reused a stashed prefix, prompt tokens they did not prefill)."""
        return self._prefixes.hits, self._prefixes.reused_tokens

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        """Queue a request; it joins the running batch at the next decode step."""
        prompt = list(prompt_ids)
        if not prompt or min(prompt) < 0 or max(prompt) >= self.vocab:
            raise RequestRejected(f"prompt ids must be non-empty and in [0, {self.vocab})")
        if max_tokens <= 0:
            return nothing_sampled(sampling)
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        row = Row(prompt, tuple(stop), max_tokens, sampling, future,
                   stop_len=max((len(s) for s in stop), default=0),
                   random=RowRandom(sampling.seed) if sampling.temperature > 0 else None)
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._serve(self._wake))
            self._task.add_done_callback(self._served)
        self._waiting.append(row)
        assert self._wake is not None
        self._wake.set()
        return await future

    async def _serve(self, wake: asyncio.Event) -> None:
        """Admit what waits and decode, one short call on the model thread at a time."""
        while True:
            while self._waiting and self._waiting[0].future.done():
                self._waiting.popleft()  # its caller gave up before it was admitted
            if not self._waiting and not self._active:
                wake.clear()
                await wake.wait()
                continue
            admit: list[Row] = []
            while self._waiting and len(self._active) + len(admit) < self.max_batch:
                row = self._waiting.popleft()
                if not row.future.done():
                    admit.append(row)
            drop = [r for r in self._active if r.future.done()]
            self._active.difference_update(drop)
            self._active.update(admit)
            ended = await self._run(self._batch.advance, admit, drop, self.steps_per_call)
            for row, out in ended:
                self._active.discard(row)
                if row.future.done():
                    continue
                if isinstance(out, BackendError):
                    row.future.set_exception(out)
                else:
                    row.future.set_result(out)

    def _served(self, task: asyncio.Task[None]) -> None:
        """The loop ended without aclose (an error in the loop itself, not in a forward; or
        its event loop shut down): fail what it held, so that no caller waits forever, and
        start afresh on the next request."""
        if self._task is not task:
            return  # aclose stopped it
        self._task = None
        error = None if task.cancelled() else task.exception()
        if error is not None:
            log.error("continuous batching loop failed", exc_info=error)
        self._fail_all(BackendError(f"generation loop failed: {error!r}") if error is not None
                       else BackendError("the generation loop was cancelled"))

    def _fail_all(self, error: BackendError) -> None:
        for row in [*self._waiting, *self._active]:
            if not row.future.done():
                row.future.set_exception(error)
        self._waiting.clear()
        self._active.clear()
        self._batch = self._make_batch()  # a call still running on the thread keeps the old

    async def aclose(self) -> None:
        """Stop the loop; requests still waiting or running fail with BackendError."""
        task, self._task = self._task, None
        self._fail_all(BackendError("the backend was closed"))
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
