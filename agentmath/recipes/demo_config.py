"""The demo's settings (:class:`DemoConfig`) and the prompts and tool format it trains and
evaluates with; no torch (importing config never imports torch)."""

from __future__ import annotations

from pydantic import Field, field_validator

from agentmath.config import StrictModel

TOOL_SYSTEM = "Solve the problem. Run Python in <code> blocks; results come back in <interpreter>."
TEXT_SYSTEM = "Solve the problem step by step."
FORMAT = "code_interpreter"


class DemoConfig(StrictModel):
    """Sizes and budgets of the demo (defaults finish in minutes on 2 CPU cores)."""

    seed: int = Field(0, ge=0, description="Seeds data, models, training and sampling.")
    train_problems: int = Field(1500, ge=10, le=1_000_000, description="Training problems.")
    test_problems: int = Field(300, ge=5, le=100_000, description=(
        "Held-out test problems, read only by the final evaluation (300: a 10-point "
        "difference is well outside the noise)."))
    validation_problems: int = Field(100, ge=5, le=100_000, description=(
        "Validation problems, drawn from the same seeded generator and disjoint from the "
        "training and test problems: every choice the demo makes (the start's headroom, "
        "growing a start again, the tool model saved for `solve`) is measured on them."))
    model_size: str = Field("nano", description=(
        "Tiny model size: nano (0.14 M parameters), micro, tiny, small or base."))
    max_digits: int = Field(3, ge=3, le=6, description=(
        "Largest operand size in digits (3-digit numbers and up defeat mental arithmetic)."))
    steps: int = Field(1400, ge=1, le=10**7, description=(
        "SFT steps for each model (the same for both), well past the point at which the nano "
        "model learns to copy numbers into code (docs/demo.md)."))
    copy_steps: int = Field(300, ge=0, le=100_000, description=(
        "Steps of copy warm-up before each SFT (random token spans shown twice): the fresh "
        "model learns to copy, as a pretrained one can, before it learns the task "
        "(docs/demo.md). 0 turns it off."))
    text_share: float = Field(0.7, ge=0, le=1, description=(
        "Share of the tool model's SFT trajectories that do the arithmetic in text instead of "
        "code (seeded per problem): the decision GRPO learns to make."))
    batch_size: int = Field(16, ge=1, le=4096, description="SFT batch size.")
    learning_rate: float = Field(4e-3, gt=0, le=1, description="SFT peak learning rate.")
    max_length: int = Field(512, ge=64, le=8192, description="Tokens per training example.")
    eval_max_tokens: int = Field(320, ge=16, le=8192, description="Model tokens per episode.")
    vocab_size: int = Field(1024, ge=300, le=65536, description="Tokenizer vocabulary size.")
    rl_steps: int = Field(16, ge=0, le=10**6, description="GRPO steps (0: no RL stage).")
    rl_group_size: int = Field(8, ge=2, le=256, description="GRPO samples per prompt.")
    rl_prompts: int = Field(8, ge=1, le=4096, description="GRPO prompts per step.")
    rl_learning_rate: float = Field(1e-4, gt=0, le=1, description="GRPO learning rate.")
    rl_temperature: float = Field(1.0, gt=0, le=5, description="GRPO sampling temperature.")
    rl_first_tool_calls: int = Field(2, ge=1, le=1000, description=(
        "Tool-call budget of GRPO's first stage (the second has 6): a 3-step solution in code "
        "is truncated there, so the truncation rate passes the threshold and the budget grows."))
    rl_stage_threshold: float = Field(0.05, gt=0, le=1, description=(
        "Truncation rate (over one step's samples) that moves GRPO to its next stage."))
    start_attempts: int = Field(3, ge=1, le=8, description=(
        "Starts the tool model may be grown from, at most: when a start's pass@k is below "
        "min_start_pass_at_k (it never learned to copy the problem's numbers into code), the "
        "tool model is grown again from other seeds, the remaining attempts side by side, and "
        "GRPO starts from the first that passes; 1 keeps the first start."))
    min_start_pass_at_k: float = Field(0.2, ge=0, le=1, description=(
        "The headroom pass@k a start needs for GRPO to start from it (a start below it has "
        "little for the accuracy reward to find; the default's starts reach 0.8-0.95)."))
    headroom_k: int = Field(8, ge=1, le=256, description=(
        "k of the start's headroom pass@k at the RL temperature on the validation problems "
        "(samples each)."))
    sampled_samples: int = Field(8, ge=1, le=256, description=(
        "Samples per problem of every model's sampled accuracy (mean accuracy at the RL "
        "temperature), beside its greedy accuracy."))
    sampled_problems: int = Field(100, ge=1, le=100_000, description=(
        "Test problems of that sampled accuracy: the first N of the test split (all of them "
        "when there are fewer), the same for every model."))
    device: str = Field("cpu", pattern=r"^(cpu|auto|cuda(:[0-9]+)?)$", description=(
        "Where SFT, GRPO and evaluation run: 'cpu' (where the README's figures come from, "
        "one core per stage), 'cuda', 'cuda:N', or 'auto' (cuda when there is one)."))
    bf16: bool = Field(False, description=(
        "bfloat16 autocast in SFT and GRPO updates (weights and optimizer stay fp32; decoding "
        "stays fp32); for a GPU, or a CPU with bf16 instructions (AVX512-BF16, AMX). It can "
        "weaken the demo's start (docs/gpu.md): on a GPU, fp32 reproduces the CPU's figures."))
    sandbox_preload: tuple[str, ...] | None = Field(None, description=(
        "Modules the sandbox imports before its first cell in evaluation and GRPO (None: the "
        "sandbox's default set, numpy, sympy and scipy among them). The problems need only "
        "arithmetic: ('math',) starts each evaluation's and GRPO run's sandbox without "
        "importing numpy, sympy and scipy first (the tests' toy demos do), but a cell that "
        "then imports numpy crashes its session (its threads are not allowed after the "
        "sandbox's limits apply), so the default keeps the full set."))

    @field_validator("model_size")
    @classmethod
    def _known_size(cls, size: str) -> str:
        from agentmath.models.tiny import known_size

        return known_size(size)

    def sampled_on(self) -> int:
        """How many test problems the sampled accuracy is measured on."""
        return min(self.sampled_problems, self.test_problems)
