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
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentmath._lazy import require
from agentmath.backends.base import chat_prompt_ids
from agentmath.errors import DataError
from agentmath.jsonl import iter_jsonl
from agentmath.tracking import open_sink
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
    resolve_device,
    restore_checkpoint,
    save_checkpoint,
    save_final,
)
from agentmath.train.sft_config import SFTConfig

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


def epoch_order(n: int, epoch: int, config: SFTConfig,
                lengths: Sequence[int] | None = None) -> list[int]:
    """The example order of one epoch: a permutation seeded by (seed, epoch); with
    ``group_by_length`` windows of that many batches are sorted by length and their batches
    shuffled (seeded too), so that a batch pads little (HF Trainer's group_by_length)."""
    order = random.Random(f"{config.seed}:{epoch}").sample(range(n), n)
    window = config.group_by_length * config.batch_size
    if not window or lengths is None:
        return order
    rng = random.Random(f"{config.seed}:{epoch}:lengths")
    grouped: list[int] = []
    for start in range(0, n, window):
        chunk = sorted(order[start:start + window], key=lambda i: lengths[i])
        batches = [chunk[i:i + config.batch_size]
                   for i in range(0, len(chunk), config.batch_size)]
        rng.shuffle(batches)
        grouped += [i for batch in batches for i in batch]
    return grouped


def _step_indices(step: int, n: int, config: SFTConfig, orders: dict[int, list[int]],
                  lengths: Sequence[int] | None = None) -> list[list[int]]:
    """Example indices of each micro-batch of optimizer step ``step`` (1-based).

    The data is a stream of epochs, each in :func:`epoch_order`: the indices of a step depend
    on nothing but the step, which is what makes resume exact.
    """
    per_step, picked = config.batch_size * config.grad_accum, []
    for pos in range((step - 1) * per_step, step * per_step):
        epoch = pos // n
        if epoch not in orders:
            orders.clear()  # keep one epoch's order in memory
            orders[epoch] = epoch_order(n, epoch, config, lengths)
        picked.append(orders[epoch][pos % n])
    return [picked[i:i + config.batch_size] for i in range(0, per_step, config.batch_size)]


def _train_step(model: Any, batches: list[tuple[Any, Any, Any]], optimizer: Any,
                scheduler: Any, config: SFTConfig, device: Any) -> tuple[float, int, float]:
    """One optimizer step over the micro-batches: (mean loss, trainable tokens, lr used)."""
    torch = require("torch", "train")
    n_tokens = sum(int((labels[:, 1:] != IGNORE_INDEX).sum()) for _, _, labels in batches)
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
        loss.backward()
        total += float(loss.detach())
    if config.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad],
                                       config.max_grad_norm)
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return total, n_tokens, lr


def _prepare(config: SFTConfig, data: Any, model: Any, out_dir: Path, tokenizer: Any,
             resume: bool) -> dict[str, Any]:
    """Load data and model, build the optimizer, and restore the latest checkpoint if any."""
    examples = ([_check_example(row, f"data[{i}]") for i, row in enumerate(data)]
                if isinstance(data, list) else load_examples(data))
    device = resolve_device(config.device)
    model, tokenizer = load_for_training(
        model, tokenizer, seed=config.seed, lora=config.lora, lora_r=config.lora_r,
        lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout, what="sft")
    model = model.to(device).train()
    encoded, stats = tokenize_examples(tokenizer, examples, config.max_length)
    if not encoded:
        raise DataError(f"no example has a trainable token within max_length={config.max_length}")
    warmup, total = config.warmup_steps, config.max_steps

    def factor(done: int) -> float:  # ``done`` optimizer steps taken before this one
        if done < warmup:
            return (done + 1) / warmup
        return max(0.0, (total - done) / max(1, total - warmup))

    optimizer, scheduler = build_optimizer(model, config.learning_rate, config.weight_decay,
                                           factor)
    out_dir.mkdir(parents=True, exist_ok=True)
    found = list_checkpoints(out_dir) if resume else []
    if not resume:
        for stale in [*out_dir.glob("checkpoint-*"), out_dir / "loss.jsonl"]:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink(missing_ok=True)
    state = (restore_checkpoint(found[-1][1], model, optimizer, scheduler, lora=config.lora,
                                device=device,
                                structural={k: getattr(config, k) for k in _STRUCTURAL})
             if found else {"step": 0, "tokens": 0, "loss": None})
    (out_dir / "sft_config.json").write_text(json.dumps(
        {"config": config.model_dump(), "examples": stats}, indent=2) + "\n")
    return {"model": model, "tokenizer": tokenizer, "encoded": encoded, "stats": stats,
            "optimizer": optimizer, "scheduler": scheduler, "device": device, "state": state,
            "resumed_from": found[-1][0] if found else None}


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
    bar, task = progress_bar("sft", progress, config.max_steps, step)
    sink = open_sink(out_dir, "loss.jsonl", dict.fromkeys(["jsonl", *config.trackers]),
                     resume_step=step, wandb=config.wandb, config=config.model_dump(mode="json"))
    with bar, contextlib.closing(sink):
        while step < config.max_steps and (stop_after is None or step < stop_after):
            step += 1
            batches = [collate([run["encoded"][i] for i in idx], pad_id)
                       for idx in _step_indices(step, len(run["encoded"]), config, orders,
                                                lengths)]
            last_loss, n, lr = _train_step(model, batches, run["optimizer"], run["scheduler"],
                                           config, device)
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
                save_checkpoint(out_dir, step, model, run["tokenizer"], run["optimizer"],
                                 run["scheduler"], {"tokens": tokens, "loss": last_loss,
                                                    "config": config.model_dump()},
                                 config.keep_checkpoints)
            bar.update(task, completed=step, stats=f"loss {last_loss:.4f} · lr {lr:.2e}")
    final = adapter = None
    if step >= config.max_steps:
        final, adapter = save_final(out_dir, model, run["tokenizer"], config.lora)
    return SFTResult(
        final_loss=last_loss, steps=step, trainable_tokens=tokens, out_dir=str(out_dir),
        final_dir=str(final) if final else None, adapter_dir=str(adapter) if adapter else None,
        loss_log=str(sink.path), checkpoints=[str(p) for _, p in list_checkpoints(out_dir)],
        resumed_from=run["resumed_from"], wall_time_s=time.monotonic() - started,
        examples=run["stats"])
