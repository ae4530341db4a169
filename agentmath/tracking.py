"""Where a run's metrics go: one small sink interface, several trackers behind it.

RL and SFT hand each logged step to a :class:`MetricsSink` (:func:`open_sink`), evaluation its
progress and final metrics, and the run's config picks the trackers (``trackers = ["jsonl",
"tensorboard"]``; the names and :class:`WandbConfig` are declared in :mod:`agentmath.config`,
so that every config can name them without importing this module):

* ``jsonl`` (always on) — the run's own log, one JSON object per line (``metrics.jsonl`` of an
  RL run, ``loss.jsonl`` of SFT, ``eval_log.jsonl`` of an evaluation), line-buffered so that
  a kill loses none; on resume the lines past the checkpoint are cut. ``agentmath report``
  and the tests read this file.
* ``tensorboard`` — the same scalars as event files under ``OUT/tensorboard`` (needs the
  ``tensorboard`` package, in the ``train`` extra; missing, it is skipped with a warning, as
  it always was); steps past the checkpoint are purged on resume.
* ``wandb`` — Weights & Biases (``pip install 'agentmath[wandb]'``), offline by default (no
  network, no account: ``wandb sync OUT/wandb`` uploads later); a resumed run continues the
  same W&B run. Missing package: a ConfigError saying how to install it.

A record is what the JSONL line holds; the trackers take its scalars (its top-level numbers,
or what the caller passes). Events (a stage change) travel inside the step's record in the
JSONL file; :meth:`MetricsSink.event` shows them in the trackers too.

Nothing here imports torch, tensorboard or wandb until a tracker that needs it is opened.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from agentmath.config import TRACKERS, TrackerName, WandbConfig
from agentmath.errors import ConfigError
from agentmath.jsonl import is_number

__all__ = ["TRACKERS", "FanOut", "JsonlSink", "MetricsSink", "TensorBoardSink", "TrackerName",
           "WandbConfig", "WandbSink", "default_scalars", "open_sink", "truncate_jsonl"]

log = logging.getLogger(__name__)


class MetricsSink(Protocol):
    """Receives a run's step records and events."""

    def log(self, step: int, record: Mapping[str, Any],
            scalars: Mapping[str, float] | None = None) -> None:
        """Step ``step``'s record (the JSONL line); ``scalars``: the numbers trackers chart
        (default: the record's top-level numbers but ``step``)."""
        ...

    def event(self, step: int, name: str, data: Mapping[str, Any]) -> None:
        """Something that happened at ``step`` (the JSONL line already carries it)."""
        ...

    def close(self) -> None:
        """Flush and close (idempotent)."""
        ...


def default_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The record's top-level numbers, ``step`` and booleans excluded."""
    return {k: v for k, v in record.items()
            if k != "step" and is_number(v)}


def truncate_jsonl(path: Path, step: int) -> None:
    """Keep only the JSONL records of steps up to ``step`` (a run killed after its last
    checkpoint may have logged past it; its resume logs those steps again)."""
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("".join(f"{x}\n" for x in lines
                            if x.strip() and json.loads(x)["step"] <= step), encoding="utf-8")


class JsonlSink:
    """One JSON object per record, appended to ``path`` (line-buffered)."""

    def __init__(self, path: Path, *, resume_step: int) -> None:
        self.path = path
        truncate_jsonl(path, resume_step)
        self._file = path.open("a", encoding="utf-8", buffering=1)

    def log(self, step: int, record: Mapping[str, Any],
            scalars: Mapping[str, float] | None = None) -> None:
        self._file.write(json.dumps(record) + "\n")

    def event(self, step: int, name: str, data: Mapping[str, Any]) -> None:
        """Nothing: events are written inside the step's record."""

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    """Scalars (and events as text) as TensorBoard event files under ``log_dir``."""

    def __init__(self, log_dir: Path, *, resume_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter  # ImportError: see open_sink

        self._writer: Any = SummaryWriter(str(log_dir), purge_step=resume_step + 1)

    def log(self, step: int, record: Mapping[str, Any],
            scalars: Mapping[str, float] | None = None) -> None:
        for key, value in (default_scalars(record) if scalars is None else scalars).items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def event(self, step: int, name: str, data: Mapping[str, Any]) -> None:
        self._writer.add_text(f"events/{name}", json.dumps(dict(data)), step)

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """A Weights & Biases run (offline by default) in ``out_dir/wandb``; its id is kept in
    ``out_dir/wandb/run_id`` so that a resumed run logs into the same W&B run."""

    def __init__(self, out_dir: Path, *, project: str, mode: str, config: Mapping[str, Any],
                 resume_step: int) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise ConfigError("the wandb tracker needs the wandb package: pip install "
                              "'agentmath[wandb]' (or take \"wandb\" out of trackers)") from exc
        home = out_dir / "wandb"
        home.mkdir(parents=True, exist_ok=True)
        id_file = home / "run_id"
        run_id = id_file.read_text().strip() if id_file.exists() and resume_step else None
        run_id = run_id or uuid.uuid4().hex[:12]
        id_file.write_text(run_id + "\n")
        self._run = wandb.init(project=project, dir=str(out_dir), mode=mode, id=run_id,
                               resume="allow", config=dict(config))

    def log(self, step: int, record: Mapping[str, Any],
            scalars: Mapping[str, float] | None = None) -> None:
        self._run.log(dict(default_scalars(record) if scalars is None else scalars), step=step)

    def event(self, step: int, name: str, data: Mapping[str, Any]) -> None:
        self._run.log({f"events/{name}": json.dumps(dict(data))}, step=step)

    def close(self) -> None:
        self._run.finish()


class FanOut:
    """Every record and event to each of ``sinks`` (the JSONL log first)."""

    def __init__(self, sinks: Sequence[MetricsSink], path: Path) -> None:
        self.sinks = list(sinks)
        self.path = path  # the JSONL log

    def log(self, step: int, record: Mapping[str, Any],
            scalars: Mapping[str, float] | None = None) -> None:
        for sink in self.sinks:
            sink.log(step, record, scalars)

    def event(self, step: int, name: str, data: Mapping[str, Any]) -> None:
        for sink in self.sinks:
            sink.event(step, name, data)

    def close(self) -> None:
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            sink.close()


def open_sink(out_dir: str | Path, log_name: str, trackers: Sequence[str], *,
              resume_step: int = 0, wandb: WandbConfig | None = None,
              config: Mapping[str, Any] | None = None) -> FanOut:
    """The run's sink: ``out_dir/log_name`` (JSONL, always) and each of ``trackers``.
    ``resume_step``: the step the run resumes after (later records are dropped); ``config``:
    the run's settings, shown by W&B."""
    out = Path(out_dir)
    unknown = sorted(set(trackers) - set(TRACKERS))
    if unknown:
        raise ConfigError(f"unknown trackers {unknown}; choose from {', '.join(TRACKERS)}")
    sinks: list[MetricsSink] = [JsonlSink(out / log_name, resume_step=resume_step)]
    try:
        if "tensorboard" in trackers:
            try:
                sinks.append(TensorBoardSink(out / "tensorboard", resume_step=resume_step))
            except ImportError:  # optional, as it always was: say so once, keep the JSONL
                log.warning("tensorboard is not installed (pip install tensorboard); metrics "
                            "go to %s only", out / log_name)
        if "wandb" in trackers:
            w = wandb or WandbConfig()
            sinks.append(WandbSink(out, project=w.project, mode=w.mode, config=config or {},
                                   resume_step=resume_step))
    except BaseException:
        for sink in sinks:
            sink.close()
        raise
    return FanOut(sinks, out / log_name)
