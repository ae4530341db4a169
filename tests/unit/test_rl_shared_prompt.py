"""A GRPO group's samples share their prompt: the update runs it once per micro-batch and the
rows attend to its KV cache (agentmath/rl/batch.py prefix_micro_batches, agentmath/rl/update.py
forward_logprobs; ``loss.share_prompt``). The log-probabilities and gradients are those of the
whole rows, to float rounding."""

from __future__ import annotations

from typing import Any

import pytest

from agentmath.rl.batch import TrainSample, prefix_micro_batches, shared_prefix
from agentmath.rl.config import LossConfig


def _sample(ids: list[int], trained_from: int, advantage: float = 1.0) -> TrainSample:
    n = len(ids)
    return TrainSample(ids, [0] * trained_from + [1] * (n - trained_from), [-0.5] * n,
                       advantage, 1.0)


def test_shared_prefix_stops_before_the_first_trained_token() -> None:
    prompt = list(range(10, 30))  # 20 prompt ids, then each row's own model tokens
    rows = [_sample(prompt + [1, 2, 3], 20), _sample(prompt + [1, 4], 20)]
    # the rows share 21 ids, but the logit predicting id 20 (trained) must be the row's own
    assert shared_prefix(rows) == 19
    assert shared_prefix([_sample([5, 6, 7], 1), _sample([5, 6, 8], 1)]) == 0
    # a tool-free prompt that differs early shares only what is common
    assert shared_prefix([_sample([1, 2, 3, 9, 9], 4), _sample([1, 2, 4, 9, 9], 4)]) == 2


def test_micro_batches_are_cut_per_prompt() -> None:
    a, b = list(range(100, 140)), list(range(200, 250))  # two prompts of 40 and 50 ids
    group_a = [_sample(a + [1] * k, 40) for k in (3, 5, 4)]
    group_b = [_sample(b + [2] * k, 50) for k in (2, 6)]
    lone = _sample(list(range(300, 310)) + [3, 3], 10)  # one sample of its prompt: whole
    short = [_sample([7] * 5 + [1] * k, 5) for k in (2, 3)]  # a prompt under min_prefix
    plan = prefix_micro_batches(group_a + [lone] + group_b + short, size=2, min_prefix=8)
    shared = [(sorted(len(s.ids) for s in mb), prefix) for mb, prefix in plan if prefix]
    assert shared == [([43, 44], 39), ([52, 56], 49)]
    whole = [s for mb, prefix in plan if not prefix for s in mb]
    # group a's third sample (a chunk of one), the lone sample and the short prompt: whole rows
    assert sorted(len(s.ids) for s in whole) == [7, 8, 12, 45]
    assert sum(len(mb) for mb, _ in plan) == 8
    assert all(len(mb) <= 2 for mb, _ in plan)
    # 0 shares nothing: the whole rows, micro-batched by length as before
    unshared = prefix_micro_batches(group_a + group_b, size=2, min_prefix=0)
    assert [p for _, p in unshared] == [0, 0, 0]
    assert [sorted(len(s.ids) for s in mb) for mb, _ in unshared] == [[43, 44], [45, 52], [56]]


def test_share_prompt_is_a_bounded_setting() -> None:
    assert LossConfig().share_prompt == 64
    assert LossConfig(share_prompt=0).share_prompt == 0
    with pytest.raises(ValueError, match="share_prompt"):
        LossConfig(share_prompt=-1)


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def _trained_logp_and_grads(model: Any, batch: Any) -> tuple[Any, list[Any]]:
    from agentmath.rl.update import forward_logprobs

    model.zero_grad(set_to_none=True)
    _, logp = forward_logprobs(model, batch)
    weights = batch.advantages[:, None].expand_as(logp)
    (logp[batch.mask] * weights[batch.mask]).sum().backward()
    return logp.detach()[batch.mask], [None if p.grad is None else p.grad.clone()
                                       for p in model.parameters()]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_shared_prompt_gives_the_rows_logprobs_and_gradients(lora: bool) -> None:
    from agentmath.models.tiny import build_model, build_tokenizer
    from agentmath.rl.batch import collate_samples
    from agentmath.train.plumbing import load_for_training
    from tests.fixtures.corpus import synthetic_conversations

    tok = build_tokenizer(synthetic_conversations(40), vocab_size=300)
    model = build_model(tok, "nano", seed=0)
    if lora:  # PEFT's wrapper passes the cache through to the base model
        pytest.importorskip("peft")
        model, _ = load_for_training(model, tok, seed=0, lora=True, lora_r=4)
        with torch.no_grad():  # LoRA's B starts at zero: give the adapters an effect
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.05)
        assert any(p.requires_grad for p in model.parameters())
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 290, (37,), generator=g).tolist()
    samples = [_sample(prompt + torch.randint(3, 290, (n,), generator=g).tolist(), 37,
                       advantage=1.0 - 0.5 * i) for i, n in enumerate((12, 30, 5, 21))]
    prefix = shared_prefix(samples)
    assert prefix == 36
    whole = collate_samples(samples, pad_id=0)
    split = collate_samples(samples, pad_id=0, prefix=prefix)
    assert split.prefix_ids.shape == (1, 36) and split.input_ids.shape == (4, 31)
    assert int(split.mask.sum()) == int(whole.mask.sum()) == 12 + 30 + 5 + 21
    whole_logp, whole_grads = _trained_logp_and_grads(model, whole)
    split_logp, split_grads = _trained_logp_and_grads(model, split)
    assert torch.allclose(whole_logp, split_logp, atol=1e-5)
    for a, b in zip(whole_grads, split_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
