"""The contract an RL trainer has with its rollouts, local or on a Ray cluster.

Two objects, each a protocol that both paths satisfy (a test checks both classes):

* :class:`EngineControl`, the engine the trainer steers between steps: the policy version new
  segments are tagged with, the model name requests send (a LoRA adapter per version) and a
  stage's episode budgets. In one process: :class:`~agentmath.rollout.scheduler.RolloutEngine`;
  on Ray: :class:`~agentmath.distributed.engine.RayRolloutEngine`.
* :class:`Iterations`, the successive RL iterations the trainer collects groups from: each
  ``iteration(n)`` returns ``n`` complete groups (fewer once the requests run out) in the
  order their prompts were drawn, and ``pending_groups`` gives the groups drawn and not yet
  handed out (parked or held back), each by its draw position, for a checkpoint. In one
  process: :class:`~agentmath.rollout.partial.PartialRollout` (partial rollout across steps);
  on Ray: :class:`~agentmath.distributed.iterations.RayIterations` (every episode to its end).
* :class:`Restorable`, the optional capability of iterations that can put a checkpoint's
  pending group back as it was (its finished samples, its parked episodes continued): the
  local :class:`~agentmath.rollout.partial.PartialRollout`. Iterations without it get the
  group's problem drawn again first, its episodes run from scratch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agentmath.config import LoopConfig, RolloutConfig
    from agentmath.rollout.partial import IterationResult
    from agentmath.rollout.records import GroupRequest, PendingGroup, RolloutStats


@runtime_checkable
class EngineControl(Protocol):
    """What the trainer changes on the rollout engine between steps."""

    @property
    def version(self) -> int:
        """The policy version new segments are sampled (and tagged) with."""
        ...

    def set_policy_version(self, version: int) -> None:
        """New weights are live: segments from now on are tagged ``version``."""
        ...

    def use_model(self, name: str) -> None:
        """Requests from now on send ``name`` as the model (a LoRA adapter per version)."""
        ...

    def set_budgets(self, loop: LoopConfig, rollout: RolloutConfig) -> None:
        """A stage's budgets: episodes started (or segments run) from now on use them."""
        ...


@runtime_checkable
class Iterations(Protocol):
    """Successive RL iterations over a request stream."""

    @property
    def parked(self) -> int:
        """Episodes waiting for the next iteration (0 where every episode runs to its end)."""
        ...

    async def iteration(self, batch_groups: int) -> IterationResult:
        """``batch_groups`` complete groups (fewer once the requests run out)."""
        ...

    def pending_groups(self) -> list[PendingGroup]:
        """The groups drawn and not yet handed out (parked or held back), in order, with
        whatever of them can be kept (a checkpoint's record of them)."""
        ...

    async def aclose(self) -> None:
        """Release what waits between iterations (parked episodes' sandbox sessions)."""
        ...


@runtime_checkable
class Restorable(Protocol):
    """Iterations that put a checkpoint's pending group back as it was."""

    def restore(self, request: GroupRequest, pending: PendingGroup) -> RolloutStats:
        """Put ``pending`` back (``request``: its request, drawn again at its position);
        the episodes it kept, continued and ran anew (``resumed_*`` counters)."""
        ...
