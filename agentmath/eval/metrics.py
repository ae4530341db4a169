"""Metrics of an evaluation run, computed from its per-sample records (``samples.jsonl``).

Definitions (a "problem score" is one number per problem; headline numbers are their mean):

* **avg@k** — a problem's score is the fraction of *all* its samples graded correct (a null
  ``correct``, i.e. an unparsable gold, counts as wrong).
* **maj@k** — a problem's score is 1 when the majority answer of its first ``k`` samples (by
  ``sample_index``), voted by mathematical equivalence, is correct, else 0.
* **pass@j** — the unbiased estimator of Chen et al. (2021) from each problem's own ``n``
  samples and ``c`` correct ones, for every ``j <= k``, averaged over problems.
* ``k`` is the smallest number of samples any problem has: when problems differ in sample
  count, avg uses every sample while maj and pass are reported at that common ``k``.
* ``stderr`` is the standard error of the mean over problems (sample standard deviation,
  ``ddof=1``, over ``sqrt(n_problems)``; 0 for a single problem). ``ci95`` is a seeded
  percentile bootstrap over problems (2.5th and 97.5th percentiles of resampled means).
* Token statistics are per sample; tool error/timeout/truncation rates are per tool call (0.0
  when there were no calls). A missing or null count field counts as 0.
* ``by_level``/``by_subject`` repeat the problem-level metrics for each ``problem_meta`` value,
  at the run's headline ``k`` (so problem-weighted group values average to the headline).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agentmath.errors import DataError

if TYPE_CHECKING:
    from agentmath.eval.records import SampleRecord
    from agentmath.eval.results import GroupMetrics, RunMetrics, Score
    from agentmath.grading.options import GradingOptions

Equivalence = Callable[[str, str], bool]
_BOOTSTRAP_CHUNK = 256  # resamples per numpy batch (bounds memory for large benchmarks)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct: ``1 - C(n-c, k) / C(n, k)``.

    Uses the product form ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` (Chen et al., 2021), which
    never builds the huge binomials, so it is exact enough for any ``n``.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0  # every k-subset contains a correct sample
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def default_equivalent(a: str, b: str) -> bool:
    """True when ``b`` is mathematically equal to ``a`` (``a`` is treated as the gold).

    An exact string match answers at once; anything else goes to
    :func:`agentmath.grading.verify` (math-verify with a hard timeout), where an unparsable
    ``a`` or a timeout counts as not equivalent.
    """
    if a == b:
        return True
    from agentmath.grading import verify  # lazy: keep importing metrics cheap

    return verify(a, b) is True


def equivalence(options: GradingOptions) -> Equivalence:
    """:func:`default_equivalent` under a run's grading options (its leniencies on or off),
    so that the majority vote groups answers as the run's grades judge them."""

    def equivalent(a: str, b: str) -> bool:
        if a == b:
            return True
        from agentmath.grading import verify

        return verify(a, b, options=options) is True

    return equivalent


def majority_answer(answers: Sequence[str | None], equivalent: Equivalence) -> str | None:
    """The most common answer, counting mathematically equivalent answers as one vote.

    Greedy clustering in sample order: each answer joins the first cluster whose
    representative (its first answer) is ``equivalent(representative, answer)``, else starts
    a new cluster. The largest cluster wins, a tie goes to the cluster whose first answer
    came earliest, and the winner's representative is returned. ``None`` answers (nothing
    extracted) never vote; if there is no answer at all the result is None. An answer string
    seen before joins the same cluster again without calling ``equivalent`` (answers repeat a
    lot, and the check may be a math-verify call).
    """
    reps: list[str] = []
    counts: list[int] = []
    cluster_of: dict[str, int] = {}
    for answer in answers:
        if answer is None:
            continue
        index = cluster_of.get(answer)
        if index is None:
            index = next((i for i, rep in enumerate(reps) if equivalent(rep, answer)), len(reps))
            if index == len(reps):
                reps.append(answer)
                counts.append(0)
            cluster_of[answer] = index
        counts[index] += 1
    if not reps:
        return None
    return reps[counts.index(max(counts))]  # .index: the earliest cluster among ties


@dataclass(frozen=True, slots=True)
class _Problem:
    """One problem's samples (sorted by sample_index) and its per-problem facts."""

    problem_id: str
    gold: str | None
    samples: tuple[SampleRecord, ...]
    meta: dict[str, Any]

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def c(self) -> int:
        return sum(1 for s in self.samples if s.correct is True)


def _typed(records: Iterable[SampleRecord | dict[str, Any]]) -> list[SampleRecord]:
    """The records as :class:`SampleRecord` (JSON objects, as tests write them, are read with
    ``from_dict``; one without ``sample_index`` takes its position among its problem's)."""
    from agentmath.eval.records import SampleRecord

    out: list[SampleRecord] = []
    seen: Counter[str] = Counter()
    for i, record in enumerate(records):
        if isinstance(record, dict):
            if record.get("problem_id") is None:
                raise DataError(f"sample record #{i} has no problem_id")
            pid = str(record["problem_id"])
            if "sample_index" not in record:
                record = {**record, "sample_index": seen[pid]}
            seen[pid] += 1
            record = SampleRecord.from_dict(record)
        out.append(record)
    return out


def _group_problems(records: Iterable[SampleRecord | dict[str, Any]]) -> list[_Problem]:
    """Group records by problem_id (first-seen order), each sorted by sample_index."""
    grouped: dict[str, list[SampleRecord]] = {}
    for record in _typed(records):
        grouped.setdefault(record.problem_id, []).append(record)
    problems = []
    for pid, rows in grouped.items():
        indices = [r.sample_index for r in rows]
        if len(set(indices)) != len(indices):
            raise DataError(f"problem {pid!r} has duplicate sample_index values: {indices}")
        order = sorted(range(len(rows)), key=lambda j: indices[j])
        samples = tuple(rows[j] for j in order)
        problems.append(_Problem(pid, samples[0].gold, samples, dict(samples[0].problem_meta)))
    return problems


def _majority_correct(problem: _Problem, k: int, equivalent: Equivalence) -> bool:
    """Whether the majority answer of the problem's first ``k`` samples is correct.

    Reuses the grade of a sample that extracted the very same string when that grade is
    known; otherwise asks ``equivalent(gold, answer)``.
    """
    answer = majority_answer([s.extracted for s in problem.samples[:k]], equivalent)
    if answer is None:
        return False
    for sample in problem.samples:
        if sample.extracted == answer and sample.correct is not None:
            return bool(sample.correct)
    if problem.gold is None:
        return False
    return bool(equivalent(problem.gold, answer))


def score_summary(scores: Sequence[float], *, bootstrap: int = 1000, seed: int = 0) -> dict:
    """Mean, standard error and 95% percentile-bootstrap interval of per-problem scores.

    ``stderr = std(scores, ddof=1) / sqrt(n)`` (0.0 for one problem). The bootstrap draws
    ``bootstrap`` resamples of the problems with replacement from ``numpy.random.default_rng
    (seed)`` and reports the 2.5th/97.5th percentiles of their means; with ``bootstrap=0`` the
    interval collapses to the mean.
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return {"value": 0.0, "stderr": 0.0, "ci95": [0.0, 0.0]}
    mean = float(values.mean())
    stderr = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else 0.0
    if bootstrap <= 0:
        return {"value": mean, "stderr": stderr, "ci95": [mean, mean]}
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, bootstrap, _BOOTSTRAP_CHUNK):
        rows = min(_BOOTSTRAP_CHUNK, bootstrap - start)
        means.append(values[rng.integers(0, values.size, size=(rows, values.size))].mean(axis=1))
    lo, hi = np.percentile(np.concatenate(means), [2.5, 97.5])
    return {"value": mean, "stderr": stderr, "ci95": [float(lo), float(hi)]}


def _num(record: SampleRecord, key: str) -> float:
    """A numeric field of a record (a missing or null one was read as 0)."""
    return float(getattr(record, key))


def token_stats(samples: Sequence[SampleRecord]) -> dict[str, float]:
    """Per-sample token statistics: mean/median model and total tokens, mean tool tokens."""
    if not samples:
        return dict.fromkeys(
            ("model_mean", "model_median", "total_mean", "total_median", "tool_mean"), 0.0
        )
    model = np.array([_num(s, "model_tokens") for s in samples])
    total = np.array([_num(s, "total_tokens") for s in samples])
    tool = np.array([_num(s, "tool_tokens") for s in samples])
    return {
        "model_mean": float(model.mean()),
        "model_median": float(np.median(model)),
        "total_mean": float(total.mean()),
        "total_median": float(np.median(total)),
        "tool_mean": float(tool.mean()),
    }


def tool_stats(samples: Sequence[SampleRecord]) -> dict[str, float]:
    """Tool calls per sample, and error / timeout / output-truncation rates per tool call."""
    calls = sum(_num(s, "tool_calls") for s in samples)

    def rate(key: str) -> float:
        return sum(_num(s, key) for s in samples) / calls if calls else 0.0

    return {
        "calls_per_sample": calls / len(samples) if samples else 0.0,
        "error_rate": rate("tool_errors"),
        "timeout_rate": rate("tool_timeouts"),
        "truncation_rate": rate("output_truncations"),
    }


def _problem_block(
    problems: Sequence[_Problem], maj: Sequence[float], k: int, bootstrap: int, seed: int
) -> dict[str, Any]:
    """n_problems, n_samples, k, avg, maj, pass and tokens over a set of problems."""
    avg = [p.c / p.n for p in problems]
    samples = [s for p in problems for s in p.samples]
    passes = {
        str(j): float(np.mean([pass_at_k(p.n, p.c, j) for p in problems])) for j in range(1, k + 1)
    }
    return {
        "n_problems": len(problems),
        "n_samples": len(samples),
        "k": k,
        "avg": score_summary(avg, bootstrap=bootstrap, seed=seed),
        "maj": score_summary(maj, bootstrap=bootstrap, seed=seed),
        "pass": passes,
        "tokens": token_stats(samples),
    }


def _sort_key(key: str) -> tuple[int, float, str]:
    """Numeric group keys in numeric order, then the rest alphabetically ("unknown" last)."""
    try:
        return (0, float(key), key)
    except ValueError:
        return (2 if key == "unknown" else 1, 0.0, key)


def _breakdown(
    problems: Sequence[_Problem], maj: Sequence[float], field: str, k: int, bootstrap: int,
    seed: int,
) -> dict[str, dict[str, Any]] | None:
    """Per-value metrics for ``problem_meta[field]``; None when no problem has that field.

    Problems without the field are grouped under ``"unknown"`` so the groups cover the run.
    """
    if not any(p.meta.get(field) is not None for p in problems):
        return None
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(problems):
        value = p.meta.get(field)
        groups.setdefault("unknown" if value is None else str(value), []).append(i)
    return {
        key: _problem_block(
            [problems[i] for i in groups[key]], [maj[i] for i in groups[key]], k, bootstrap, seed
        )
        for key in sorted(groups, key=_sort_key)
    }


def compute_metrics(
    records: Iterable[SampleRecord | dict[str, Any]],
    *,
    equivalent: Equivalence = default_equivalent,
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """All metrics of a run from its sample records (see the module docstring for definitions).

    Returns a JSON-ready dict: n_problems, n_samples, k, avg, maj, pass, tokens, tools,
    finish_reasons, duration_ms_mean, and by_level / by_subject when records carry
    ``problem_meta.level`` / ``problem_meta.subject``. ``equivalent`` groups answers for the
    majority vote (a stub in tests); ``bootstrap``/``seed`` make the CIs deterministic.
    """
    problems = _group_problems(records)
    if not problems:
        raise DataError("no sample records to compute metrics from")
    k = min(p.n for p in problems)
    maj = [float(_majority_correct(p, k, equivalent)) for p in problems]
    samples = [s for p in problems for s in p.samples]
    metrics = _problem_block(problems, maj, k, bootstrap, seed)
    reasons = Counter(str(s.finish_reason or "unknown") for s in samples)
    metrics.update(
        tools=tool_stats(samples),
        finish_reasons=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        duration_ms_mean=float(np.mean([_num(s, "duration_ms") for s in samples])),
    )
    for field, name in (("level", "by_level"), ("subject", "by_subject")):
        groups = _breakdown(problems, maj, field, k, bootstrap, seed)
        if groups is not None:
            metrics[name] = groups
    return metrics


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _score_row(summary: Score | None) -> str:
    """``41.3% ± 2.1 [37.2, 45.4]``: value, stderr and CI, all in percentage points."""
    if summary is None:
        return "-"
    lo, hi = summary.ci95 if summary.ci95 is not None else (summary.value, summary.value)
    return (
        f"{_pct(summary.value)} ± {100 * summary.stderr:.1f} "
        f"[{100 * lo:.1f}, {100 * hi:.1f}]"
    )


def _shown_pass_keys(k: int) -> list[int]:
    """pass@1, 2, 4, 8, ... and pass@k: every j would be too many rows for k = 64."""
    shown = [j for j in range(1, k + 1) if j & (j - 1) == 0]
    return shown if shown[-1] == k else [*shown, k]


def _group_rows(label: str, groups: dict[str, GroupMetrics]) -> list[tuple[str, str]]:
    """One row per group: avg@k and maj@k with the group's problem count."""
    rows = []
    for key, block in groups.items():
        k = block.k
        avg = _pct(block.avg.value) if block.avg is not None else "-"
        maj = _pct(block.maj.value) if block.maj is not None else "-"
        rows.append((f"{label} {key}", f"avg@{k} {avg} · maj@{k} {maj} · n={block.n_problems}"))
    return rows


def _num_text(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def metrics_table_rows(metrics: RunMetrics | dict[str, Any]) -> list[tuple[str, str]]:
    """Human-readable ``(name, value)`` rows of a run's metrics (typed, or the JSON form
    :func:`compute_metrics` returns), for the CLI.

    Scores read like ``avg@16  41.3% ± 2.1 [37.2, 45.4]`` (stderr and CI in percentage points).
    """
    from agentmath.eval.results import RunMetrics

    m = metrics if isinstance(metrics, RunMetrics) else RunMetrics.from_dict(metrics)
    k, tokens, tools, n_samples = m.k, m.tokens, m.tools, m.n_samples
    rows = [
        ("problems", str(m.n_problems)),
        ("samples", f"{n_samples} (k={k})"),
        (f"avg@{k}", _score_row(m.avg)),
        (f"maj@{k}", _score_row(m.maj)),
    ]
    rows += [(f"pass@{j}", _pct(m.pass_at[str(j)])) for j in _shown_pass_keys(k)
             if str(j) in m.pass_at]
    rows += [
        ("model tokens", f"mean {_num_text(tokens.model_mean, '.0f')} · "
                         f"median {_num_text(tokens.model_median, '.0f')}"),
        ("total tokens", f"mean {_num_text(tokens.total_mean, '.0f')} · "
                         f"median {_num_text(tokens.total_median, '.0f')}"),
        ("tool tokens", f"mean {_num_text(tokens.tool_mean, '.0f')}"),
        ("tool calls/sample", _num_text(tools.calls_per_sample, ".2f")),
        ("tool error rate", _pct(tools.error_rate or 0.0)),
        ("tool timeout rate", _pct(tools.timeout_rate or 0.0)),
        ("output truncation rate", _pct(tools.truncation_rate or 0.0)),
    ]
    rows += [
        (f"finish: {reason}", f"{count} ({_pct(count / n_samples if n_samples else 0.0)})")
        for reason, count in m.finish_reasons.items()
    ]
    rows += [
        (f"stopped at {s.budget}" + ("" if s.limit is None else f" ({s.limit:g})"),
         f"{s.count} ({_pct(s.rate)})")
        for s in m.truncation
    ]
    rows.append(("duration/sample", f"{(m.duration_ms_mean or 0.0) / 1000:.2f} s"))
    rows += _group_rows("level", m.by_level)
    rows += _group_rows("subject", m.by_subject)
    return rows
