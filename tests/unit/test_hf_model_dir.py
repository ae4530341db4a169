"""A model named by a local path that is not a model directory: the in-process backend says
which it is not (no such directory; no config.json), not transformers' hub-id complaint."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from agentmath.backends.hf import HFBackend  # noqa: E402
from agentmath.errors import BackendError  # noqa: E402


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="absent: no such model directory"):
        HFBackend(str(tmp_path / "absent"))


def test_a_directory_without_a_model_is_named(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(BackendError, match=r"not a model directory \(no config.json in it\)"):
        HFBackend(str(tmp_path))


def test_a_file_is_no_model_directory(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(BackendError, match="a file, not a model directory"):
        HFBackend(str(weights))


def test_one_check_for_trainers_and_the_backend(tmp_path: Path) -> None:
    from agentmath.models.local import model_dir_problem

    assert model_dir_problem(tmp_path / "absent") == "no such model directory"
    assert model_dir_problem("org/name") == "no such model directory"  # trainers: local only
    assert model_dir_problem("org/name", hub_ids=True) is None  # the backend: a hub id
    (tmp_path / "config.json").write_text("{}")
    assert model_dir_problem(tmp_path) is None
