"""Estimates of a run's time and memory on GPUs, from the cost model: what the GPU quickstart
quotes for each recipe before anyone has run it at that size.

Generation (evaluation, synthesis, RL rollouts) is priced with the vLLM step-cost model of
:mod:`agentmath.sim.costs` built from the model's shape and the card (:mod:`.hardware`): every
replica decodes as many sequences at once as its KV cache holds (at most ``max_running``), each
sequence's context at its mean length; prefill is priced without prefix caching. Training is
priced at a stated model FLOPs utilisation (6 FLOPs per parameter per token for a forward and
backward pass, 2 for each extra forward: RL's log-probabilities of the old and reference
policies). A trainer's memory is :mod:`agentmath.sim.train_memory`'s.

These are estimates from first principles with the assumptions stated beside each constant, not
measurements: they ignore the tail of the longest episodes (a synchronous batch waits for it;
the asynchronous rollout does not), queueing at the sandbox, and checkpointing time. Written by
hand because no library prices an agentic RL run; the step-cost model it stands on is checked
against published vLLM measurements in ``tests/unit/test_simulator_costs.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentmath.sim.costs import ServerCostModel
from agentmath.sim.hardware import (
    GIB,
    GPU_MEMORY_UTILIZATION,
    H100_SXM,
    NON_KV_BYTES,
    Accelerator,
    ModelShape,
    step_coefficients,
)

__all__ = ["MFU", "GenerationShape", "TrainingShape", "generation_seconds", "gib",
           "inference_memory_bytes", "replicas", "training_seconds"]

#: Model FLOPs utilisation assumed for training (forward + backward, bf16, FSDP on one node):
#: 35%, a common figure for dense decoders of a few billion parameters at long sequence length.
#: An assumption, not measured here.
MFU = 0.35


@dataclass(frozen=True, slots=True)
class GenerationShape:
    """What a generation workload asks of the servers, in mean tokens per episode."""

    episodes: int
    model_tokens: float  # tokens the model writes per episode
    prompt_tokens: float  # tokens prefilled per episode: the prompt and the tool outputs
    concurrency: int = 1024  # episodes in flight at once, over all replicas


@dataclass(frozen=True, slots=True)
class TrainingShape:
    """What a training run computes: tokens through the model and its longest sequence."""

    tokens: float  # tokens trained on, summed over the run
    max_length: int  # the longest sequence (activations and logits scale with it)
    extra_forwards: int = 0  # forwards beyond the trained one (RL: old and reference log-probs)
    micro_batch: int = 1


def replicas(model: ModelShape, gpu: Accelerator, gpus: int) -> tuple[int, int]:
    """(replicas, GPUs per replica): the fewest GPUs (a power of two) whose memory holds the
    weights with room for a KV cache, then as many replicas as ``gpus`` allows."""
    per = 1
    while per < gpus and model.weight_bytes + NON_KV_BYTES > 0.5 * per * gpu.memory_bytes:
        per *= 2
    return max(1, gpus // per), per


def _server(model: ModelShape, gpu: Accelerator, per_replica: int) -> ServerCostModel:
    """The step-cost model of one replica over ``per_replica`` GPUs (tensor parallelism taken as
    ideal: the card's bandwidth and FLOP rate multiplied)."""
    card = Accelerator(gpu.name, gpu.memory_bytes * per_replica,
                       gpu.hbm_bytes_per_s * per_replica, gpu.dense_bf16_flops * per_replica)
    coefficients = step_coefficients(model, card)
    kv_tokens = int(coefficients.pop("kv_tokens"))
    return ServerCostModel(**coefficients, kv_tokens=max(kv_tokens, 0))


def generation_seconds(work: GenerationShape, model: ModelShape, gpus: int,
                       gpu: Accelerator = H100_SXM) -> float:
    """Seconds to generate ``work`` on ``gpus`` cards: decode at the batch each replica's KV
    cache holds, plus prefill, spread evenly over the replicas."""
    count, per = replicas(model, gpu, gpus)
    server = _server(model, gpu, per)
    mean_context = work.prompt_tokens + work.model_tokens / 2
    by_kv = int(server.kv_tokens // max(mean_context, 1))
    batch = max(1, min(math.ceil(work.concurrency / count), by_kv, server.max_running))
    per_token = server.step_time(batch, 0, int(batch * mean_context)) / batch
    decode = work.episodes * work.model_tokens * per_token
    prefill = work.episodes * work.prompt_tokens * server.c
    return (decode + prefill) / count


def inference_memory_bytes(model: ModelShape, gpu: Accelerator = H100_SXM) -> float:
    """Per GPU of one replica: vLLM takes ``gpu_memory_utilization`` (0.9) of the card for
    weights, KV cache and its own buffers, whatever the workload."""
    return GPU_MEMORY_UTILIZATION * gpu.memory_bytes


def training_seconds(work: TrainingShape, model: ModelShape, gpus: int,
                     gpu: Accelerator = H100_SXM, mfu: float = MFU) -> float:
    """Seconds of forward and backward passes (6 FLOPs per active parameter per token) and the
    extra forwards (2 each) at ``mfu`` of the cards' dense bf16 rate."""
    flops = (6 + 2 * work.extra_forwards) * model.active_params * work.tokens
    return flops / (mfu * gpu.dense_bf16_flops * gpus)


def gib(value: float) -> str:
    """``value`` bytes as GiB, for tables."""
    return f"{value / GIB:.0f} GiB"
