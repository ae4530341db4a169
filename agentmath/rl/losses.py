"""The GRPO objective as small pure functions (prime-rl style): tensors in, tensors out.

Shapes: B sequences, T positions. Everything is aligned with the *targets*: position t holds
the log-probability of token ``ids[t + 1]`` given ``ids[: t + 1]`` (see
:func:`token_logprobs`), and ``mask`` is 1 where that target token carries loss (model-written
tokens; never prompt or tool tokens unless an ablation asks for it).

* :func:`group_advantages`: GRPO's group-normalised advantage (r - mean) / std, or Dr. GRPO's
  r - mean (no std division, which biases towards easy and hard groups otherwise);
* :func:`policy_loss`: the clipped surrogate with DAPO's asymmetric clip-higher
  (1 - eps_low, 1 + eps_high), token- or sequence-level aggregation, truncated importance
  sampling against the sampler's logprobs (the correction asynchronous / partial-rollout and
  sampler-trainer mismatched samples need: Yao et al. 2025, "Your efficient RL framework
  secretly brings you off-policy RL training"), and an optional k3 KL to a reference policy;
* :func:`entropy` for logging.

Why hand-written: these are a few lines each, and TRL's versions are fused into its trainer
(its importance correction only runs with vLLM + NCCL), so they cannot be tested alone.
"""

from __future__ import annotations

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


def truncated_is_weights(old_logp: Any, sampler_logp: Any, cap: float | None) -> Any:
    """Truncated importance weights min(pi_old / pi_sampler, cap), detached.

    A position without a sampler logprob (NaN: a tool token trained in the unmasked ablation,
    or a backend that returns none) gets weight 1.
    """
    torch = require("torch", "train")
    if sampler_logp is None:
        return torch.ones_like(old_logp)
    known = ~torch.isnan(sampler_logp)
    w = torch.exp((old_logp - torch.where(known, sampler_logp, old_logp)).clamp(max=20.0))
    if cap is not None:
        w = w.clamp(max=cap)
    return torch.where(known, w, torch.ones_like(w)).detach()


@dataclass(slots=True)
class LossStats:
    """Per-call statistics, as plain floats, over the masked tokens."""

    tokens: float  # masked (loss-bearing) tokens
    clip_frac: float  # fraction where the clipped branch was active
    ratio_mean: float
    is_weight_mean: float
    is_capped_frac: float  # fraction where the IS weight hit its cap
    kl: float  # mean k3 KL to the reference (0 without one)


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
                sampler_logp: Any = None, tis_cap: float | None = 2.0,
                ref_logp: Any = None, kl_coef: float = 0.0,
                aggregation: Aggregation = "token",
                denominator: float | None = None) -> tuple[Any, LossStats]:
    """The clipped GRPO/DAPO surrogate, to minimise.

    ``logp``, ``old_logp``, ``sampler_logp``, ``ref_logp``, ``mask``: [B, T]; ``advantages``:
    [B] (one per sequence) or [B, T]. ratio = exp(logp - old_logp); per token
    max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)), times the truncated IS
    weight min(exp(old_logp - sampler_logp), tis_cap) (None: no correction), plus
    kl_coef * k3(logp, ref_logp). Tokens outside ``mask`` carry exactly zero gradient.
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
    weights = truncated_is_weights(old_logp, sampler_logp, tis_cap) if tis_cap is not None \
        else torch.ones_like(old_logp)
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
        capped = (weights >= tis_cap - 1e-6).float() if tis_cap is not None else m * 0
        stats = LossStats(tokens=float(m.sum()), clip_frac=float((active * m).sum() / n),
                          ratio_mean=float((ratio * m).sum() / n),
                          is_weight_mean=float((weights * m).sum() / n),
                          is_capped_frac=float((capped * m).sum() / n),
                          kl=float((kl * m).sum() / n))
    return loss, stats
