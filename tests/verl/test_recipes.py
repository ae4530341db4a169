"""configs/verl at tiny scale, as far as verl 0.9.1 runs on a CPU: each trainer recipe composed
and checked by verl, the agent loop built from the YAML it names, and one episode per recipe
through verl's own ``LLMServerClient`` and the router YAML's plug-in to a Qwen3-like model.

What verl refuses here, and why (so the full run is a GPU check, scripts/gpu_check.sh):

* ``python -m verl.trainer.main_ppo`` (its default V1 trainer) imports ``transfer_queue`` (the
  TransferQueue package of verl's ``verl-core`` extra, not installed by scripts/install_verl.sh)
  before anything else runs: ``ModuleNotFoundError: No module named 'transfer_queue'``.
* With ``trainer.use_v1=false`` (the legacy trainer) the config checks pass, Ray starts and the
  data loads, then ``ResourcePoolManager.create_resource_pool`` (every worker group is placed
  with ``use_gpu=True``) stops: ``ValueError: Total available GPUs 0 is less than total desired
  GPUs 1``. verl's rollout is a vLLM, SGLang or TensorRT-LLM server adapter
  (``verl.workers.rollout.base._ROLLOUT_REGISTRY``, no CPU engine); its vLLM pin (0.24, a CUDA
  build) is not in .venv-verl, and the LoRA recipe's config check already imports it:
  ``ValueError: vllm version None not supported and SGLang also not Found``.

So these tests keep the strongest check that runs: the recipe composed on verl's
``ppo_trainer.yaml`` with its sizes swapped for tiny ones and passed through verl's
``validate_config``; the agent loop instantiated by hydra from the recipe's agent-loop YAML as
verl's ``AgentLoopWorker`` does; one episode per recipe with the recipe's tool format, rewards
and budgets (shrunk), its requests sent by verl's ``LLMServerClient`` through the router that
``router.yaml`` loads, to a random-weight Qwen3-like model (tests/fixtures/qwen3_like.py: its
chat template's thinking blocks and tool-call tags) generating in process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.router import _load_router_yaml, _resolve_router_class

from agentmath.tasks import Task
from agentmath.verl.router import AgentMathRouter
from tests.verl.fakes import LocalActor, ModelServer, dataset_fields, make_agent_loop, runs
from tests.verl.test_configs import vllm_lora_check  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("close_sandboxes")

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "verl"
#: Only sizes change: a step of one prompt, short contexts, few tool calls.
TINY = ["data.train_batch_size=1", "data.max_prompt_length=512",
        "data.max_response_length=96", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1", "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1", "actor_rollout_ref.rollout.agent.num_workers=1"]
TASK = Task("t1", "What is 17 times 23?", "391")


@pytest.fixture(scope="module")
def qwen3_dir() -> Path:
    from tests.fixtures.qwen3_like import qwen3_like_dir

    return qwen3_like_dir("qwen3")


def _compose(name: str, model: Path) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        return compose(config_name=name,
                       overrides=[*TINY, f"actor_rollout_ref.model.path={model}"])


@pytest.mark.recipe("configs/verl/router.yaml")
@pytest.mark.parametrize("name,fmt,rewards", [
    pytest.param("deepmath_like", "deepmath", ["accuracy", "code_use"], marks=[
        pytest.mark.recipe("configs/verl/deepmath_like.yaml"),
        pytest.mark.recipe("configs/verl/agent_loop_deepmath.yaml")]),
    pytest.param("agentmath_like", "code_interpreter", ["accuracy", "tool_efficiency"], marks=[
        pytest.mark.recipe("configs/verl/agentmath_like.yaml"),
        pytest.mark.recipe("configs/verl/agent_loop_agentmath.yaml")]),
])
async def test_recipe_episode_through_verls_client_and_the_router(
        name: str, fmt: str, rewards: list[str], qwen3_dir: Path,
        vllm_lora_check: list[int]) -> None:  # noqa: F811
    # (verl's check of the LoRA recipe imports vLLM, a GPU install: the rank is recorded)
    from transformers import AutoTokenizer

    cfg = _compose(name, qwen3_dir)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg),
                    use_critic=need_critic(cfg))
    rollout = cfg.actor_rollout_ref.rollout
    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_dir))
    (entry,) = [e for e in OmegaConf.load(ROOT / rollout.agent.agent_loop_config_path)
                if e.name == rollout.agent.default_agent_loop]
    entry.agentmath.loop.max_model_tokens = 48  # a size: the recipe's budget, shrunk
    router_yaml = _load_router_yaml(str(ROOT / rollout.router_config_path))
    assert _resolve_router_class(router_yaml["router_class"]) is AgentMathRouter
    server = ModelServer(str(qwen3_dir))
    router = AgentMathRouter({"s0": LocalActor(server)}, router_yaml)
    client = LLMServerClient(cfg, load_balancer_handle=LocalActor(router))
    loop = make_agent_loop(cfg, client, tokenizer, entry=entry)
    assert loop.fmt.name == fmt

    out = await loop.run({"temperature": rollout.temperature, "top_p": 1.0,
                          "logprobs": rollout.calculate_log_probs}, **dataset_fields(TASK))

    assert router.get_total_inflight() == 0 and server.calls  # routed, and released
    rendered = tokenizer.decode(out.prompt_ids)
    assert "<|im_start|>system" in rendered and TASK.problem in rendered  # Qwen3-like template
    assert 0 < len(out.response_ids) <= cfg.data.max_response_length
    assert len(out.response_mask) == len(out.response_ids)
    for call, (start, _) in zip(server.calls, runs(out.response_mask, 1), strict=False):
        assert call["prompt_ids"] == out.prompt_ids + out.response_ids[:start]  # token-exact
    assert sum(out.response_mask) <= 48 + len(server.calls)  # the model-token budget held
    info = out.extra_fields["reward_extra_info"]
    assert {k for k in info if k not in ("score", "acc")} == set(rewards)
    assert out.reward_score == info["score"]
    assert out.extra_fields["agentmath"]["finish_reason"]
    assert vllm_lora_check == ([32] if name == "deepmath_like" else [])
