"""The example order of an SFT run: a pure function of (seed, step), which is what makes
resume exact, and each rank's share of a step under sharding."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import Protocol

from agentmath.train.sharding import world_size


class OrderSettings(Protocol):
    """What the order depends on (SFTConfig's fields of these names)."""

    @property
    def seed(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def grad_accum(self) -> int: ...
    @property
    def group_by_length(self) -> int: ...


def epoch_order(n: int, epoch: int, config: OrderSettings,
                lengths: Sequence[int] | None = None) -> list[int]:
    """The example order of one epoch: a permutation seeded by (seed, epoch); with
    ``group_by_length`` windows of that many batches are sorted by length and their batches
    shuffled (seeded too), so that a batch pads little (HF Trainer's group_by_length)."""
    order = random.Random(f"{config.seed}:{epoch}").sample(range(n), n)
    window = config.group_by_length * config.batch_size
    if not window or lengths is None:
        return order
    rng = random.Random(f"{config.seed}:{epoch}:lengths")
    grouped: list[int] = []
    for start in range(0, n, window):
        chunk = sorted(order[start:start + window], key=lambda i: lengths[i])
        batches = [chunk[i:i + config.batch_size]
                   for i in range(0, len(chunk), config.batch_size)]
        rng.shuffle(batches)
        grouped += [i for batch in batches for i in batch]
    return grouped


def step_indices(step: int, n: int, config: OrderSettings, orders: dict[int, list[int]],
                  lengths: Sequence[int] | None = None) -> list[list[int]]:
    """Example indices of each micro-batch of optimizer step ``step`` (1-based).

    The data is a stream of epochs, each in :func:`epoch_order`: the indices of a step depend
    on nothing but the step, which is what makes resume exact.
    """
    per_step, picked = config.batch_size * config.grad_accum, []
    for pos in range((step - 1) * per_step, step * per_step):
        epoch = pos // n
        if epoch not in orders:
            orders.clear()  # keep one epoch's order in memory
            orders[epoch] = epoch_order(n, epoch, config, lengths)
        picked.append(orders[epoch][pos % n])
    return [picked[i:i + config.batch_size] for i in range(0, per_step, config.batch_size)]


def rank_share(micro: list[list[int]], batch_size: int) -> list[list[int]]:
    """This rank's micro-batches of a step: every N-th example of the step, cut again into
    micro-batches of at most ``batch_size`` (every rank gets as many)."""
    flat = [i for batch in micro for i in batch]
    mine = flat[int(os.environ.get("RANK", "0"))::world_size()]
    return [mine[i:i + batch_size] for i in range(0, len(mine), batch_size)]
