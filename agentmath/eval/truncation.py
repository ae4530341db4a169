"""Which budget stopped each sample, and how often each budget did in a run.

An episode that runs out of a budget ends with a finish reason (``token_budget``,
``tool_budget``, ``time_budget``: :mod:`agentmath.agent.episode`); its record keeps the counts
(model and total tokens, tool calls). :func:`budget_hit` tells from both which setting it
was, :func:`truncation_stats` counts them over a run (``metrics.json``'s ``truncation``), and
:func:`warning_text` says, for one budget past the warning rate, which one, how often, its
value and the option that raises it. A thinking model cut at a budget is graded as wrong
without a word otherwise.

``token_budget`` covers three settings and the server: the model's tokens
(``loop.max_model_tokens``) when it used them all, else the context (``loop.max_total_tokens``)
when it is full, else the turn (``loop.max_tokens_per_turn``) when one is set, else the
server's own context length (vLLM's ``max_model_len``), the one left.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from agentmath.config import LoopConfig
from agentmath.eval.records import SampleRecord
from agentmath.eval.results import BudgetStop

#: Budget -> the option that raises it (eval's; ``--set`` or the config file work too).
BUDGET_OPTIONS: dict[str, str] = {
    "loop.max_model_tokens": "--max-model-tokens",
    "loop.max_total_tokens": "--max-total-tokens",
    "loop.max_tokens_per_turn": "--max-tokens-per-turn",
    "loop.max_tool_calls": "--max-tool-calls",
    "loop.time_limit_s": "--time-limit",
    "max_model_len": "--max-model-len (vllm backend) or the server's --max-model-len",
}


def budget_hit(record: SampleRecord, loop: LoopConfig) -> str | None:
    """The budget that ended ``record``'s episode (a key of :data:`BUDGET_OPTIONS`), or None
    when it ended otherwise (an answer, the end of turn, an error)."""
    reason = record.finish_reason
    if reason == "tool_budget":
        return "loop.max_tool_calls"
    if reason == "time_budget":
        return "loop.time_limit_s"
    if reason != "token_budget":
        return None
    if record.model_tokens >= loop.max_model_tokens:
        return "loop.max_model_tokens"
    if record.total_tokens >= loop.max_total_tokens:
        return "loop.max_total_tokens"
    if loop.max_tokens_per_turn is not None:
        return "loop.max_tokens_per_turn"
    return "max_model_len"


def _limit(budget: str, loop: LoopConfig) -> float | None:
    """The budget's value in the run (None: the server's, not known here)."""
    if budget == "max_model_len":
        return None
    value = getattr(loop, budget.removeprefix("loop."))
    return None if value is None else float(value)


def truncation_stats(records: Sequence[SampleRecord], loop: LoopConfig) -> list[BudgetStop]:
    """Each budget's stops over the run's records: every budget the loop sets (those that
    stopped nothing at 0), and the server's context length when it stopped any sample."""
    hits = Counter(b for r in records if (b := budget_hit(r, loop)) is not None)
    n = len(records)
    out = []
    for budget, option in BUDGET_OPTIONS.items():
        limit = _limit(budget, loop)
        if limit is None and not hits[budget]:
            continue  # unset (max_tokens_per_turn) or the server's, and it cut nothing
        out.append(BudgetStop(budget=budget, option=option, limit=limit, count=hits[budget],
                              rate=hits[budget] / n if n else 0.0))
    return out


def over_rate(stops: Sequence[BudgetStop], rate: float) -> list[BudgetStop]:
    """The budgets that stopped more than ``rate`` of the run's samples."""
    return [s for s in stops if s.count and s.rate > rate]


def warning_text(stop: BudgetStop) -> str:
    """One line on a budget that stopped too many samples: which, how often, its value and
    how to raise it."""
    value = "" if stop.limit is None else f" = {stop.limit:g}"
    return (f"{stop.rate:.1%} of the samples ({stop.count}) stopped at {stop.budget}{value}: "
            f"their answers were cut and count as wrong; raise it with {stop.option}")
