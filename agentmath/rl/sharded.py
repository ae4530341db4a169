"""An RL run across the ranks of a sharded learner (``optim.sharding = "fsdp"``).

Rank 0 drives the run as in one process: it runs the rollouts, scores them, logs and saves.
The other ranks hold only their shards of the learner and follow rank 0's orders, broadcast
over the process group: *update* (the step's scored groups: every rank then trains on its
share of the micro-batches, :class:`~agentmath.rl.update.PolicyUpdater`), *gather* (every
rank takes part in gathering the full weights, and the optimizer state for a checkpoint, to
rank 0, which pushes them to the generators or saves them) and *stop* (with the run's result).
Every collective thus runs in the same order on every rank. An error on rank 0 ends its
process with the error; the launcher (torchrun under ``accelerate launch``) then ends the
other ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentmath._lazy import require
from agentmath.train import sharding

if TYPE_CHECKING:
    from agentmath.rl.batch import ScoredGroup
    from agentmath.rl.records import RLResult
    from agentmath.rl.update import PolicyUpdater, UpdateStats


@dataclass
class Order:
    """What rank 0 tells the other ranks to do next."""

    kind: Literal["update", "gather", "stop"]
    groups: list[ScoredGroup] = field(default_factory=list)  # update: the step's groups
    with_optimizer: bool = False  # gather: the optimizer state too (a checkpoint)
    result: RLResult | None = None  # stop: what the run did


def _broadcast(order: Order | None) -> Order:
    torch = require("torch", "train")
    box: list[Any] = [order]
    torch.distributed.broadcast_object_list(box, src=0)
    received: Order = box[0]
    return received


def tell(order: Order) -> None:
    """Rank 0: send ``order`` to the other ranks (nothing when there are none)."""
    if sharding.world_size() > 1:
        _broadcast(order)


@dataclass(eq=False)
class ShardedLearner:
    """The learner's collective operations, the same calls on rank 0 and on the others."""

    model: Any
    updater: PolicyUpdater
    lora: bool

    def update(self, groups: list[ScoredGroup]) -> UpdateStats:
        """Rank 0: the optimizer step(s) on ``groups``, every rank training its share."""
        tell(Order("update", groups=groups))
        return self.updater.update(groups)

    def gathered(self, with_optimizer: bool) -> tuple[Any, dict[str, Any] | None]:
        """Rank 0: an unsharded copy of the model (and the full optimizer state, keyed by
        parameter name, when ``with_optimizer``), gathered from every rank."""
        tell(Order("gather", with_optimizer=with_optimizer))
        return sharding.gather(self.model,
                               self.updater.optimizer if with_optimizer else None,
                               lora=self.lora, main=True)

    def follow(self) -> RLResult | None:
        """Another rank: carry out rank 0's orders until it says stop; its run's result."""
        while True:
            order = _broadcast(None)
            if order.kind == "stop":
                return order.result
            if order.kind == "update":
                self.updater.update(order.groups)
            else:
                sharding.gather(self.model,
                                self.updater.optimizer if order.with_optimizer else None,
                                lora=self.lora, main=False)
