"""Configuration of ``agentmath synth`` (pydantic; loadable from TOML/YAML; no torch import).

Fields that change what a record is (the converter, the teacher and its prompt, the output
format, the checks) are the run's *identity*: a resumed run must use the same ones, or records
made two ways would mix in one dataset. Concurrency and retry settings may change on resume.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from agentmath.backends.registry import BackendName
from agentmath.config import LoopConfig, SandboxConfig, StrictModel, VLLMEngineConfig
from agentmath.synth.checks import AstLimits

NATIVE = "native"  # the output "format" of chat records with native tool calls


class EndpointConfig(StrictModel):
    """A model the pipeline talks to (the teacher, or the consistency judge)."""

    backend: BackendName = Field("openai", description=(
        "openai: any OpenAI-compatible server (its chat endpoint); hf/vllm: a local model."))
    model: str = Field("", description="Served model name (openai) or model path (hf, vllm).")
    base_url: str | None = Field(None, description="Server URL (openai backend).")
    api_key_env: str | None = Field(None, description=(
        "Name of the environment variable holding the API key (the key never goes in a file)."))
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int = Field(4096, ge=16, le=262_144, description="Reply length limit.")
    http_timeout_s: float = Field(600.0, gt=0, le=7200, description=(
        "Time limit of one request (teacher replies are long)."))
    http_retries: int = Field(4, ge=0, le=100, description="Retries of a failed request.")
    max_concurrency: int = Field(64, ge=1, le=100_000, description=(
        "Requests in flight to this endpoint at once."))
    max_outage_s: float = Field(300.0, ge=0, le=86_400, description=(
        "openai: while the server is unreachable (restarting), hold requests and probe it, up "
        "to this long, instead of failing them (0: fail at once, after the retries)."))
    vllm: VLLMEngineConfig = Field(default_factory=VLLMEngineConfig, description=(
        "vllm: the offline engine's settings (tensor parallelism, max_model_len, dtype, "
        "memory); e.g. --set teacher.vllm.tensor_parallel_size=4."))


class ChecksConfig(StrictModel):
    """Which checks run; each is a named stage of the funnel (agentmath/synth/pipeline.py)."""

    ast: bool = Field(True, description="AST filter: trivial snippets, restated text, limits.")
    execute: bool = Field(True, description="Drop trajectories whose code fails unplanned.")
    outputs: bool = Field(True, description="Real outputs must agree with simulated ones.")
    answer: bool = Field(True, description="The final answer must still match the gold.")
    consistency: bool = Field(False, description=(
        "Ask the judge whether the reasoning follows from every real output (needs [judge])."))
    max_snippet_lines: int = Field(80, ge=1, le=10_000, description="AST filter: lines.")
    max_snippet_chars: int = Field(4000, ge=16, le=1_000_000, description="AST filter: size.")
    max_ast_depth: int = Field(40, ge=2, le=1000, description="AST filter: nesting depth.")

    def limits(self) -> AstLimits:
        """The AST filter's size limits."""
        return AstLimits(self.max_snippet_lines, self.max_snippet_chars, self.max_ast_depth)


class SelfCorrectionConfig(StrictModel):
    """Self-correction turns: a realistic mistake, its real error, then the fix."""

    rate: float = Field(0.0, ge=0, le=1, description=(
        "Fraction of trajectories given one self-correction turn (0: none)."))
    seed: int = Field(0, ge=0, description="Seeds which trajectories and which mistakes.")


class SynthConfig(StrictModel):
    """One ``agentmath synth`` run: a text-CoT dataset in, verified tool trajectories out."""

    input: str = Field(..., min_length=1, description=(
        "JSONL/JSON/Parquet file, a built-in name, or synthetic:N[:SEED] (generated "
        "problems with structured steps, for the rule_based converter) (identity)."))
    problem_field: str = Field("problem", description="Field holding the problem (identity).")
    answer_field: str = Field("answer", description="Field holding the gold answer (identity).")
    solution_field: str = Field("solution", description=(
        "Field holding the text solution the teacher rewrites (identity)."))
    id_field: str = Field("id", description="Field holding the row id (default: row index).")
    limit: int | None = Field(None, ge=1, description="Only the first N rows (identity).")
    converter: Literal["teacher", "rule_based"] = Field("teacher", description=(
        "teacher: an LLM rewrites each solution; rule_based: synthetic steps only (identity)."))
    teacher: EndpointConfig = Field(default_factory=EndpointConfig, description="The teacher.")
    teacher_prompt: str | None = Field(None, description=(
        "TOML/YAML/JSON file with system, user (template with {problem}, {solution}, "
        "{answer}) and examples (few-shot); default: the built-in prompt (identity)."))
    teacher_format: str = Field("code_interpreter", description=(
        "The text tool format the teacher writes in (identity)."))
    judge: EndpointConfig | None = Field(None, description=(
        "The consistency judge (checks.consistency); default: the teacher's endpoint."))
    format: str = Field("code_interpreter", description=(
        "Tool format of the output records, or 'native' for chat records with tool calls "
        "(identity)."))
    system_prompt: str | None = Field(None, description=(
        "System prompt of the records: must be the one used at inference (default: the "
        "format's instructions) (identity)."))
    max_output_chars: int = Field(LoopConfig().max_output_chars, ge=64, le=1_000_000,
                                  description="Tool output cap, as the agent loop's (identity).")
    checks: ChecksConfig = Field(default_factory=ChecksConfig, description="Checks (identity).")
    self_correction: SelfCorrectionConfig = Field(default_factory=SelfCorrectionConfig,
                                                  description="Self-correction (identity).")
    snippet_timeout_s: float = Field(10.0, gt=0, le=3600, description="Per snippet (identity).")
    concurrency: int = Field(16, ge=1, le=100_000, description=(
        "Tasks in flight (teacher requests and sandbox sessions) at once."))
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="The sandbox.")
    sandbox_url: list[str] | None = Field(None, description=(
        "Base URLs of sandbox services (agentmath sandbox serve) to run the snippets on instead "
        "of a local sandbox pool; sessions are spread over them (not identity)."))
    sandbox_token_file: Path | None = Field(None, description=(
        "File holding the token of the sandbox services (default: $AGENTMATH_SANDBOX_TOKEN) "
        "(not identity)."))

    @model_validator(mode="after")
    def _needs(self) -> SynthConfig:
        if self.converter == "teacher" and not self.teacher.model:
            raise ValueError("converter 'teacher' needs teacher.model (--teacher-model)")
        if self.checks.consistency and self.judge is None and not self.teacher.model:
            raise ValueError("checks.consistency needs a judge (or a teacher) model")
        return self

    def identity(self) -> dict[str, object]:
        """The fields a resumed run must share (see the module doc)."""
        data = self.model_dump(mode="json", exclude={"concurrency", "sandbox", "sandbox_url",
                                                  "sandbox_token_file", "id_field"})
        for endpoint in ("teacher", "judge"):
            if data.get(endpoint):
                data[endpoint] = {k: v for k, v in data[endpoint].items()
                                  if k in ("backend", "model", "temperature", "max_tokens")}
        return data


class DetectorSettings(StrictModel):
    """Every near-duplicate detector's parameters (agentmath/synth/detectors.py), with the
    defaults ``agentmath decontam`` and ``agentmath dedup`` use."""

    ngram_n: int = Field(13, ge=1, le=1000, description="Words per N-gram.")
    ngram_threshold: float = Field(0.5, gt=0, le=1, description=(
        "Shared N-grams / N-grams of the shorter text, at or above which texts match."))
    minhash_threshold: float = Field(0.5, gt=0, le=1, description=(
        "Estimated Jaccard similarity of the shingle sets at or above which texts match."))
    minhash_perm: int = Field(128, ge=16, le=4096, description="MinHash permutations.")
    minhash_shingle: int = Field(2, ge=1, le=100, description="Words per shingle.")
    semantic_threshold: float = Field(0.85, gt=0, le=1, description=(
        "Cosine similarity of the MiniLM embeddings at or above which texts match."))
    semantic_numbers: float = Field(0.5, ge=0, le=1, description=(
        "Share of numbers a semantic match must keep (multiset Jaccard; 0 turns it off)."))
    semantic_model: str | None = Field(None, description=(
        "Local sentence-transformers model directory (default: the bundled "
        "all-MiniLM-L6-v2)."))
    semantic_device: str = Field("auto", pattern=r"^(cpu|auto|cuda(:[0-9]+)?)$", description=(
        "Where the embedding model runs: 'auto' (cuda when there is one), 'cpu', 'cuda' or "
        "'cuda:N'."))
    semantic_batch_size: int = Field(32, ge=1, le=65536, description="Texts embedded at once.")
    semantic_backend: Literal["auto", "onnx", "torch"] = Field("auto", description=(
        "Embedding runtime: onnx (int8 ONNX Runtime, CPU), torch, or auto (onnx on a CPU when "
        "onnxruntime is installed)."))


class DecontamConfig(DetectorSettings):
    """One ``agentmath decontam`` or ``agentmath dedup`` run: the detectors, their settings and
    the fields of the rows."""

    detectors: str = Field("ngram,minhash,semantic", min_length=1, description=(
        "Comma-separated: ngram, minhash, semantic; they run in that order, each on what the "
        "previous kept."))
    problem_field: str = Field("problem", min_length=1, description=(
        "Field holding the text: a string, or chat messages whose user turns are the text "
        "(`--problem-field messages`, as in SFT records)."))
    id_field: str = Field("id", min_length=1, description=(
        "Field holding the id (default: the row index)."))
    answer_field: str = Field("answer", min_length=1, description=(
        "Field holding a row's reference answer (optional per row). A match between two rows "
        "with answers is spared when the answers differ and the texts differ in more than "
        "their numbers: the same story asking another question."))
    ignore_answers: bool = Field(False, description=(
        "Match on the texts alone: no match is spared for asking another question."))
    data_dir: str | None = Field(None, description=(
        "Where built-in datasets live (decontam's --against names)."))
