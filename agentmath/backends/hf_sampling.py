"""Per-row sampling for continuous batching (:mod:`agentmath.backends.hf_continuous`).

Rows that decode together may each have their own temperature, top-p, top-k and seed. One
vectorised step samples them all by inverse CDF, each row with a uniform from its own
``torch.Generator`` (:class:`RowRandom`), so that a request's sampled tokens depend on its seed
and its logits only, not on which rows share its batch. Greedy rows (temperature 0) take the
argmax. Logprobs are those of the distribution sampled from before the top-p/top-k cut:
log-softmax of logits / temperature (of the raw logits when greedy), as an RL trainer's
importance weights compare against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmath._lazy import require
from agentmath.backends.base import SamplingParams

_CHUNK = 64  # uniforms drawn from a row's generator at a time


@dataclass
class RowRandom:
    """A request's own random stream: ``seed`` (from torch's global generator when None, so
    that ``torch.manual_seed`` still makes a run repeatable) and the uniforms drawn from it."""

    seed: int | None
    generator: Any = None
    buffer: list[float] = field(default_factory=list)

    def uniform(self) -> float:
        """The next uniform in [0, 1)."""
        if not self.buffer:
            torch = require("torch", "train")
            if self.generator is None:
                seed = self.seed if self.seed is not None else int(torch.randint(0, 2**62, ()))
                self.generator = torch.Generator().manual_seed(seed)
            draw = torch.rand(_CHUNK, generator=self.generator, dtype=torch.float64)
            self.buffer = draw.tolist()[::-1]
        return self.buffer.pop()


@dataclass
class BatchSampling:
    """The sampling settings of a batch's rows as tensors, built once per set of rows."""

    temperature: Any  # [B, 1] float; 1 for greedy rows, so their logprobs are of raw logits
    greedy: Any  # [B] bool
    top_p: Any  # [B, 1] float64
    top_k: Any  # [B, 1] long; the vocabulary size where top-k is off
    sampled: bool  # some row samples
    filtered: bool  # some row cuts with top-p or top-k
    logprobs: bool  # some row wants logprobs

    @classmethod
    def of(cls, settings: Sequence[SamplingParams], vocab: int, device: Any) -> BatchSampling:
        torch = require("torch", "train")
        greedy = [s.temperature <= 0 for s in settings]
        pairs = list(zip(settings, greedy, strict=True))
        top_k = [s.top_k if s.top_k > 0 and not g else vocab for s, g in pairs]
        top_p = [1.0 if g else s.top_p for s, g in pairs]
        return cls(
            temperature=torch.tensor([[1.0 if g else s.temperature] for s, g in pairs],
                                     device=device),
            greedy=torch.tensor(greedy, device=device),
            top_p=torch.tensor(top_p, dtype=torch.float64, device=device)[:, None],
            top_k=torch.tensor(top_k, device=device)[:, None],
            sampled=not all(greedy), filtered=any(k < vocab for k in top_k) or min(top_p) < 1,
            logprobs=any(s.logprobs for s in settings))


def sample(logits: Any, p: BatchSampling,
           randoms: Sequence[RowRandom | None]) -> tuple[list[int], list[float] | None]:
    """One token per row from ``logits`` [B, V]: the argmax where greedy, else inverse-CDF
    sampling of softmax(logits / T) cut to top-k then top-p (transformers' order) with the
    row's next uniform; and, when some row wants them, each token's logprob (module docstring).
    ``randoms`` has a stream for each sampling row (None for greedy ones)."""
    torch = require("torch", "train")
    logits = logits.float()
    tokens = logits.argmax(-1)
    if p.sampled:
        probs = (logits / p.temperature).softmax(-1).double()
        order = None
        if p.filtered:
            probs, order = probs.sort(-1, descending=True)
            ranks = torch.arange(probs.shape[-1], device=probs.device)[None]
            probs = probs * (ranks < p.top_k)
            cum = probs.cumsum(-1)
            # the smallest prefix holding top_p of the top-k mass (the first token always)
            probs = probs * ((cum - probs) < p.top_p * cum[:, -1:])
        cdf = probs.cumsum(-1)
        u = torch.tensor([r.uniform() if r is not None else 0.0 for r in randoms],
                         dtype=torch.float64, device=cdf.device)
        idx = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)
        idx = idx.clamp_(max=cdf.shape[-1] - 1)
        picked = (idx if order is None else order.gather(1, idx)).squeeze(1)
        tokens = torch.where(p.greedy, tokens, picked)
    lps = None
    if p.logprobs:
        lps = (logits / p.temperature).log_softmax(-1).gather(1, tokens[:, None])
        lps = lps.squeeze(1).tolist()
    return tokens.tolist(), lps
