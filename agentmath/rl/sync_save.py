"""Saving a full checkpoint for vLLM to load (:class:`~agentmath.rl.sync_vllm.VLLMWeightSync`):
a PEFT model is saved merged, so that the server loads plain weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["save_full"]


def save_full(model: Any, directory: Path, is_peft: bool) -> None:
    """``save_pretrained`` of the model; a PEFT model is saved merged (adapter merged in,
    LoRA tensors dropped, base names restored: the same tensors as ``merge_and_unload``, without
    a copy of the model) and unmerged afterwards (as TRL does; the unmerge leaves rounding
    error in the base weights, ~2e-8 in fp32)."""
    if not is_peft:
        model.save_pretrained(str(directory))
        return
    model.merge_adapter()
    try:
        state: dict[str, Any] = {}
        for key, tensor in model.get_base_model().state_dict().items():
            if "lora_" in key or ".original_module." in key:
                continue
            for adapter in model.peft_config:
                key = key.replace(f".modules_to_save.{adapter}.", ".")
            state[key.replace(".base_layer.", ".")] = tensor
        model.get_base_model().save_pretrained(str(directory), state_dict=state)
    finally:
        model.unmerge_adapter()
