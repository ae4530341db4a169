"""Training plumbing shared by SFT (agentmath/train/sft.py) and RL (agentmath/rl/trainer.py).

One copy of: loading a model for training (LoRA through PEFT as an option), AdamW with decay on
matrices only and a warmup/decay schedule, right-padded collation, atomic checkpoints that hold
model, optimizer, scheduler, RNG and any extra run state, exact restore, the final save (LoRA
merged, adapter kept), and the progress bar. Written by hand because each is a few lines and
the trainers need exact-resume semantics (atomic rename, RNG state) that ``Trainer`` hides.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentmath._lazy import require
from agentmath.errors import ConfigError
from agentmath.models.local import model_dir_problem

STATE_FILE = "trainer_state.pt"
#: a checkpoint's flag: its optimizer state is keyed by parameter name (a sharded run's)
OPTIMIZER_BY_NAME = "optimizer_by_name"
IGNORE_INDEX = -100  # label of a token that carries no loss (prompt, tool output, padding)


def resolve_device(name: str) -> Any:
    """'auto' -> cuda when there is one, else cpu; anything else as torch names it."""
    torch = require("torch", "train")
    return torch.device(("cuda" if torch.cuda.is_available() else "cpu")
                        if name == "auto" else name)


def load_for_training(model: Any, tokenizer: Any, *, seed: int, lora: bool, lora_r: int = 16,
                      lora_alpha: float = 32.0, lora_dropout: float = 0.0,
                      what: str = "training") -> tuple[Any, Any]:
    """A model (a directory, or a loaded model + ``tokenizer``) in fp32, LoRA-wrapped when
    asked, and its tokenizer. A directory that does not hold a model is a ConfigError naming
    it (offline, nothing can be downloaded)."""
    torch = require("torch", "train")
    transformers = require("transformers", "train")
    if isinstance(model, str | Path):
        path = Path(model)
        problem = model_dir_problem(path)
        if problem is not None:
            raise ConfigError(f"{what}: model {str(model)!r}: {problem}; models are read "
                              "from local directories only, so give the path of one saved "
                              "with save_pretrained")
        if tokenizer is None:
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    elif tokenizer is None:
        raise ConfigError(f"{what}: pass tokenizer= when model is a model object")
    torch.manual_seed(seed)
    if lora:
        peft = require("peft", "train")
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
            target_modules="all-linear", task_type="CAUSAL_LM"))
    return model, tokenizer


def build_optimizer(model: Any, learning_rate: float, weight_decay: float,
                    factor: Callable[[int], float]) -> tuple[Any, Any]:
    """AdamW (decay on matrices only) and a LambdaLR applying ``factor(steps_done)``."""
    torch = require("torch", "train")
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=learning_rate)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def collate(pairs: list[tuple[list[int], list[int]]], pad_id: int,
            pad_label: int = IGNORE_INDEX) -> tuple[Any, Any, Any]:
    """Right-pad (ids, labels) pairs to the longest: (input_ids, attention_mask, labels).

    ``labels`` may be any per-token integer sequence aligned with ids (SFT labels, a 0/1 loss
    mask); padding gets ``pad_label``.
    """
    torch = require("torch", "train")
    width = max(len(ids) for ids, _ in pairs)
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
    labels = torch.full((len(pairs), width), pad_label, dtype=torch.long)
    lengths = torch.tensor([len(seq) for seq, _ in pairs])
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    for row, (seq, lab) in enumerate(pairs):
        ids[row, :len(seq)] = torch.tensor(seq)
        labels[row, :len(lab)] = torch.tensor(lab)
    return ids, mask, labels


def list_checkpoints(out_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under ``out_dir`` (those with a state file), oldest first."""
    return sorted((int(p.name[11:]), p) for p in out_dir.glob("checkpoint-*")
                  if p.name[11:].isdigit() and (p / STATE_FILE).exists())


def save_checkpoint(out_dir: Path, step: int, model: Any, tokenizer: Any, optimizer: Any,
                    scheduler: Any, state: dict[str, Any], keep: int, *,
                    optimizer_state: dict[str, Any] | None = None) -> Path:
    """Write checkpoint-STEP atomically (built in a temp dir, then renamed); prune old ones.

    ``state`` is any extra run state torch.save can write with weights_only loading (plain
    containers of numbers and strings); RNG states are added here. ``optimizer_state``: a
    sharded run's full optimizer state, keyed by parameter name
    (:func:`agentmath.train.sharding.full_optimizer_state`), saved instead of
    ``optimizer.state_dict()`` and marked so that only a sharded run resumes it.
    """
    torch = require("torch", "train")
    target, tmp = out_dir / f"checkpoint-{step}", out_dir / f".checkpoint-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    by_name = optimizer_state is not None
    torch.save({**state, "step": step, "scheduler": scheduler.state_dict(), "rng": rng,
                "optimizer": optimizer_state if by_name else optimizer.state_dict(),
                OPTIMIZER_BY_NAME: by_name}, tmp / STATE_FILE)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    if keep:
        for _, old in list_checkpoints(out_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return target


def read_checkpoint(path: Path, structural: dict[str, Any] | None = None, *,
                    mmap: bool = False) -> dict[str, Any]:
    """The state file of a checkpoint (``mmap``: memory-mapped, copy on write, so that the
    ranks of a sharded run, which all read it, share its pages).

    ``structural``: settings that must equal the checkpoint's ``config`` entries (resuming a
    LoRA run as a full one cannot work); a difference is a ConfigError naming them.
    """
    torch = require("torch", "train")  # weights_only: a checkpoint cannot run code
    state: dict[str, Any] = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True,
                                       mmap=mmap)
    changed = [k for k, v in (structural or {}).items() if state["config"].get(k) != v]
    if changed:
        raise ConfigError(f"{path}: cannot resume: {', '.join(changed)} differ from the "
                          f"checkpoint's; use another output directory or start over")
    return state


def restore_weights(path: Path, model: Any, *, lora: bool) -> None:
    """Load a checkpoint's weights (the LoRA adapter, or the whole model) into ``model``,
    an unsharded one (a sharded run loads them before sharding)."""
    torch = require("torch", "train")
    if lora:
        peft = require("peft", "train")
        peft.set_peft_model_state_dict(model, peft.utils.load_peft_weights(str(path)))
    else:
        loaded = type(model).from_pretrained(str(path), dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())


def restore_state(path: Path, state: dict[str, Any], optimizer: Any, scheduler: Any, *,
                  load_by_name: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Load a checkpoint's optimizer, scheduler and RNG state (``state``, from
    :func:`read_checkpoint`) into the run. ``load_by_name``: a sharded run's loader of an
    optimizer state keyed by parameter name; the layout must match the run's."""
    torch = require("torch", "train")
    by_name = bool(state.get(OPTIMIZER_BY_NAME, False))
    if by_name != (load_by_name is not None):
        saved, now = ("fsdp", "none") if by_name else ("none", "fsdp")
        raise ConfigError(f"{path}: cannot resume: the checkpoint was saved with sharding "
                          f"{saved!r}, this run has {now!r} (their optimizer states differ in "
                          "layout); resume with the checkpoint's sharding or start over")
    if load_by_name is not None:
        load_by_name(state["optimizer"])
    else:
        optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    if "cuda" in state["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])


def restore_checkpoint(path: Path, model: Any, optimizer: Any, scheduler: Any, *, lora: bool,
                       device: Any, structural: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load weights, optimizer, scheduler and RNG state from a checkpoint into an unsharded
    run (see :func:`read_checkpoint` for ``structural``)."""
    state = read_checkpoint(path, structural)
    restore_weights(path, model, lora=lora)
    model.to(device)
    restore_state(path, state, optimizer, scheduler)
    return state


def save_final(out_dir: Path, model: Any, tokenizer: Any, lora: bool) -> tuple[Path, Path | None]:
    """Save final/ (LoRA merged into the weights) and, for LoRA, the adapter to adapter/.

    The caller's model is left as it was (merging works on a copy for LoRA)."""
    import copy

    adapter = out_dir / "adapter" if lora else None
    if adapter is not None:
        model.save_pretrained(str(adapter))
        model = copy.deepcopy(model).merge_and_unload()
    final = out_dir / "final"
    model.save_pretrained(str(final))
    tokenizer.save_pretrained(str(final))
    return final, adapter


def progress_bar(label: str, enabled: bool, total: int, done: int) -> tuple[Any, Any]:
    """A rich progress bar on stderr (a disabled one when not ``enabled``) and its task."""
    import rich.console
    import rich.progress as rp

    bar = rp.Progress(rp.TextColumn(f"[bold]{label}"), rp.BarColumn(), rp.MofNCompleteColumn(),
                      rp.TextColumn("{task.fields[stats]}"), rp.TimeRemainingColumn(),
                      console=rich.console.Console(stderr=True), disable=not enabled)
    return bar, bar.add_task(label, total=total, completed=done, stats="")
