"""Configuration models and their loader.

Every config is a pydantic model with bounds and a docstring per field, so that a bad value
fails at load time with the field's name. Configs load from TOML or YAML and take dotted CLI
overrides (``sandbox.timeout_s=5``). This module never imports torch.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentmath.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

DEFAULT_ALLOWED_MODULES: tuple[str, ...] = (
    "math", "cmath", "fractions", "decimal", "numbers", "itertools", "functools", "operator",
    "collections", "heapq", "bisect", "array", "statistics", "random", "re", "string",
    "textwrap", "typing", "dataclasses", "enum", "copy", "time", "datetime", "calendar",
    "json", "pprint", "abc", "contextlib", "warnings", "numpy", "sympy", "scipy", "mpmath",
    # seen in real model code: recursion and int-digit limits, hashing, plots, tables
    "sys", "hashlib", "struct", "io", "base64", "unicodedata", "zoneinfo", "matplotlib",
    "pandas",
)  # fmt: skip

DEFAULT_PRELOAD: tuple[str, ...] = (
    "math", "cmath", "fractions", "decimal", "itertools", "functools", "collections",
    "statistics", "random", "re", "numpy", "sympy", "mpmath", "scipy", "scipy.special",
    # pyplot builds its font cache on first import; in the zygote that happens once per pool,
    # while the cache directory is still writable (workers can write nothing)
    "matplotlib.pyplot",
)  # fmt: skip


DisableableProtection = Literal["network_namespace", "minimal_root", "landlock", "seccomp",
                                "setuid", "ipc_namespace", "idle_freeze"]


class StrictModel(BaseModel):
    """Base for configs: unknown fields are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SandboxConfig(StrictModel):
    """Limits and pool sizes of the Python sandbox (see docs/sandbox.md)."""

    timeout_s: float = Field(10.0, gt=0, le=3600, description=(
        "Wall-clock limit of one snippet; over it the worker is killed and restarted clean."))
    memory_mb: int = Field(1024, ge=128, le=65536, description=(
        "Address-space limit (RLIMIT_AS) of each worker process, in MiB."))
    cpu_s: int = Field(120, ge=1, le=86400, description=(
        "CPU seconds a session may use in total (RLIMIT_CPU); a backstop to timeout_s."))
    max_output_chars: int = Field(8192, ge=64, le=10_000_000, description=(
        "stdout/stderr kept per snippet; longer output keeps its head and tail."))
    max_value_chars: int = Field(2048, ge=16, le=1_000_000, description=(
        "Characters kept of the repr of a snippet's final expression."))
    max_sessions: int = Field(64, ge=1, le=4096, description=(
        "Live sessions (worker processes) at once; more sessions wait their turn (FIFO)."))
    max_concurrency: int = Field(0, ge=0, le=4096, description=(
        "Snippets in flight at once; 0 means 4 x CPU cores: enough to hide round-trip latency "
        "for short snippets, few enough that CPU-bound ones are not starved into timeouts."))
    spare_workers: int = Field(2, ge=0, le=64, description=(
        "Workers forked ahead of need so that a new session starts without waiting for fork."))
    start_timeout_s: float = Field(60.0, gt=0, le=3600, description=(
        "How long the zygote may take to start (it imports the preload modules) and a new "
        "worker to report ready; past it the start fails with a SandboxError. Raise it on "
        "a machine so loaded that importing numpy, sympy and scipy takes minutes."))
    allowed_modules: tuple[str, ...] = Field(DEFAULT_ALLOWED_MODULES, description=(
        "Top-level modules a snippet may import (usability layer; not the security boundary)."))
    preload: tuple[str, ...] = Field(DEFAULT_PRELOAD, description=(
        "Modules imported once in the zygote so that every session starts with them warm."))
    base_uid: int = Field(61000, ge=1000, le=2**31 - 4096, description=(
        "When the host is root, worker i runs as uid base_uid+i (one uid per live worker)."))
    require_isolation: bool = Field(False, description=(
        "Refuse to start unless every kernel protection is active (no silent fallback)."))
    disable_protections: tuple[DisableableProtection, ...] = Field((), description=(
        "Protections to switch off, to measure what each one costs (benchmarks/sandbox.py). "
        "Never for real use: a disabled protection is reported inactive in `protections` and "
        "fails require_isolation."))
    fault_kill_rate: float = Field(0.0, ge=0, le=1, description=(
        "For tests and benchmarks of infrastructure failures only: the fraction of sessions "
        "whose process is killed from outside (SIGKILL) while their first snippet runs, "
        "drawn per session with fault_seed. The snippet's result is a crash marked as the "
        "infrastructure's (ExecResult.infra). 0 in real use."))
    fault_seed: int = Field(0, ge=0, description="Seed of fault_kill_rate's draws.")

    #: Fields that change how many snippets run at once or how the pool starts, never what a
    #: snippet returns: a resumed evaluation may change them (not its identity).
    RESUMABLE_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"max_sessions", "max_concurrency", "spare_workers", "start_timeout_s", "base_uid",
         "require_isolation"})


TrackerName = Literal["jsonl", "tensorboard", "wandb"]
TRACKERS: tuple[str, ...] = ("jsonl", "tensorboard", "wandb")


class WandbConfig(StrictModel):
    """Settings of the ``wandb`` tracker (agentmath/tracking.py; used only when a run's
    ``trackers`` names it)."""

    project: str = Field("agentmath", min_length=1, max_length=128,
                         description="The W&B project the run is logged to.")
    mode: Literal["offline", "online"] = Field("offline", description=(
        "offline: written under OUT/wandb with no network (upload later with `wandb sync`); "
        "online: streamed to the W&B server (needs `wandb login`)."))


def _parse_value(raw: str) -> Any:
    """Parse an override's value as JSON when it is JSON (numbers, bools, lists), else a string."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _key_path(item: str, key: str) -> list[str]:
    """``a.b[1].c`` (or ``a.b.1.c``, as pydantic's errors write it) as ``["a", "b", "1", "c"]``."""
    parts: list[str] = []
    for piece in key.strip().split("."):
        name, _, rest = piece.partition("[")
        indices = rest.rstrip("]").split("][") if rest else []
        if (not name and not indices) or not all(i.isdigit() for i in indices) or (
                rest and not rest.endswith("]")):
            raise ConfigError(f"override {item!r}: {piece!r} is not a field name or "
                              f"name[index]")
        parts += ([name] if name else []) + indices
    return parts


def _slot(item: str, node: dict[str, Any] | list[Any], part: str) -> str | int:
    """The key of ``part`` in ``node``: a dict key, or an index into a list (which must
    exist)."""
    if isinstance(node, dict):
        return part
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"override {item!r}: index {part} is out of range (the list "
                          f"has {len(node)} item{'s' if len(node) != 1 else ''})")
    return int(part)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides to a nested dict (in a copy) and return it; list items
    are addressed by index (``rewards[0].weight=2``, or ``rewards.0.weight=2``)."""
    out = json.loads(json.dumps(data))
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not of the form key=value")
        *path, leaf = parts = _key_path(item, key)
        node: dict[str, Any] | list[Any] = out
        for part, following in zip(path, parts[1:], strict=True):
            if isinstance(node, dict) and part not in node:
                if following.isdigit():  # an index into a list the file does not hold
                    raise ConfigError(f"override {item!r}: {part!r} is not set in the "
                                      f"config, so its items cannot be addressed; set the "
                                      f"whole list instead ({part}=[...], JSON)")
                node[part] = {}
            child = node[_slot(item, node, part)]  # type: ignore[index]
            if not isinstance(child, dict | list):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
            node = child
        node[_slot(item, node, leaf)] = _parse_value(raw)  # type: ignore[index]
    return out


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML (.toml) or YAML (.yaml/.yml) file into a dict, naming the file on error."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from exc
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(f"{path}: unknown config format (use .toml, .yaml or .yml)")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a table/mapping")
    return data


def field_problems(exc: ValidationError, prefix: str = "") -> str:
    """Every problem of a pydantic error as ``field.path: message``, joined by ``; `` (the path
    under ``prefix``, e.g. ``agentmath.loop.max_tool_calls``; ``<root>`` for the whole
    object): how every config error in agentmath names its fields."""
    names = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"])
        name = f"{prefix}.{path}" if prefix and path else (prefix or path or "<root>")
        names.append(f"{name}: {err['msg']}")
    return "; ".join(names)


def load_config(
    model: type[M],
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    section: str | None = None,
) -> M:
    """Build ``model`` from an optional file (or one ``section`` of it) and dotted overrides.

    Validation errors name the source and each offending field.
    """
    data: dict[str, Any] = read_config_file(path) if path is not None else {}
    if section is not None:
        data = data.get(section, {})
    data = apply_overrides(data, overrides or [])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        where = str(path) if path is not None else "overrides"
        raise ConfigError(f"{where}: invalid {model.__name__}: {field_problems(exc)}") from exc


class LoopConfig(StrictModel):
    """Budgets and behaviour of one agent-loop episode (see agentmath/agent/episode.py)."""

    max_tool_calls: int = Field(8, ge=0, le=1000, description=(
        "Code blocks executed per episode; a call beyond it ends the episode (tool_budget)."))
    max_total_tokens: int = Field(4096, ge=16, le=1_048_576, description=(
        "Context budget: prompt + model + tool tokens."))
    max_model_tokens: int = Field(2048, ge=1, le=1_048_576, description=(
        "Tokens the model may generate in total over all its turns."))
    max_tokens_per_turn: int | None = Field(None, ge=1, le=1_048_576, description=(
        "Tokens per generate call (None: whatever the other budgets leave)."))
    max_output_chars: int = Field(2000, ge=32, le=1_000_000, description=(
        "Characters of rendered tool output appended per call (head and tail kept)."))
    tool_timeout_s: float = Field(10.0, gt=0, le=3600, description="Time limit per snippet.")
    time_limit_s: float = Field(600.0, gt=0, le=86_400, description=(
        "Wall-clock limit of the whole episode (time_budget)."))
    stop_on_answer: bool = Field(True, description=(
        "End the episode as soon as a model turn contains a final answer (\\boxed{...})."))
    system_prompt: str | None = Field(None, description=(
        "System prompt (default: the tool format's own instructions)."))
    history_rewrite: Literal["per_turn", "refuse"] = Field("per_turn", description=(
        "Native chat tool calling only: what training does with an episode whose chat "
        "template rewrote its history (a turn's re-rendered prompt did not extend the ids of "
        "the turn before, as when Qwen3's template drops earlier reasoning). per_turn: one "
        "training sequence per turn, its prompt as the server rendered it (masked) and the "
        "ids it sampled, all with the episode's advantage; refuse: its reward still counts "
        "in its group, its tokens carry no loss. The trajectory's history_rewrite says "
        "which."))


class VLLMEngineConfig(StrictModel):
    """vLLM's offline engine (``--backend vllm``: the model runs in this process, no server):
    the settings of vLLM's ``LLM(...)`` / ``AsyncEngineArgs`` a run may need. None: vLLM's own
    default. A server backend ignores them (set them on ``vllm serve``)."""

    tensor_parallel_size: int = Field(1, ge=1, le=1024, description=(
        "vllm backend: GPUs one copy of the model is split over (tensor parallelism)."))
    pipeline_parallel_size: int = Field(1, ge=1, le=1024, description=(
        "vllm backend: pipeline stages (GPUs in a row); 1: none."))
    max_model_len: int | None = Field(None, ge=16, le=10_485_760, description=(
        "vllm backend: context length the engine allocates for (prompt + generation); "
        "default: the model's own. Keep it >= loop.max_total_tokens."))
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field("auto", description=(
        "vllm backend: weight and activation dtype (auto: the model's, float16 for float32 "
        "checkpoints)."))
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description=(
        "vllm backend: fraction of each GPU's memory the engine may take (weights + KV "
        "cache)."))
    max_num_seqs: int | None = Field(None, ge=1, le=100_000, description=(
        "vllm backend: sequences in one running batch (default: vLLM's)."))
    max_num_batched_tokens: int | None = Field(None, ge=16, le=10_485_760, description=(
        "vllm backend: tokens in one engine step (default: vLLM's)."))
    enable_prefix_caching: bool | None = Field(None, description=(
        "vllm backend: reuse the KV cache of shared prefixes (default: vLLM's, on)."))
    enforce_eager: bool = Field(False, description=(
        "vllm backend: no CUDA graphs (slower, less memory, faster start)."))
    quantization: str | None = Field(None, min_length=1, description=(
        "vllm backend: quantization method of the weights (awq, gptq, fp8, ...; default: "
        "the checkpoint's)."))
    kv_cache_dtype: str = Field("auto", min_length=1, description=(
        "vllm backend: KV cache dtype (auto, fp8, ...)."))
    trust_remote_code: bool = Field(False, description=(
        "vllm backend: run the model repository's own code (needed by some architectures)."))

    def engine_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of vLLM's ``LLM(...)`` / ``AsyncEngineArgs`` these settings
        give (a setting left None is left out: vLLM's default applies)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


BACKEND_HELP = (
    "A backend registered in agentmath/backends/registry.py: openai (an OpenAI-compatible "
    "server at base_url), hf (a model directory, run in this process) or vllm; default: "
    "openai when base_url is given, else hf.")
DEVICE_HELP = ("Where a model in this process runs: 'auto' (cuda when there is one), 'cpu', "
               "'cuda' or 'cuda:N' (a served model runs where its server does).")
DEVICE_PATTERN = r"^(cpu|auto|cuda(:[0-9]+)?)$"


def default_backend(data: Any) -> Any:
    """A run's settings (a dict, before validation) with ``backend`` filled in when they name
    none: ``openai`` when they name a server (``base_url``), ``hf`` otherwise. The one rule
    for the default backend of every command that runs a model (eval, solve)."""
    if isinstance(data, dict) and data.get("backend") is None:
        return {**data, "backend": "openai" if data.get("base_url") else "hf"}
    return data


class SolveConfig(StrictModel):
    """One problem solved by ``agentmath solve``: the model, its tool format, sampling and the
    episode's budgets."""

    model: str | None = Field(None, min_length=1, description=(
        "Served model name (openai) or model directory (hf, vllm); default: the model "
        "`agentmath demo` trained."))
    backend: str = Field("hf", description=BACKEND_HELP)
    base_url: str | None = Field(None, description="OpenAI-compatible server URL.")
    format: str = Field("code_interpreter", description="Tool format name.")
    temperature: float = Field(0.0, ge=0, le=5, description=(
        "Sampling temperature (0: greedy, the model's most likely answer)."))
    device: str = Field("auto", pattern=DEVICE_PATTERN, description=DEVICE_HELP)
    loop: LoopConfig = Field(default_factory=LoopConfig, description="Episode budgets.")
    vllm: VLLMEngineConfig = Field(default_factory=VLLMEngineConfig, description=(
        "The offline vLLM engine's settings (backend vllm)."))

    _default_backend = model_validator(mode="before")(default_backend)


class RolloutConfig(StrictModel):
    """How the rollout engine schedules episodes (see agentmath/rollout/scheduler.py)."""

    mode: Literal["async", "sync"] = Field("async", description=(
        "async: every episode advances on its own (request-level scheduling, no barrier); "
        "sync: the baseline of TRL's tool loop and DeepMath, a barrier after every turn with "
        "all episodes of a batch in lockstep, and a barrier at the end of each batch."))
    max_in_flight: int = Field(256, ge=1, le=1_000_000, description=(
        "Episodes being advanced at once (admission bound; per-server request bounds are the "
        "router's). In sync mode, the episodes of one lockstep batch."))
    max_in_flight_tokens: int | None = Field(None, ge=1, le=10**12, description=(
        "Context tokens the episodes in flight may hold together (None: no bound). Set it to "
        "about the fleet's KV capacity so that prefix caches keep each episode's context "
        "across its tool calls instead of evicting each other (agentmath/rollout/admission.py)."))
    segment_tokens: int | None = Field(None, ge=1, le=1_048_576, description=(
        "Partial rollout: model tokens an episode may generate per iteration; an unfinished "
        "episode is parked and continued in the next iteration (None: no partial rollout)."))
    segment_tool_calls: int | None = Field(None, ge=1, le=1000, description=(
        "Partial rollout: tool calls an episode may make per iteration (None: unbounded)."))
    interrupt_turns: bool = Field(False, description=(
        "Partial rollout (segment_tokens): when an iteration's batch is complete, cut the model "
        "turns still running (their sampled tokens kept; the next iteration continues each "
        "turn from its ids under the new weights) instead of letting every running turn end "
        "first, so that no server idles through a long turn at the iteration's end. Needs a "
        "backend that can be interrupted (backends.base.Interruptible: the simulator's "
        "servers, a router over them, the OpenAI-compatible client); with another, turns "
        "park at their end as without it."))
    max_staleness: int = Field(2, ge=0, le=1000, description=(
        "Policy versions a parked sample may lag: resumed under version v, a sample whose "
        "oldest model segment is older than v - max_staleness is stale."))
    stale: Literal["regenerate", "drop", "wait"] = Field("regenerate", description=(
        "How the staleness bound is kept (partial rollout). regenerate: a stale sample runs "
        "again from scratch under the current policy; drop: its whole group is dropped; "
        "wait: no sample goes stale, an episode that would be stale after another park runs "
        "to its end in this iteration instead (the step waits for it) and the groups that "
        "would be stale next step are trained first. Each is counted (regenerated, "
        "stale_dropped, stale_waited) and logged. Local engine only: Ray refuses wait."))
    max_new_groups: int | None = Field(None, ge=1, le=1_000_000, description=(
        "Partial rollout (segment_tokens): new groups one iteration may draw. Without a bound "
        "an iteration whose episodes are all longer than one segment completes no group and "
        "draws from the prompt stream without end, its parked episodes holding sandbox "
        "sessions until none is left (a deadlock); at the bound it stops drawing, runs what it "
        "started and ends with the groups complete by then (fewer than the batch, maybe none; "
        "logged and counted as draws_stopped), the rest parked for the next iteration. None: "
        "twice the groups the iteration needs, or more while its new episodes stay within "
        "max_in_flight + max_parked_sessions."))
    max_parked_sessions: int = Field(512, ge=0, le=1_000_000, description=(
        "Parked episodes that keep their sandbox session open; beyond it the oldest release "
        "theirs (as they park) and replay their cells on resume. With a local sandbox pool it "
        "is lowered to SandboxConfig.max_sessions minus max_in_flight (at least half the "
        "sessions; logged), so that parked episodes never hold every session a running one "
        "waits for; on Ray each worker does the same with its own pool."))


class RayConfig(StrictModel):
    """Where and how episodes run on a Ray cluster (agentmath/distributed/; the ``ray`` extra).

    The driver (``agentmath eval``, or the trainer of ``agentmath rl``) keeps everything
    durable (the run directory, grading, checkpoints, resume); the cluster runs the episodes:
    one rollout worker actor per slot, each with its own sandbox (a local pool on its node, or
    the sandbox services) and its own client of the model servers.
    """

    address: str = Field("auto", min_length=1, description=(
        "'auto': join the cluster this machine belongs to (ray start --head / RAY_ADDRESS); "
        "'local': start a private Ray instance on the local machine; or a cluster address "
        "(host:port, ray://host:10001)."))
    workers: int | None = Field(None, ge=1, le=100_000, description=(
        "Rollout worker actors (None: one per node with CPUs), spread over the nodes."))
    worker_cpus: float = Field(1.0, gt=0, le=1024, description=(
        "CPUs each worker reserves on its node (its agent loop and sandbox workers)."))
    max_attempts: int = Field(3, ge=1, le=100, description=(
        "Placements of one episode before it is recorded as an error: an episode whose "
        "worker dies (its node lost) is run again from scratch on another worker."))
    start_timeout_s: float = Field(120.0, gt=0, le=3600, description=(
        "How long to wait for at least one worker to start before giving up."))
