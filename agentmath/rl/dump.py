"""Rollout dumps: every trajectory of an RL step, with what the step did with it.

With ``dump_rollouts`` a run writes ``OUT/rollouts/step-NNNNNN.jsonl.gz`` after each step: one
:class:`RolloutRecord` per sample generated (trained, or left out and why), its reward terms,
advantage and whole trajectory, token ids and logprobs included, so that a step can be
inspected, shown in the viewer or replayed after the fact (slime writes such dumps too). This
module is the one writer (:func:`write_rollout_dump`) and the one reader
(:func:`read_rollout_dump`) of the format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentmath.agent.trajectory import Trajectory
from agentmath.errors import DataError
from agentmath.jsonl import read_records, write_jsonl
from agentmath.rl.batch import ScoredGroup, ScoredSample
from agentmath.rl.rollouts import Collected

DUMP_DIR = "rollouts"

#: What the step did with a sample: trained on it, or left it out with its group (no reward
#: variance, a filter, beyond the step's need, too few valid samples left), or alone (a filter
#: or an infrastructure failure took it out of a group that was trained).
Status = Literal["trained", "no_variance", "filtered", "surplus", "infra", "removed_filter",
                 "removed_infra"]
STATUSES: tuple[str, ...] = Status.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class RolloutRecord:
    """One sample of one step, as the dump stores it."""

    step: int
    problem_id: str
    sample_index: int
    status: Status
    reward: float
    correct: bool
    advantage: float
    trajectory: Trajectory
    terms: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "problem_id": self.problem_id,
                "sample_index": self.sample_index, "status": self.status,
                "reward": self.reward, "correct": self.correct, "advantage": self.advantage,
                "terms": dict(self.terms), "infra_failure": self.trajectory.infra_failure,
                "trajectory": self.trajectory.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutRecord:
        """A record :meth:`to_dict` wrote; DataError naming the field that is wrong."""
        if data.get("status") not in STATUSES:
            raise DataError(f"field 'status': expected one of {', '.join(STATUSES)}, got "
                            f"{data.get('status')!r}")
        try:
            return cls(int(data["step"]), str(data["problem_id"]), int(data["sample_index"]),
                       data["status"], float(data["reward"]), bool(data["correct"]),
                       float(data["advantage"]), Trajectory.from_dict(data["trajectory"]),
                       {str(k): float(v) for k, v in dict(data.get("terms") or {}).items()})
        except KeyError as exc:
            raise DataError(f"missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise DataError(f"a malformed field: {exc}") from None


def dump_path(out_dir: str | Path, step: int) -> Path:
    """Where step ``step``'s dump goes."""
    return Path(out_dir) / DUMP_DIR / f"step-{step:06d}.jsonl.gz"


def _records(step: int, collected: Collected) -> list[RolloutRecord]:
    def of(sample: ScoredSample, status: Status) -> RolloutRecord:
        return RolloutRecord(step, sample.group_id, sample.index, status, sample.reward,
                             sample.correct, sample.advantage, sample.trajectory,
                             dict(sample.terms))

    def whole(groups: list[ScoredGroup], status: Status) -> list[RolloutRecord]:
        return [of(s, status) for g in groups for s in g.samples]

    return (whole(collected.groups, "trained") + whole(collected.dropped, "no_variance")
            + whole(collected.filtered, "filtered") + whole(collected.surplus, "surplus")
            + whole(collected.infra_dropped, "infra")
            + [of(s, "removed_infra" if s.trajectory.infra_failure else "removed_filter")
               for s in collected.removed])


def write_rollout_dump(out_dir: str | Path, step: int, collected: Collected) -> Path:
    """Write every sample of step ``step`` (after its update: the advantages are set)."""
    path = dump_path(out_dir, step)
    write_jsonl((r.to_dict() for r in _records(step, collected)), path)
    return path


def read_rollout_dump(path: str | Path) -> list[RolloutRecord]:
    """The records of one dump; a bad line is a DataError naming the file and the line."""
    return read_records(path, RolloutRecord.from_dict, what="a rollout dump")
