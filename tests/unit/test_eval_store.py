"""The run directory under faults: the run lock, the dataset fingerprint, superseding errored
samples, and the EvalConfig fields that control retries."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agentmath.errors import ConfigError, DataError
from agentmath.eval.config import EvalConfig
from agentmath.eval.runner import identity
from agentmath.runs.fingerprint import dataset_fingerprint, describe_change
from agentmath.runs.lock import LOCK_FILE, RunLock, RunLockedError
from agentmath.runs.store import (
    CONFIG_FILE,
    DATASET_KEY,
    RETRIED_FILE,
    SAMPLES_FILE,
    check_or_write_config,
    drop_errors,
    load_records,
    unique_records,
)
from agentmath.tasks import Task

TASKS = [Task("a", "1+1?", "2"), Task("b", "2+2?", "4"), Task("c", "3+3?", "6")]


# ------------------------------------------------------------------------------------ lock


def test_a_second_lock_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with RunLock(tmp_path):
        holder = json.loads((tmp_path / LOCK_FILE).read_text())
        assert holder["pid"] == os.getpid() and holder["host"]
        with pytest.raises(RunLockedError) as info:
            RunLock(tmp_path).acquire()
        message = str(info.value)
        assert f"pid {os.getpid()}" in message and "in use by another run" in message
        assert holder["command"] in message and str(tmp_path) in message
    with RunLock(tmp_path):  # released on exit
        pass
    assert (tmp_path / LOCK_FILE).read_text() == ""  # no stale holder left behind


def test_a_lock_without_details_is_still_refused(tmp_path: Path) -> None:
    lock = RunLock(tmp_path)
    lock.acquire()
    os.ftruncate(lock._fd, 0)  # as if the holder had not written its details yet
    with pytest.raises(RunLockedError, match="has not written its details"):
        RunLock(tmp_path).acquire()
    lock.release()


def test_the_lock_of_a_killed_run_is_free(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from agentmath.runs.lock import RunLock; "
         "RunLock(sys.argv[1]).acquire(); print('locked', flush=True); time.sleep(60)",
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockedError, match=f"pid {holder.pid} "):
            RunLock(tmp_path).acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        with RunLock(tmp_path):  # kill -9 released it: nothing to clean up
            pass
    finally:
        holder.kill()
        holder.wait(timeout=10)


# ----------------------------------------------------------------------------- fingerprint


def test_fingerprint_ignores_order_and_line_endings_but_not_content() -> None:
    base = dataset_fingerprint(TASKS)
    assert base["n_problems"] == 3 and set(base["problems"]) == {"a", "b", "c"}
    assert dataset_fingerprint(TASKS[::-1])["sha256"] == base["sha256"]
    crlf = [Task("a", "1+1?\r\n", "2"), *TASKS[1:]]
    assert dataset_fingerprint(crlf)["sha256"] == base["sha256"]
    assert describe_change(base, dataset_fingerprint(TASKS)) is None
    edited = [Task("a", "1+1?", "3"), Task("b", "2+2 ?", "4"), Task("d", "x", "1")]
    change = describe_change(base, dataset_fingerprint(edited))
    assert change is not None and "dataset changed" in change
    assert "2 problem(s) changed" in change and "'a', 'b'" in change
    assert "1 added ('d')" in change and "1 removed ('c')" in change


def _config(**kwargs: Any) -> EvalConfig:
    return EvalConfig(dataset="data.jsonl", model="m", **kwargs)


def test_a_changed_dataset_is_refused_like_changed_settings(tmp_path: Path) -> None:
    config = _config()
    saved = dataset_fingerprint(TASKS)
    assert check_or_write_config(tmp_path, identity(config), {}, saved) is False
    assert check_or_write_config(tmp_path, identity(config), {}, saved) is True
    edited = dataset_fingerprint([Task("a", "1+1?", "11"), *TASKS[1:]])
    with pytest.raises(ConfigError) as info:
        check_or_write_config(tmp_path, identity(config), {}, edited)
    assert "dataset changed" in str(info.value) and "'a'" in str(info.value)
    with pytest.raises(ConfigError, match="temperature") as info:
        check_or_write_config(tmp_path, identity(_config(temperature=0.1)), {}, edited)
    assert "dataset changed" in str(info.value)  # both problems are reported at once


def test_a_run_saved_without_a_fingerprint_gets_one(tmp_path: Path) -> None:
    config = _config()
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"identity": identity(config)}))
    saved = dataset_fingerprint(TASKS)
    assert check_or_write_config(tmp_path, identity(config), {}, saved) is True
    document = json.loads((tmp_path / CONFIG_FILE).read_text())
    assert document[DATASET_KEY]["sha256"] == saved["sha256"]


@pytest.mark.parametrize("text, fragment", [
    ("{not json", "config.json: not valid JSON"),
    ("[]", "config.json: expected a JSON object, got list"),
    (b"\xff", "config.json: cannot read"),
])
def test_a_broken_saved_config_names_the_file(tmp_path: Path, text: str | bytes,
                                               fragment: str) -> None:
    path = tmp_path / CONFIG_FILE
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    with pytest.raises(DataError, match=re.escape(fragment)):
        check_or_write_config(tmp_path, identity(_config()), {})


def test_retry_and_timeout_settings_are_bounded_and_resumable() -> None:
    config = _config(http_retries=10, http_timeout_s=5, retry_errors=True)
    assert identity(config) == identity(_config())
    for bad in ({"http_retries": -1}, {"http_retries": 101}, {"http_timeout_s": 0},
                {"grade_timeout_s": 0}):
        with pytest.raises(ValidationError):
            _config(**bad)


def test_the_sandbox_pool_settings_may_change_on_resume_but_not_its_limits(
        tmp_path: Path) -> None:
    """How many snippets run at once and how the pool starts never change what a snippet
    returns, so a resumed run may change them; its limits (time, memory, output) may not,
    and the refusal names the setting."""
    first = _config(sandbox={"spare_workers": 0, "max_sessions": 8})
    assert check_or_write_config(tmp_path, identity(first), {}) is False
    resumed = _config(sandbox={"spare_workers": 2, "max_sessions": 64, "start_timeout_s": 300,
                               "max_concurrency": 3})
    assert check_or_write_config(tmp_path, identity(resumed), {}) is True
    with pytest.raises(ConfigError, match=r"sandbox\.timeout_s: saved 10\.0, now 5\.0"):
        check_or_write_config(tmp_path, identity(_config(sandbox={"timeout_s": 5})), {})


def test_a_run_saved_when_every_sandbox_field_was_identity_still_resumes(
        tmp_path: Path) -> None:
    """Before the pool settings were resumable a run saved the whole sandbox config (and no
    start_timeout_s, which did not exist): fields the identity no longer counts are ignored."""
    config = _config()
    saved = identity(config)
    saved["sandbox"] = {**config.sandbox.model_dump(mode="json", exclude={"start_timeout_s"}),
                        "max_sessions": 3}
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"identity": saved}))
    assert check_or_write_config(tmp_path, identity(config), {}) is True
    saved["sandbox"]["memory_mb"] = 512  # a limit that counts
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"identity": saved}))
    with pytest.raises(ConfigError, match=r"sandbox\.memory_mb: saved 512, now 1024"):
        check_or_write_config(tmp_path, identity(config), {})


# ------------------------------------------------------------------------- errored samples


def _record(pid: str, index: int, error: str | None = None) -> dict[str, Any]:
    return {"problem_id": pid, "sample_index": index, "correct": error is None,
            "finish_reason": "error" if error else "answered", "error": error}


def _write(run_dir: Path, records: list[dict[str, Any]]) -> None:
    (run_dir / SAMPLES_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))


def test_unique_records_never_let_an_error_replace_a_finished_sample() -> None:
    records = [_record("a", 0, "boom"), _record("a", 0), _record("a", 0, "late boom"),
               _record("b", 0, "x"), _record("b", 0, "y")]
    kept = unique_records(records)
    assert [(r["problem_id"], r["error"]) for r in kept] == [("a", None), ("b", "y")]


def test_drop_errors_moves_them_aside_atomically(tmp_path: Path) -> None:
    _write(tmp_path, [_record("a", 0), _record("a", 1, "HTTP 503"), _record("b", 0),
                      _record("b", 0), _record("b", 1, "malformed reply")])
    assert drop_errors(tmp_path) == 2
    assert [(r["problem_id"], r["sample_index"]) for r in load_records(tmp_path)] == [
        ("a", 0), ("b", 0)]
    retried = [json.loads(line) for line in (tmp_path / RETRIED_FILE).read_text().splitlines()]
    assert [r["error"] for r in retried] == ["HTTP 503", "malformed reply"]
    assert drop_errors(tmp_path) == 0  # nothing left to retry
    assert not (tmp_path / f".{SAMPLES_FILE}.tmp").exists()


def test_a_record_with_a_lone_surrogate_is_still_written(tmp_path: Path) -> None:
    from agentmath.runs.store import SampleWriter

    writer = SampleWriter(tmp_path)
    writer.append({"problem_id": "a", "sample_index": 0, "extracted": "x\udc80"})
    writer.close()
    assert load_records(tmp_path)[0]["extracted"] == "x\udc80"
