"""The learning half of an RL step: scored groups -> advantages -> optimizer step(s).

Advantages are computed per group (:func:`~agentmath.rl.losses.group_advantages`), every
sample becomes ids + loss mask + sampler logprobs (:mod:`agentmath.rl.batch`; one per turn,
sharing the sample's advantage, for a chat episode whose template rewrote its history: with
the default ``token`` aggregation such an episode weighs exactly its loss tokens, as in one
sequence; ``sequence`` aggregation counts each of its turns as a sequence), and the samples
are split into ``mini_batches`` optimizer steps, each accumulated over micro-batches with the
loss normalised by the mini-batch's total (token or sequence) count, so that the gradient does
not depend on the micro-batch size. With one mini-batch the update is on-policy (the "old"
policy is the current one, detached); with more, the old log-probabilities are computed once
before the first update, as PPO does. Micro-batches are cut per prompt, and a prompt the rows
share runs once (``loss.share_prompt``; the rows attend to its KV cache). Backward goes
through ``accelerate`` (bf16 autocast). With ``optim.sharding = "fsdp"`` each rank trains on
every N-th micro-batch of a mini-batch, its loss scaled by N (FSDP averages the ranks'
gradients), and the statistics are summed over the ranks (:mod:`agentmath.rl.sharded`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from agentmath._lazy import require
from agentmath.errors import ConfigError
from agentmath.models.kv import cache_argument
from agentmath.rl.batch import (
    ScoredGroup,
    TensorBatch,
    TrainSample,
    collate_samples,
    prefix_micro_batches,
    to_train_samples,
)
from agentmath.rl.config import LossConfig, RLConfig
from agentmath.rl.losses import (
    ISCorrection,
    entropy,
    group_advantages,
    policy_loss,
    token_logprobs,
)
from agentmath.train import sharding


def sampler_correction(cfg: LossConfig) -> ISCorrection | None:
    """The loss's sampler correction from its settings (None: none; a ``*_tis`` mode with
    ``tis_cap`` None is none too, as ``tis_cap = None`` always meant)."""
    mode = cfg.is_correction
    if mode == "none" or (mode.endswith("_tis") and cfg.tis_cap is None):
        return None
    return ISCorrection(mode, cap=cfg.tis_cap or 2.0, low=cfg.is_band_low,
                        high=cfg.is_band_high)


def assign_advantages(groups: list[ScoredGroup], std_normalize: bool) -> None:
    """Set each sample's advantage from its group's rewards."""
    if not groups:
        return
    size = {len(g.samples) for g in groups}
    if len(size) == 1:
        adv = group_advantages([g.rewards for g in groups], std_normalize=std_normalize)
        for g, row in zip(groups, adv.tolist(), strict=True):
            for s, a in zip(g.samples, row, strict=True):
                s.advantage = a
        return
    for g in groups:  # groups of unequal size (a regenerated sample was dropped): one by one
        row = group_advantages([g.rewards], std_normalize=std_normalize)[0].tolist()
        for s, a in zip(g.samples, row, strict=True):
            s.advantage = a


@dataclass(slots=True)
class UpdateStats:
    """Averages over an RL step's optimizer steps."""

    loss: float = 0.0
    clip_frac: float = 0.0
    is_weight_mean: float = 1.0
    is_capped_frac: float = 0.0
    kl: float = 0.0
    mismatch_kl: float = 0.0  # mean over the loss tokens of the step
    mismatch_max: float = 0.0  # the step's largest
    mismatch_masked: float = 0.0  # fraction of the step's loss tokens
    entropy: float = 0.0
    grad_norm: float = 0.0
    loss_tokens: int = 0
    lr: float = 0.0


#: the per-token means of LossStats that a step averages over its loss tokens
_TOKEN_MEANS = ("clip_frac", "is_weight_mean", "is_capped_frac", "kl", "mismatch_kl",
                "mismatch_masked")


def forward_logprobs(model: Any, batch: TensorBatch) -> tuple[Any, Any]:
    """Logits [B, T, V] of the batch's rows and the log-probabilities [B, T-1] of their ids.
    Right-padded rows need no attention mask (TensorBatch); a shared prefix runs once, and its
    KV cache, repeated for each row, is what the rows attend to before their own ids (the
    gradient flows back through it into the prefix's one forward)."""
    if batch.prefix_ids is None:
        logits = model(input_ids=batch.input_ids).logits
    else:
        # the forward fills the cache it is given, in place (the generator's way too); no
        # config: the model may be wrapped for data parallelism, and full layers suit a prompt
        cache = require("transformers", "train").DynamicCache()
        model(input_ids=batch.prefix_ids, use_cache=True, logits_to_keep=1,
              **{cache_argument(): cache})
        if cache.get_seq_length() != batch.prefix_ids.shape[1]:
            raise ConfigError("the model kept no KV cache for the shared prompt: set "
                              "loss.share_prompt=0 to train it on whole rows")
        cache.batch_repeat_interleave(batch.input_ids.shape[0])
        logits = model(input_ids=batch.input_ids, use_cache=True,
                       **{cache_argument(): cache}).logits
    return logits, token_logprobs(logits, batch.input_ids, batch.temperature)


class PolicyUpdater:
    """Holds the model, optimizer and (optional) reference model of a run."""

    def __init__(self, config: RLConfig, model: Any, optimizer: Any, scheduler: Any,
                 accelerator: Any, pad_id: int, ref_model: Any = None) -> None:
        self.config = config
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.accelerator = accelerator
        self.pad_id = pad_id
        self.ref_model = ref_model

    def _old_logps(self, batches: list[TensorBatch]) -> list[Any]:
        torch = require("torch", "train")
        with torch.no_grad(), self.accelerator.autocast():
            return [forward_logprobs(self.model, b.to(self.accelerator.device))[1]
                    for b in batches]

    def _ref_logps(self, batch: TensorBatch) -> Any:
        torch = require("torch", "train")
        if self.ref_model is None:
            return None
        with torch.no_grad(), self.accelerator.autocast():
            return forward_logprobs(self.ref_model, batch)[1]

    def _denominator(self, batches: list[TensorBatch]) -> float:
        if self.config.loss.aggregation == "token":
            return float(sum(int(b.mask.sum()) for b in batches)) or 1.0
        return float(sum(b.input_ids.shape[0] for b in batches)) or 1.0

    def _optimizer_step(self, batches: list[TensorBatch], real: int, old: list[Any] | None,
                        acc: UpdateStats, denominator: float) -> None:
        """One optimizer step over this rank's ``batches`` (all of the mini-batch's unsharded),
        of which the first ``real`` are its own and the rest stand-ins (:func:`_rank_share`);
        ``denominator``: the whole mini-batch's count, over every rank."""
        torch = require("torch", "train")
        loss_cfg, device = self.config.loss, self.accelerator.device
        correction = sampler_correction(loss_cfg)
        # sharded, the ranks' gradients are averaged: undo it
        scale = sharding.world_scale() if self.config.optim.sharding == "fsdp" else 1
        for i, batch in enumerate(batches):
            batch = batch.to(device)
            with self.accelerator.autocast():
                logits, logp = forward_logprobs(self.model, batch)
            old_logp = old[i].to(device) if old is not None else logp.detach()
            loss, st = policy_loss(
                logp, old_logp, batch.advantages, batch.mask, clip_low=loss_cfg.clip_low,
                clip_high=loss_cfg.clip_high, sampler_logp=batch.sampler_logp,
                correction=correction, ref_logp=self._ref_logps(batch),
                kl_coef=loss_cfg.kl_coef, aggregation=loss_cfg.aggregation,
                denominator=denominator)
            if i >= real:  # a stand-in that keeps the ranks' collectives in step: no gradient
                self.accelerator.backward(loss * 0.0)
                continue
            self.accelerator.backward(loss * scale if scale > 1 else loss)
            with torch.no_grad():
                ent = entropy(logits.detach(), batch.temperature)
                m = batch.mask.float()
                w = st.tokens
                acc.entropy += float((ent * m).sum() / m.sum().clamp(min=1)) * w
            acc.loss += float(loss.detach())
            for name in _TOKEN_MEANS:
                setattr(acc, name, getattr(acc, name) + getattr(st, name) * w)
            acc.mismatch_max = max(acc.mismatch_max, st.mismatch_max)
            acc.loss_tokens += int(st.tokens)
        params = [p for p in self.model.parameters() if p.requires_grad]
        max_norm = self.config.optim.max_grad_norm
        norm = self.accelerator.clip_grad_norm_(params, max_norm if max_norm > 0 else math.inf)
        acc.grad_norm = max(acc.grad_norm, sharding.norm_value(norm))
        acc.lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def update(self, groups: list[ScoredGroup]) -> UpdateStats:
        """Advantages, then ``mini_batches`` optimizer steps over the groups' samples."""
        cfg = self.config.loss
        assign_advantages(groups, cfg.std_normalize)
        # an episode whose chat template rewrote its history is one sample per turn (all
        # with its advantage), or none (refused); rl/batch.py
        samples: list[TrainSample] = [
            t for g in groups for s in g.samples
            for t in to_train_samples(s, mask_tool_tokens=cfg.mask_tool_tokens)]
        acc = UpdateStats(is_weight_mean=0.0)
        if not samples:
            return UpdateStats()
        self.model.train()
        n_mini = min(cfg.mini_batches, len(samples))
        minis = [samples[i::n_mini] for i in range(n_mini)]
        tensor_minis = [[collate_samples(mb, self.pad_id, prefix) for mb, prefix in
                         prefix_micro_batches(mini, cfg.micro_batch_size, cfg.share_prompt)]
                        for mini in minis]
        denominators = [self._denominator(b) for b in tensor_minis]
        shares = ([_rank_share(b) for b in tensor_minis] if self.config.optim.sharding == "fsdp"
                  else [(b, len(b)) for b in tensor_minis])
        olds = ([self._old_logps(b) for b, _ in shares] if n_mini > 1
                else [None] * n_mini)
        for (batches, real), old, denominator in zip(shares, olds, denominators, strict=True):
            self._optimizer_step(batches, real, old, acc, denominator)
        if self.config.optim.sharding == "fsdp":
            _sum_over_ranks(acc)
        tokens = max(1, acc.loss_tokens)
        for name in (*_TOKEN_MEANS, "entropy"):
            setattr(acc, name, getattr(acc, name) / tokens)
        acc.loss /= n_mini
        return acc


def _rank_share(batches: list[TensorBatch]) -> tuple[list[TensorBatch], int]:
    """This rank's micro-batches of a mini-batch (every N-th) and how many are its own: a rank
    with fewer than another repeats its first (or the mini-batch's first) as a stand-in, whose
    loss is multiplied by 0, so that every rank runs as many forwards and backwards (each is
    a collective under FSDP)."""
    rank, world = int(os.environ.get("RANK", "0")), sharding.world_size()
    mine = batches[rank::world]
    rounds = -(-len(batches) // world)
    return mine + [(mine or batches)[0]] * (rounds - len(mine)), len(mine)


def _sum_over_ranks(acc: UpdateStats) -> None:
    """The step's sums over every rank's micro-batches (max for the largest mismatch)."""
    names = ("loss", *_TOKEN_MEANS, "entropy")
    sums = sharding.reduce_over_ranks([getattr(acc, n) for n in names] + [acc.loss_tokens])
    for name, value in zip(names, sums, strict=False):
        setattr(acc, name, value)
    acc.loss_tokens = int(sums[-1])
    acc.mismatch_max = sharding.reduce_over_ranks([acc.mismatch_max], op="max")[0]
