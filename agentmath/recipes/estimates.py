"""Time and memory estimates of every recipe under ``configs/`` on one GPU and on one 8-GPU node:
the table of the GPU quickstart (docs/gpu.md), written by
``python -m agentmath.recipes.estimates [CONFIGS_DIR]``.

Each recipe is read with its own settings class (eval, synth, sft, rl) and turned into a
generation or training workload for :mod:`agentmath.sim.estimate`. What a recipe does not fix
is assumed, the same way for every recipe (:data:`ASSUMPTIONS`, printed under the table): an
episode writes half its model-token budget, its prompt and tool outputs add a fifth of that, an
SFT example is half its maximum length. The model's shape is recognised from its name (Qwen3
1.7B, 4B, 8B, 30B-A3B, DeepMath); another name is priced as Qwen3-8B and says so.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmath.config import read_config_file
from agentmath.sim import train_memory
from agentmath.sim.estimate import (
    GenerationShape,
    TrainingShape,
    generation_seconds,
    gib,
    inference_memory_bytes,
    training_seconds,
)
from agentmath.sim.hardware import (
    H100_SXM,
    QWEN3_1_7B,
    QWEN3_4B,
    QWEN3_8B,
    QWEN3_30B_A3B,
    ModelShape,
)

__all__ = ["ASSUMPTIONS", "Estimate", "estimate_recipe", "main", "markdown_table"]

ASSUMPTIONS = (
    "an episode writes half its model-token budget; prompt and tool outputs add a fifth of "
    "that; an SFT example is half its maximum length; synthesis is priced per 10,000 rows "
    "with one teacher reply of half its max_tokens each; bf16 weights on H100-80GB cards; "
    "training at 35% MFU with FSDP over the node (bf16, activation checkpointing, one "
    "micro-batch of batch_size x max_length tokens, RL: one longest episode), memory by "
    "agentmath.sim.train_memory; a 1-GPU figure over 80 GiB does not fit that card.")
#: Rows of the built-in benchmarks (../shared/data and agentmath.tasks.datasets).
DATASET_ROWS = {"math500": 500, "aime24": 30, "aime25": 30, "hmmt25": 30, "amc23": 40,
                "gsm8k": 1319}
SYNTH_ROWS = 10_000
#: Name fragment -> shape (the cost model's, the trainer's memory model's). Intel's
#: deepmath-v1 is a LoRA on Qwen3-4B-Thinking-2507 (its model card's base_model).
_SHAPES = (("30b-a3b", QWEN3_30B_A3B, train_memory.QWEN3_30B_A3B),
           ("1.7b", QWEN3_1_7B, train_memory.QWEN3_1_7B),
           ("4b", QWEN3_4B, train_memory.QWEN3_4B), ("8b", QWEN3_8B, train_memory.QWEN3_8B),
           ("deepmath", QWEN3_4B, train_memory.QWEN3_4B))
#: Trainable parameters of a LoRA adapter, for its memory: rank 32 on every linear layer of a
#: 4B model is ~66M; taken as 1.5% of the model for every rank the recipes use.
LORA_SHARE = 0.015


@dataclass(frozen=True, slots=True)
class Estimate:
    """One recipe's estimate: seconds and peak memory per GPU on 1 and on 8 GPUs."""

    recipe: str
    model: str
    work: str
    seconds: tuple[float, float]
    memory: tuple[float, float]


def model_shape(name: str) -> tuple[ModelShape, bool]:
    """The shape a model name stands for, and whether it was recognised."""
    lowered = name.lower()
    for key, shape, _ in _SHAPES:
        if key in lowered:
            return shape, True
    return QWEN3_8B, False


def _train_memory(shape: ModelShape, gpus: int, tokens: int, lora: bool) -> float:
    """Peak bytes of one trainer rank (:func:`agentmath.sim.train_memory.fsdp_rank_memory`,
    activation checkpointing on) for ``shape`` sharded over ``gpus`` ranks."""
    trained = next(t for _, s, t in _SHAPES if s is shape)
    return train_memory.fsdp_rank_memory(
        trained, ranks=gpus, tokens_per_rank=tokens,
        lora_params=LORA_SHARE * trained.params if lora else 0.0).total


def _generation(path: str, model: str, work: GenerationShape, what: str) -> Estimate:
    shape, known = model_shape(model)
    memory = inference_memory_bytes(shape)
    return Estimate(path, shape.name if known else f"{model} (as Qwen3-8B)", what,
                    (generation_seconds(work, shape, 1), generation_seconds(work, shape, 8)),
                    (memory, memory))


def _eval(path: str, data: dict[str, Any]) -> Estimate:
    from agentmath.eval.config import EvalConfig

    config = EvalConfig.model_validate(data)
    rows = DATASET_ROWS.get(config.dataset, 500)
    if config.limit is not None:
        rows = min(rows, config.limit)
    tokens = config.loop.max_model_tokens / 2
    work = GenerationShape(rows * config.samples, tokens, tokens / 5, config.concurrency)
    return _generation(path, config.model, work,
                       f"{rows} problems x {config.samples} samples ({config.dataset})")


def _synth(path: str, data: dict[str, Any]) -> Estimate:
    from agentmath.synth.config import SynthConfig

    config = SynthConfig.model_validate({"input": "INPUT", **data})  # the input: an argument
    tokens = config.teacher.max_tokens / 2
    work = GenerationShape(SYNTH_ROWS, tokens, tokens, config.concurrency)
    return _generation(path, config.teacher.model, work,
                       f"{SYNTH_ROWS:,} rows, one teacher reply each")


def _sft(path: str, data: dict[str, Any]) -> Estimate:
    from agentmath.train.sft import SFTConfig

    fields = {k: v for k, v in data.items() if k in SFTConfig.model_fields}
    config = SFTConfig.model_validate(fields)
    model = str(data.get("model", ""))
    shape, known = model_shape(model)
    examples = config.max_steps * config.batch_size * config.grad_accum
    work = TrainingShape(examples * config.max_length / 2, config.max_length,
                         micro_batch=config.batch_size)
    tokens = config.batch_size * config.max_length
    return Estimate(path, shape.name if known else f"{model} (as Qwen3-8B)",
                    f"{config.max_steps} steps x {config.batch_size * config.grad_accum} "
                    f"examples",
                    (training_seconds(work, shape, 1), training_seconds(work, shape, 8)),
                    (_train_memory(shape, 1, tokens, config.lora),
                     _train_memory(shape, 8, tokens, config.lora)))


def _rl(path: str, data: dict[str, Any]) -> Estimate:
    from agentmath.rl.config import RLConfig

    config = RLConfig.model_validate(data)
    budgets = [s.max_model_tokens for s in config.stages.stages] or [
        config.loop.max_model_tokens]
    tokens = sum(budgets) / len(budgets) / 2
    episodes = config.steps * config.prompts_per_step * config.group_size
    rollout = GenerationShape(episodes, tokens, tokens / 5, config.rollout.max_in_flight)
    longest = max(s.max_total_tokens for s in config.stages.stages) if config.stages.stages \
        else config.loop.max_total_tokens
    extra = 1 + (config.loss.kl_coef > 0)
    train = TrainingShape(episodes * tokens * 1.2, longest, extra_forwards=extra)
    shape, known = model_shape(config.model)
    # generation and training share the node in turn (colocated), so their times add
    seconds = tuple(generation_seconds(rollout, shape, n) + training_seconds(train, shape, n)
                    for n in (1, 8))
    return Estimate(path, shape.name if known else f"{config.model} (as Qwen3-8B)",
                    f"{config.steps} steps x {config.prompts_per_step} x {config.group_size}",
                    (seconds[0], seconds[1]),
                    (_train_memory(shape, 1, longest, config.optim.lora),
                     _train_memory(shape, 8, longest, config.optim.lora)))


_READERS = {"eval": _eval, "synth": _synth, "sft": _sft, "rl": _rl}


def estimate_recipe(path: Path, root: Path) -> Estimate | None:
    """The estimate of the recipe at ``path`` (None for a kind not priced here: verl's YAMLs,
    accelerate's configs)."""
    kind = path.relative_to(root).parts[0]
    reader = _READERS.get(kind)
    if reader is None:
        return None
    data = read_config_file(path)
    if isinstance(data.get(kind), dict):  # a file with the command's own table
        data = data[kind]
    return reader(path.relative_to(root.parent).as_posix(), data)


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{max(seconds / 60, 1):.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def markdown_table(estimates: list[Estimate]) -> str:
    """The quickstart's table: one row per recipe."""
    lines = ["| recipe | model | work | 1 GPU: time | 1 GPU: memory | 8 GPUs: time | "
             "8 GPUs: memory per GPU |", "|---|---|---|---|---|---|---|"]
    for e in estimates:
        one, eight = (gib(m) + (" (over 80)" if m > H100_SXM.memory_bytes else "")
                      for m in e.memory)
        lines.append(f"| `{e.recipe}` | {e.model} | {e.work} | {_duration(e.seconds[0])} | "
                     f"{one} | {_duration(e.seconds[1])} | {eight} |")
    return "\n".join(lines) + f"\n\nEstimates, not measurements: {ASSUMPTIONS}\n"


def main(argv: list[str] | None = None) -> None:
    """Print the table for every recipe under ``configs/`` (or the directory given)."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else "configs")
    files = sorted(p for p in root.rglob("*") if p.suffix in {".toml", ".yaml", ".yml"})
    found = [e for e in (estimate_recipe(p, root) for p in files) if e is not None]
    print(markdown_table(found), end="")


if __name__ == "__main__":
    main()
