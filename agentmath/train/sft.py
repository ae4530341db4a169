"""Supervised fine-tuning with AgentMath's selective feedback masking.

A tool-integrated trajectory is a prompt, then pieces the model wrote (reasoning, code) and
pieces the interpreter wrote (tool output). The model must learn to write the former, never to
predict the latter (tool output is the environment's feedback; training on it teaches the model
to hallucinate results). So labels are -100 on the prompt and every ``train: false`` piece and
the ids elsewhere, the final ``<|im_end|>`` included. Tokenization matches the agent loop: the
prompt is rendered once by the chat template and each piece is encoded on its own and appended.

A plain torch loop: AdamW, linear warmup/decay, gradient accumulation (the loss is the mean over
all trainable tokens of an optimizer step, however it is split), a seeded data order that is a
pure function of the step, checkpoints with optimizer/scheduler/RNG state, and exact resume.
LoRA (PEFT, every linear layer but the head): the adapter is saved to ``out_dir/adapter/`` (for
vLLM's ``--lora-modules``) *and* merged in ``out_dir/final/``, which any loader then takes.
With ``sharding = "fsdp"`` under a launcher of N processes (:mod:`agentmath.train.sharding`)
each rank trains on every N-th example of a step's micro-batches, the loss normalised by the
whole step's trainable tokens, so a step's update is the one process's, to float rounding.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentmath._lazy import require
from agentmath.backends.base import chat_prompt_ids
from agentmath.errors import DataError
from agentmath.jsonl import iter_jsonl
from agentmath.tracking import FanOut, open_sink
from agentmath.train import sharding
from agentmath.train.chat_records import (
    IGNORE_INDEX,
    check_chat_record,
    encode_chat,
    is_chat_record,
)
from agentmath.train.plumbing import (
    build_optimizer,
    collate,
    list_checkpoints,
    load_for_training,
    progress_bar,
    read_checkpoint,
    resolve_device,
    restore_state,
    restore_weights,
    save_checkpoint,
    save_final,
)
from agentmath.train.sft_config import SFTConfig
from agentmath.train.sft_order import epoch_order, rank_share, step_indices

__all__ = ["IGNORE_INDEX", "SFTConfig", "SFTResult", "epoch_order", "load_examples",
           "masked_lm_loss", "tokenize_example", "tokenize_examples", "train_sft",
           "trained_tail"]

_STRUCTURAL = ("lora", "lora_r", "lora_alpha")  # resuming under other values is an error


@dataclass
class SFTResult:
    """What a run did and where it put things."""

    final_loss: float | None  # mean loss over the trainable tokens of the last step trained
    steps: int  # optimizer steps done, counting those done before a resume
    trainable_tokens: int  # trainable (loss-bearing) tokens seen, counting before a resume
    out_dir: str
    final_dir: str | None  # HF model + tokenizer (LoRA merged); None when stopped early
    adapter_dir: str | None  # the LoRA adapter alone, when lora
    loss_log: str
    checkpoints: list[str]
    resumed_from: int | None  # the checkpoint step this run started from
    wall_time_s: float  # this invocation's time
    examples: dict[str, int]  # total, kept, truncated, dropped

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _check_example(row: Any, where: str) -> dict[str, Any]:
    """Validate one row's shape, raising DataError naming ``where`` and the field.

    A row without ``completion`` is a chat record (native tool calling), see
    :mod:`agentmath.train.chat_records`.
    """
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row must be a JSON object, not {type(row).__name__}")
    if is_chat_record(row):
        return check_chat_record(row, where)
    for name, keys in (("messages", {"role": str, "content": str}),
                       ("completion", {"text": str, "train": bool})):
        items = row.get(name)
        if not isinstance(items, list) or not items:
            raise DataError(f"{where}: field {name!r}: must be a non-empty list of objects "
                            f"with {' and '.join(keys)}")
        for i, item in enumerate(items):
            for key, kind in keys.items():
                if not isinstance(item, dict) or not isinstance(item.get(key), kind):
                    raise DataError(f"{where}: field '{name}[{i}].{key}': must be "
                                    f"{'a string' if kind is str else 'true or false'}")
    return row


def load_examples(path: str | Path) -> list[dict[str, Any]]:
    """Read an SFT JSONL file (one ``{id, messages, completion, answer}`` object a line).

    Blank lines are skipped; a malformed row raises DataError naming the file, line and field,
    so that a bad converter output fails before any model is loaded.
    """
    return [_check_example(row, f"{path}:{lineno}")
            for lineno, row in iter_jsonl(path, what="SFT data")]


def _encode(tokenizer: Any, example: dict[str, Any]) -> tuple[list[int], list[int]]:
    """Uncut ids and labels of one example (see tokenize_example)."""
    if tokenizer.eos_token_id is None:
        raise DataError("the tokenizer has no EOS token; SFT appends it to every example")
    if is_chat_record(example):
        return encode_chat(tokenizer, example)
    ids = chat_prompt_ids(tokenizer, example["messages"])  # as every backend renders it
    labels = [IGNORE_INDEX] * len(ids)
    for piece in example["completion"]:
        piece_ids = list(tokenizer.encode(piece["text"], add_special_tokens=False))
        ids += piece_ids
        labels += piece_ids if piece["train"] else [IGNORE_INDEX] * len(piece_ids)
    ids.append(tokenizer.eos_token_id)
    labels.append(tokenizer.eos_token_id)
    return ids, labels


def _cut(ids: list[int], labels: list[int], max_length: int
         ) -> tuple[list[int], list[int]] | None:
    """Cut to ``max_length``; None when no trainable target is left (labels[0] never is)."""
    ids, labels = ids[:max_length], labels[:max_length]
    if all(label == IGNORE_INDEX for label in labels[1:]):
        return None
    return ids, labels


def tokenize_example(tokenizer: Any, example: dict[str, Any],
                     max_length: int) -> tuple[list[int], list[int]] | None:
    """Token ids and labels of one example, exactly as the agent loop would see them.

    ids = chat-template prompt + each completion piece encoded separately + EOS. Labels are the
    ids on ``train: true`` pieces and on the EOS, IGNORE_INDEX (-100) on the prompt and on
    ``train: false`` (tool output) pieces; labels are aligned with ids (the loss shifts them).
    A chat record (no ``completion``) is encoded by :func:`~agentmath.train.chat_records.
    encode_chat`: assistant turns trained, everything else masked.
    Both are cut to ``max_length``; None when no trainable token survives the cut.
    """
    return _cut(*_encode(tokenizer, example), max_length)


def tokenize_examples(tokenizer: Any, examples: list[dict[str, Any]], max_length: int
                      ) -> tuple[list[tuple[list[int], list[int]]], dict[str, int]]:
    """Tokenize every example; also count total, kept, truncated and dropped examples."""
    encoded, truncated = [], 0
    for example in examples:
        ids, labels = _encode(tokenizer, example)
        pair = _cut(ids, labels, max_length)
        truncated += pair is not None and len(ids) > max_length
        if pair is not None:
            encoded.append(pair)
    stats = {"total": len(examples), "kept": len(encoded), "truncated": truncated,
             "dropped": len(examples) - len(encoded)}
    return encoded, stats


def masked_lm_loss(logits: Any, labels: Any, loss_mask: Any = None,
                   reduction: str = "mean") -> Any:
    """Next-token cross entropy of ``logits`` [B, T, V] against ``labels`` [B, T].

    Position t's logits predict labels[t + 1]; labels equal to -100 carry no loss and no
    gradient. ``loss_mask`` (bool [B, T], optional) masks too, whatever the label id there.
    ``reduction``: "mean" over trainable tokens (0 when there are none) or "sum".
    """
    torch = require("torch", "train")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', not {reduction!r}")
    if loss_mask is not None:
        labels = labels.masked_fill(~loss_mask.bool(), IGNORE_INDEX)
    shift_logits = logits[:, :-1, :].float()
    shift_labels = labels[:, 1:].to(shift_logits.device)
    total = torch.nn.functional.cross_entropy(
        shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1),
        ignore_index=IGNORE_INDEX, reduction="sum")
    count = (shift_labels != IGNORE_INDEX).sum().clamp(min=1)
    return total if reduction == "sum" else total / count


def trained_tail(labels: Any) -> int:
    """How many last positions of ``labels`` [B, T] a loss needs logits for: from the first
    position whose next label carries loss in any row, to the end (T when none does).

    Passed as ``logits_to_keep``, it spares the LM head (a large share of a tiny model's
    compute) and the cross entropy over the prompt positions that no row trains on;
    :func:`masked_lm_loss` of those logits against ``labels[:, -keep:]`` equals the loss of
    the whole sequence, since every dropped position's next label is ignored.
    """
    trained = (labels[:, 1:] != IGNORE_INDEX).any(dim=0).nonzero()
    width = labels.shape[1]
    return width - int(trained[0]) if len(trained) else width


def _train_step(model: Any, batches: list[tuple[Any, Any, Any]], optimizer: Any,
                scheduler: Any, config: SFTConfig, device: Any, n_tokens: int
                ) -> tuple[float, float]:
    """One optimizer step over this rank's micro-batches: (mean loss over the step's
    ``n_tokens`` trainable tokens, summed over the ranks; lr used)."""
    torch = require("torch", "train")
    scale = sharding.world_scale()  # the ranks' gradients are averaged: undo it
    autocast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if config.bf16
                else contextlib.nullcontext())
    total = 0.0
    for ids, mask, labels in batches:
        keep = trained_tail(labels)  # no LM head over the prompts every row of the batch shares
        with autocast:
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device),
                           logits_to_keep=keep).logits
        loss = masked_lm_loss(logits, labels[:, -keep:].to(device),
                              reduction="sum") / max(1, n_tokens)
        (loss * scale).backward()
        total += float(loss.detach())
    if config.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad],
                                       config.max_grad_norm)
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return sharding.sum_over_ranks(total), lr


def _trainable(pair: tuple[list[int], list[int]]) -> int:
    """Loss-bearing tokens of one encoded example (its labels after the first)."""
    return sum(label != IGNORE_INDEX for label in pair[1][1:])


def _load_sharded(config: SFTConfig, model: Any, device: Any, found: list[tuple[int, Path]]
                  ) -> tuple[Any, Any, Any, dict[str, Any] | None]:
    """Sharded model (checkpoint weights loaded before sharding), optimizer, schedule, and the
    checkpoint's state with its optimizer state sharded in."""
    state = (read_checkpoint(found[-1][1], {k: getattr(config, k) for k in _STRUCTURAL},
                             mmap=True) if found else None)
    if found:
        restore_weights(found[-1][1], model, lora=config.lora)
    model = sharding.shard_model(model, config.fsdp, bf16=config.bf16, device=device).train()
    optimizer, scheduler = build_optimizer(model, config.learning_rate, config.weight_decay,
                                           _lr_factor(config))
    if state is not None:
        restore_state(found[-1][1], state, optimizer, scheduler, load_by_name=lambda sd:
                      sharding.load_optimizer_state(model, optimizer, sd))
    return model, optimizer, scheduler, state


def _lr_factor(config: SFTConfig) -> Any:
    warmup, total = config.warmup_steps, config.max_steps

    def factor(done: int) -> float:  # ``done`` optimizer steps taken before this one
        if done < warmup:
            return (done + 1) / warmup
        return max(0.0, (total - done) / max(1, total - warmup))
    return factor


def _device(config: SFTConfig) -> Any:
    """The training device; under sharding, this rank's (the process group joined)."""
    sharding.check_launch(config.sharding, "sft")
    if config.sharding == "none":
        return resolve_device(config.device)
    world = sharding.world_size()
    if (config.batch_size * config.grad_accum) % world:
        raise DataError(f"sharding: batch_size * grad_accum = "
                        f"{config.batch_size * config.grad_accum} examples a step cannot be "
                        f"shared evenly by {world} processes")
    cpu = resolve_device(config.device).type == "cpu"
    return sharding.init_process_group(cpu)[0]


def _prepare(config: SFTConfig, data: Any, model: Any, out_dir: Path, tokenizer: Any,
             resume: bool) -> dict[str, Any]:
    """Load data and model, build the optimizer, and restore the latest checkpoint if any."""
    examples = ([_check_example(row, f"data[{i}]") for i, row in enumerate(data)]
                if isinstance(data, list) else load_examples(data))
    device = _device(config)
    main = int(os.environ.get("RANK", "0")) == 0
    model, tokenizer = load_for_training(
        model, tokenizer, seed=config.seed, lora=config.lora, lora_r=config.lora_r,
        lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout, what="sft")
    encoded, stats = tokenize_examples(tokenizer, examples, config.max_length)
    if not encoded:
        raise DataError(f"no example has a trainable token within max_length={config.max_length}")
    out_dir.mkdir(parents=True, exist_ok=True)
    found = list_checkpoints(out_dir) if resume else []
    if not resume and main:
        for stale in [*out_dir.glob("checkpoint-*"), out_dir / "loss.jsonl"]:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink(missing_ok=True)
    sharding.barrier()
    structural = {k: getattr(config, k) for k in _STRUCTURAL}
    if config.sharding == "fsdp":
        model, optimizer, scheduler, state = _load_sharded(config, model, device, found)
    else:
        model = model.to(device).train()
        optimizer, scheduler = build_optimizer(model, config.learning_rate,
                                               config.weight_decay, _lr_factor(config))
        state = read_checkpoint(found[-1][1], structural) if found else None
        if found and state is not None:
            restore_weights(found[-1][1], model, lora=config.lora)
            model.to(device)
            restore_state(found[-1][1], state, optimizer, scheduler)
    if main:
        (out_dir / "sft_config.json").write_text(json.dumps(
            {"config": config.model_dump(), "examples": stats}, indent=2) + "\n")
    return {"model": model, "tokenizer": tokenizer, "encoded": encoded, "stats": stats,
            "optimizer": optimizer, "scheduler": scheduler, "device": device,
            "state": state or {"step": 0, "tokens": 0, "loss": None}, "main": main,
            "resumed_from": found[-1][0] if found else None}


def _checkpoint(run: dict[str, Any], config: SFTConfig, out_dir: Path, step: int,
                extra: dict[str, Any]) -> None:
    """Save checkpoint-STEP from rank 0; a sharded run gathers it there first."""
    model, by_name = run["model"], None
    if config.sharding == "fsdp":
        model, by_name = sharding.gather(model, run["optimizer"], lora=config.lora,
                                         main=run["main"])
    if run["main"]:
        save_checkpoint(out_dir, step, model, run["tokenizer"], run["optimizer"],
                        run["scheduler"], extra, config.keep_checkpoints, optimizer_state=by_name)
    sharding.barrier()


def _final(run: dict[str, Any], config: SFTConfig, out_dir: Path
           ) -> tuple[Path | None, Path | None]:
    """Save final/ (and adapter/) from rank 0; a sharded run gathers the model there first."""
    model = run["model"]
    if config.sharding == "fsdp":
        model, _ = sharding.gather(model, None, lora=config.lora, main=run["main"])
    saved = save_final(out_dir, model, run["tokenizer"], config.lora) if run["main"] else (
        out_dir / "final", out_dir / "adapter" if config.lora else None)
    sharding.barrier()
    return saved


def train_sft(config: SFTConfig, data: str | Path | list[dict[str, Any]], model: Any,
              out_dir: str | Path, *, tokenizer: Any = None, progress: bool = True,
              resume: bool = True, stop_after: int | None = None) -> SFTResult:
    """Fine-tune ``model`` (a directory or a loaded model + ``tokenizer``) on ``data``.

    Loss only on model-written tokens (see the module docstring). With ``resume`` the run
    continues from the newest complete ``out_dir/checkpoint-*``; otherwise it starts over,
    deleting the run's old checkpoints and log. ``stop_after`` ends the run after that step
    as a kill would (no final model): for time-sliced jobs and for testing resume.
    """
    started, out_dir = time.monotonic(), Path(out_dir)
    run = _prepare(config, data, model, out_dir, tokenizer, resume)
    model, state, device = run["model"], run["state"], run["device"]
    pad_id = run["tokenizer"].pad_token_id
    pad_id = run["tokenizer"].eos_token_id if pad_id is None else pad_id  # masked anyway
    step, tokens, last_loss = state["step"], state["tokens"], state["loss"]
    orders: dict[int, list[int]] = {}
    lengths = [len(ids) for ids, _ in run["encoded"]]
    window = [0.0, 0]  # token-weighted loss since last record
    bar, task = progress_bar("sft", progress and run["main"], config.max_steps, step)
    sink = (open_sink(out_dir, "loss.jsonl", dict.fromkeys(["jsonl", *config.trackers]),
                      resume_step=step, wandb=config.wandb, config=config.model_dump(mode="json"))
            if run["main"] else FanOut([], out_dir / "loss.jsonl"))
    with bar, contextlib.closing(sink):
        while step < config.max_steps and (stop_after is None or step < stop_after):
            step += 1
            micro = step_indices(step, len(run["encoded"]), config, orders, lengths)
            n = sum(_trainable(run["encoded"][i]) for idx in micro for i in idx)
            if config.sharding == "fsdp":
                micro = rank_share(micro, config.batch_size)
            batches = [collate([run["encoded"][i] for i in idx], pad_id) for idx in micro]
            last_loss, lr = _train_step(model, batches, run["optimizer"], run["scheduler"],
                                        config, device, n)
            tokens += n
            window = [window[0] + last_loss * n, window[1] + n]
            if step % config.log_every == 0 or step == config.max_steps:
                record = {"step": step, "loss": window[0] / max(1, window[1]), "lr": lr,
                          "tokens": window[1], "total_tokens": tokens,
                          "elapsed_s": round(time.monotonic() - started, 3)}
                sink.log(step, record)  # jsonl is line-buffered: a kill loses none
                window = [0.0, 0]
            if config.checkpoint_every and (step % config.checkpoint_every == 0
                                            or step == config.max_steps):
                _checkpoint(run, config, out_dir, step, {"tokens": tokens, "loss": last_loss,
                                                          "config": config.model_dump()})
            bar.update(task, completed=step, stats=f"loss {last_loss:.4f} · lr {lr:.2e}")
    final = adapter = None
    if step >= config.max_steps:
        final, adapter = _final(run, config, out_dir)
    return SFTResult(
        final_loss=last_loss, steps=step, trainable_tokens=tokens, out_dir=str(out_dir),
        final_dir=str(final) if final else None, adapter_dir=str(adapter) if adapter else None,
        loss_log=str(sink.path), checkpoints=[str(p) for _, p in list_checkpoints(out_dir)],
        resumed_from=run["resumed_from"], wall_time_s=time.monotonic() - started,
        examples=run["stats"])
