"""A local transformers model as a backend (CPU here, GPU where there is one).

Concurrent requests share the model on one worker thread, which is what makes a small model fast
enough on a CPU to evaluate hundreds of samples. Two ways:

* ``continuous=True`` (the default): continuous batching, :mod:`~agentmath.backends.hf_continuous`:
  one running decode batch that a request joins at the next step and leaves as soon as it ends,
  whatever turn of its episode it is in; sampling is seeded per request.
* ``continuous=False``: the requests queued when a call starts that have the same shape are
  generated together in one left-padded ``model.generate`` call that runs to its longest row.

Either way each row is cut at its own stop string or end-of-turn token; the ids returned are the
ids sampled, including a last token that may run past the stop string.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from agentmath._lazy import require
from agentmath.backends.base import Generation, SamplingParams, chat_prompt_ids
from agentmath.backends.hf_continuous import ContinuousBatcher
from agentmath.backends.hf_decode import Request
from agentmath.errors import BackendError
from agentmath.models.local import model_dir_problem

T = TypeVar("T")


def _batch_key(req: Request) -> tuple[Any, ...]:
    """Requests that can share one ``generate`` call. Per-request seeds are not part of it: a
    batch samples from one generator seeded by its first request, so sampled outputs are
    reproducible for the same schedule but not per request (greedy decoding is unaffected)."""
    s = req.sampling
    return req.stop, s.temperature, s.top_p, s.top_k, s.logprobs


class HFBackend:
    """Generate with ``transformers`` from a model directory or loaded objects.

    ``max_batch`` bounds the rows generated together; ``continuous`` chooses continuous
    batching (default) or the gathered ``generate`` calls (see the module docstring);
    ``prefix_cache_rows`` (continuous only) finished generations keep their KV cache for the
    next turn of their episode (0: off)."""

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any = None, *, max_batch: int = 32,
                 device: str | None = None, continuous: bool = True,
                 prefix_cache_rows: int = 64) -> None:
        self.torch = require("torch", "train")
        transformers = require("transformers", "train")
        if isinstance(model, str):
            problem = model_dir_problem(model, hub_ids=True)
            if problem is not None:
                raise BackendError(f"{model}: {problem}")
            try:
                tokenizer = tokenizer or transformers.AutoTokenizer.from_pretrained(model)
                model = transformers.AutoModelForCausalLM.from_pretrained(model)
            except OSError as exc:
                raise BackendError(f"cannot load a transformers model from {model!r}: {exc}") \
                    from exc
        if tokenizer is None:
            raise BackendError("HFBackend needs a tokenizer when given a model object")
        self.device = device or ("cuda" if self.torch.cuda.is_available() else "cpu")
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.eos_ids = self._eos_ids()
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
            else self.eos_ids[0]
        self._queue: asyncio.Queue[Request] | None = None
        self._worker: asyncio.Task[None] | None = None
        # One OS thread for every call into the model: each thread that runs torch gets its own
        # OpenMP pool, and two pools spinning on a small CPU slow each other down (a generate
        # call right after a backward pass on another thread is several times slower). A trainer
        # sharing this model runs its update here too (run_on_model_thread).
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._batcher = ContinuousBatcher(
            self.model, tokenizer, eos_ids=self.eos_ids, pad_id=self.pad_id, device=self.device,
            max_batch=max_batch, run=self.run_on_model_thread,
            prefix_rows=prefix_cache_rows) if continuous else None

    def _eos_ids(self) -> list[int]:
        ids = self.model.generation_config.eos_token_id
        ids = ids if isinstance(ids, list) else [ids]
        if self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        return sorted({i for i in ids if i is not None})

    async def render_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Apply the tokenizer's chat template with the generation prompt."""
        return chat_prompt_ids(self.tokenizer, messages)

    async def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    async def detokenize(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        """Queue a request: it joins the running batch at its next step (continuous), or a
        batching worker generates it with others of the same shape."""
        if self._batcher is not None:
            return await self._batcher.generate(prompt_ids, stop=stop, max_tokens=max_tokens,
                                                sampling=sampling)
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._serve())
        fut: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        await self._queue.put(Request(list(prompt_ids), tuple(stop), max_tokens, sampling, fut))
        return await fut

    async def _serve(self) -> None:
        assert self._queue is not None
        while True:
            first = await self._queue.get()
            await asyncio.sleep(0)  # let concurrent callers enqueue, then batch them
            batch, rest = [first], []
            while not self._queue.empty() and len(batch) < self.max_batch:
                req = self._queue.get_nowait()
                (batch if _batch_key(req) == _batch_key(first) else rest).append(req)
            for req in rest:
                self._queue.put_nowait(req)
            try:
                outs = await self.run_on_model_thread(self._generate_batch, batch)
            except (RuntimeError, ValueError) as exc:
                for req in batch:
                    if not req.future.done():
                        req.future.set_exception(BackendError(f"generation failed: {exc}"))
                continue
            for req, out in zip(batch, outs, strict=True):
                if not req.future.done():
                    req.future.set_result(out)

    def _generate_batch(self, batch: list[Request]) -> list[Generation]:
        torch = self.torch
        width = max(len(r.prompt) for r in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, req in enumerate(batch):
            ids[i, width - len(req.prompt):] = torch.tensor(req.prompt)
            mask[i, width - len(req.prompt):] = 1
        s = batch[0].sampling
        if s.seed is not None:
            torch.manual_seed(s.seed)
        kwargs: dict[str, Any] = {"do_sample": s.temperature > 0}
        if s.temperature > 0:
            kwargs.update(temperature=s.temperature, top_p=s.top_p,
                          top_k=s.top_k if s.top_k > 0 else None)
        if batch[0].stop:
            kwargs.update(stop_strings=list(batch[0].stop), tokenizer=self.tokenizer)
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                max_new_tokens=max(r.max_tokens for r in batch), eos_token_id=self.eos_ids,
                pad_token_id=self.pad_id, return_dict_in_generate=True, output_logits=True,
                **kwargs)
        new = out.sequences[:, width:].tolist()
        logprobs = None
        if s.logprobs and out.logits:
            # The distribution sampled from: logits / temperature (top-p/top-k cuts aside),
            # which is what an RL trainer's importance weights compare against; greedy: raw.
            stacked = torch.stack(out.logits, dim=1).float()
            if s.temperature > 0:
                stacked = stacked / s.temperature
            stacked = stacked.log_softmax(-1)
            logprobs = stacked.gather(-1, out.sequences[:, width:, None]).squeeze(-1).tolist()
        return [self._cut(row, req, logprobs[i] if logprobs else None)
                for i, (row, req) in enumerate(zip(new, batch, strict=True))]

    def _cut(self, row: list[int], req: Request, logprobs: list[float] | None) -> Generation:
        """Trim a batch row at its own end: the first stop string, end-of-turn or max_tokens."""
        text, end, reason, matched = "", len(row), "length", None
        for i, tok in enumerate(row[: req.max_tokens]):
            if tok in self.eos_ids:
                end, reason = i + 1, "eos"
                break
            piece = self.tokenizer.decode([tok], skip_special_tokens=False)
            text += piece
            tail = text[-(len(piece) + max((len(x) for x in req.stop), default=0)):]
            hit = next((x for x in req.stop if x in tail), None)
            if hit is not None:
                end, reason, matched = i + 1, "stop", hit
                break
        else:
            end = min(len(row), req.max_tokens)
        ids = row[:end]
        return Generation(ids, self.tokenizer.decode(ids, skip_special_tokens=False),
                          reason, matched, logprobs[:end] if logprobs else None)  # type: ignore[arg-type]

    async def run_on_model_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the thread that generates (see __init__): an in-process RL
        trainer runs its update here so that training and generation share one OpenMP pool."""
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hf-model")
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def aclose(self) -> None:
        """Stop generating and free the thread (continuous: requests in flight fail with
        BackendError); a later call starts again."""
        if self._batcher is not None:
            await self._batcher.aclose()
        if self._worker is not None:
            self._worker.cancel()
            self._worker = None
            self._queue = None
        if self._thread is not None:  # a later call starts a new one
            self._thread.shutdown(wait=False)
            self._thread = None
