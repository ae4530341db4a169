"""The typed records of an RL run, each with one writer and one reader.

* :class:`StepMetrics` — everything logged for one step: written by the trainer (one line of
  ``metrics.jsonl`` per step, through the run's metrics sink), read back by
  :func:`read_steps` (older lines, without the fields added since, still load).
* :data:`RunEvent` — what happened to the run besides the figures: :class:`NoUpdate` (a step
  trained nothing) and :class:`StageMove` (the budgets grew). Kept in the step's line, in the
  checkpoint and in the result.
* :class:`CheckpointState` — the run state a checkpoint holds beside the weights and the
  optimizer (step, policy version, data cursor, the groups drawn and not yet trained on with
  what was kept of them, stage, events, the settings it is bound to), with a format version.
  :meth:`CheckpointState.from_payload` also reads the older formats (0: the events as JSON
  text; 1: the pending groups as problem ids, run again from scratch).
* :class:`RLResult` — what ``train_rl`` returns.

Their ``to_dict`` forms are the JSON (and ``torch.save``) forms, unchanged from the dicts the
code wrote before these records existed, so that every older file still reads.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentmath.agent.episode import Progress
from agentmath.agent.trajectory import Trajectory
from agentmath.errors import DataError
from agentmath.jsonl import read_records
from agentmath.rl.schedules import Stage, StageState
from agentmath.rollout.records import PendingGroup, Sample
from agentmath.runs.files import STEP_METRICS_FILE

#: The version of :class:`CheckpointState`'s payload (0: written before it had one; 1: the
#: pending groups as problem ids only, ``requeue``; 2: as :class:`PendingGroup` records).
CHECKPOINT_FORMAT = 2


#: Why a step trained nothing (:attr:`NoUpdate.cause`): every group that came back had no
#: reward variance; the filters dropped every group; no group came back complete because the
#: partial rollout reached its draw bound (``RolloutConfig.max_new_groups``: every episode it
#: drew outlasted its segments, parked for the next step); no group came back for another
#: reason (the prompts ran out).
NO_UPDATE_CAUSES = ("no_variance", "filtered", "draw_bound", "no_groups", "infra")


@dataclass(frozen=True, slots=True)
class NoUpdate:
    """Step ``step`` trained nothing: ``why`` says why in words, ``cause`` is one of
    :data:`NO_UPDATE_CAUSES` (a record written before it existed reads as ``no_variance``,
    what it always said)."""

    step: int
    why: str
    cause: str = "no_variance"

    def __post_init__(self) -> None:
        if self.cause not in NO_UPDATE_CAUSES:
            raise ValueError(f"unknown no-update cause {self.cause!r} "
                             f"(known: {', '.join(NO_UPDATE_CAUSES)})")

    def to_dict(self) -> dict[str, Any]:
        """The stored form; ``cause`` only when it is not ``no_variance``, so that a record of
        that cause is the line it always was."""
        data: dict[str, Any] = {"event": "no_update", "step": self.step, "why": self.why}
        if self.cause != "no_variance":
            data["cause"] = self.cause
        return data


@dataclass(frozen=True, slots=True)
class StageMove:
    """At ``step``, the truncation rate ``rate`` passed the threshold: stage ``old`` -> ``new``
    with ``budgets``."""

    step: int
    old: int
    new: int
    rate: float
    budgets: Stage

    def to_dict(self) -> dict[str, Any]:
        return {"event": "stage", "step": self.step, "old": self.old, "new": self.new,
                "rate": self.rate, "budgets": asdict(self.budgets)}


RunEvent = NoUpdate | StageMove


def event_from_dict(data: Mapping[str, Any]) -> RunEvent:
    """The event a ``to_dict`` wrote; DataError for an unknown kind."""
    kind = data.get("event")
    try:
        if kind == "no_update":
            return NoUpdate(int(data["step"]), str(data["why"]),
                            str(data.get("cause", "no_variance")))
        if kind == "stage":
            return StageMove(int(data["step"]), int(data["old"]), int(data["new"]),
                             float(data["rate"]), Stage(**data["budgets"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"RL event {dict(data)!r}: {exc}") from exc
    raise DataError(f"unknown RL event {kind!r} (known: no_update, stage)")


@dataclass(slots=True)
class StepExtra:
    """Details of a step kept for debugging: rollout rounds (dynamic sampling) and the policy
    versions the trained samples were generated under."""

    rounds: int = 0
    sample_versions: list[int] = field(default_factory=list)


@dataclass(slots=True)
class StepMetrics:
    """Everything logged for one RL step (one line of ``metrics.jsonl``)."""

    step: int
    policy_version: int
    stage: int
    temperature: float
    lr: float
    reward_mean: float
    reward_terms: dict[str, float]  # mean of each (unweighted) term
    accuracy: float
    advantage_mean: float
    advantage_std: float
    advantage_abs_mean: float
    loss: float
    clip_frac: float
    is_weight_mean: float
    is_capped_frac: float  # loss tokens whose token_tis / sequence_tis weight hit its cap
    kl: float
    entropy: float
    grad_norm: float
    model_tokens_mean: float
    tool_tokens_mean: float
    loss_tokens: int
    tool_calls_mean: float
    tool_error_rate: float  # errored tool calls / tool calls
    truncation_rate: float
    groups_trained: int
    groups_dropped: int  # dynamic sampling: no reward variance
    samples: int
    samples_per_s: float
    rollout_s: float
    train_s: float
    step_s: float
    stale_dropped: int = 0
    regenerated: int = 0
    parked: int = 0
    # defaults: records written before these existed still load
    tool_call_rate: float = 0.0  # samples with at least one tool call / samples
    pass_rate_dropped: int = 0  # groups: measured pass rate out of bounds (filters)
    void_dropped: int = 0  # samples with a void turn, left out (filters)
    void_groups_dropped: int = 0  # groups left with < 2 samples or no variance by it
    roc_dropped: int = 0  # samples resample-on-correct left out (filters)
    groups_surplus: int = 0  # with signal, beyond the step's need (generation_batch_factor)
    # the sampler-trainer mismatch over the step's loss tokens (rl/losses.py)
    mismatch_kl: float = 0.0  # mean k3 estimate of KL(sampler || trainer) per token
    mismatch_max: float = 0.0  # largest |log pi_trainer - log pi_sampler|
    mismatch_masked: float = 0.0  # fraction of loss tokens the IS correction cut or masked
    # native chat: episodes whose chat template rewrote their history (trained per turn or
    # refused: LoopConfig.history_rewrite), and episodes training refuses (rewritten under
    # "refuse", or ids that are not what the sampler saw); over every sample of the step
    rewritten_episodes: int = 0
    refused_episodes: int = 0
    # policy versions behind the trainer: the step's version minus the oldest version that
    # sampled a turn of a trained sample (partial rollout and async runs mix versions)
    infra_excluded: int = 0  # samples left out: failed for the infrastructure's reasons
    staleness_max: int = 0
    staleness_mean: float = 0.0
    stale_waited: int = 0  # episodes run to their end, parked they'd go stale (stale="wait")
    # the first step after a resume: what became of the checkpoint's pending groups
    resumed_kept: int = 0  # finished samples kept as they were
    resumed_continued: int = 0  # parked episodes continued from their saved progress
    resumed_regenerated: int = 0  # episodes run again from scratch (nothing of them kept)
    prompts: list[str] = field(default_factory=list)  # problem ids of the groups trained on
    #: problem ids of the groups drawn and not trained on, by reason (no_variance, filtered,
    #: surplus, infra, stale); a problem drawn twice in a step is listed twice
    prompts_dropped: dict[str, list[str]] = field(default_factory=dict)
    extra: StepExtra = field(default_factory=StepExtra)
    events: list[RunEvent] = field(default_factory=list)  # this step's (a line has none if none)
    #: read back from a line written before these fields existed (their defaults are not data)
    absent: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON line: every field, ``events`` only when there are some; a record read
        from a line written before some fields existed writes them back as absent (their
        defaults are not data), so that the line comes back as it was."""
        record = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("extra", "events", "absent", *self.absent)}
        record["reward_terms"] = dict(self.reward_terms)
        if "prompts" in record:
            record["prompts"] = list(self.prompts)
            record["prompts_dropped"] = {k: list(v) for k, v in self.prompts_dropped.items()}
        record["extra"] = asdict(self.extra)
        if self.events:
            record["events"] = [e.to_dict() for e in self.events]
        return record

    def scalars(self) -> dict[str, float]:
        """The numeric figures by name (for trackers and plots): every int/float field but
        ``step`` (and those its line did not have), and each reward term as ``reward/NAME``."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != "step" and f.name not in self.absent
               and type(getattr(self, f.name)) in (int, float)}
        out.update({f"reward/{k}": v for k, v in self.reward_terms.items()})
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepMetrics:
        """A record :meth:`to_dict` wrote (fields added since take their defaults; unknown
        keys are ignored); DataError naming the field that is missing or malformed."""
        if not isinstance(data.get("step"), int):
            raise DataError("field 'step': a step record needs an integer")
        known = {f.name: f for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items()
                  if k in known and k not in ("extra", "events", "absent")}
        missing = [n for n, f in known.items() if n not in data and
                   f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise DataError(f"missing field{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(map(repr, missing))}")
        if not isinstance(values["reward_terms"], Mapping):
            raise DataError("field 'reward_terms': expected an object")
        if not _str_list(values.get("prompts", [])):
            raise DataError("field 'prompts': expected a list of problem ids")
        dropped = values.get("prompts_dropped", {})
        if not isinstance(dropped, Mapping) or not all(map(_str_list, dropped.values())):
            raise DataError("field 'prompts_dropped': expected an object of lists of problem "
                            "ids")
        extra = data.get("extra") or {}
        events = data.get("events") or []
        if not isinstance(extra, Mapping):
            raise DataError("field 'extra': expected an object")
        if not isinstance(events, list) or not all(isinstance(e, Mapping) for e in events):
            raise DataError("field 'events': expected a list of objects")
        try:
            details = StepExtra(int(extra.get("rounds", 0)),
                                list(extra.get("sample_versions", [])))
        except (TypeError, ValueError) as exc:
            raise DataError(f"field 'extra': {exc}") from exc
        absent = tuple(n for n in known if n not in data and n not in ("extra", "events",
                                                                      "absent"))
        return cls(**values, extra=details,
                   events=[event_from_dict(e) for e in events], absent=absent)


def _str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def read_steps(path: str | Path) -> list[StepMetrics]:
    """The one reader of an RL run's step log: the typed records of a ``metrics.jsonl`` (or
    of the run directory holding one), in order. A bad line is a DataError naming the file,
    the line and the field."""
    file = Path(path)
    if file.is_dir():
        file = file / STEP_METRICS_FILE
    return read_records(file, StepMetrics.from_dict, what="an RL run's step log")


@dataclass(frozen=True, slots=True)
class BoundSettings:
    """The settings a checkpoint is bound to: resuming it under other values is refused."""

    lora: bool
    group_size: int
    model: str


@dataclass(slots=True)
class CheckpointState:
    """The run state saved in ``trainer_state.pt`` beside the weights and the optimizer."""

    step: int
    version: int  # the policy version
    cursor: int  # group requests drawn from the data stream
    #: groups drawn and not yet trained on (held back, parked, or put back by an earlier
    #: resume and not drawn again yet), with their finished samples and parked episodes
    pending: list[PendingGroup]
    stage: StageState
    events: list[RunEvent]
    config: BoundSettings
    format_version: int = CHECKPOINT_FORMAT

    def to_payload(self) -> dict[str, Any]:
        """Plain containers for ``torch.save`` (read back with ``weights_only``)."""
        return {"format_version": self.format_version, "config": asdict(self.config),
                "step": self.step, "version": self.version, "cursor": self.cursor,
                "pending": [_pending_payload(p) for p in self.pending],
                "stage": self.stage.to_dict(), "events": [e.to_dict() for e in self.events]}

    @classmethod
    def from_payload(cls, state: Mapping[str, Any]) -> CheckpointState:
        """The state of a checkpoint: this format or an older one (the module docstring);
        DataError for a newer format than this code reads, or a malformed pending group."""
        fmt = int(state.get("format_version", 0))
        if fmt > CHECKPOINT_FORMAT:
            raise DataError(f"checkpoint state format {fmt} is newer than this agentmath reads "
                            f"({CHECKPOINT_FORMAT}): upgrade agentmath")
        events = state["events"]
        if isinstance(events, str):  # format 0
            events = json.loads(events)
        bound = state["config"]
        if fmt < 2:  # problem ids only: their groups run again from scratch
            pending = [PendingGroup(None, str(i)) for i in state.get("requeue", [])]
        else:
            pending = [_pending_from(p, n) for n, p in enumerate(state["pending"])]
        return cls(step=int(state["step"]), version=int(state["version"]),
                   cursor=int(state.get("cursor", 0)), pending=pending,
                   stage=StageState.from_dict(state["stage"]),
                   events=[event_from_dict(e) for e in events],
                   config=BoundSettings(bool(bound["lora"]), int(bound["group_size"]),
                                        str(bound["model"])),
                   format_version=CHECKPOINT_FORMAT)


def _pending_payload(pending: PendingGroup) -> dict[str, Any]:
    """One pending group's stored form (the one writer; :func:`_pending_from` reads it)."""
    return {"position": pending.position, "task_id": pending.task_id,
            "samples": [{"index": s.index, "restarts": s.restarts,
                         "trajectory": s.trajectory.to_dict()} for s in pending.samples],
            "progress": [{"index": i, **p.to_dict()} for i, p in
                         sorted(pending.progress.items())]}


def _pending_from(data: Mapping[str, Any], n: int) -> PendingGroup:
    """The pending group :func:`_pending_payload` wrote (``n``: its place, for errors)."""
    try:
        task_id = str(data["task_id"])
        position = data["position"]
        samples = [Sample(task_id, int(s["index"]), Trajectory.from_dict(s["trajectory"]),
                          int(s["restarts"])) for s in data["samples"]]
        progress = {int(p["index"]): Progress.from_dict(p) for p in data["progress"]}
        return PendingGroup(None if position is None else int(position), task_id, samples,
                            progress)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"checkpoint state: pending group {n}: {type(exc).__name__}: "
                        f"{exc}") from exc


@dataclass
class RLResult:
    """What a run did and where it put things."""

    steps: int
    policy_version: int
    stage: int
    out_dir: str
    final_dir: str | None  # None when stopped early (stop_after)
    metrics: str
    checkpoints: list[str]
    resumed_from: int | None
    wall_time_s: float
    last: StepMetrics | None = None
    events: list[RunEvent] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``agentmath rl --json``): ``last`` and ``events`` as dicts."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["checkpoints"] = list(self.checkpoints)
        out["last"] = self.last.to_dict() if self.last is not None else None
        out["events"] = [e.to_dict() for e in self.events]
        return out
