"""The eval and SFT recipe files load into their settings, carry the papers' protocols, and
``agentmath sft`` takes its data and model from a config file or says which one is missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentmath.cli.main import app
from agentmath.config import read_config_file
from agentmath.eval.config import EvalConfig
from agentmath.grading import GradingOptions
from agentmath.train.sft_config import SFTConfig

ROOT = Path(__file__).resolve().parents[2]


def test_eval_recipes_carry_their_protocol_and_math_verify_grading() -> None:
    deepmath = EvalConfig.model_validate(read_config_file(ROOT / "configs/eval/deepmath.toml"))
    agentmath = EvalConfig.model_validate(read_config_file(ROOT / "configs/eval/agentmath.toml"))
    assert (deepmath.samples, deepmath.temperature, deepmath.top_p, deepmath.top_k) == (
        16, 0.6, 0.95, 20)
    assert (deepmath.loop.max_tokens_per_turn, deepmath.loop.max_model_tokens,
            deepmath.loop.max_tool_calls) == (3000, 20000, 50)
    assert agentmath.samples == 32 and agentmath.loop.max_tool_calls == 96
    for config in (deepmath, agentmath):
        assert config.backend == "openai" and config.model.startswith("models/")
        assert config.grading == GradingOptions.math_verify_only()


@pytest.mark.parametrize("name", ["agentmath_full", "agentmath_lora", "agentmath_moe_lora"])
def test_sft_recipes_name_their_data_and_model(name: str) -> None:
    config = SFTConfig.model_validate(read_config_file(ROOT / f"configs/sft/{name}.toml")["sft"])
    assert config.data and config.model and config.model.startswith("models/Qwen3-")
    assert config.lora is (name != "agentmath_full") and config.bf16


def test_sft_without_data_or_model_names_the_missing_one(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["sft", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "no SFT data" in result.output
    config = tmp_path / "sft.toml"
    config.write_text('[sft]\ndata = "data/sft.jsonl"\n')
    result = runner.invoke(app, ["sft", "--config", str(config), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "no SFT model" in result.output and "--model" in result.output
