"""The GRPO objective as small pure functions (prime-rl style): tensors in, tensors out.

Shapes: B sequences, T positions. Everything is aligned with the *targets*: position t holds
the log-probability of token ``ids[t + 1]`` given ``ids[: t + 1]`` (see
:func:`token_logprobs`), and ``mask`` is 1 where that target token carries loss (model-written
tokens; never prompt or tool tokens unless an ablation asks for it).

* :func:`group_advantages`: GRPO's group-normalised advantage (r - mean) / std, or Dr. GRPO's
  r - mean (no std division, which biases towards easy and hard groups otherwise);
* :func:`policy_loss`: the clipped surrogate with DAPO's asymmetric clip-higher
  (1 - eps_low, 1 + eps_high), token- or sequence-level aggregation, truncated importance
  sampling against the sampler's logprobs or one of its masked variants (the correction
  asynchronous / partial-rollout and sampler-trainer mismatched samples need: Yao et al.
  2025, "Your efficient RL framework secretly brings you off-policy RL training"; IcePop;
  SkyRL's geometric mask), and an optional k3 KL to a reference policy;
* :func:`correction_weights` and :func:`sampler_log_ratios`: those corrections, and the
  mismatch they measure (``LossStats.mismatch_*``);
* :func:`entropy` for logging.

Why hand-written: these are a few lines each, and TRL's versions are fused into its trainer
(its importance correction only runs with vLLM + NCCL), so they cannot be tested alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from agentmath._lazy import require

Aggregation = Literal["token", "sequence"]


def group_advantages(rewards: Any, *, std_normalize: bool = True, eps: float = 1e-6) -> Any:
    """Advantages of rewards shaped [groups, G]: r - mean(group), divided by the group's std
    (population std, + ``eps``) unless ``std_normalize`` is False (Dr. GRPO).

    A group whose rewards are all equal gets zero advantages (no signal; dynamic sampling
    drops such groups before they get here).
    """
    torch = require("torch", "train")
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if rewards.ndim != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [groups, G] with G >= 2, got {tuple(rewards.shape)}")
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not std_normalize:
        return centred
    return centred / (rewards.std(dim=1, unbiased=False, keepdim=True) + eps)


def _scaled(logits: Any, temperature: Any) -> Any:
    """Next-token logits [B, T-1, V] in float32, divided by the temperature (a float or [B])."""
    torch = require("torch", "train")
    logits = logits[:, :-1, :].float()
    if torch.is_tensor(temperature):
        return logits / temperature.to(logits).clamp(min=1e-6)[:, None, None]
    if temperature != 1.0:
        return logits / max(float(temperature), 1e-6)
    return logits


def token_logprobs(logits: Any, ids: Any, temperature: Any = 1.0) -> Any:
    """Log-probabilities [B, T-1] of ``ids[:, 1:]`` under ``logits`` [B, T, V] / temperature.

    ``temperature`` is a float or a [B] tensor (each sample is scored at the temperature it
    was sampled with, so that ratios compare like with like). Computed in float32 with
    logsumexp, without materialising a full log-softmax copy.
    """
    torch = require("torch", "train")
    logits = _scaled(logits, temperature)
    targets = ids[:, 1:].to(logits.device)
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy(logits: Any, temperature: Any = 1.0) -> Any:
    """Entropy [B, T-1] of the next-token distributions (for logging; no gradient needed)."""
    torch = require("torch", "train")
    logp = torch.log_softmax(_scaled(logits, temperature), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def kl_k3(logp: Any, ref_logp: Any) -> Any:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(d) - d - 1, d = ref - logp
    (unbiased, always >= 0)."""
    torch = require("torch", "train")
    d = (ref_logp - logp).clamp(-20.0, 20.0)
    return torch.exp(d) - d - 1.0


Correction = Literal["none", "token_tis", "sequence_tis", "token_mask", "sequence_mask",
                     "geo_mask"]


@dataclass(frozen=True, slots=True)
class ISCorrection:
    """How the loss corrects for the sampler's and the trainer's log-probabilities differing
    (another engine's kernels and precision, a stale policy version): a weight on each loss
    token from the log-ratio d = log pi_trainer - log pi_sampler.

    * ``token_tis``: min(exp(d), cap) per token (truncated IS; verl's default);
    * ``sequence_tis``: min(exp(sum d), cap) over the sequence, on each of its tokens;
    * ``token_mask``: exp(d) where it lies in [low, high], 0 outside (masked IS / IcePop);
    * ``sequence_mask``: exp(sum d) where it lies in [low, high], else the sequence is dropped;
    * ``geo_mask``: weight 1, the sequence dropped when the geometric mean exp(mean d) leaves
      [low, high] (SkyRL's geometric mask; length-neutral, so the band is narrow: ~0.99-1.01);
    * ``none``: weight 1.
    """

    mode: Correction = "token_tis"
    cap: float = 2.0
    low: float = 0.5
    high: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.low <= 1 <= self.high:
            raise ValueError(f"the IS band must hold 1 (0 < low <= 1 <= high), got "
                             f"[{self.low}, {self.high}]")
        if self.cap <= 0:
            raise ValueError(f"the IS cap must be positive, got {self.cap}")


#: the correction policy_loss applies unless told otherwise (LossConfig's defaults)
_DEFAULT = ISCorrection()


def sampler_log_ratios(old_logp: Any, sampler_logp: Any, mask: Any) -> Any:
    """d = old_logp - sampler_logp [B, T] on the loss tokens whose sampler logprob is known;
    0 elsewhere (outside ``mask``, or NaN: a tool token trained in the unmasked ablation, a
    backend that returns none), so that such a token neither counts nor is corrected."""
    torch = require("torch", "train")
    if sampler_logp is None:
        return torch.zeros_like(old_logp)
    known = ~torch.isnan(sampler_logp) & mask.bool()
    d = old_logp.detach() - torch.where(known, sampler_logp, old_logp.detach())
    return torch.where(known, d.clamp(-20.0, 20.0), torch.zeros_like(d))


def correction_weights(d: Any, mask: Any, correction: ISCorrection | None) -> tuple[Any, Any]:
    """The weights [B, T] of :class:`ISCorrection` from the log-ratios ``d`` [B, T]
    (:func:`sampler_log_ratios`), detached, and which loss tokens it changed [B, T] (bool:
    truncated at the cap, or masked out of the band); None: weight 1, nothing changed."""
    torch = require("torch", "train")
    mask = mask.bool()
    ones, nothing = torch.ones_like(d), torch.zeros_like(mask)
    if correction is None or correction.mode == "none":
        return ones, nothing
    mode, log_cap = correction.mode, math.log(correction.cap)
    lo, hi = math.log(correction.low), math.log(correction.high)
    if mode == "token_tis":
        return torch.exp(d.clamp(max=log_cap)).detach(), (d >= log_cap - 1e-6) & mask
    if mode == "token_mask":
        keep = (d >= lo) & (d <= hi)
        return torch.where(keep, torch.exp(d), torch.zeros_like(d)).detach(), ~keep & mask
    seq = d.sum(-1, keepdim=True)  # [B, 1]: the sequence's log-ratio
    if mode == "sequence_tis":
        hit = (seq >= log_cap - 1e-6).expand_as(d)
        return torch.exp(seq.clamp(max=log_cap)).expand_as(d).detach(), hit & mask
    if mode == "geo_mask":
        seq = seq / mask.sum(-1, keepdim=True).clamp(min=1)
    keep = ((seq >= lo) & (seq <= hi)).expand_as(d)
    weight = torch.exp(seq.clamp(-20.0, 20.0)) if mode == "sequence_mask" else ones[:, :1]
    if mode not in ("sequence_mask", "geo_mask"):
        raise ValueError(f"unknown IS correction {mode!r}")
    return torch.where(keep, weight.expand_as(d), torch.zeros_like(d)).detach(), ~keep & mask


@dataclass(slots=True)
class LossStats:
    """Per-call statistics, as plain floats, over the masked tokens."""

    tokens: float  # masked (loss-bearing) tokens
    clip_frac: float  # fraction where the clipped branch was active
    ratio_mean: float
    is_weight_mean: float
    is_capped_frac: float  # fraction where a token_tis / sequence_tis weight hit its cap
    kl: float  # mean k3 KL to the reference (0 without one)
    mismatch_kl: float  # mean k3 estimate of KL(sampler || trainer) per loss token
    mismatch_max: float  # largest |log pi_trainer - log pi_sampler| (0 without a sampler)
    mismatch_masked: float  # fraction of loss tokens the IS correction truncated or masked


def aggregate(per_token: Any, mask: Any, how: Aggregation,
              denominator: float | None = None) -> Any:
    """Reduce [B, T] per-token losses under ``mask``.

    ``token`` (DAPO): sum over every masked token / their count (or ``denominator``: the count
    over a whole optimizer step, so that gradient accumulation gives the same gradient as one
    big batch); long sequences weigh more. ``sequence`` (GRPO as published): each sequence's
    mean, then the mean over sequences (or sum / ``denominator`` sequences).
    """
    mask = mask.to(per_token.dtype)
    if how == "token":
        return (per_token * mask).sum() / (denominator or mask.sum().clamp(min=1.0))
    if how == "sequence":
        per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_seq.sum() / (denominator or per_token.shape[0])
    raise ValueError(f"aggregation must be 'token' or 'sequence', not {how!r}")


def policy_loss(logp: Any, old_logp: Any, advantages: Any, mask: Any, *,
                clip_low: float = 0.2, clip_high: float = 0.28,
                sampler_logp: Any = None, correction: ISCorrection | None = _DEFAULT,
                ref_logp: Any = None, kl_coef: float = 0.0,
                aggregation: Aggregation = "token",
                denominator: float | None = None) -> tuple[Any, LossStats]:
    """The clipped GRPO/DAPO surrogate, to minimise.

    ``logp``, ``old_logp``, ``sampler_logp``, ``ref_logp``, ``mask``: [B, T]; ``advantages``:
    [B] (one per sequence) or [B, T]. ratio = exp(logp - old_logp); per token
    max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)), times the weight of the
    sampler correction (:func:`correction_weights` of d = old_logp - sampler_logp; None: no
    correction), plus kl_coef * k3(logp, ref_logp). Tokens outside ``mask`` carry exactly zero
    gradient. The stats measure the sampler-trainer mismatch whatever the correction.
    """
    torch = require("torch", "train")
    mask = mask.bool()
    adv = advantages[:, None] if advantages.ndim == 1 else advantages
    # Masked positions may hold anything (padding): zero them so no NaN can leak through.
    logp = torch.where(mask, logp, logp.detach() * 0)
    old_logp = torch.where(mask, old_logp, torch.zeros_like(old_logp)).detach()
    ratio = torch.exp((logp - old_logp).clamp(-20.0, 20.0))
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    pg = torch.maximum(-adv * ratio, -adv * clipped)
    d = sampler_log_ratios(old_logp, sampler_logp, mask)
    weights, changed = correction_weights(d, mask, correction)
    per_token = pg * weights
    kl = torch.zeros_like(logp)
    if ref_logp is not None:
        kl = kl_k3(logp, torch.where(mask, ref_logp, logp.detach()))
        if kl_coef:
            per_token = per_token + kl_coef * kl
    loss = aggregate(per_token, mask, aggregation, denominator)
    with torch.no_grad():
        m = mask.float()
        n = m.sum().clamp(min=1.0)
        active = ((-adv * clipped) > (-adv * ratio)).float()
        stats = LossStats(tokens=float(m.sum()), clip_frac=float((active * m).sum() / n),
                          ratio_mean=float((ratio * m).sum() / n),
                          is_weight_mean=float((weights * m).sum() / n),
                          is_capped_frac=float((changed.float() * m).sum() / n)
                          if correction is not None and correction.mode.endswith("_tis")
                          else 0.0,
                          kl=float((kl * m).sum() / n),
                          # k3 >= 0 exactly; float32 rounding can dip below
                          mismatch_kl=float(((torch.exp(d) - d - 1.0).clamp(min=0.0) * m).sum()
                                            / n),
                          mismatch_max=float((d.abs() * m).max()) if m.any() else 0.0,
                          mismatch_masked=float((changed.float() * m).sum() / n))
    return loss, stats
