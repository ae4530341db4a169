"""The offline vLLM engine's settings (agentmath.config.VLLMEngineConfig) reach vLLM's engine
constructor: from eval's and solve's options and config files, through BackendSettings and the
registry, to ``vllm.AsyncEngineArgs`` (a stand-in ``vllm`` module here: the main environment
has no vLLM)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from agentmath.backends import BackendSettings, build_backend
from agentmath.backends.vllm_engine import engine_args
from agentmath.cli.main import app
from agentmath.config import SolveConfig, VLLMEngineConfig
from agentmath.eval.config import EvalConfig
from agentmath.eval.runner import backend_settings, identity


class Stop(Exception):
    """Raised by the stand-in engine once it has seen its arguments."""


def fake_vllm(seen: list[dict[str, Any]]) -> types.ModuleType:
    """A ``vllm`` module whose engine records ``AsyncEngineArgs``' keyword arguments and
    refuses to start (so that a command stops there)."""
    module = types.ModuleType("vllm")

    def engine_args_(**kwargs: Any) -> dict[str, Any]:
        seen.append(kwargs)
        return kwargs

    class Engine:
        @staticmethod
        def from_engine_args(args: Any) -> Any:
            raise Stop("the stand-in engine does not start")

    module.AsyncEngineArgs = engine_args_  # type: ignore[attr-defined]
    module.AsyncLLMEngine = Engine  # type: ignore[attr-defined]
    return module


def test_defaults_leave_vllm_its_own_and_unset_fields_are_left_out() -> None:
    assert engine_args(None) == {}
    assert engine_args(VLLMEngineConfig()) == {
        "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "dtype": "auto",
        "gpu_memory_utilization": 0.9, "enforce_eager": False, "kv_cache_dtype": "auto",
        "trust_remote_code": False}


def test_a_config_file_section_reaches_the_engine_arguments() -> None:
    config = EvalConfig.model_validate({
        "dataset": "d", "model": "/m", "backend": "vllm",
        "vllm": {"tensor_parallel_size": 4, "max_model_len": 32768, "dtype": "bfloat16",
                 "gpu_memory_utilization": 0.85, "enable_prefix_caching": True}})
    args = engine_args(backend_settings(config).vllm)
    assert args["tensor_parallel_size"] == 4 and args["max_model_len"] == 32768
    assert args["dtype"] == "bfloat16" and args["gpu_memory_utilization"] == 0.85
    assert args["enable_prefix_caching"] is True and "max_num_seqs" not in args
    assert "vllm" not in identity(config)  # the engine's layout, not the results: resumable
    solve = SolveConfig.model_validate({"backend": "vllm", "vllm": {"max_model_len": 4096}})
    assert solve.vllm.max_model_len == 4096


def test_bad_engine_settings_fail_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="vllm.tensor_parallel_size"):
        EvalConfig.model_validate({"dataset": "d", "model": "m",
                                   "vllm": {"tensor_parallel_size": 0}})
    with pytest.raises(ValidationError, match="vllm.dtype"):
        EvalConfig.model_validate({"dataset": "d", "model": "m", "vllm": {"dtype": "int3"}})


def test_the_registry_hands_the_settings_to_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(seen))
    settings = BackendSettings("/models/x", vllm=VLLMEngineConfig(tensor_parallel_size=8,
                                                                  max_model_len=40960))
    with pytest.raises(Exception, match="could not start vLLM on /models/x"):
        build_backend("vllm", settings)
    assert seen[0]["model"] == "/models/x" and seen[0]["tensor_parallel_size"] == 8
    assert seen[0]["max_model_len"] == 40960


def model_dir(path: Path) -> Path:
    """A model directory the startup checks accept (config, tokenizer, chat template)."""
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}"}))
    return path


@pytest.mark.parametrize("command", ["eval", "solve"])
def test_the_cli_options_reach_the_engine(command: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(seen))
    model = model_dir(tmp_path / "model")
    head = (["eval", "--dataset", "d", "--out", str(tmp_path / "run")] if command == "eval"
            else ["solve", "1 + 1?"])
    result = CliRunner().invoke(app, [
        *head, "--model", str(model), "--backend", "vllm", "--tensor-parallel-size", "2",
        "--max-model-len", "8192", "--dtype", "bfloat16", "--gpu-memory-utilization", "0.5",
        "--enforce-eager", "--max-num-seqs", "64"])
    assert result.exit_code == 2 and "could not start vLLM" in result.output, result.output
    assert seen == [{"model": str(model), "tensor_parallel_size": 2,
                     "pipeline_parallel_size": 1, "max_model_len": 8192, "dtype": "bfloat16",
                     "gpu_memory_utilization": 0.5, "max_num_seqs": 64, "enforce_eager": True,
                     "kv_cache_dtype": "auto", "trust_remote_code": False}]


def test_a_synth_endpoint_hands_its_engine_settings_to_vllm(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from agentmath.synth.config import SynthConfig
    from agentmath.synth.run import make_endpoint

    seen: list[dict[str, Any]] = []
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(seen))
    config = SynthConfig.model_validate({"input": "in.jsonl", "teacher": {
        "backend": "vllm", "model": "/models/teacher",
        "vllm": {"tensor_parallel_size": 4, "max_model_len": 16384}}})
    with pytest.raises(Exception, match="could not start vLLM on /models/teacher"):
        make_endpoint(config.teacher)
    assert seen[0]["tensor_parallel_size"] == 4 and seen[0]["max_model_len"] == 16384
    assert "vllm" not in config.identity()["teacher"]  # the engine's layout, not the records
