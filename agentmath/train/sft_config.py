"""The settings of one SFT run (:class:`SFTConfig`), apart from the trainer so that reading a
recipe or building CLI help imports neither torch nor the trainer."""

from __future__ import annotations

from pydantic import Field

from agentmath.config import StrictModel
from agentmath.tracking import TrackerName, WandbConfig
from agentmath.train.sharding import SHARDING_DESCRIPTION, FSDPConfig, Sharding

__all__ = ["SFTConfig"]


class SFTConfig(StrictModel):
    """Hyperparameters of one supervised fine-tuning run (see agentmath/train/sft.py), and
    optionally its data and model, so that a recipe file names everything a run needs."""

    data: str | None = Field(None, min_length=1, description=(
        "SFT examples (JSONL): {messages, completion: [{text, train}]} or chat records per "
        "line; --data overrides it (the CLI needs one or the other)."))
    model: str | None = Field(None, min_length=1, description=(
        "Model directory (HF format) to tune; --model overrides it (the CLI needs one or the "
        "other)."))

    learning_rate: float = Field(1e-5, gt=0, le=1.0, description="Peak LR; then linear to ~0.")
    max_steps: int = Field(1000, ge=1, le=10**8, description="Optimizer steps in all.")
    batch_size: int = Field(8, ge=1, le=4096, description="Examples per micro-batch (padded).")
    grad_accum: int = Field(1, ge=1, le=4096, description="Micro-batches per optimizer step.")
    max_length: int = Field(4096, ge=8, le=2**20, description=(
        "Tokens kept per example; longer ones are cut, and dropped if nothing trainable is left."))
    warmup_steps: int = Field(0, ge=0, le=10**8, description="Steps of linear warmup.")
    weight_decay: float = Field(0.0, ge=0, le=10, description="AdamW decay (matrices only).")
    max_grad_norm: float = Field(1.0, ge=0, le=1e6, description="Gradient clip norm; 0: none.")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="Seeds torch and the data order.")
    lora: bool = Field(False, description="Train a LoRA adapter on every linear layer (PEFT).")
    lora_r: int = Field(16, ge=1, le=4096, description="LoRA rank.")
    lora_alpha: float = Field(32.0, gt=0, le=1e6, description="LoRA scale numerator (/ lora_r).")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    checkpoint_every: int = Field(500, ge=0, le=10**8, description=(
        "Save out_dir/checkpoint-STEP every this many steps and at the end; 0: never."))
    keep_checkpoints: int = Field(2, ge=0, le=10**5, description="Newest kept; 0 keeps all.")
    log_every: int = Field(1, ge=1, le=10**8, description="Steps per loss.jsonl record.")
    trackers: list[TrackerName] = Field(["jsonl"], max_length=3, description=(
        "Where the loss records go (agentmath.tracking): jsonl (out_dir/loss.jsonl, always "
        "written), tensorboard (out_dir/tensorboard), wandb (Weights & Biases, offline by "
        "default: the wandb extra)."))
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    device: str = Field("auto", min_length=1, description=(
        "Where the model trains: 'auto' (cuda when there is one), 'cpu', 'cuda' or 'cuda:N'."))
    bf16: bool = Field(False, description=(
        "bfloat16 autocast (weights, optimizer stay fp32); with sharding 'fsdp' the layers' "
        "gathered weights are bfloat16 too, the shards and AdamW state fp32."))
    group_by_length: int = Field(0, ge=0, le=4096, description=(
        "Batches of similar length: each epoch's shuffled order is cut into windows of this "
        "many batches, sorted by length inside a window, and the window's batches shuffled "
        "(less padding: faster steps on mixed lengths); 0: off."))
    # -- sharded training (agentmath/train/sharding.py) --
    sharding: Sharding = Field("none", description=SHARDING_DESCRIPTION + (
        " batch_size * grad_accum must be a multiple of the processes."))
    fsdp: FSDPConfig = Field(default_factory=FSDPConfig, description=(
        "FSDP settings, read with sharding 'fsdp': wrap class, resharding, CPU offload, "
        "activation checkpointing, gradient reduce dtype."))
