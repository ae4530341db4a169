"""Copy warm-up: a freshly initialised tiny model learns to copy before its SFT.

A pretrained language model can already repeat a span it has read (its *induction heads*); a
randomly initialised tiny model has to discover that during SFT, where copying the problem's
numbers into code is only one part of the loss. The demo's nano model found it abruptly, at a
step that ranged from 536 to 1,338 SFT steps, or never, over seeds 0-9 (docs/demo.md): the
start's headroom, and so whether GRPO had anything to learn from, depended on the seed.

On sequences of random tokens shown twice, copying is the only way to predict the second
half, and the same model learns it in about 100 steps (loss 6.5 -> 0.2 by step 125, 300 steps
in ~13 s on one CPU core). SFT then starts from a model that copies, the way a real tool
model starts from a pretrained one.

Written by hand: a 20-line loop on token batches; the SFT trainer trains on chat records.
"""

from __future__ import annotations

from typing import Any

from agentmath.train.plumbing import resolve_device

#: Tokens per random span (the problems' numbers and phrases to copy are far shorter).
SPAN = 24
#: Added to the run's seed for the spans' random stream, so that it differs from the stream
#: that initialised the model's weights with the same seed.
SPAN_SEED_OFFSET = 12345


def copy_vocabulary(tokenizer: Any) -> list[int]:
    """The ids to draw random spans from: the tokenizer's vocabulary without its special and
    added tokens (chat markers, tool markers), which a copied span never holds."""
    skip = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
    return [i for i in range(len(tokenizer)) if i not in skip]


def copy_batch(vocab: Any, batch: int, span: int, generator: Any) -> Any:
    """``batch`` rows of ``span`` random tokens from ``vocab`` (a 1-D id tensor), each row
    followed by itself: shape (batch, 2 * span)."""
    import torch

    first = vocab[torch.randint(len(vocab), (batch, span), generator=generator)]
    return torch.cat([first, first], dim=1)


def copy_loss(logits: Any, ids: Any, span: int) -> Any:
    """Mean cross-entropy of the second copy's tokens: ``logits`` (batch, 2 * span, vocab),
    ``ids`` (batch, 2 * span); position t predicts token t + 1, so positions span-1 .. 2*span-2
    predict the second copy. The first copy is random: nothing there can be learned."""
    import torch

    pred = logits[:, span - 1:-1]
    return torch.nn.functional.cross_entropy(pred.reshape(-1, pred.size(-1)),
                                             ids[:, span:].reshape(-1))


def copy_warmup(model: Any, tokenizer: Any, steps: int, *, seed: int, batch_size: int = 32,
                learning_rate: float = 3e-3, device: str = "auto", bf16: bool = False
                ) -> list[float]:
    """Train ``model`` in place for ``steps`` steps of :func:`copy_loss` on :func:`copy_batch`
    spans (AdamW, constant ``learning_rate``; a fresh optimizer, so SFT starts its own), and
    return the per-step losses. The model is left on ``device`` in train mode."""
    import torch

    if steps <= 0:
        return []
    where = resolve_device(device)
    generator = torch.Generator().manual_seed(seed + SPAN_SEED_OFFSET)
    vocab = torch.tensor(copy_vocabulary(tokenizer))
    model.to(where).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    autocast = torch.autocast(device_type=where.type, dtype=torch.bfloat16, enabled=bf16)
    losses: list[float] = []
    for _ in range(steps):
        ids = copy_batch(vocab, batch_size, SPAN, generator).to(where)
        with autocast:
            logits = model(input_ids=ids).logits
        loss = copy_loss(logits.float(), ids, SPAN)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses
