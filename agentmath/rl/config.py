"""Configuration of an agentic GRPO run (``agentmath rl --config FILE``).

Plain pydantic with bounds and a description per field; loading it never imports torch. The
sections mirror the stages of a step: data -> rollout (loop budgets, stages, temperature) ->
rewards -> loss -> optimizer -> weight sync -> logging and checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from agentmath.backends.routing import RouterConfig
from agentmath.config import LoopConfig, RayConfig, RolloutConfig, SandboxConfig, StrictModel
from agentmath.rl.rewards import RewardSpec
from agentmath.tracking import TrackerName, WandbConfig
from agentmath.train.sharding import SHARDING_DESCRIPTION, FSDPConfig, Sharding


class RLDataConfig(StrictModel):
    """Where the training prompts come from (the same loader as ``agentmath eval``)."""

    dataset: str = Field(..., min_length=1, description=(
        "Built-in name, or a JSONL/JSON/Parquet file with a problem and a gold answer per row."))
    data_dir: str | None = Field(None, description="Where to look for built-in datasets.")
    problem_field: str = Field("problem", description="Problem field of a custom dataset.")
    answer_field: str = Field("answer", description="Answer field of a custom dataset.")
    id_field: str = Field("id", description="Id field of a custom dataset.")
    limit: int | None = Field(None, ge=1, description="Only the first N problems.")
    shuffle: bool = Field(True, description="A new seeded order every epoch over the data.")


class LossConfig(StrictModel):
    """The policy-gradient objective (agentmath/rl/losses.py)."""

    std_normalize: bool = Field(True, description=(
        "Divide advantages by the group's std (GRPO); False is Dr. GRPO."))
    clip_low: float = Field(0.2, ge=0, le=1, description="Ratio clip below: 1 - clip_low.")
    clip_high: float = Field(0.28, ge=0, le=10, description=(
        "Ratio clip above: 1 + clip_high (DAPO clip-higher; = clip_low for symmetric PPO)."))
    aggregation: Literal["token", "sequence"] = Field("token", description=(
        "token: mean over all loss tokens of a step (DAPO); sequence: mean of sequence means."))
    is_correction: Literal["none", "token_tis", "sequence_tis", "token_mask", "sequence_mask",
                           "geo_mask"] = Field("token_tis", description=(
        "Correction for the sampler's and the trainer's log-probabilities differing (another "
        "engine's kernels, a stale policy): token_tis / sequence_tis weigh each token by the "
        "token's / the sequence's ratio capped at tis_cap; token_mask / sequence_mask keep the "
        "ratio inside [is_band_low, is_band_high] and drop the token / sequence outside it "
        "(masked IS, IcePop); geo_mask drops a sequence whose geometric-mean ratio leaves the "
        "band (set a narrow band, e.g. 0.99-1.01); none: no correction. The mismatch is "
        "logged whatever this is (mismatch_kl, mismatch_max, mismatch_masked)."))
    tis_cap: float | None = Field(2.0, gt=0, le=1000, description=(
        "Cap of the token_tis and sequence_tis weights; None turns those corrections off."))
    is_band_low: float = Field(0.5, gt=0, le=1, description=(
        "Lower end of the ratio band of token_mask, sequence_mask and geo_mask."))
    is_band_high: float = Field(2.0, ge=1, le=1000, description=(
        "Upper end of the ratio band of token_mask, sequence_mask and geo_mask."))
    kl_coef: float = Field(0.0, ge=0, le=100, description=(
        "k3 KL penalty to the starting model (0: none, and no reference model is kept)."))
    mask_tool_tokens: bool = Field(True, description=(
        "Tool output carries no loss. False trains on it as if the model wrote it (DeepMath's "
        "choice; the demo's ablation)."))
    mini_batches: int = Field(1, ge=1, le=1024, description=(
        "Optimizer steps per RL step, each on a slice of its samples (>1 is off-policy within "
        "a step; the ratio and clip then matter)."))
    micro_batch_size: int = Field(16, ge=1, le=4096, description=(
        "Sequences per forward/backward pass (gradient accumulation inside a mini-batch)."))
    share_prompt: int = Field(64, ge=0, le=10**6, description=(
        "Run the prompt a micro-batch's rows share once, its KV cache repeated for each row, "
        "when it is at least this many tokens (0: never): a GRPO group's samples share their "
        "prompt, so micro-batches are cut per prompt. The same log-probabilities and gradients "
        "to float rounding (Prefix Grouper, arXiv 2506.05433), less compute where prompts are "
        "long (a system prompt with a tools schema); below ~64-96 tokens cutting per prompt "
        "costs about what it saves (benchmarks/shared_prompt.py)."))


class OptimConfig(StrictModel):
    """AdamW and the learning-rate schedule (agentmath/train/plumbing.py)."""

    learning_rate: float = Field(1e-6, gt=0, le=1, description="Peak learning rate.")
    warmup_steps: int = Field(0, ge=0, le=10**7, description="Optimizer steps of linear warmup.")
    decay: Literal["constant", "linear", "cosine"] = Field("constant", description=(
        "Decay after warmup, to min_lr_factor at the last step."))
    min_lr_factor: float = Field(0.0, ge=0, le=1, description="Final LR / peak LR.")
    weight_decay: float = Field(0.0, ge=0, le=10, description="AdamW decay (matrices only).")
    max_grad_norm: float = Field(1.0, ge=0, le=1e6, description="Gradient clip norm; 0: none.")
    lora: bool = Field(False, description="Train a LoRA adapter on every linear layer (PEFT).")
    lora_r: int = Field(32, ge=1, le=4096, description="LoRA rank.")
    lora_alpha: float = Field(16.0, gt=0, le=1e6, description="LoRA scale numerator.")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    bf16: bool = Field(False, description=(
        "bfloat16 mixed precision (accelerate); with sharding 'fsdp' the layers' gathered "
        "weights are bfloat16 too, the shards and AdamW state fp32."))
    # -- sharded training (agentmath/train/sharding.py) --
    sharding: Sharding = Field("none", description=SHARDING_DESCRIPTION + (
        " Rank 0 runs the rollouts and shares each step's groups; with generator.backend "
        "'hf' it decodes with a full copy of the weights gathered after every update. Needs "
        "loss.share_prompt = 0."))
    fsdp: FSDPConfig = Field(default_factory=FSDPConfig, description=(
        "FSDP settings, read with sharding 'fsdp': wrap class, resharding, CPU offload, "
        "activation checkpointing, gradient reduce dtype."))


class TemperatureSchedule(StrictModel):
    """Sampling temperature over the run (DeepMath: 1.2 -> 0.7, linear)."""

    start: float = Field(1.0, gt=0, le=5, description="Temperature at step 1.")
    end: float | None = Field(None, gt=0, le=5, description="At the last step; None: constant.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling.")


class StageConfig(StrictModel):
    """Budgets of one training stage (AgentMath: 48k -> 72k -> 96k context)."""

    max_total_tokens: int = Field(..., ge=16, le=2**22, description="Context budget.")
    max_model_tokens: int = Field(..., ge=1, le=2**22, description="Model tokens per episode.")
    max_tool_calls: int = Field(..., ge=0, le=10_000, description="Tool calls per episode.")
    segment_tokens: int | None = Field(None, ge=1, le=2**22, description=(
        "Partial rollout segment in this stage (None: the rollout section's)."))


class StagesConfig(StrictModel):
    """Multi-stage budgets that grow when the truncation rate passes a threshold."""

    stages: list[StageConfig] = Field([], description=(
        "In order; empty: one stage with the loop section's budgets."))
    truncation_threshold: float = Field(0.1, gt=0, le=1, description=(
        "Move to the next stage when this fraction of the window's samples was truncated."))
    window: int = Field(256, ge=1, le=10**7, description="Samples in the truncation window.")


class GeneratorConfig(StrictModel):
    """Who generates the rollouts and how new weights reach them."""

    backend: Literal["hf", "openai"] = Field("hf", description=(
        "hf: the trainer's own model in process (CPU, tests, small runs); openai: vLLM "
        "servers at base_urls, weights pushed from disk after every step."))
    base_urls: list[str] = Field([], description="vLLM server URLs (backend openai).")
    served_name: str | None = Field(None, description="The servers' model name (openai).")
    sync_dir: str | None = Field(None, description=(
        "Where pushed weights go, readable by the servers (default: OUT/weights)."))
    max_batch: int = Field(64, ge=1, le=4096, description="hf: sequences per generate batch.")
    continuous: bool = Field(True, description=(
        "hf: continuous batching (a request joins the running decode batch at the next step "
        "and leaves it when it ends, whatever turn it is in); false: gathered generate calls "
        "that run to their longest row."))
    prefix_cache_rows: int = Field(64, ge=0, le=65_536, description=(
        "hf, continuous: finished generations whose KV cache is kept for the next turn of "
        "their episode, which then prefills only the tool output and the new turn's header "
        "(0: off; emptied after every weight update)."))
    http_timeout_s: float = Field(600.0, gt=0, le=86_400, description=(
        "openai: per request; a request with no answer by then is not sent again to that "
        "server (it looks hung): another server takes it, or it waits as in an outage "
        "(max_outage_s)."))
    max_outage_s: float = Field(300.0, ge=0, le=86_400, description=(
        "openai: how long rollouts wait, in seconds, when every server stops answering "
        "(a restart, or hung: no answer within http_timeout_s): requests are held while the "
        "servers are probed with backoff and go on when one answers, episodes keeping their "
        "sandbox sessions; past this bound they fail as errors. A weight push waits as long "
        "for a server that does not answer, then pushes (past it the run fails as before). "
        "0: no waiting."))
    router: RouterConfig = Field(default_factory=RouterConfig, description=(
        "openai with several base_urls: the router over them (policy, spill, and how often a "
        "server out of rotation is probed: generator.router.probe_interval_s); a server that "
        "comes back gets the current weights before its next request."))


class FilterConfig(StrictModel):
    """Which rollouts a step trains on (agentmath/rl/filters.py); the defaults filter nothing.

    Applied after scoring, before the update, in this order: pass rate (on every sample of the
    group), void turns, resample-on-correct; then dynamic sampling as before. Each has its
    counter in metrics.jsonl (docs/rl.md, "Filters")."""

    exclude_infra_failures: bool = Field(True, description=(
        "Leave out of the group's advantage statistics and of the loss every sample whose "
        "episode failed for the infrastructure's reasons (the sandbox killed or unreachable, "
        "a server error after retries, a grader crash or timeout: Trajectory.infra_failure), "
        "and drop a group left with fewer than two samples; infra_excluded counts them. "
        "False scores them as the model's (reward 0 for a wrong answer), the poisoned "
        "baselines the option exists to avoid. A model's own code error stays the model's."))
    oversample: int = Field(1, ge=1, le=16, description=(
        "Episodes generated per prompt = group_size * oversample; more than 1 needs "
        "resample_on_correct, which keeps group_size of them (rStar2-Agent: 2)."))
    resample_on_correct: bool = Field(False, description=(
        "GRPO-RoC (rStar2-Agent): keep group_size of the oversampled episodes, failed ones "
        "uniformly, correct ones preferring few tool errors and a clean format; roc_dropped."))
    drop_void_turns: bool = Field(False, description=(
        "SimpleTIR: leave out every episode with a void turn (a model turn with neither a "
        "code block that ran nor a final answer); void_dropped, void_groups_dropped."))
    pass_rate_filter: bool = Field(False, description=(
        "Train only on groups whose pass rate (correct / generated) lies strictly between "
        "pass_rate_low and pass_rate_high (DAPO; SimpleTIR's acc_filter); pass_rate_dropped."))
    pass_rate_low: float = Field(0.0, ge=0, le=1, description=(
        "Lower bound of the pass rate, exclusive (0: drop groups that are all wrong)."))
    pass_rate_high: float = Field(1.0, ge=0, le=1, description=(
        "Upper bound of the pass rate, exclusive (1: drop groups that are all right)."))


class RLConfig(StrictModel):
    """One agentic GRPO run."""

    model: str = Field(..., min_length=1, description="A local model directory (HF format).")
    format: str = Field("code_interpreter", description="Tool format of the episodes.")
    data: RLDataConfig
    steps: int = Field(100, ge=1, le=10**7, description="RL steps (optimizer updates / mini).")
    group_size: int = Field(8, ge=2, le=4096, description="G: samples per prompt.")
    prompts_per_step: int = Field(8, ge=1, le=100_000, description="Groups trained per step.")
    dynamic_sampling: bool = Field(True, description=(
        "Drop groups whose rewards are all equal (no signal) and back-fill with new prompts."))
    max_sampling_rounds: int = Field(3, ge=1, le=100, description=(
        "Rollout rounds per step at most when back-filling; then train on what there is."))
    generation_batch_factor: float = Field(1.0, ge=1.0, le=8.0, description=(
        "Dynamic sampling: each rollout round draws this many times the groups still "
        "missing, rounded up (DAPO's generation batch larger than its training batch, "
        "verl's data.gen_batch_size), so that groups without signal are replaced in the "
        "same round rather than in another that waits for its own longest episode; the "
        "first groups with signal (in draw order; in completion order with partial rollout) "
        "are trained on, the rest counted in groups_surplus. 1: draw only what is missing."))
    seed: int = Field(0, ge=0, le=2**63 - 1, description="Seeds data order, model, sampling.")
    device: str = Field("auto", min_length=1, description=(
        "Where the model trains: 'auto' (cuda when there is one), 'cpu', 'cuda' or 'cuda:N'."))
    rewards: list[RewardSpec] = Field(
        default_factory=lambda: [RewardSpec(name="accuracy", weight=1.0)], min_length=1,
        description="Weighted reward terms, each logged on its own.")
    filters: FilterConfig = Field(default_factory=FilterConfig, description=(
        "Sample and group filters after scoring: resample-on-correct, void turns, pass rate."))
    loss: LossConfig = Field(default_factory=LossConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    temperature: TemperatureSchedule = Field(default_factory=TemperatureSchedule)
    stages: StagesConfig = Field(default_factory=StagesConfig)
    loop: LoopConfig = Field(default_factory=LoopConfig, description="Episode budgets.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Scheduling.")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    sandbox_url: list[str] | None = Field(None, description=(
        "Base URLs of sandbox services (agentmath sandbox serve) to run rollout code on "
        "instead of a local sandbox pool; sessions are spread over them."))
    sandbox_token_file: str | None = Field(None, description=(
        "File holding the sandbox services' token (default: $AGENTMATH_SANDBOX_TOKEN)."))
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    ray: RayConfig | None = Field(None, description=(
        "Run the rollouts on a Ray cluster (the ray extra; None: in this process). Needs "
        "generator.backend 'openai' and rollout.mode 'async'; partial rollout (segment "
        "budgets) parks episodes on their workers between steps. Same seeds give the same "
        "samples as in process."))
    checkpoint_every: int = Field(10, ge=0, le=10**7, description=(
        "Save OUT/checkpoint-STEP every this many steps and at the end; 0: only at the end."))
    keep_checkpoints: int = Field(2, ge=0, le=10**5, description="Newest kept; 0 keeps all.")
    dump_rollouts: bool = Field(False, description=(
        "Write every trajectory of each step (trained or left out, and why; rewards, "
        "advantages, token ids and logprobs) to OUT/rollouts/step-NNNNNN.jsonl.gz, for "
        "inspection, the viewer and replay (agentmath/rl/dump.py)."))
    trackers: list[TrackerName] = Field(["jsonl", "tensorboard"], max_length=3, description=(
        "Where the step metrics go (agentmath.tracking): jsonl (OUT/metrics.jsonl, always "
        "written), tensorboard (OUT/tensorboard; skipped with a warning when the package is "
        "missing), wandb (Weights & Biases, offline by default: the wandb extra)."))
    tensorboard: bool = Field(True, description=(
        "The older switch: false takes tensorboard out of trackers."))
    wandb: WandbConfig = Field(default_factory=WandbConfig)

    def tracker_names(self) -> list[str]:
        """The trackers this run logs to: ``trackers`` with jsonl always first, without
        tensorboard when ``tensorboard`` is false."""
        names = dict.fromkeys(["jsonl", *self.trackers])
        return [t for t in names if t != "tensorboard" or self.tensorboard]

    def served_model_name(self) -> str:
        """The model name the generator's servers serve (the model directory's name by
        default)."""
        return self.generator.served_name or Path(self.model).name

    @model_validator(mode="after")
    def _consistent(self) -> RLConfig:
        if self.generator.backend == "openai" and not self.generator.base_urls:
            raise ValueError("generator.base_urls: backend 'openai' needs at least one URL")
        if self.ray is not None:
            self._check_ray()
        self._check_filters()
        if self.optim.sharding == "fsdp" and self.loss.share_prompt > 0:
            raise ValueError("loss.share_prompt: with optim.sharding 'fsdp' rows are trained "
                             "whole (a shared prompt runs each layer twice before one "
                             "backward, and FSDP frees a layer's gathered weights after its "
                             "first backward); set loss.share_prompt = 0")
        return self

    def _check_filters(self) -> None:
        """Filter settings that contradict each other, named by field."""
        f = self.filters
        if self.generation_batch_factor > 1 and not self.dynamic_sampling:
            raise ValueError("generation_batch_factor: drawing more groups than a step trains "
                             "on only pays with dynamic_sampling (which keeps the groups with "
                             "signal); set it, or leave the factor at 1")
        if f.resample_on_correct and f.oversample < 2:
            raise ValueError("filters.oversample: resample_on_correct keeps group_size of "
                             "group_size * oversample episodes; it needs oversample >= 2")
        if f.oversample > 1 and not f.resample_on_correct:
            raise ValueError("filters.oversample: only resample_on_correct brings the "
                             "oversampled groups back to group_size; set it, or oversample 1")
        if f.oversample * self.group_size > 4096:
            raise ValueError(f"filters.oversample: group_size * oversample = "
                             f"{f.oversample * self.group_size} episodes per prompt (at most "
                             f"4096)")
        if f.pass_rate_low >= f.pass_rate_high:
            raise ValueError(f"filters.pass_rate_low: {f.pass_rate_low} must be below "
                             f"pass_rate_high ({f.pass_rate_high}); the kept interval is open")

    def _check_ray(self) -> None:
        """What rollouts on Ray cannot do, named by field."""
        if self.generator.backend != "openai":
            raise ValueError("generator.backend: rollouts on Ray need 'openai' (model servers "
                             "the workers reach); 'hf' generates in the trainer's process")
        if self.rollout.mode != "async":
            raise ValueError("rollout.mode: rollouts on Ray are request-level ('async'); "
                             "the lockstep baseline ('sync') runs in one process")
        if self.rollout.max_in_flight_tokens is not None:
            raise ValueError("rollout.max_in_flight_tokens: the context-token admission bound "
                             "is not applied on Ray (only max_in_flight is); leave it unset")
        if self.rollout.stale == "wait":
            raise ValueError("rollout.stale: 'wait' runs on the local engine only; on Ray use "
                             "'regenerate' or 'drop'")
