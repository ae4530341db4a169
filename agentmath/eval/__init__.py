"""Evaluation: run an agent over a benchmark, record every sample, and score the run.

:mod:`agentmath.eval.metrics` turns the per-sample records of ``runs/NAME/samples.jsonl`` into
avg@k, maj@k, unbiased pass@k (with standard errors and bootstrap confidence intervals), token,
tool and finish-reason statistics, and per-level / per-subject breakdowns.
"""
