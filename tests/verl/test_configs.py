"""configs/verl: the two trainer recipes compose on verl's own ppo_trainer.yaml with hydra and
pass verl's own config checks; the agent-loop and router YAMLs they name build the agentmath
agent loop and router. (CPU only: nothing here trains or starts a server.)"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from verl.trainer.config.algorithm import RolloutCorrectionConfig
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.workers.rollout.router import _load_router_yaml, _resolve_router_class

from agentmath.verl.agent_loop import AgentMathAgentLoop
from agentmath.verl.router import AgentMathRouter
from tests.verl.fakes import FakeServerManager, make_agent_loop

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "verl"
RECIPES = {"deepmath_like": ("deepmath", ["accuracy", "code_use"], 4, 50),
           "agentmath_like": ("code_interpreter", "agentmath", 8, 48)}


def recipe(name: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        return compose(config_name=name)


@pytest.fixture
def vllm_lora_check(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """verl's validate_config asks vLLM for its largest LoRA rank (importing vLLM, a GPU
    install); record the rank instead."""
    seen: list[int] = []
    package = types.ModuleType("verl.workers.rollout.vllm_rollout")
    package.__path__ = []
    utils = types.ModuleType("verl.workers.rollout.vllm_rollout.utils")
    utils.get_vllm_max_lora_rank = seen.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(sys.modules, utils.__name__, utils)
    return seen


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_composes_and_passes_verls_checks(name: str, vllm_lora_check: list[int]) -> None:
    cfg = recipe(name)
    rollout = cfg.actor_rollout_ref.rollout
    assert cfg.algorithm.adv_estimator == "grpo"
    assert rollout.agent.default_agent_loop == "agentmath"
    assert rollout.n == RECIPES[name][2] and rollout.calculate_log_probs is True
    assert rollout.prompt_length == cfg.data.max_prompt_length  # verl's interpolation
    assert rollout.response_length == cfg.data.max_response_length
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg),
                    use_critic=need_critic(cfg))
    assert not need_critic(cfg)  # GRPO: no critic
    typed = omega_conf_to_dataclass(rollout)  # verl's typed RolloutConfig
    assert typed.agent.agent_loop_config_path == rollout.agent.agent_loop_config_path
    correction = RolloutCorrectionConfig(  # the trainer reads it as a dict; check its fields
        **OmegaConf.to_container(cfg.algorithm.rollout_correction))  # type: ignore[arg-type]
    assert correction.rollout_is == "token"
    assert vllm_lora_check == ([32] if name == "deepmath_like" else [])
    assert (ROOT / rollout.agent.agent_loop_config_path).is_file()
    assert (ROOT / rollout.router_config_path).is_file()


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipes_agent_loop_yaml_builds_the_agentmath_loop(name: str, tokenizer: Any) -> None:
    cfg = recipe(name)
    path = ROOT / cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path
    entries = OmegaConf.load(path)  # what verl's AgentLoopWorker reads into its registry
    (item,) = [e for e in entries if e.name == "agentmath"]
    loop = make_agent_loop(cfg, FakeServerManager(None), tokenizer, entry=item)
    assert isinstance(loop, AgentMathAgentLoop)
    fmt, rewards, _, calls = RECIPES[name]
    named = loop.settings.rewards  # a preset's name, or the specs
    assert loop.fmt.name == fmt
    assert (named if isinstance(named, str) else [s.name for s in named]) == rewards
    assert loop.settings.loop.max_tool_calls == calls
    assert loop.settings.sandbox_url == [] and loop.settings.mask_tool_tokens


def test_router_yaml_is_verls_plugin() -> None:
    config = _load_router_yaml(str(CONFIGS / "router.yaml"))
    assert _resolve_router_class(config["router_class"]) is AgentMathRouter
    router = AgentMathRouter({"a": 1}, config)
    assert router.config.policy == "prefix_aware" and router.config.spill_slack == 32
