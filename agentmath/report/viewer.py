"""A single self-contained static HTML page to browse runs, problems, samples and trajectories.

All data is embedded as JSON in a ``<script type="application/json">`` tag (with ``<``, ``>``
and ``&`` written as ``\\u003c`` etc., so model output containing ``</script>`` cannot end the
tag); the page's JavaScript inserts every piece of data with ``textContent``, never as HTML.
There are no external URLs: the file works offline, from disk, in any modern browser.
Long texts are capped per segment (head and tail kept, with a visible note).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmath.jsonl import finite
from agentmath.report._viewer_assets import PAGE
from agentmath.report.tables import Run

if TYPE_CHECKING:
    from agentmath.agent.trajectory import Segment
    from agentmath.eval.records import SampleRecord
    from agentmath.sandbox.result import ExecResult

VIEWER_FILE = "viewer.html"
DEFAULT_MAX_CHARS = 20_000
_RESULT_TEXT_KEYS = ("stdout", "stderr", "value", "error")
_RESULT_FLAG_KEYS = ("error_type", "error_line", "timed_out", "truncated", "state_lost",
                     "crashed", "duration_ms")


def cap_text(text: Any, limit: int) -> tuple[str | None, int]:
    """``(text, original length)`` with the middle of an over-long text cut out, else ``(text, 0)``.

    A cut text keeps its head (three quarters of ``limit``) and tail and says how much is gone.
    """
    if text is None:
        return None, 0
    text = str(text)
    if len(text) <= limit:
        return text, 0
    head = (3 * limit) // 4
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n… [{omitted} characters omitted] …\n{text[-tail:]}", len(text)


def _result(result: ExecResult | None, limit: int) -> dict[str, Any] | None:
    """An ExecResult reduced to what the page shows (the page's JSON), texts capped."""
    if result is None:
        return None
    out: dict[str, Any] = {key: getattr(result, key) for key in _RESULT_FLAG_KEYS}
    for key in _RESULT_TEXT_KEYS:
        out[key], cut = cap_text(getattr(result, key), limit)
        if cut:
            out[f"{key}_cut"] = cut
    return out


def _segment(seg: Segment, limit: int) -> dict[str, Any]:
    """A trajectory segment without token ids or logprobs, texts capped."""
    text, text_cut = cap_text(seg.text, limit)
    code, code_cut = cap_text(seg.code, limit)
    return {"source": seg.source, "text": text, "text_cut": text_cut,
            "code": code, "code_cut": code_cut, "n_tokens": len(seg.token_ids),
            "finish_reason": seg.finish_reason, "result": _result(seg.result, limit)}


def _sample(record: SampleRecord, limit: int) -> dict[str, Any]:
    """What the page needs of one samples.jsonl record."""
    traj = record.trajectory
    keys = ("sample_index", "extracted", "correct", "finish_reason", "model_tokens",
            "tool_tokens", "prompt_tokens", "total_tokens", "tool_calls", "tool_errors",
            "tool_timeouts", "output_truncations", "duration_ms")
    out = {key: getattr(record, key) for key in keys}
    out["finish_reason"] = out["finish_reason"] or (traj.finish_reason if traj else None)
    out["answer"], _ = cap_text(traj.answer if traj else None, limit)
    out["error"], _ = cap_text(traj.error if traj else None, limit)
    out["segments"] = [_segment(s, limit) for s in traj.segments] if traj else []
    out["has_trajectory"] = traj is not None
    return out


def run_payload(run: Run, max_chars: int = DEFAULT_MAX_CHARS) -> dict[str, Any]:
    """One run's data for the page: config summary, metrics summary, problems with samples."""
    problems: dict[str, dict[str, Any]] = {}
    for record in run.iter_samples():
        pid = record.problem_id
        problem = problems.get(pid)
        if problem is None:
            text, _ = cap_text(record.problem or
                               (record.trajectory.problem if record.trajectory else ""),
                               max_chars)
            problem = problems[pid] = {"id": pid, "problem": text, "gold": record.gold,
                                       "meta": record.problem_meta, "samples": []}
        problem["samples"].append(_sample(record, max_chars))
    for problem in problems.values():
        problem["samples"].sort(key=lambda s: s["sample_index"]
                                if isinstance(s["sample_index"], int) else 0)
    m, c = run.metrics, run.config
    config = {"model": c.model, "backend": c.backend, "format": c.format,
              "dataset": c.dataset, "samples": c.samples, "seed": c.seed}
    summary = {"avg": m.avg.value if m.avg is not None else None,
               "maj": m.maj.value if m.maj is not None else None,
               "k": m.k, "n_problems": m.n_problems}
    return {"name": run.name, "path": str(run.path), "config": config, "summary": summary,
            "problems": list(problems.values())}


def embed_json(data: Any) -> str:
    """JSON safe to place inside a ``<script>`` element: ``<``, ``>``, ``&`` are escaped."""
    text = json.dumps(finite(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_viewer_html(runs: Sequence[Run], *, max_chars: int = DEFAULT_MAX_CHARS,
                       title: str = "agentmath trajectories") -> str:
    """The viewer page for ``runs`` as one HTML string (data, CSS and JS inline)."""
    data = {"title": title, "max_chars": max_chars,
            "runs": [run_payload(run, max_chars) for run in runs]}
    return (PAGE.replace("__TITLE__", html.escape(title))
            .replace("__DATA__", embed_json(data)))


def write_viewer(runs: Sequence[Run], out_dir: str | Path, *,
                 max_chars: int = DEFAULT_MAX_CHARS) -> Path:
    """Write ``viewer.html`` for ``runs`` into ``out_dir``; return its path."""
    path = Path(out_dir) / VIEWER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_viewer_html(runs, max_chars=max_chars), encoding="utf-8")
    return path
