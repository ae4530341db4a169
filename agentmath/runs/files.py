"""The names of the files in a run directory, defined once for every stage that writes or
reads one (eval, synth, RL, the report).

An evaluation run holds ``config.json`` (settings, identity, the dataset's fingerprint),
``samples.jsonl`` (one record per graded sample), ``metrics.json`` (its scores),
``eval_log.jsonl`` (its progress and final metrics as the metrics sink logs them,
agentmath/tracking.py) and, after a ``--retry-errors`` run, ``retried_errors.jsonl``; an RL run
holds ``metrics.jsonl`` (one step record per line). Every run directory is locked through
``.lock`` while a process writes to it.
"""

from __future__ import annotations

CONFIG_FILE = "config.json"
SAMPLES_FILE = "samples.jsonl"
METRICS_FILE = "metrics.json"
STEP_METRICS_FILE = "metrics.jsonl"  # an RL run's step records
EVAL_LOG_FILE = "eval_log.jsonl"  # an evaluation's progress and final metrics (tracking)
RETRIED_FILE = "retried_errors.jsonl"  # error records superseded by a --retry-errors run
LOCK_FILE = ".lock"
RECORD_KEY = ("problem_id", "sample_index")  # every sample record has these
DATASET_KEY = "dataset_fingerprint"  # where config.json keeps the dataset's fingerprint
