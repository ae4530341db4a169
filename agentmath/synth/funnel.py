"""The funnel report: how many tasks entered each stage, and why each one that left did.

Built from the outcomes alone (``outcomes.jsonl`` of a run), so a resumed or finished run's
report is always the whole run's. A task that left at stage *s* entered every enabled stage up
to *s*; a kept task entered them all. Each reason keeps a few examples (id and detail) so that
a surprising count can be looked at right away.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentmath.synth.pipeline import STAGES, Outcome


@dataclass(frozen=True)
class Example:
    """One rejected task, as an example of its reason."""

    id: str
    reason: str
    detail: str


@dataclass
class StageRow:
    """One stage of the funnel."""

    stage: str
    enabled: bool
    entered: int = 0
    left: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    examples: list[Example] = field(default_factory=list)


@dataclass
class Funnel:
    """The whole run: per stage, then the kept records' shape."""

    total: int
    kept: int
    stages: list[StageRow]
    mean_tool_calls: float
    self_corrections: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def build_funnel(outcomes: Sequence[Outcome], enabled: Sequence[str],
                 examples_per_reason: int = 3) -> Funnel:
    """The funnel of ``outcomes``; ``enabled``: the stages that ran (others are shown off)."""
    order = {stage: i for i, stage in enumerate(STAGES)}
    by_stage: dict[str, list[Outcome]] = {stage: [] for stage in STAGES}
    for o in outcomes:
        if o.stage is not None:
            by_stage.setdefault(o.stage, []).append(o)
    kept_outcomes = [o for o in outcomes if o.kept]
    kept = len(kept_outcomes)
    rows = []
    for stage in STAGES:
        left_here = by_stage[stage]
        beyond = sum(len(out) for s, out in by_stage.items() if order.get(s, -1) >= order[stage])
        row = StageRow(stage, stage in enabled, entered=beyond + kept if stage in enabled
                       else 0, left=len(left_here))
        row.reasons = dict(Counter(str(o.reason) for o in left_here).most_common())
        seen: Counter[str] = Counter()
        for o in left_here:
            if seen[str(o.reason)] < examples_per_reason:
                seen[str(o.reason)] += 1
                row.examples.append(Example(o.id, str(o.reason), o.detail[:300]))
        rows.append(row)
    mean_calls = (sum(o.tool_calls for o in kept_outcomes) / len(kept_outcomes)
                  if kept_outcomes else 0.0)
    return Funnel(len(outcomes), kept, rows, round(mean_calls, 2),
                  sum(o.self_corrections for o in kept_outcomes))


def funnel_table(funnel: Funnel) -> Any:
    """The funnel as a rich table (stage, entered, left, reasons, an example)."""
    from rich.table import Table

    table = Table(title=f"synth funnel: kept {funnel.kept} of {funnel.total}")
    for column in ("stage", "entered", "left", "why they left", "example"):
        table.add_column(column, justify="right" if column in ("entered", "left") else "left")
    for row in funnel.stages:
        if not row.enabled and not row.left:
            table.add_row(row.stage, "off", "", "", "")
            continue
        why = ", ".join(f"{r} {n}" for r, n in row.reasons.items())
        example = (f"{row.examples[0].id}: {row.examples[0].detail[:70]}"
                   if row.examples else "")
        table.add_row(row.stage, str(row.entered), str(row.left), why, example)
    table.add_row("kept", str(funnel.kept), "", f"{funnel.mean_tool_calls} tool calls on "
                  f"average, {funnel.self_corrections} self-corrections", "")
    return table
