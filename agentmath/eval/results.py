"""What an evaluation hands to the stages after it, typed: the run's metrics (``metrics.json``),
what the report shows of its saved config (``config.json``), the result of
:func:`~agentmath.eval.runner.run_eval` and its progress reports.

:class:`RunMetrics` has one writer (:func:`~agentmath.eval.runner.compute_run_metrics`, which
also writes ``metrics.json`` as :meth:`RunMetrics.to_dict`) and one reader
(:meth:`RunMetrics.from_dict`, used by the report and by anything that loads a finished run).
``from_dict`` is lenient where older or hand-made files may lack a block (the report reads
those too): a missing score is None, a missing count 0. The field names of the JSON form are
the file format (``pass`` is :attr:`RunMetrics.pass_at` here, a keyword in Python).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentmath.jsonl import is_number


@dataclass(frozen=True, slots=True)
class Score:
    """A headline score: the mean over problems, its standard error and 95% interval."""

    value: float
    stderr: float = 0.0
    ci95: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        ci = list(self.ci95) if self.ci95 is not None else [self.value, self.value]
        return {"value": self.value, "stderr": self.stderr, "ci95": ci}

    @classmethod
    def from_dict(cls, data: Any) -> Score | None:
        """None when ``data`` holds no numeric value (a block an older file lacks)."""
        if not isinstance(data, dict) or not is_number(data.get("value")):
            return None
        ci = data.get("ci95")
        ci95 = (float(ci[0]), float(ci[1])) if (isinstance(ci, list | tuple) and len(ci) == 2
                                                and all(is_number(v) for v in ci)) else None
        stderr = data.get("stderr")
        return cls(float(data["value"]), float(stderr) if is_number(stderr) else 0.0, ci95)


def _floats(data: Any, keys: tuple[str, ...]) -> dict[str, float | None]:
    data = data if isinstance(data, dict) else {}
    return {k: float(data[k]) if is_number(data.get(k)) else None for k in keys}


@dataclass(frozen=True, slots=True)
class TokenStats:
    """Per-sample token statistics (None: not in the file)."""

    model_mean: float | None = None
    model_median: float | None = None
    total_mean: float | None = None
    total_median: float | None = None
    tool_mean: float | None = None

    @classmethod
    def from_dict(cls, data: Any) -> TokenStats:
        return cls(**_floats(data, ("model_mean", "model_median", "total_mean",
                                    "total_median", "tool_mean")))


@dataclass(frozen=True, slots=True)
class ToolStats:
    """Tool calls per sample, and error / timeout / truncation rates per call."""

    calls_per_sample: float | None = None
    error_rate: float | None = None
    timeout_rate: float | None = None
    truncation_rate: float | None = None

    @classmethod
    def from_dict(cls, data: Any) -> ToolStats:
        return cls(**_floats(data, ("calls_per_sample", "error_rate", "timeout_rate",
                                    "truncation_rate")))


@dataclass(frozen=True, slots=True)
class BudgetStop:
    """How many of a run's samples one budget stopped (:mod:`agentmath.eval.truncation`):
    the setting (``loop.max_model_tokens``), the option that raises it, its value in the run
    (None: the server's context length, not known here), the count and its share of the
    run's samples."""

    budget: str
    option: str
    limit: float | None
    count: int
    rate: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> BudgetStop | None:
        """None for a block that is not one (a hand-made or damaged file)."""
        if not isinstance(data, dict) or not isinstance(data.get("budget"), str):
            return None
        limit = data.get("limit")
        return cls(budget=data["budget"], option=str(data.get("option") or ""),
                   limit=float(limit) if is_number(limit) else None,
                   count=int(data["count"]) if is_number(data.get("count")) else 0,
                   rate=float(data["rate"]) if is_number(data.get("rate")) else 0.0)


def _stops(data: Any) -> tuple[BudgetStop, ...]:
    blocks = data if isinstance(data, list) else []
    return tuple(s for b in blocks if (s := BudgetStop.from_dict(b)) is not None)


@dataclass(frozen=True, slots=True)
class GroupMetrics:
    """The problem-level metrics of a set of problems (a run, or one level or subject)."""

    n_problems: int = 0
    n_samples: int = 0
    k: int = 0
    avg: Score | None = None
    maj: Score | None = None
    pass_at: dict[str, float] = field(default_factory=dict)
    tokens: TokenStats = field(default_factory=TokenStats)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GroupMetrics:
        return cls(**_group_fields(data))


def _group_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The :class:`GroupMetrics` fields of a JSON block."""
    passes = data.get("pass") if isinstance(data.get("pass"), dict) else {}
    return {"n_problems": int(data.get("n_problems") or 0),
            "n_samples": int(data.get("n_samples") or 0), "k": int(data.get("k") or 0),
            "avg": Score.from_dict(data.get("avg")), "maj": Score.from_dict(data.get("maj")),
            "pass_at": {str(j): float(v) for j, v in passes.items() if is_number(v)},
            "tokens": TokenStats.from_dict(data.get("tokens"))}


def _groups(data: Any) -> dict[str, GroupMetrics]:
    if not isinstance(data, dict):
        return {}
    return {str(key): GroupMetrics.from_dict(block) for key, block in data.items()
            if isinstance(block, dict)}


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """The metrics of an evaluation run: ``metrics.json`` (see :mod:`agentmath.eval.metrics`
    for every definition). ``document`` keeps the JSON form it was made from, written back
    unchanged by :meth:`to_dict` (so a run's file never loses a key a newer version adds)."""

    n_problems: int
    n_samples: int
    k: int
    avg: Score | None
    maj: Score | None
    pass_at: dict[str, float]
    tokens: TokenStats
    tools: ToolStats
    finish_reasons: dict[str, int]
    duration_ms_mean: float | None
    by_level: dict[str, GroupMetrics]
    by_subject: dict[str, GroupMetrics]
    n_errors: int
    #: Each budget's stops (``truncation`` in the file; empty in files written before it).
    truncation: tuple[BudgetStop, ...] = ()
    document: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunMetrics:
        """The metrics of a ``metrics.json`` document (lenient: see the module doc)."""
        reasons = data.get("finish_reasons") if isinstance(data.get("finish_reasons"),
                                                           dict) else {}
        duration = data.get("duration_ms_mean")
        return cls(**_group_fields(data), tools=ToolStats.from_dict(data.get("tools")),
                   finish_reasons={str(k): int(v) for k, v in reasons.items()
                                   if is_number(v)},
                   duration_ms_mean=float(duration) if is_number(duration) else None,
                   by_level=_groups(data.get("by_level")),
                   by_subject=_groups(data.get("by_subject")),
                   n_errors=int(data.get("n_errors") or 0),
                   truncation=_stops(data.get("truncation")), document=dict(data))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as ``metrics.json`` holds it."""
        return dict(self.document)

    @property
    def truncated_rate(self) -> float | None:
        """The share of samples any budget stopped (None: the file does not say)."""
        return sum(s.rate for s in self.truncation) if self.truncation else None

    def scalars(self) -> dict[str, float]:
        """The numeric figures by name, for the trackers (agentmath/tracking.py): counts,
        ``avg``/``maj`` with their stderr and 95% interval, ``pass@j``, token and tool
        statistics, finish-reason counts, the mean duration, and each level's and subject's
        ``avg`` (None figures are left out)."""
        out: dict[str, float | None] = {"n_problems": self.n_problems,
                                        "n_samples": self.n_samples, "k": self.k,
                                        "n_errors": self.n_errors,
                                        "duration_ms_mean": self.duration_ms_mean}
        for name, score in (("avg", self.avg), ("maj", self.maj)):
            if score is not None:
                low, high = score.ci95 or (score.value, score.value)
                out |= {name: score.value, f"{name}_stderr": score.stderr,
                        f"{name}_ci95_low": low, f"{name}_ci95_high": high}
        out |= {f"pass@{j}": v for j, v in self.pass_at.items()}
        out |= {f"tokens/{k}": v for k, v in asdict(self.tokens).items()}
        out |= {f"tools/{k}": v for k, v in asdict(self.tools).items()}
        out |= {f"finish/{k}": v for k, v in self.finish_reasons.items()}
        out |= {f"truncated/{s.budget}": s.rate for s in self.truncation}
        for kind, groups in (("level", self.by_level), ("subject", self.by_subject)):
            out |= {f"{kind}/{key}/avg": g.avg.value for key, g in groups.items()
                    if g.avg is not None}
        return {k: float(v) for k, v in out.items() if v is not None}


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What a run's saved ``config.json`` says about it, for people comparing runs: its
    optional name, model, backend, tool format, dataset, samples per problem and seed (None:
    not in the file). The whole file stays in ``document`` (the runner checks its identity
    and dataset fingerprint itself, :func:`agentmath.runs.store.check_or_write_config`)."""

    name: str | None = None
    model: str | None = None
    backend: str | None = None
    format: str | None = None
    dataset: str | None = None
    samples: int | None = None
    seed: int | None = None
    document: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunInfo:
        """The display fields of a ``config.json`` document (lenient: any may be missing)."""
        def text(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else str(value)

        def number(key: str) -> int | None:
            value = data.get(key)
            return int(value) if is_number(value) else None

        return cls(name=text("name"), model=text("model"), backend=text("backend"),
                   format=text("format"), dataset=text("dataset"), samples=number("samples"),
                   seed=number("seed"), document=dict(data))


@dataclass(frozen=True, slots=True)
class EvalProgress:
    """One progress report of a running evaluation (after each recorded sample)."""

    done: int  # samples recorded, this run and before
    total: int  # samples the run has in all
    fresh: int  # samples recorded by this invocation
    correct: int  # of the fresh ones
    errors: int  # of the fresh ones
    rate: float  # fresh samples per second

    @property
    def accuracy(self) -> float:
        """The fresh samples' accuracy so far (0.0 before any)."""
        return self.correct / self.fresh if self.fresh else 0.0

    def scalars(self) -> dict[str, float]:
        """The counts, the rate and the accuracy by name, for the trackers."""
        return {"done": self.done, "total": self.total, "fresh": self.fresh,
                "correct": self.correct, "errors": self.errors, "rate": self.rate,
                "accuracy": self.accuracy}


@dataclass(frozen=True, slots=True)
class EvalResult:
    """What :func:`~agentmath.eval.runner.run_eval` returns: where the run is, its metrics,
    and how many samples this invocation ran (the rest were recorded before)."""

    run_dir: Path
    metrics: RunMetrics
    ran: int
