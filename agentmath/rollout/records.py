"""Typed records passed between the rollout engine and its consumers (evaluator, trainer)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from agentmath.agent.episode import Progress
from agentmath.agent.trajectory import Trajectory

if TYPE_CHECKING:
    from agentmath.tasks import Task


@dataclass(frozen=True, slots=True)
class GroupRequest:
    """A problem to sample ``samples`` times (GRPO's group of G; evaluation's samples per
    problem). ``indices`` restricts which sample indices to run (a resumed evaluation runs
    only the missing ones); None runs ``range(samples)``. ``position``: the request's draw
    number in an RL run's seeded order of problems (what a checkpoint records of it, and what
    its samples' seeds derive from); None outside such a stream."""

    task: Task
    samples: int = 1
    indices: tuple[int, ...] | None = None
    position: int | None = None

    @property
    def group_id(self) -> str:
        return self.task.id

    @property
    def sample_indices(self) -> tuple[int, ...]:
        return self.indices if self.indices is not None else tuple(range(self.samples))


@dataclass(slots=True)
class Sample:
    """One finished episode of a group. ``restarts`` counts regenerations after it went stale;
    ``error`` is set when the episode could not be run at all (a bug, not a model failure)."""

    group_id: str
    index: int
    trajectory: Trajectory
    restarts: int = 0

    @property
    def policy_versions(self) -> list[int]:
        return self.trajectory.policy_versions


@dataclass(slots=True)
class Group:
    """A group whose samples are all finished, handed to the consumer as one unit."""

    request: GroupRequest
    samples: list[Sample] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return len(self.samples) == len(self.request.sample_indices)


@dataclass(slots=True)
class RolloutStats:
    """Counters of a run (or of one iteration), for logs and benchmarks."""

    groups_done: int = 0
    samples_done: int = 0
    segments: int = 0  # calls of Episode.advance
    parked: int = 0  # segments that ended parked (partial rollout)
    interrupted: int = 0  # of them, parked with their running turn cut (interrupt_turns)
    resumed: int = 0  # parked episodes continued in a later iteration
    dropped_groups: int = 0  # groups dropped for staleness
    regenerated: int = 0  # samples restarted from scratch for staleness
    wasted_tokens: int = 0  # model tokens thrown away by drops and regenerations
    draws_stopped: int = 0  # iterations that reached their draw bound, their batch short
    stale_waited: int = 0  # episodes run to their end, not parked: parked they'd go stale
    resumed_kept: int = 0  # finished samples a checkpoint kept, handed out after a resume
    resumed_continued: int = 0  # episodes a checkpoint saved, continued after a resume
    resumed_regenerated: int = 0  # episodes a checkpoint could not save, run from scratch
    dropped_ids: list[str] = field(default_factory=list)  # groups dropped for staleness
    version_spans: Counter[int] = field(default_factory=Counter)  # samples by versions spanned

    def add(self, other: RolloutStats) -> None:
        """Add ``other``'s counters to these (one RL step's rounds into its total)."""
        for f in fields(self):
            if f.name == "version_spans":
                self.version_spans.update(other.version_spans)
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict[str, object]:
        """JSON-ready counters."""
        return {"groups_done": self.groups_done, "samples_done": self.samples_done,
                "segments": self.segments, "parked": self.parked,
                "interrupted": self.interrupted, "resumed": self.resumed,
                "dropped_groups": self.dropped_groups, "regenerated": self.regenerated,
                "wasted_tokens": self.wasted_tokens, "draws_stopped": self.draws_stopped,
                "stale_waited": self.stale_waited,
                "resumed_kept": self.resumed_kept,
                "resumed_continued": self.resumed_continued,
                "resumed_regenerated": self.resumed_regenerated,
                "dropped_ids": list(self.dropped_ids),
                "version_spans": {str(k): v for k, v in sorted(self.version_spans.items())}}


@dataclass(slots=True)
class PendingGroup:
    """A group drawn and not yet handed out, as a checkpoint keeps it: its draw ``position``
    in the run's seeded order (None: a checkpoint that kept only the problem id), its
    problem, the samples already finished and what each parked episode had done
    (``progress`` by sample index). A sample index in neither is run from scratch after a
    resume; a parked one continues from its progress."""

    position: int | None
    task_id: str
    samples: list[Sample] = field(default_factory=list)
    progress: dict[int, Progress] = field(default_factory=dict)

    @property
    def saved(self) -> bool:
        """Whether anything of the group's episodes was kept (else it is only redrawn)."""
        return bool(self.samples or self.progress)
