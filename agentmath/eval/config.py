"""Configuration of one evaluation run (``agentmath eval``): pydantic, loadable from TOML/YAML
(:func:`agentmath.config.load_config`), importing no torch. It sits beside the runner that reads
it (:mod:`agentmath.eval.runner`), above the backend registry, so that its ``backend`` is
checked against the registered names as synth's endpoints are."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field, model_validator

from agentmath.backends.registry import BackendName
from agentmath.config import (
    BACKEND_HELP,
    DEVICE_HELP,
    DEVICE_PATTERN,
    LoopConfig,
    RayConfig,
    SandboxConfig,
    StrictModel,
    TrackerName,
    VLLMEngineConfig,
    WandbConfig,
    default_backend,
)
from agentmath.grading.options import GradingOptions

__all__ = ["EvalConfig"]


class EvalConfig(StrictModel):
    """One evaluation run (``agentmath eval``). Fields marked *identity* must match on resume."""

    dataset: str = Field(..., min_length=1, description=(
        "Built-in name (math500, aime24, ...), a JSONL/JSON/Parquet file or a hub id (identity)."))
    samples: int = Field(1, ge=1, le=4096, description="Samples per problem (identity).")
    limit: int | None = Field(None, ge=1, description="Only the first N problems (identity).")
    backend: BackendName = Field("hf", description=BACKEND_HELP[:-1] + " (identity).")
    device: str = Field("auto", pattern=DEVICE_PATTERN, description=(
        DEVICE_HELP[:-1] + " (not identity)."))
    model: str = Field(..., min_length=1, description="Served name or model path (identity).")
    base_url: str | list[str] | None = Field(None, description=(
        "OpenAI-compatible server URL, or a list of them: samples are then spread over the "
        "servers by the prefix-aware router (agentmath/backends/router.py)."))
    format: str = Field("code_interpreter", description="Tool format name (identity).")
    temperature: float = Field(0.7, ge=0, le=5, description="Sampling temperature (identity).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling (identity).")
    top_k: int = Field(-1, ge=-1, description="Top-k sampling, -1 off (identity).")
    seed: int = Field(0, ge=0, description="Base seed; each sample's seed derives from it.")
    concurrency: int = Field(32, ge=1, le=100_000, description=(
        "Samples in flight at once (not identity: a resumed run may change it)."))
    data_dir: str | None = Field(None, description="Where to look for built-in datasets.")
    problem_field: str = Field("problem", description="Problem field of a custom dataset.")
    answer_field: str = Field("answer", description="Answer field of a custom dataset.")
    id_field: str = Field("id", description="Id field of a custom dataset.")
    grade_timeout_s: float = Field(10.0, gt=0, le=600, description=(
        "Per-sample grading limit, answer extraction and verification together (not identity)."))
    http_retries: int = Field(4, ge=0, le=100, description=(
        "Retries of a failed request to the model server (connection errors, 408, 429, 5xx, "
        "malformed replies; not a timeout: see http_timeout_s), with exponential backoff "
        "from 0.5 s up to 30 s and the server's Retry-After honoured; a server that stops "
        "answering is waited for instead (max_outage_s) (not identity)."))
    http_timeout_s: float = Field(120.0, gt=0, le=3600, description=(
        "Time limit of one request to the model server, in seconds. A request with no answer "
        "by then is not sent again to that server: the server looks hung, so it is waited "
        "for as an outage (max_outage_s), or the sample fails with an error naming the server "
        "and this limit (not identity)."))
    max_outage_s: float = Field(300.0, ge=0, le=86_400, description=(
        "How long samples wait, in seconds, when the model server (every server, with "
        "several) stops answering (connections refused or reset, 502/503/504, or no answer "
        "within http_timeout_s: hung): requests are "
        "held while /health is probed with backoff and go on when it answers, so a restart "
        "costs no sample; past this bound they fail as errors. 0: no waiting (not identity)."))
    retry_errors: bool = Field(False, description=(
        "Run again the samples recorded as errors (the model server failed); each new record "
        "replaces the old one, so every (problem, sample) still counts once (not identity)."))
    loop: LoopConfig = Field(default_factory=LoopConfig, description="Episode budgets.")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="Sandbox limits.")
    sandbox_url: list[str] | None = Field(None, description=(
        "Base URLs of sandbox services (agentmath sandbox serve) to run the code on instead of "
        "a local sandbox pool; sessions are spread over them (not identity)."))
    sandbox_token_file: Path | None = Field(None, description=(
        "File holding the token of the sandbox services (default: $AGENTMATH_SANDBOX_TOKEN) "
        "(not identity)."))
    ray: RayConfig | None = Field(None, description=(
        "Run the episodes on a Ray cluster instead of in this process; each sample's seed is "
        "the same either way, so are its results (not identity)."))
    trackers: list[TrackerName] = Field(["jsonl"], max_length=3, description=(
        "Where the run's progress and final metrics go (agentmath.tracking): jsonl "
        "(OUT/eval_log.jsonl, always written), tensorboard (OUT/tensorboard), wandb (Weights "
        "& Biases, offline by default: the wandb extra) (not identity)."))
    wandb: WandbConfig = Field(default_factory=WandbConfig, description=(
        "The wandb tracker's settings (not identity)."))
    # -- grading: how answers are judged (agentmath.grading.options) --
    grading: GradingOptions = Field(default_factory=GradingOptions, description=(
        "Which of agentmath's leniencies beyond math-verify grading applies (number words, "
        "plain-text math, word case, choice letters) and where answers are looked for; a "
        "paper's recipe turns them off to grade as math-verify alone would (identity)."))
    # --- real-model guards: the offline engine's settings, and the truncation warning ---
    vllm: VLLMEngineConfig = Field(default_factory=VLLMEngineConfig, description=(
        "The offline vLLM engine's settings (backend vllm): tensor parallelism, "
        "max_model_len, dtype, memory (not identity: the engine's layout, like device)."))
    truncation_warn_rate: float = Field(0.05, ge=0, le=1, description=(
        "Warn (stderr, and 'warnings' in --json) when more than this fraction of the run's "
        "samples stopped at one budget (loop.max_model_tokens, loop.max_total_tokens, "
        "loop.max_tool_calls, loop.time_limit_s, ...) (not identity)."))

    #: Fields that may differ between a run and its resumption.
    RESUMABLE_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"concurrency", "base_url", "device", "data_dir", "grade_timeout_s", "http_retries",
         "http_timeout_s", "max_outage_s", "retry_errors", "sandbox_url",
         "sandbox_token_file", "ray", "trackers", "wandb", "vllm", "truncation_warn_rate"})

    _default_backend = model_validator(mode="before")(default_backend)
