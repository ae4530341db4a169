"""Grow a tiny model from SFT records: the text its tokenizer is trained on
(:func:`corpus_texts`), then a fresh tiny model of :mod:`agentmath.models.tiny`, copy warm-up
(:mod:`agentmath.train.copy_warmup`) and SFT with tool output masked
(:mod:`agentmath.train.sft`), saved with the system prompts it was trained under
(:mod:`agentmath.models.prompts`). The tool-model recipe (:mod:`agentmath.recipes.tool_model`)
and the demo grow their models with it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentmath.train.sft import SFTResult

__all__ = ["corpus_texts", "train_model"]


def corpus_texts(records: Sequence[dict]) -> list[str]:
    """The text a tokenizer for ``records`` should be trained on (prompts, completions, tool
    calls and schemas of chat records)."""
    texts = []
    for rec in records:
        for msg in rec["messages"]:
            texts.append(msg.get("content") or "")
            texts += [json.dumps(c["function"]) for c in msg.get("tool_calls") or []]
        texts += [json.dumps(t) for t in rec.get("tools") or []]
        texts.append("".join(p["text"] for p in rec.get("completion") or []))
    return [t for t in texts if t]


def train_model(records: list[dict], tokenizer: Any, out: Path, *, size: str, steps: int,
                batch_size: int, learning_rate: float, max_length: int, seed: int,
                progress: bool = True, group_by_length: int = 0, device: str = "auto",
                bf16: bool = False, system_prompts: Mapping[str, str] | None = None,
                copy_steps: int = 0) -> SFTResult:
    """A fresh tiny model of ``size`` fine-tuned on ``records`` (on ``device``, bfloat16
    autocast with ``bf16``), after ``copy_steps`` steps of copy warm-up
    (:mod:`agentmath.train.copy_warmup`); returns the SFTResult (the model + tokenizer are in
    its ``final_dir``, with ``system_prompts``, the records' prompt per format, stored beside
    them: :mod:`agentmath.models.prompts`)."""
    from agentmath.models.prompts import TrainedPrompts
    from agentmath.models.tiny import build_model
    from agentmath.train.copy_warmup import copy_warmup
    from agentmath.train.sft import SFTConfig, train_sft

    model = build_model(tokenizer, size, seed=seed)
    copy_warmup(model, tokenizer, copy_steps, seed=seed, device=device, bf16=bf16)
    sft = SFTConfig(learning_rate=learning_rate, max_steps=steps, batch_size=batch_size,
                    max_length=max_length, warmup_steps=min(50, steps // 10), seed=seed,
                    checkpoint_every=0, group_by_length=group_by_length, device=device,
                    bf16=bf16)
    result = train_sft(sft, records, model, out, tokenizer=tokenizer, progress=progress,
                       resume=False)
    if system_prompts and result.final_dir is not None:
        TrainedPrompts(dict(system_prompts)).write(result.final_dir)
    return result
