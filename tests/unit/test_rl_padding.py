"""The policy update's forward runs right-padded micro-batches without an attention mask
(agentmath/rl/batch.py, TensorBatch): a causal model's real positions never attend to the
padding after them, so log-probabilities and gradients on the trained positions are those of
the masked forward, and each row's are those of its sample forwarded alone."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentmath.models.tiny import build_model, build_tokenizer  # noqa: E402
from agentmath.rl.batch import TensorBatch, TrainSample, collate_samples  # noqa: E402
from agentmath.rl.losses import token_logprobs  # noqa: E402
from tests.fixtures.corpus import synthetic_conversations  # noqa: E402

LENGTHS = [9, 17, 30]


def _logp_and_grads(model: Any, batch: TensorBatch, attention: Any) -> tuple[Any, list[Any]]:
    """Trained positions' log-probabilities, and the parameters' gradients of an
    advantage-weighted sum of them."""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=batch.input_ids, attention_mask=attention).logits
    logp = token_logprobs(logits, batch.input_ids)
    weights = batch.advantages[:, None].expand_as(logp)
    (logp[batch.mask] * weights[batch.mask]).sum().backward()
    return logp.detach()[batch.mask], [p.grad.clone() for p in model.parameters()
                                       if p.grad is not None]


def test_right_padded_rows_need_no_attention_mask() -> None:
    tok = build_tokenizer(synthetic_conversations(40), vocab_size=300)
    model = build_model(tok, "nano", seed=0)
    g = torch.Generator().manual_seed(0)
    samples = [TrainSample(torch.randint(3, 290, (n,), generator=g).tolist(),
                           [0] * 4 + [1] * (n - 4), [-0.5] * n, 1.0 - i, 1.0)
               for i, n in enumerate(LENGTHS)]
    batch = collate_samples(samples, pad_id=0)
    attention = torch.zeros_like(batch.input_ids)
    for row, n in enumerate(LENGTHS):
        attention[row, :n] = 1
    plain_logp, plain_grads = _logp_and_grads(model, batch, None)
    masked_logp, masked_grads = _logp_and_grads(model, batch, attention)
    assert torch.allclose(plain_logp, masked_logp, atol=1e-6)
    for a, b in zip(plain_grads, masked_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    with torch.no_grad():
        padded = token_logprobs(model(input_ids=batch.input_ids).logits, batch.input_ids)
        for row, sample in enumerate(samples):
            ids = torch.tensor([sample.ids])
            alone = token_logprobs(model(input_ids=ids).logits, ids)[0]
            assert torch.allclose(padded[row, :len(sample.ids) - 1], alone, atol=1e-5)
