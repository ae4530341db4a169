"""Agentic GRPO recipes at GPU scale, mirroring the two published runs.

Real configs for :func:`agentmath.rl.trainer.train_rl` (or ``agentmath rl --config``: the
same settings are in ``configs/rl/deepmath.toml`` and ``configs/rl/agentmath.toml``, written
by :func:`recipe_toml` with a comment on every setting: its source, and where it deviates).
They need GPUs, vLLM servers and the models on local disk; on a machine without them,
``train_rl`` stops at once with an error naming the missing model directory.

* :func:`deepmath` — Intel's DeepMath (IntelLabs/DeepMath, configs/training.yaml): Qwen3-4B-
  Thinking, LoRA r32 / alpha 16 / dropout 0.1, lr 1e-6 with cosine decay and 10% warmup,
  4 generations per prompt, temperature 1.2 -> 0.7 (linear), top-p 0.8, clip-higher 0.4,
  completions capped at 5k tokens, rewards 0.1 accuracy + 1.0 code use. Unlike DeepMath's
  trainer, tool output is masked from the loss and rollouts run on the asynchronous engine.
* :func:`agentmath` — AgentMath (arXiv 2512.20745): Qwen3-8B, lr 1e-6, 64 prompts a step, 8
  rollouts each, accuracy + tool-efficiency reward, three stages of context 48k -> 72k -> 96k
  and tool calls 48 -> 72 -> 96, moving on when 10% of a window of samples is truncated,
  partial rollout.
"""

from __future__ import annotations

from typing import Any

from agentmath.rl.config import RLConfig
from agentmath.rl.rewards import agentmath_rewards, deepmath_rewards

_DM = "DeepMath (IntelLabs/DeepMath configs/training.yaml)"
_OURS = "agentmath's choice, not from DeepMath"

#: Where each setting of :func:`deepmath` comes from (written above it in the TOML file).
DEEPMATH_NOTES = {
    "model": f"{_DM}: Qwen/Qwen3-4B-Thinking-2507. A local directory: set it to your copy.",
    "format": "DeepMath's agent writes Python in <tool_call> blocks and reads ```output blocks "
              "(deep_math/prompts.py); agentmath's 'deepmath' tool format.",
    "steps": "Not stated: DeepMath trains one epoch of its data (max_steps -1). Its temperature "
             "schedule reaches 0.7 at step 1000; here it reaches it at the last step (set "
             "steps = 1000 for DeepMath's pace).",
    "group_size": f"{_DM}: num_generations 4.",
    "prompts_per_step": "Not stated: DeepMath's batch is 4 completions per GPU x 2 accumulation "
                        "steps x its GPU count (unpublished); 32 prompts = 128 completions.",
    "seed": f"{_DM}: seed 42.",
    "data": "DeepMath trains on fastragdev/openmathreasoning-tir (problem, answer); any file "
            "with a problem and an answer per row.",
    "loss": "agentmath's GRPO loss (token mean, truncated importance sampling on the "
            "sampler's logprobs: not in DeepMath's TRL 0.16.1 trainer).",
    "loss.clip_high": f"{_DM}: epsilon_high 0.4 (clip-higher; epsilon low is TRL's 0.2).",
    "loss.micro_batch_size": f"{_DM}: per_device_train_batch_size 4.",
    "loss.mask_tool_tokens": "Deviation: DeepMath's trainer scores the agent's whole output, "
                             "tool output included; agentmath masks tool output from the loss "
                             "(false gives DeepMath's choice).",
    "loss.kl_coef": "DeepMath sets no beta, so TRL 0.16.1's default KL coefficient 0.04 applies "
                    "(its sync_ref_model comment confirms a KL term). Deviation: DeepMath mixes "
                    "the reference toward the policy every 300 steps (alpha 0.4); here the "
                    "reference stays the starting model.",
    "optim": f"{_DM}: lr 1e-6, cosine schedule, warmup_ratio 0.1 (50 of 500 steps), weight "
             "decay 0.001, bf16; LoRA r 32, alpha 16, dropout 0.1 on all linear layers. "
             "Deviation: DeepMath's LoRA is rank-stabilised (use_rslora), agentmath's plain.",
    "temperature": f"{_DM}: temp_scheduling 1.2 at step 0 -> 0.7 at step 1000, linear; top_p "
                   "0.8. Deviation: its top_k 50 is not applied (agentmath's RL samples "
                   "without top-k).",
    "loop": "The length cap: DeepMath's max_agent_output 5000 model tokens (its README's 5k "
            "cap; its training.yaml's max_completion_length is 3000, which its own comment "
            "says should equal it). max_agent_steps 50 bounds tool calls. The 16k context and "
            f"the 10 s per snippet are {_OURS}.",
    "rollout": f"Asynchronous request-level rollouts: {_OURS} (DeepMath generates through TRL's "
               "vLLM client, one batch a step).",
    "generator": "vLLM servers started with the weight-sync flags (agentmath/rl/sync_vllm.py, "
                 "docs/rl.md); LoRA adapters are pushed after every step. Set the URLs.",
    "rewards": f"{_DM}: reward_funcs [open_r1_accuracy, code_format], weights [0.1, 1.0]; "
               "code_format pays 1 for any tool call, right answer or not (require_correct "
               "false). DeepMath adds no length penalty: the cap only truncates.",
}

_AM = "AgentMath (arXiv 2512.20745)"

#: Where each setting of :func:`agentmath` comes from.
AGENTMATH_NOTES = {
    "model": f"{_AM} trains Qwen3 models (8B here; its headline model is Qwen3-30B-A3B) after "
             "SFT on its synthesized trajectories. A local directory: set it to your SFT model.",
    "format": "Reasoning with <code> snippets and <interpreter> outputs: agentmath's "
              "code_interpreter format, the one its synth recipe writes (configs/synth).",
    "steps": f"Not stated by {_AM}; {300} steps is agentmath's.",
    "group_size": f"{_AM}: 8 rollouts per prompt.",
    "prompts_per_step": f"{_AM}: 64 prompts per step.",
    "data": "Your RL prompts (problem and gold answer per row).",
    "loss": "GRPO with clip-higher 0.28 (DAPO's, agentmath's default) and token-mean loss; "
            "truncated importance sampling on the sampler's logprobs (agentmath's default: "
            "async rollouts are slightly off-policy). micro_batch_size 1: 48k-96k contexts.",
    "optim": f"{_AM}: lr 1e-6, full fine-tuning, bf16.",
    "temperature": "Temperature 1.0, constant: agentmath's (no schedule in AgentMath's RL).",
    "stages": f"{_AM}: multi-stage RL whose context and tool-call budgets grow 48k -> 72k -> "
              "96k tokens and 48 -> 72 -> 96 calls, moving on when 10% of recent samples are "
              "truncated; the 2048-sample window and the 2k tokens kept for the prompt are "
              "agentmath's.",
    "stages.stages": "Each stage: context, model tokens (context less 2k for the prompt), tool "
                     "calls, and the partial-rollout segment (8k model tokens a step).",
    "loop": "Stage 1's budgets (the stages section moves them on).",
    "rollout": f"{_AM}'s training system: request-level asynchronous rollout, agentic partial "
               "rollout (segments of 8k tokens, turns interrupted at a weight update), at most 2 "
               "policy versions stale; 1024 episodes in flight is agentmath's.",
    "generator": "vLLM servers started with the weight-sync flags (agentmath/rl/sync_vllm.py, "
                 "docs/rl.md); full weights pushed after every step. Several URLs go through "
                 f"agentmath's prefix-aware load balancer ({_AM}). Set the URLs.",
    "rewards": f"{_AM}: R = R_acc + 1[R_acc = 1] * min(R_max, alpha + beta * N_code), alpha "
               "0.1, beta 0.01, R_max 1.",
}


def deepmath(model: str = "models/Qwen3-4B-Thinking-2507", dataset: str = "data/train.jsonl",
             base_urls: tuple[str, ...] = ("http://127.0.0.1:8000",), **over: Any) -> RLConfig:
    """DeepMath's GRPO run as an :class:`RLConfig` (``over``: top-level field overrides)."""
    steps = 500
    data: dict[str, Any] = {
        "model": model, "format": "deepmath", "data": {"dataset": dataset},
        "steps": steps, "group_size": 4, "prompts_per_step": 32, "seed": 42,
        "rewards": [spec.model_dump() for spec in deepmath_rewards(max_tokens=None)],
        "optim": {"learning_rate": 1e-6, "warmup_steps": steps // 10, "decay": "cosine",
                  "weight_decay": 0.001, "lora": True, "lora_r": 32, "lora_alpha": 16.0,
                  "lora_dropout": 0.1, "bf16": True},
        "temperature": {"start": 1.2, "end": 0.7, "top_p": 0.8},
        "loop": {"max_model_tokens": 5000, "max_total_tokens": 16384, "max_tool_calls": 50,
                 "tool_timeout_s": 10.0},
        "loss": {"micro_batch_size": 4, "clip_high": 0.4, "kl_coef": 0.04,
                 "mask_tool_tokens": True},
        "rollout": {"mode": "async", "max_in_flight": 256},
        "generator": {"backend": "openai", "base_urls": list(base_urls)},
    }
    return RLConfig.model_validate({**data, **over})


def agentmath(model: str = "models/Qwen3-8B", dataset: str = "data/train.jsonl",
              base_urls: tuple[str, ...] = ("http://127.0.0.1:8000",), **over: Any) -> RLConfig:
    """AgentMath's multi-stage agentic GRPO as an :class:`RLConfig`."""
    stages = [{"max_total_tokens": k * 1024, "max_model_tokens": k * 1024 - 2048,
               "max_tool_calls": k, "segment_tokens": 8192} for k in (48, 72, 96)]
    data: dict[str, Any] = {
        "model": model, "format": "code_interpreter", "data": {"dataset": dataset},
        "steps": 300, "group_size": 8, "prompts_per_step": 64,
        "rewards": [spec.model_dump() for spec in agentmath_rewards()],
        "optim": {"learning_rate": 1e-6, "bf16": True},
        "temperature": {"start": 1.0},
        "stages": {"stages": stages, "truncation_threshold": 0.1, "window": 2048},
        "loop": {"max_total_tokens": stages[0]["max_total_tokens"],
                 "max_model_tokens": stages[0]["max_model_tokens"], "max_tool_calls": 48},
        "loss": {"micro_batch_size": 1, "clip_high": 0.28},
        "rollout": {"mode": "async", "max_in_flight": 1024, "segment_tokens": 8192,
                    "max_staleness": 2, "interrupt_turns": True},
        "generator": {"backend": "openai", "base_urls": list(base_urls)},
    }
    return RLConfig.model_validate({**data, **over})


RECIPES = {"deepmath": deepmath, "agentmath": agentmath}
NOTES = {"deepmath": DEEPMATH_NOTES, "agentmath": AGENTMATH_NOTES}


def recipe_toml(name: str) -> str:
    """The TOML file of recipe ``name`` (what configs/rl/NAME.toml holds), every setting with
    its source as a comment."""
    from agentmath.recipes._toml import dumps

    fn = RECIPES[name]
    head = (f"# {(fn.__doc__ or '').splitlines()[0]}\n"
            f"# Generated by agentmath.recipes.grpo.recipe_toml({name!r}) (python -m "
            "agentmath.recipes.grpo); a unit test keeps the two equal.\n"
            "# Run: agentmath rl --config configs/rl/" + name + ".toml --out runs/rl-" + name
            + " --set model=PATH --set data.dataset=FILE --set 'generator.base_urls=[\"URL\"]'"
            "\n# Each comment says where the setting below it comes from, and where it "
            "deviates.\n\n")
    return head + dumps(fn().model_dump(mode="json", exclude_unset=True), notes=NOTES[name])


if __name__ == "__main__":  # python -m agentmath.recipes.grpo: rewrite configs/rl/*.toml
    from pathlib import Path

    for recipe in RECIPES:
        Path("configs/rl", f"{recipe}.toml").write_text(recipe_toml(recipe), encoding="utf-8")
