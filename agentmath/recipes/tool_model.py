"""Grow a tiny tool-using model on the CPU: problems -> verified trajectories -> tokenizer -> SFT.

The recipe composes library parts, for one or several tool formats at once (and, optionally,
native tool calling). A model trained on several formats learns to follow whichever one its
system prompt describes, so one small model can be served to the tests of every format (it is
the model the agent-loop and evaluation tests serve through vLLM).

1. seeded synthetic word problems, split train / held-out, and with ``text_share`` > 0 a seeded
   share of the training problems kept as text records (:mod:`agentmath.tasks.synthetic`);
2. code injection in each format, every snippet executed and checked in the sandbox, problems
   dealt round-robin to the formats, the text share in the protocol of the format it was
   dealt to (:mod:`agentmath.synth.tool_records`), so the model learns to choose between text
   and the tool (the demo's mixture);
3. a byte-level BPE tokenizer on the training text, a tiny Qwen3 model and SFT with tool output
   masked (:mod:`agentmath.train.grow`); the model + tokenizer are saved.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from agentmath import _loop as event_loop
from agentmath.config import StrictModel
from agentmath.errors import DataError
from agentmath.synth.config import NATIVE  # the pseudo-format of native tool-calling records
from agentmath.synth.tool_records import Conversion

Stage = Callable[[str], None]


class ToolModelConfig(StrictModel):
    """What tiny tool model to grow and how (defaults: one format, about a minute of SFT)."""

    seed: int = Field(0, ge=0, description="Seeds data, model, training.")
    train_problems: int = Field(1000, ge=1, le=1_000_000, description="Training problems.")
    test_problems: int = Field(50, ge=1, le=100_000, description="Held-out problems.")
    max_digits: int = Field(3, ge=3, le=6, description="Largest operand size in digits.")
    formats: list[str] = Field(["code_interpreter"], min_length=1, description=(
        "Tool formats to train on (problems dealt round-robin); 'native' adds native "
        "tool-calling chat records."))
    system_prompts: dict[str, str] = Field({}, description=(
        "System prompt per format; a format not listed gets its own instructions (the agent "
        "loop's default), 'native' the chat loop's CHAT_SYSTEM_PROMPT. Prompts must differ "
        "between formats for one model to learn several."))
    model_size: str = Field("micro", description="A size from agentmath.models.tiny.SIZES.")
    steps: int = Field(300, ge=1, le=10**7, description="SFT steps.")
    copy_steps: int = Field(0, ge=0, le=100_000, description=(
        "Steps of copy warm-up before SFT (random token spans shown twice: the fresh model "
        "learns to copy, as a pretrained one can; agentmath/train/copy_warmup.py). The demo "
        "uses 300; 0 (the default) keeps the models grown before it existed."))
    batch_size: int = Field(16, ge=1, le=4096, description="SFT batch size.")
    learning_rate: float = Field(3e-3, gt=0, le=1, description="SFT peak learning rate.")
    max_length: int = Field(512, ge=64, le=8192, description="Tokens per training example.")
    vocab_size: int = Field(1024, ge=300, le=65536, description="Tokenizer vocabulary size.")
    text_share: float = Field(0.0, ge=0, le=1, description=(
        "Share of the training problems (seeded per problem) trained as text records instead "
        "of tool trajectories: the text chain-of-thought ending in \\boxed{answer}, under the "
        "same prompt as that format's tool records (for 'native' a chat record with the same "
        "tools schema and system prompt). 0 (the default): every record uses the tool."))

    @field_validator("formats")
    @classmethod
    def _known_formats(cls, formats: list[str]) -> list[str]:
        from agentmath.formats import available_formats

        known = [*available_formats(), NATIVE]
        unknown = [f for f in formats if f not in known]
        if unknown:
            raise ValueError(f"unknown format(s) {unknown}; choose from {known}")
        if len(set(formats)) != len(formats):
            raise ValueError(f"formats must not repeat: {formats}")
        return formats

    @field_validator("model_size")
    @classmethod
    def _known_size(cls, size: str) -> str:
        from agentmath.models.tiny import known_size

        return known_size(size)

    @model_validator(mode="after")
    def _prompts_for_trained_formats(self) -> ToolModelConfig:
        extra = sorted(set(self.system_prompts) - set(self.formats))
        if extra:
            raise ValueError(f"system_prompts for formats not trained: {extra}")
        return self


#: The summary :func:`build_tool_model` writes next to the model (read by :meth:`GrownModel.read`).
SUMMARY_FILE = "tool_model.json"


@dataclass(frozen=True, slots=True)
class GrownModel:
    """What :func:`build_tool_model` made (``OUT/tool_model.json``; the grow command's
    ``--json``): the model directory, the held-out problems, the code injection's funnel per
    format, the SFT's final loss and example counts, the config and the seconds it took."""

    model_dir: str
    test: str
    conversion: dict[str, Conversion]
    final_loss: float | None
    examples: dict[str, int]  # total, kept, truncated, dropped (agentmath.train.sft)
    config: ToolModelConfig
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"model_dir": self.model_dir, "test": self.test,
                "conversion": {k: v.to_dict() for k, v in self.conversion.items()},
                "final_loss": self.final_loss, "examples": dict(self.examples),
                "config": self.config.model_dump(), "seconds": self.seconds}

    def write(self, out: Path) -> None:
        (out / SUMMARY_FILE).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read(cls, out: str | Path) -> GrownModel:
        """The summary in the grown model's directory ``out``; a missing or malformed one is
        a DataError naming the file."""
        path = Path(out) / SUMMARY_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            loss = data["final_loss"]
            return cls(model_dir=str(data["model_dir"]), test=str(data["test"]),
                       conversion={str(k): Conversion.from_dict(v)
                                   for k, v in data["conversion"].items()},
                       final_loss=None if loss is None else float(loss),
                       examples={str(k): int(v) for k, v in data["examples"].items()},
                       config=ToolModelConfig.model_validate(data["config"]),
                       seconds=float(data["seconds"]))
        except OSError as exc:
            raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from exc
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DataError(f"{path}: not a grown model's summary ({exc})") from exc


#: The tiny model the test suite grows (tests/fixtures/models.py) and benchmarks reuse: every
#: format and native tool calling, a few minutes of CPU.
TEST_MODEL = ToolModelConfig(
    seed=0, train_problems=1000, test_problems=50, max_digits=3,
    formats=["code_interpreter", "markdown", "tool_call", "openai_tools", NATIVE],
    model_size="nano", steps=300, batch_size=16, learning_rate=3e-3, max_length=512,
    vocab_size=1024)


def build_tool_model(cfg: ToolModelConfig, out: Path, stage: Stage = print,
                     progress: bool = True) -> GrownModel:
    """Run every step; the model + tokenizer end in ``out/final``, the held-out problems in
    ``out/test.jsonl`` and a summary in ``out/tool_model.json`` (also returned)."""
    from agentmath.jsonl import write_jsonl
    from agentmath.models.tiny import build_tokenizer
    from agentmath.synth.tool_records import tool_records
    from agentmath.tasks.synthetic import make_problems, text_problem_ids, to_task_rows
    from agentmath.train.grow import corpus_texts, train_model

    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    stage("generating problems")
    train, test = make_problems(cfg.seed, cfg.train_problems, cfg.test_problems,
                                cfg.max_digits)
    write_jsonl(to_task_rows(test), out / "test.jsonl")
    text_ids = text_problem_ids(train, cfg.text_share, cfg.seed)
    stage(f"code injection in {', '.join(cfg.formats)}: {len(train) - len(text_ids)} "
          f"trajectories" + (f" ({len(text_ids)} more problems as text records)"
                             if text_ids else ""))
    records, conversion = event_loop.run(tool_records(train, cfg.formats,
                                                   system_prompts=cfg.system_prompts,
                                                   text_ids=text_ids))
    stage(f"tokenizer and a {cfg.model_size} model; SFT for {cfg.steps} steps")
    tokenizer = build_tokenizer(corpus_texts(records), vocab_size=cfg.vocab_size)
    result = train_model(records, tokenizer, out, size=cfg.model_size, steps=cfg.steps,
                         batch_size=cfg.batch_size, learning_rate=cfg.learning_rate,
                         max_length=cfg.max_length, seed=cfg.seed, progress=progress,
                         system_prompts=cfg.system_prompts, copy_steps=cfg.copy_steps)
    summary = GrownModel(model_dir=str(result.final_dir), test=str(out / "test.jsonl"),
                         conversion=conversion, final_loss=result.final_loss,
                         examples=dict(result.examples), config=cfg,
                         seconds=round(time.monotonic() - started, 1))
    summary.write(out)
    return summary


def config_key_data(cfg: ToolModelConfig) -> dict[str, Any]:
    """What the cache key hashes: the config, less ``text_share`` and ``copy_steps`` when they
    are 0 (so every model grown before those fields existed keeps its key)."""
    unset = {name for name, value in (("text_share", cfg.text_share),
                                      ("copy_steps", cfg.copy_steps)) if not value}
    return cfg.model_dump(mode="json", exclude=unset or None)


def cached_tool_model(cfg: ToolModelConfig, root: Path, stage: Stage = print) -> Path:
    """The directory of a model grown with ``cfg`` under ``root`` (``final/``, ``test.jsonl``,
    ``tool_model.json``), grown once and reused: the key is a hash of the config, and a
    half-built directory is never mistaken for a finished one (built aside, then renamed)."""
    import hashlib
    import shutil
    import tempfile

    key = hashlib.sha256(json.dumps(config_key_data(cfg), sort_keys=True)
                         .encode()).hexdigest()[:12]
    target = root / f"model-{key}"
    if (target / SUMMARY_FILE).exists():
        stage(f"model: cached {target}")
        return target
    root.mkdir(parents=True, exist_ok=True)
    stage(f"model: growing a {cfg.model_size} tool model ({cfg.steps} SFT steps) -> {target}")
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        build_tool_model(cfg, staging, stage=lambda s: stage(f"  {s}"), progress=False)
        try:
            staging.rename(target)
        except OSError:  # another process (a second benchmark, a test worker) finished first
            if not (target / SUMMARY_FILE).exists():
                raise
            stage(f"model: {target} was grown meanwhile by another process; it is used")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target

