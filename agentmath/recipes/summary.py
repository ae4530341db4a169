"""What ``agentmath demo`` hands back: its summary, typed.

:class:`DemoSummary` has one writer, the recipe (:func:`agentmath.recipes.demo.run_demo`, which
also saves it as ``OUT/summary.json``), and one reader, the CLI (its table, and ``--json``,
which prints :meth:`DemoSummary.to_dict`). The JSON form is the file format: ``to_dict`` writes
the keys the demo has always written, in the same order (``pass@8`` and ``greedy_pass@1`` are
:attr:`Headroom.pass_at_k` and :attr:`Headroom.greedy_pass_at_1` here), and
:meth:`DemoSummary.from_dict` reads them back (:meth:`DemoSummary.read` reads the file),
older summaries too (written before the validation split and the sampled accuracy: their
headroom was measured on the test problems, and their rows have no sampled accuracy).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmath.errors import DataError
from agentmath.rl.records import StageMove, event_from_dict
from agentmath.synth.tool_records import Conversion

if TYPE_CHECKING:
    from agentmath.eval.results import RunMetrics, Score

SUMMARY_FILE = "summary.json"


def _avg(metrics: RunMetrics) -> Score:
    """avg@k of a run the demo evaluated (always present: every run has samples)."""
    assert metrics.avg is not None
    return metrics.avg


@dataclass(frozen=True, slots=True)
class ModelRow:
    """The figures the demo compares for one model on the held-out test problems: greedy
    accuracy with its 95% CI, the sampled accuracy (mean over :class:`Sampling`'s samples at
    the RL temperature; None in summaries written before it was measured), mean model
    tokens, tool calls and failed tool calls per sample and samples of the greedy run; a GRPO
    row also lists its budget-stage transitions (None: not a GRPO row); a candidate for the
    model saved for ``solve`` its greedy accuracy on the validation problems, which chose it
    (None: not a candidate)."""

    model: str
    accuracy: float
    accuracy_ci95: tuple[float, float]
    sampled_accuracy: float | None
    mean_model_tokens: float | None
    tool_calls_per_sample: float | None
    failed_tool_calls_per_sample: float
    n: int
    stage_transitions: list[StageMove] | None = None
    validation_accuracy: float | None = None

    @classmethod
    def of(cls, name: str, greedy: RunMetrics, sampled: RunMetrics | None,
           transitions: list[StageMove] | None = None,
           validation_accuracy: float | None = None) -> ModelRow:
        """The row of a model's greedy and sampled evaluations on the test problems."""
        avg, tools = _avg(greedy), greedy.tools
        calls = tools.calls_per_sample or 0.0
        return cls(model=name, accuracy=avg.value,
                   accuracy_ci95=avg.ci95 or (avg.value, avg.value),
                   sampled_accuracy=None if sampled is None else _avg(sampled).value,
                   mean_model_tokens=greedy.tokens.model_mean,
                   tool_calls_per_sample=tools.calls_per_sample,
                   failed_tool_calls_per_sample=calls * (tools.error_rate or 0.0),
                   n=greedy.n_samples, stage_transitions=transitions,
                   validation_accuracy=validation_accuracy)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model, "accuracy": self.accuracy,
            "accuracy_ci95": list(self.accuracy_ci95),
            "sampled_accuracy": self.sampled_accuracy,
            "mean_model_tokens": self.mean_model_tokens,
            "tool_calls_per_sample": self.tool_calls_per_sample,
            "failed_tool_calls_per_sample": self.failed_tool_calls_per_sample, "n": self.n}
        if self.stage_transitions is not None:
            out["stage_transitions"] = [e.to_dict() for e in self.stage_transitions]
        if self.validation_accuracy is not None:
            out["validation_accuracy"] = self.validation_accuracy
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelRow:
        low, high = data["accuracy_ci95"]
        moves = data.get("stage_transitions")
        return cls(model=str(data["model"]), accuracy=float(data["accuracy"]),
                   accuracy_ci95=(float(low), float(high)),
                   sampled_accuracy=_optional(data.get("sampled_accuracy")),
                   mean_model_tokens=_optional(data.get("mean_model_tokens")),
                   tool_calls_per_sample=_optional(data.get("tool_calls_per_sample")),
                   failed_tool_calls_per_sample=float(data["failed_tool_calls_per_sample"]),
                   n=int(data["n"]),
                   stage_transitions=None if moves is None else [_stage_move(e) for e in moves],
                   validation_accuracy=_optional(data.get("validation_accuracy")))


@dataclass(frozen=True, slots=True)
class Sampling:
    """How every row's sampled accuracy was measured: ``samples`` per problem at
    ``temperature`` on the first ``problems`` problems of the ``split``."""

    samples: int
    temperature: float
    problems: int
    split: str = "test"

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "temperature": self.temperature,
                "problems": self.problems, "split": self.split}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sampling:
        return cls(samples=int(data["samples"]), temperature=float(data["temperature"]),
                   problems=int(data["problems"]), split=str(data["split"]))


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)


def _stage_move(data: dict[str, Any]) -> StageMove:
    event = event_from_dict(data)
    if not isinstance(event, StageMove):
        raise DataError(f"a stage transition was expected, got {data!r}")
    return event


@dataclass(frozen=True, slots=True)
class Headroom:
    """What GRPO can lift the start to: greedy pass@1 and pass@k at the RL temperature on
    ``problems`` problems of the ``split`` (with the sampled runs' pass@1 and tool calls).
    The demo measures it on its validation problems; summaries written before there was a
    validation split measured it on the test problems (``split`` "test")."""

    greedy_pass_at_1: float
    k: int
    temperature: float
    pass_at_k: float
    sampled_pass_at_1: float
    sampled_tool_calls_per_sample: float | None
    problems: int
    split: str = "validation"

    @classmethod
    def measure(cls, k: int, temperature: float, greedy: RunMetrics,
                sampled: RunMetrics) -> Headroom:
        """The headroom of the start's greedy run and its ``k``-sample run (validation)."""
        return cls(greedy_pass_at_1=_avg(greedy).value, k=k, temperature=temperature,
                   pass_at_k=sampled.pass_at[str(k)], sampled_pass_at_1=_avg(sampled).value,
                   sampled_tool_calls_per_sample=sampled.tools.calls_per_sample,
                   problems=sampled.n_problems)

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "greedy_pass@1": self.greedy_pass_at_1, "k": self.k,
                "temperature": self.temperature, f"pass@{self.k}": self.pass_at_k,
                "sampled_pass@1": self.sampled_pass_at_1,
                "sampled_tool_calls_per_sample": self.sampled_tool_calls_per_sample,
                "problems": self.problems}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Headroom:
        k = int(data["k"])
        return cls(greedy_pass_at_1=float(data["greedy_pass@1"]), k=k,
                   temperature=float(data["temperature"]), pass_at_k=float(data[f"pass@{k}"]),
                   sampled_pass_at_1=float(data["sampled_pass@1"]),
                   sampled_tool_calls_per_sample=_optional(
                       data.get("sampled_tool_calls_per_sample")),
                   problems=int(data["problems"]), split=str(data.get("split", "test")))


@dataclass(frozen=True, slots=True)
class StartAttempt:
    """One start the demo grew for its tool model: which attempt (1 = the first), the seed of
    its SFT (initialisation and data order), its headroom, and whether GRPO ran from it."""

    attempt: int
    sft_seed: int
    headroom: Headroom
    used: bool

    def to_dict(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "sft_seed": self.sft_seed, "used": self.used,
                "headroom": self.headroom.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StartAttempt:
        return cls(attempt=int(data["attempt"]), sft_seed=int(data["sft_seed"]),
                   headroom=Headroom.from_dict(data["headroom"]), used=bool(data["used"]))


@dataclass(frozen=True, slots=True)
class ReportFiles:
    """The demo's report: its comparison rows (the report's table, by column) and files."""

    rows: list[dict[str, Any]]
    markdown: str | None
    csv: str | None
    plots: list[str]
    viewer: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "markdown": self.markdown, "csv": self.csv,
                "plots": list(self.plots), "viewer": self.viewer}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReportFiles:
        return cls(rows=list(data["rows"]), markdown=data.get("markdown"),
                   csv=data.get("csv"), plots=[str(p) for p in data.get("plots", [])],
                   viewer=data.get("viewer"))


@dataclass(frozen=True, slots=True)
class DemoSummary:
    """The demo's results: a row per model, how their sampled accuracy was measured
    (``sampling``; None in summaries written before it was), the start's headroom, the tool
    model's data, the settings it ran with (``DemoConfig`` as JSON), its report, where the
    tool model was saved and which one it is, the seconds it took, and every start grown for
    the tool model (``starts``; empty in summaries written before starts could be grown
    again)."""

    models: list[ModelRow]
    headroom: Headroom
    conversion: Conversion
    config: dict[str, Any] = field(repr=False)
    report: ReportFiles
    tool_model: str
    tool_model_is: str
    seconds: float
    starts: list[StartAttempt] = field(default_factory=list)
    sampling: Sampling | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``summary.json`` and ``agentmath demo --json``."""
        out = {"models": [row.to_dict() for row in self.models]}
        if self.sampling is not None:
            out["sampling"] = self.sampling.to_dict()
        return {**out, "headroom": self.headroom.to_dict(),
                "conversion": self.conversion.to_dict(),
                "config": dict(self.config), "report": self.report.to_dict(),
                "tool_model": self.tool_model, "tool_model_is": self.tool_model_is,
                "seconds": self.seconds, "starts": [a.to_dict() for a in self.starts]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DemoSummary:
        """The summary a :meth:`to_dict` wrote; DataError naming what is missing or wrong."""
        try:
            return cls(models=[ModelRow.from_dict(r) for r in data["models"]],
                       headroom=Headroom.from_dict(data["headroom"]),
                       conversion=Conversion.from_dict(data["conversion"]),
                       config=dict(data["config"]),
                       report=ReportFiles.from_dict(data["report"]),
                       tool_model=str(data["tool_model"]),
                       tool_model_is=str(data["tool_model_is"]),
                       seconds=float(data["seconds"]),
                       starts=[StartAttempt.from_dict(a) for a in data.get("starts", [])],
                       sampling=None if data.get("sampling") is None
                       else Sampling.from_dict(data["sampling"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DataError(f"not a demo summary ({type(exc).__name__}: {exc})") from exc

    def write(self, out_dir: Path) -> Path:
        """Save as ``out_dir/summary.json``; returns its path."""
        path = out_dir / SUMMARY_FILE
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, out_dir: Path) -> DemoSummary:
        """The summary a demo saved in ``out_dir``."""
        path = out_dir / SUMMARY_FILE
        try:
            return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except DataError as exc:
            raise DataError(f"{path}: {exc}") from exc
