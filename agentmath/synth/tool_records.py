"""SFT records for a tool model in one or several tool formats, every tool call verified.

Problems are dealt round-robin to the formats; each format's share goes through code injection
(:func:`agentmath.synth.inject.inject`: every snippet executed and checked in the sandbox), and
``native`` makes native tool-calling chat records. A chosen set of problems becomes text
records instead (the arithmetic done in the problem's text chain-of-thought, in the protocol of
the format it was dealt to), so that a model trained on the mixture learns to choose between
text and the tool. :class:`Conversion` counts what each format kept and dropped.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentmath.config import SandboxConfig
from agentmath.synth.config import NATIVE  # the pseudo-format of native tool-calling records
from agentmath.tasks import Task

__all__ = ["Conversion", "text_record", "tool_records"]


@dataclass(frozen=True, slots=True)
class Conversion:
    """The tool model's SFT data: verified tool trajectories kept, dropped ones by reason,
    the seconds code injection took, and the problems left as text chain-of-thought (None:
    no text share)."""

    kept: int
    dropped: dict[str, int]
    seconds: float
    text: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kept": self.kept, "dropped": dict(self.dropped),
                               "seconds": self.seconds}
        if self.text is not None:
            out["text"] = self.text
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Conversion:
        text = data.get("text")
        return cls(kept=int(data["kept"]),
                   dropped={str(k): int(v) for k, v in data["dropped"].items()},
                   seconds=float(data["seconds"]), text=None if text is None else int(text))


def text_record(task: Task, fmt_name: str, system_prompt: str | None = None) -> dict[str, Any]:
    """``task``'s text solution as an SFT record in the protocol of ``fmt_name``, under the
    prompt its tool records get: for ``native`` a chat record (the same system prompt and
    tools schema as a native tool record; the assistant answers in text, no tool call), for a
    text format a completion record (:func:`agentmath.synth.inject.text_only_example` with
    the format's system prompt)."""
    from agentmath.agent.prompts import CHAT_SYSTEM_PROMPT, build_messages
    from agentmath.formats import get_format
    from agentmath.formats.openai_tools import OPENAI_TOOLS, tool_spec
    from agentmath.synth.inject import text_only_example

    if not task.solution:
        raise ValueError(f"task {task.id!r} has no text solution")
    if fmt_name == NATIVE:
        messages = build_messages(task.problem, OPENAI_TOOLS, system_prompt or CHAT_SYSTEM_PROMPT)
        return {"id": task.id,
                "messages": [*messages, {"role": "assistant", "content": task.solution}],
                "tools": [tool_spec()], "answer": task.answer}
    return text_only_example(task, system_prompt or get_format(fmt_name).instructions())


async def tool_records(problems: Sequence[Task], formats: Sequence[str], *,
                       system_prompts: Mapping[str, str] | None = None,
                       concurrency: int = 16,
                       text_ids: Collection[str] = ()) -> tuple[list[dict], dict[str, Conversion]]:
    """Verified SFT records, problem i in ``formats[i % len(formats)]``; and conversion stats
    (kept, dropped by reason, seconds) per format. ``native`` makes chat records.
    ``system_prompts``: per format (a format not listed gets its own instructions). Problems
    whose id is in ``text_ids`` get :func:`text_record` s in the protocol of their format
    instead (counted as ``text`` in the stats); records stay in problem order within each
    format."""
    from agentmath.formats import get_format
    from agentmath.sandbox import SandboxPool
    from agentmath.synth.converters import RuleBasedConverter
    from agentmath.synth.inject import inject

    records: list[dict] = []
    stats: dict[str, Conversion] = {}
    text_ids = set(text_ids)
    async with SandboxPool(SandboxConfig(spare_workers=4)) as pool:
        for k, name in enumerate(formats):
            native = name == NATIVE
            fmt = get_format("openai_tools" if native else name)
            prompt = (system_prompts or {}).get(name)
            dealt = problems[k::len(formats)]
            report = await inject([p for p in dealt if p.id not in text_ids],
                                  RuleBasedConverter(), fmt, pool, concurrency=concurrency,
                                  system_prompt=prompt, native=native)
            if text_ids:
                by_id = {r["id"]: r for r in report.records}
                by_id.update({p.id: text_record(p, name, prompt) for p in dealt
                              if p.id in text_ids})
                records += [by_id[p.id] for p in dealt if p.id in by_id]
            else:
                records += report.records
            stats[name] = Conversion(
                kept=report.kept, dropped=dict(report.dropped),
                seconds=round(report.seconds, 1),
                text=sum(p.id in text_ids for p in dealt) if text_ids else None)
    return records, stats
