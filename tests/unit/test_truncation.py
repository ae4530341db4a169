"""Which budget stopped a sample, each budget's rate over a run, the warning past the rate, and
the typed ``truncation`` block of metrics.json (agentmath/eval/truncation.py)."""

from __future__ import annotations

from agentmath.config import LoopConfig
from agentmath.eval.metrics import metrics_table_rows
from agentmath.eval.records import SampleRecord
from agentmath.eval.results import BudgetStop, RunMetrics
from agentmath.eval.truncation import budget_hit, over_rate, truncation_stats, warning_text

LOOP = LoopConfig(max_model_tokens=100, max_total_tokens=300, max_tool_calls=2)


def record(reason: str, model: int = 10, total: int = 50, i: int = 0) -> SampleRecord:
    return SampleRecord(problem_id=f"p{i}", sample_index=0, finish_reason=reason,
                        model_tokens=model, total_tokens=total)


def test_each_finish_reason_names_its_budget() -> None:
    assert budget_hit(record("answered"), LOOP) is None
    assert budget_hit(record("eos"), LOOP) is None
    assert budget_hit(record("error"), LOOP) is None
    assert budget_hit(record("tool_budget"), LOOP) == "loop.max_tool_calls"
    assert budget_hit(record("time_budget"), LOOP) == "loop.time_limit_s"
    assert budget_hit(record("token_budget", model=100), LOOP) == "loop.max_model_tokens"
    assert budget_hit(record("token_budget", total=300), LOOP) == "loop.max_total_tokens"
    per_turn = LOOP.model_copy(update={"max_tokens_per_turn": 20})
    assert budget_hit(record("token_budget"), per_turn) == "loop.max_tokens_per_turn"
    # none of the run's budgets was spent: the server cut the turn (its max_model_len)
    assert budget_hit(record("token_budget"), LOOP) == "max_model_len"


def test_rates_per_budget_over_the_run() -> None:
    records = [record("token_budget", model=100, i=i) for i in range(3)]
    records += [record("tool_budget", i=3)] + [record("answered", i=i) for i in range(4, 20)]
    stops = {s.budget: s for s in truncation_stats(records, LOOP)}
    assert set(stops) == {"loop.max_model_tokens", "loop.max_total_tokens",
                          "loop.max_tool_calls", "loop.time_limit_s"}  # per-turn unset
    assert stops["loop.max_model_tokens"] == BudgetStop(
        "loop.max_model_tokens", "--max-model-tokens", 100.0, 3, 0.15)
    assert stops["loop.max_tool_calls"].count == 1 and stops["loop.max_tool_calls"].rate == 0.05
    assert stops["loop.max_total_tokens"].count == 0
    warned = over_rate(list(stops.values()), 0.05)  # more than 5%: 5% itself does not warn
    assert [s.budget for s in warned] == ["loop.max_model_tokens"]
    assert warning_text(warned[0]) == (
        "15.0% of the samples (3) stopped at loop.max_model_tokens = 100: their answers were "
        "cut and count as wrong; raise it with --max-model-tokens")


def test_the_server_cut_is_listed_only_when_it_cut() -> None:
    stops = truncation_stats([record("token_budget")], LOOP)
    [server] = [s for s in stops if s.budget == "max_model_len"]
    assert server.limit is None and server.rate == 1.0 and "--max-model-len" in server.option
    assert "max_model_len = " not in warning_text(server)


def test_the_metrics_record_reads_its_truncation_block_typed() -> None:
    stop = BudgetStop("loop.max_total_tokens", "--max-total-tokens", 4096.0, 7, 0.35)
    document = {"n_problems": 1, "n_samples": 20, "k": 20, "truncation": [stop.to_dict()]}
    metrics = RunMetrics.from_dict(document)
    assert metrics.truncation == (stop,) and metrics.truncated_rate == 0.35
    assert metrics.scalars()["truncated/loop.max_total_tokens"] == 0.35
    assert ("stopped at loop.max_total_tokens (4096)", "7 (35.0%)") in metrics_table_rows(metrics)
    older = RunMetrics.from_dict({"n_problems": 1, "n_samples": 1, "k": 1})
    assert older.truncation == () and older.truncated_rate is None
