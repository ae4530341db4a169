"""``agentmath serve``: the vllm serve command line it writes (--print), its checks, and the
message when vLLM is not installed."""

from __future__ import annotations

import shlex

from typer.testing import CliRunner

from agentmath.cli.main import app
from agentmath.config import VLLMEngineConfig
from agentmath.rl.vllm_ext import EXTENSION_CLS
from agentmath.serving.command import ServeConfig, engine_flags, vllm_serve_command


def _printed(*args: str) -> tuple[dict[str, str], list[str]]:
    result = CliRunner().invoke(app, ["serve", *args, "--print"])
    assert result.exit_code == 0, result.output
    words = shlex.split(result.output)
    env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-")
               and words.index(w) < words.index("serve"))
    return env, words[len(env):]


def test_an_evaluation_server_has_the_tool_parser_and_no_dev_mode() -> None:
    env, argv = _printed("models/Qwen3-4B", "--served-name", "qwen3-4b",
                         "--max-model-len", "40960", "--reasoning-parser", "qwen3")
    assert env == {}
    assert argv[:3] == ["vllm", "serve", "models/Qwen3-4B"]
    text = " ".join(argv)
    for flag in ("--served-model-name qwen3-4b", "--max-model-len 40960",
                 "--enable-auto-tool-choice --tool-call-parser hermes",
                 "--reasoning-parser qwen3", "--generation-config vllm"):
        assert flag in text
    assert "--worker-extension-cls" not in text


def test_an_rl_server_gets_dev_mode_and_the_weight_sync_extension() -> None:
    env, argv = _printed("m", "--rl", "--tensor-parallel-size", "2")
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["PYTHONPATH"].split(":")[0].endswith("agentmath/rl/vllm_ext")
    assert argv[argv.index("--worker-extension-cls") + 1] == EXTENSION_CLS
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    env, argv = _printed("m", "--rl", "--lora-rank", "48")
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert argv[argv.index("--max-lora-rank") + 1] == "64"  # rounded up to a rank vLLM takes


def test_bad_combinations_and_a_missing_vllm_are_clear_errors() -> None:
    runner = CliRunner()
    lora = runner.invoke(app, ["serve", "m", "--lora-rank", "8", "--print"])
    assert lora.exit_code == 2 and "--rl" in lora.output
    missing = runner.invoke(app, ["serve", "m", "--vllm-bin", "no-such-vllm-here"])
    assert missing.exit_code == 1 and "no-such-vllm-here: not found" in missing.output
    bad = runner.invoke(app, ["serve", "m", "--port", "0", "--print"])
    assert bad.exit_code == 2 and "port" in bad.output


def test_no_tool_parser_and_no_prefix_cache_when_asked() -> None:
    argv = vllm_serve_command(ServeConfig(model="m", tool_call_parser="none",
                                          engine=VLLMEngineConfig(enable_prefix_caching=False)))
    assert "--tool-call-parser" not in argv and "--no-enable-prefix-caching" in argv


def test_engine_settings_become_flags_only_when_set() -> None:
    # one settings class for vLLM's engine, offline (--backend vllm) or served
    engine = VLLMEngineConfig(tensor_parallel_size=4, dtype="bfloat16", enforce_eager=True,
                              kv_cache_dtype="fp8", gpu_memory_utilization=0.85)
    assert engine_flags(engine) == [
        "--tensor-parallel-size", "4", "--dtype", "bfloat16", "--gpu-memory-utilization",
        "0.85", "--enforce-eager", "--kv-cache-dtype", "fp8"]
    assert engine_flags(VLLMEngineConfig()) == []
