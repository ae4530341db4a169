"""Sharded data parallelism (FSDP2) for the in-house trainers, on torch's ``fully_shard``.

One process per device (``accelerate launch`` or ``torchrun`` starts them; accelerate's
``PartialState`` joins the process group: NCCL on GPUs, gloo on the CPU). Each decoder layer
is one FSDP unit and the root (embeddings, final norm, head) another: a rank holds 1/N of
every parameter, of its gradient and of its AdamW state, and gathers a layer's full weights
only while that layer runs. Each rank trains on its own share of a step's examples; gradients
are averaged over the ranks by the reduce-scatter, so a loss that each rank scales by the
world size gives the gradient of the whole step (:func:`world_scale`).

Why torch's ``fully_shard`` and not accelerate's FSDP plugin: accelerate (1.16) applies its
plugin only on GPU/NPU/XPU process groups; under a CPU launch it silently wraps the model in
DDP instead (``distributed_type`` MULTI_CPU), so the plugin's path could not be tested on the
CPU at all. ``fully_shard`` runs the same code on gloo and NCCL, which is what the CPU test
(tests/integration/test_sft_fsdp.py) checks against one process.

Precision (``bf16``): with it, FSDP's mixed-precision policy all-gathers each layer's weights
in bfloat16 and computes in bfloat16, while the sharded master weights, their gradients as the
optimizer sees them and the AdamW moments stay float32 ("bf16 weights, fp32 optimizer state";
16 bytes a parameter in all, divided by the ranks). ``reduce_dtype`` says in which dtype the
gradients are averaged over the ranks: float32 by default, since a sum of bfloat16 gradients
over many ranks loses low bits; bfloat16 halves that traffic. Without ``bf16`` every tensor is
float32.

Saving: checkpoints and the final model hold the *full* state dict, gathered to rank 0 on the
CPU (:func:`gather`), written by rank 0 alone: a checkpoint is the same directory as an
unsharded run's (``save_pretrained`` weights), plus the optimizer state keyed by parameter name
(torch.distributed.checkpoint's full optimizer state dict). Resume loads the weights before
sharding and the optimizer state after; resuming a sharded run unsharded (or the reverse) is
refused with a ConfigError, since the two keep their optimizer state in different layouts.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field

from agentmath._lazy import require
from agentmath.config import StrictModel
from agentmath.errors import ConfigError

Sharding = Literal["none", "fsdp"]

SHARDING_DESCRIPTION = (
    "none: one process holds the whole model (today's trainer); fsdp: sharded data "
    "parallelism (torch FSDP2) over the processes `accelerate launch` or `torchrun` starts, "
    "one per device: each holds 1/N of the weights, gradients and AdamW state (docs/gpu.md, "
    "'Sharded training').")


class FSDPConfig(StrictModel):
    """The few FSDP knobs a run needs (agentmath/train/sharding.py); read only when
    ``sharding`` is 'fsdp'."""

    wrap_class: str | None = Field(None, min_length=1, max_length=200, description=(
        "Class name of the module each FSDP unit wraps, a decoder layer (e.g. "
        "'Qwen3DecoderLayer'); None: the model's own list (transformers' _no_split_modules)."))
    reshard_after_forward: bool = Field(True, description=(
        "Free each layer's gathered weights after its forward and gather them again in "
        "backward (ZeRO-3: least memory); false keeps them until backward (one all-gather "
        "less per layer, a layer's full weights more memory each)."))
    cpu_offload: bool = Field(False, description=(
        "Keep the weight and gradient shards and the AdamW state in CPU memory (FSDP2's "
        "CPUOffloadPolicy); the optimizer step runs on the CPU. Slower; for a model whose "
        "shards do not fit on the devices."))
    activation_checkpointing: bool = Field(False, description=(
        "Recompute each decoder layer's activations in backward instead of keeping them "
        "(transformers' gradient checkpointing, non-reentrant): about a third more compute, "
        "activations of one layer instead of all."))
    reduce_dtype: Literal["float32", "bfloat16"] = Field("float32", description=(
        "With bf16: the dtype gradients are averaged in over the ranks (float32: exact "
        "sums; bfloat16: half the traffic)."))


def world_size() -> int:
    """Processes of this launch (1 when not launched by accelerate or torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def check_launch(sharding: Sharding, what: str) -> None:
    """A launch of several processes needs ``sharding`` 'fsdp': unsharded, every process
    would train the same examples on its own copy and write the same files."""
    if sharding == "none" and world_size() > 1:
        raise ConfigError(f"{what}: launched as {world_size()} processes but sharding is "
                          "'none'; set sharding = 'fsdp' (or launch one process)")


def init_process_group(cpu: bool) -> tuple[Any, int, int]:
    """Join the launch's process group and return (device, rank, world size).

    On GPUs the group is started here with NCCL for CUDA tensors and gloo for CPU ones (CPU
    offload's gradient norm, the ranks' statistics); on the CPU accelerate's PartialState
    starts it (gloo). A process that was not launched gets a group of one (FSDP then only
    offloads or checkpoints)."""
    accelerate = require("accelerate", "train")
    torch = require("torch", "train")
    if not torch.distributed.is_initialized() and (not cpu or world_size() == 1):
        if not cpu:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "gloo" if cpu else "cuda:nccl,cpu:gloo"
        if world_size() > 1:  # the launcher's environment (env://)
            torch.distributed.init_process_group(backend)
        else:
            torch.distributed.init_process_group(backend, store=torch.distributed.HashStore(),
                                                 rank=0, world_size=1)
    state = accelerate.PartialState(cpu=cpu)
    if not torch.distributed.is_initialized():
        raise ConfigError("sharding 'fsdp': no process group was started")
    return state.device, state.process_index, state.num_processes


def layer_classes(model: Any, wrap_class: str | None) -> set[str]:
    """Names of the module classes each FSDP unit wraps (see FSDPConfig.wrap_class)."""
    transformers = require("transformers", "train")
    if wrap_class is not None:
        return {wrap_class}
    for module in model.modules():
        if isinstance(module, transformers.PreTrainedModel) and module._no_split_modules:
            return set(module._no_split_modules)
    raise ConfigError("fsdp.wrap_class: the model names no decoder layer class "
                      "(_no_split_modules); set it to the class of its layers")


def shard_model(model: Any, config: FSDPConfig, *, bf16: bool, device: Any) -> Any:
    """Apply FSDP2 to ``model`` in place: one unit per decoder layer, then the root.

    Call it before building the optimizer (which must see the sharded parameters) and after
    loading any checkpoint weights (they load into the plain model)."""
    torch = _torch()
    fsdp = torch.distributed.fsdp
    names = layer_classes(model, config.wrap_class)
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        found = sorted({type(m).__name__ for m in model.modules()})
        raise ConfigError(f"fsdp.wrap_class: no module of class {sorted(names)} in the model; "
                          f"its classes: {', '.join(found)}")
    if config.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mesh = torch.distributed.device_mesh.init_device_mesh(
        device.type, (torch.distributed.get_world_size(),))
    reduce = torch.float32 if config.reduce_dtype == "float32" else torch.bfloat16
    policy = (fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce)
              if bf16 else fsdp.MixedPrecisionPolicy())
    offload = fsdp.CPUOffloadPolicy() if config.cpu_offload else fsdp.OffloadPolicy()
    for layer in layers:
        fsdp.fully_shard(layer, mesh=mesh, reshard_after_forward=config.reshard_after_forward,
                         mp_policy=policy, offload_policy=offload)
    fsdp.fully_shard(model, mesh=mesh, reshard_after_forward=config.reshard_after_forward,
                     mp_policy=policy, offload_policy=offload)
    return model


def world_scale() -> int:
    """The factor a rank's loss is multiplied by so that the ranks' averaged gradient is the
    gradient of the step's summed loss (FSDP's reduce-scatter averages over the ranks)."""
    torch = require("torch", "train")
    return torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1


def reduce_over_ranks(values: list[float], op: Literal["sum", "max"] = "sum") -> list[float]:
    """``values`` summed (or their maximum taken) over the processes of the group, element by
    element (themselves when there is no group)."""
    torch = require("torch", "train")
    if not torch.distributed.is_initialized():
        return list(values)
    total = torch.tensor(values, dtype=torch.float64)  # gloo's, or NCCL's on a GPU of its own
    if torch.distributed.get_backend() == "nccl":
        total = total.cuda()
    reduce_op = torch.distributed.ReduceOp.SUM if op == "sum" else torch.distributed.ReduceOp.MAX
    torch.distributed.all_reduce(total, op=reduce_op)
    return [float(v) for v in total.tolist()]


def sum_over_ranks(value: float) -> float:
    """``value`` summed over the processes of the group (itself when there is none)."""
    return reduce_over_ranks([value])[0]


def norm_value(norm: Any) -> float:
    """A gradient norm as a float: a DTensor (sharded gradients) is reduced first."""
    torch = _torch()
    if isinstance(norm, torch.distributed.tensor.DTensor):
        norm = norm.full_tensor()
    return float(norm)


def _torch() -> Any:
    """torch, with the distributed submodules this module uses imported."""
    import importlib

    torch = require("torch", "train")
    for name in ("fsdp", "tensor", "device_mesh", "checkpoint.state_dict"):
        importlib.import_module(f"torch.distributed.{name}")
    return torch


def _options(**kwargs: Any) -> Any:
    return _torch().distributed.checkpoint.state_dict.StateDictOptions(**kwargs)


def load_optimizer_state(model: Any, optimizer: Any, state: dict[str, Any]) -> None:
    """Shard a full optimizer state (keyed by parameter name, as :func:`gather` returns it)
    into ``optimizer``; every rank passes the whole state (read with mmap: no copy a rank)."""
    _torch().distributed.checkpoint.state_dict.set_optimizer_state_dict(
        model, optimizer, optim_state_dict=state, options=_options(full_state_dict=True))


def gather(model: Any, optimizer: Any, *, lora: bool, main: bool
           ) -> tuple[Any | None, dict[str, Any] | None]:
    """A sharded run's model as rank 0 saves it: (an unsharded copy holding the full weights,
    the full optimizer state keyed by parameter name, or None without ``optimizer``) on the
    ``main`` rank, (None, None) elsewhere. Collective: every rank calls it."""
    dcp = _torch().distributed.checkpoint.state_dict
    options = _options(full_state_dict=True, cpu_offload=True)
    weights = dcp.get_model_state_dict(model, options=options)
    by_name = (dcp.get_optimizer_state_dict(model, optimizer, options=options)
               if optimizer is not None else None)
    if not main:
        return None, None
    return plain_copy(model, weights, lora=lora), by_name


def plain_copy(model: Any, state: dict[str, Any], *, lora: bool) -> Any:
    """An unsharded model of ``model``'s architecture (and LoRA adapter) holding ``state``
    (a full state dict), on the CPU. Built without initialising weights (accelerate's
    init_empty_weights; buffers such as the rotary frequencies are built), then the tensors
    assigned."""
    accelerate = require("accelerate", "train")
    transformers = require("transformers", "train")
    with accelerate.init_empty_weights(include_buffers=False):
        plain = transformers.AutoModelForCausalLM.from_config(model.config)
        if lora:
            peft = require("peft", "train")
            plain = peft.get_peft_model(plain, model.peft_config["default"])
    plain.load_state_dict(state, assign=True)
    # assigning gives a tied head its own tensor: tie it again (as saved by the plain run)
    (plain.get_base_model() if lora else plain).tie_weights()
    return plain.train(model.training)


def barrier() -> None:
    """Wait for every rank (nothing without a process group)."""
    torch = require("torch", "train")
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
