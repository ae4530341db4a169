"""From scored groups to training tensors: typed samples, dynamic sampling, collation.

A trajectory is already token-exact (the ids the model sampled and the ids of the prompt and
of every tool output, as the model read them), so a training sample is its ids, a loss mask
and the sampler's logprobs, with no re-tokenisation (re-tokenising a multi-turn text is how
TRL's tool masks drifted off their tokens, huggingface/trl#5144). The loss mask is 1 on model
tokens only; the unmasked ablation (DeepMath's trainer) also puts 1 on tool-output tokens.

An episode of native chat tool calling whose chat template rewrote its history (a turn's
re-rendered prompt did not extend what the model had seen and sampled before:
:attr:`~agentmath.agent.trajectory.Trajectory.history_rewrite`) is several sequences, one per
turn whose prompt did not extend the turn before; it becomes one sample per sequence, each
with the episode's advantage, or none (``refuse``). A trajectory whose ids are not what the
sampler saw (``token_exact`` False: a chat server that did not report them) becomes none.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from agentmath._lazy import require
from agentmath.agent.trajectory import Segment, Trajectory
from agentmath.rollout.records import Group

TRUNCATED = frozenset({"token_budget", "tool_budget", "time_budget"})


@dataclass(slots=True)
class ScoredSample:
    """One finished episode with its reward terms (the record between rollout and loss)."""

    group_id: str
    index: int
    trajectory: Trajectory
    reward: float
    terms: dict[str, float]
    correct: bool
    advantage: float = 0.0

    @property
    def truncated(self) -> bool:
        return self.trajectory.finish_reason in TRUNCATED

    @property
    def temperature(self) -> float:
        sampling = self.trajectory.sampling
        return float((sampling.temperature if sampling is not None else None) or 1.0)


@dataclass(slots=True)
class ScoredGroup:
    """A complete group and its samples' rewards."""

    group: Group
    samples: list[ScoredSample] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.samples]

    @property
    def has_signal(self) -> bool:
        """False when every reward is equal: all advantages would be zero (DAPO's dynamic
        sampling drops such groups; AgentMath does too)."""
        return len({round(r, 9) for r in self.rewards}) > 1


def split_by_signal(groups: list[ScoredGroup]) -> tuple[list[ScoredGroup], list[ScoredGroup]]:
    """(groups with reward variance, groups without) in their order."""
    return [g for g in groups if g.has_signal], [g for g in groups if not g.has_signal]


@dataclass(slots=True)
class TrainSample:
    """Tensors-to-be of one sequence, aligned with its ids (position t = token t)."""

    ids: list[int]
    mask: list[int]  # 1: token t carries loss
    sampler_logp: list[float]  # NaN where the sampler gave none (prompt, tool tokens)
    advantage: float
    temperature: float


def to_train_sample(sample: ScoredSample, *, mask_tool_tokens: bool = True) -> TrainSample:
    """The ids, loss mask and sampler logprobs of a scored sample, all its segments as one
    sequence (what a trajectory in one sequence is: see :func:`to_train_samples`).

    With ``mask_tool_tokens`` False the tool-output tokens carry loss too (the ablation).
    """
    return _sequence_sample(sample.trajectory.segments, sample, mask_tool_tokens)


def trainable(trajectory: Trajectory) -> bool:
    """Whether training may take the trajectory: its ids are what the sampler saw, and its
    history, if rewritten, is not to be refused."""
    return trajectory.token_exact and trajectory.history_rewrite != "refuse"


def to_train_samples(sample: ScoredSample, *, mask_tool_tokens: bool = True
                     ) -> list[TrainSample]:
    """The training sequences of a scored sample: one per sequence the sampler saw
    (:attr:`~agentmath.agent.trajectory.Trajectory.sequences`: one for every trajectory
    whose history was never rewritten, a new one at each turn whose re-rendered prompt did
    not extend the turn before), each with the sample's advantage; none when it is not
    :func:`trainable`."""
    if not trainable(sample.trajectory):
        return []
    return [_sequence_sample(seq, sample, mask_tool_tokens)
            for seq in sample.trajectory.sequences]


def _sequence_sample(segments: list[Segment], sample: ScoredSample,
                     mask_tool_tokens: bool) -> TrainSample:
    ids, mask, logps = [], [], []
    for seg in segments:
        n = len(seg.token_ids)
        ids += seg.token_ids
        trained = seg.source == "model" or (seg.source == "tool" and not mask_tool_tokens)
        mask += [int(trained)] * n
        if seg.source == "model" and seg.logprobs is not None and len(seg.logprobs) == n:
            logps += [float(x) for x in seg.logprobs]
        else:
            logps += [math.nan] * n
    return TrainSample(ids, mask, logps, sample.advantage, sample.temperature)


@dataclass(slots=True)
class TensorBatch:
    """A right-padded micro-batch; ``mask``/``sampler_logp`` are shifted to target positions
    ([B, T-1]: entry t is about token t + 1), as the loss functions want them. No attention
    mask: with right padding a causal model's real positions never attend to the padding
    after them, so the forward runs without one (sdpa's causal kernel: a forward and backward
    of the micro model over 32 rows of 350 tokens took 1.38 s against 1.91 s with the mask,
    same log-probabilities), and what the padded positions compute is masked out of the
    loss."""

    input_ids: Any
    mask: Any
    sampler_logp: Any
    advantages: Any
    temperature: Any
    #: [1, P]: ids every row starts with and none trains on (a group's prompt), run once, its
    #: KV cache repeated for each row; ``input_ids`` and the rest are then the rows after them.
    #: None: the rows are whole.
    prefix_ids: Any = None

    def to(self, device: Any) -> TensorBatch:
        return TensorBatch(*(t.to(device) for t in (
            self.input_ids, self.mask, self.sampler_logp,
            self.advantages, self.temperature)),
            prefix_ids=None if self.prefix_ids is None else self.prefix_ids.to(device))


def collate_samples(samples: list[TrainSample], pad_id: int, prefix: int = 0) -> TensorBatch:
    """Right-pad ``samples`` into one :class:`TensorBatch`; with ``prefix`` (see
    :func:`shared_prefix`) their first ``prefix`` ids become its ``prefix_ids``."""
    torch = require("torch", "train")
    width = max(len(s.ids) for s in samples) - prefix
    n = len(samples)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.bool)
    logp = torch.full((n, width), math.nan, dtype=torch.float32)
    for row, s in enumerate(samples):
        k = len(s.ids) - prefix
        ids[row, :k] = torch.tensor(s.ids[prefix:])
        mask[row, :k] = torch.tensor(s.mask[prefix:], dtype=torch.bool)
        logp[row, :k] = torch.tensor(s.sampler_logp[prefix:], dtype=torch.float32)
    prefix_ids = torch.tensor([samples[0].ids[:prefix]], dtype=torch.long) if prefix else None
    return TensorBatch(ids, mask[:, 1:], logp[:, 1:],
                       torch.tensor([s.advantage for s in samples], dtype=torch.float32),
                       torch.tensor([s.temperature for s in samples], dtype=torch.float32),
                       prefix_ids=prefix_ids)


def _loss_start(sample: TrainSample) -> int:
    """Index of the first id that carries loss (the length when none does)."""
    return sample.mask.index(1) if 1 in sample.mask else len(sample.mask)


def shared_prefix(samples: list[TrainSample]) -> int:
    """How many leading ids ``samples`` can share in one forward: the ids they all begin with,
    stopping before the id whose logit predicts their first trained token (that logit must
    come from the row's own forward). 0 when there is nothing to share."""
    common = len(os.path.commonprefix([s.ids for s in samples]))
    return max(0, min(common, min(_loss_start(s) for s in samples) - 1))


def prefix_micro_batches(samples: list[TrainSample], size: int,
                         min_prefix: int) -> list[tuple[list[TrainSample], int]]:
    """Micro-batches whose rows share their prompt, each with the prefix length to run once.

    Samples are bucketed by the ids before their first trained token (a GRPO group's samples
    share their prompt; Prefix Grouper, arXiv 2506.05433, shares it the same way), each bucket
    cut into slices of ``size`` by length. A slice that shares fewer than ``min_prefix`` ids,
    or has one row, is pooled with the rest and micro-batched whole (:func:`micro_batches`);
    ``min_prefix`` 0 shares nothing (``loss.share_prompt = 0``).
    """
    if min_prefix == 0:
        return [(chunk, 0) for chunk in micro_batches(samples, size)]
    buckets: dict[tuple[int, ...], list[TrainSample]] = {}
    for s in samples:
        buckets.setdefault(tuple(s.ids[:_loss_start(s)]), []).append(s)
    planned: list[tuple[list[TrainSample], int]] = []
    whole: list[TrainSample] = []
    for bucket in buckets.values():
        for chunk in micro_batches(bucket, size):
            prefix = shared_prefix(chunk) if len(chunk) > 1 else 0
            if prefix >= min_prefix:
                planned.append((chunk, prefix))
            else:
                whole += chunk
    return planned + [(chunk, 0) for chunk in micro_batches(whole, size)]


def micro_batches(samples: list[TrainSample], size: int) -> list[list[TrainSample]]:
    """Consecutive slices of ``size`` samples, after sorting by length (less padding)."""
    ordered = sorted(samples, key=lambda s: len(s.ids))
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]
