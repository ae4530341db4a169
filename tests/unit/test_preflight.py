"""The startup checks on files (agentmath/backends/preflight.py): a model directory, its
tokenizer and its chat template; the servers' checks are in
tests/integration/test_startup_checks.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentmath.backends import BackendSettings
from agentmath.backends.preflight import (
    chat_template,
    check_backend,
    check_model_dir,
    served_models,
    template_problem,
)
from agentmath.errors import StartupCheckError


def model_dir(path: Path, tokenizer_config: dict | None = None) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config or {}))
    return path


def test_a_template_is_read_wherever_transformers_saves_it(tmp_path: Path) -> None:
    inline = model_dir(tmp_path / "a", {"chat_template": "{{ messages }}"})
    assert chat_template(inline) == "{{ messages }}"
    named = model_dir(tmp_path / "b", {"chat_template": [
        {"name": "default", "template": "{{ messages }}"},
        {"name": "tool_use", "template": "{{ tools }}"}]})
    assert "{{ tools }}" in (chat_template(named) or "")
    beside = model_dir(tmp_path / "c")
    (beside / "chat_template.jinja").write_text("{% for m in messages %}{% endfor %}")
    assert chat_template(beside) == "{% for m in messages %}{% endfor %}"
    assert chat_template(model_dir(tmp_path / "d")) is None


def test_what_a_run_needs_of_a_template() -> None:
    assert template_problem(None) == (
        "its tokenizer has no chat template (agentmath renders every prompt with one)")
    assert template_problem("{{ messages }}") is None
    assert "does not take tools" in (template_problem("{{ messages }}", needs_tools=True) or "")
    assert template_problem("{% if tools %}{{ tools }}{% endif %}", needs_tools=True) is None


def test_a_model_directory_is_checked_naming_it(tmp_path: Path) -> None:
    with pytest.raises(StartupCheckError, match=f"{tmp_path / 'x'}: no such model directory"):
        check_model_dir(tmp_path / "x")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(StartupCheckError, match="no config.json in it"):
        check_model_dir(empty)
    no_tokenizer = tmp_path / "no-tok"
    no_tokenizer.mkdir()
    (no_tokenizer / "config.json").write_text("{}")
    with pytest.raises(StartupCheckError, match=f"{no_tokenizer}: no tokenizer in it"):
        check_model_dir(no_tokenizer)
    broken = model_dir(tmp_path / "broken")
    (broken / "config.json").write_text("{not json")
    with pytest.raises(StartupCheckError, match="config.json: does not read as JSON"):
        check_model_dir(broken)
    bare = model_dir(tmp_path / "bare")
    with pytest.raises(StartupCheckError, match=f"{bare}: its tokenizer has no chat template"):
        check_model_dir(bare)
    check_model_dir(bare, template=False)
    check_model_dir(model_dir(tmp_path / "ok", {"chat_template": "{{ messages }}"}))


def test_a_local_backend_checks_its_directory_and_a_server_backend_without_url_nothing(
        tmp_path: Path) -> None:
    with pytest.raises(StartupCheckError, match="no such model directory"):
        check_backend("hf", BackendSettings(str(tmp_path / "nope")))
    with pytest.raises(StartupCheckError, match="no such model directory"):
        check_backend("vllm", BackendSettings("./relative/nope"))
    check_backend("openai", BackendSettings("served-name"))  # the backend says: no URL


def test_served_models_reads_an_openai_model_list() -> None:
    assert served_models({"object": "list", "data": [{"id": "a"}, {"id": "b"}]}) == ["a", "b"]
    assert served_models({"status": "ok"}) is None
    assert served_models([]) is None
