"""The GPU-scale GRPO recipes: valid configs, files in sync, a clear error offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmath.config import load_config
from agentmath.errors import ConfigError
from agentmath.recipes.grpo import RECIPES, agentmath, deepmath, recipe_toml
from agentmath.rl.config import RLConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_files_equal_the_python_recipes(name: str) -> None:
    path = ROOT / "configs" / "rl" / f"{name}.toml"
    assert path.read_text(encoding="utf-8") == recipe_toml(name), (
        "regenerate with: python -m agentmath.recipes.grpo")
    assert load_config(RLConfig, path) == RECIPES[name]()


def test_deepmath_recipe_mirrors_the_paper() -> None:
    cfg = deepmath()
    assert (cfg.optim.lora, cfg.optim.lora_r, cfg.optim.lora_alpha) == (True, 32, 16.0)
    assert cfg.optim.learning_rate == 1e-6 and cfg.group_size == 4
    assert (cfg.temperature.start, cfg.temperature.end) == (1.2, 0.7)
    assert cfg.loop.max_model_tokens == 5000 and cfg.format == "deepmath"
    assert {r.name for r in cfg.rewards} >= {"accuracy", "code_use"}


def test_agentmath_recipe_mirrors_the_paper() -> None:
    cfg = agentmath()
    assert cfg.optim.learning_rate == 1e-6
    assert (cfg.prompts_per_step, cfg.group_size) == (64, 8)
    stages = cfg.stages.stages
    assert [s.max_total_tokens for s in stages] == [48 * 1024, 72 * 1024, 96 * 1024]
    assert [s.max_tool_calls for s in stages] == [48, 72, 96]
    assert cfg.stages.truncation_threshold == 0.1
    assert {r.name for r in cfg.rewards} == {"accuracy", "tool_efficiency"}


def test_a_model_not_on_disk_is_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from agentmath.train.plumbing import load_for_training

    cfg = deepmath(model="Qwen/Qwen3-4B-Thinking-2507")
    with pytest.raises(ConfigError, match="Qwen/Qwen3-4B-Thinking-2507.*local directories only"):
        load_for_training(cfg.model, None, seed=0, lora=True, what="rl")
