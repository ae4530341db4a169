"""The GRPO objective's pure functions against hand-computed values, and the masking proof."""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from agentmath.agent.trajectory import Segment, Trajectory  # noqa: E402
from agentmath.rl.batch import ScoredSample, collate_samples, to_train_sample  # noqa: E402
from agentmath.rl.losses import (  # noqa: E402
    aggregate,
    group_advantages,
    kl_k3,
    policy_loss,
    token_logprobs,
    truncated_is_weights,
)


def test_group_advantages_std_and_dr_grpo() -> None:
    adv = group_advantages([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    assert adv[0].tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # no variance: no signal
    dr = group_advantages([[1.0, 0.0, 0.0, 1.0]], std_normalize=False)
    assert dr[0].tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])
    with pytest.raises(ValueError, match="G >= 2"):
        group_advantages([[1.0]])


def test_token_logprobs_match_log_softmax_with_temperature() -> None:
    logits = torch.randn(2, 5, 7)
    ids = torch.randint(0, 7, (2, 5))
    got = token_logprobs(logits, ids, torch.tensor([1.0, 0.5]))
    for b, temp in enumerate((1.0, 0.5)):
        ref = torch.log_softmax(logits[b, :-1] / temp, -1)
        want = ref.gather(-1, ids[b, 1:, None]).squeeze(-1)
        assert torch.allclose(got[b], want, atol=1e-5)


def test_on_policy_loss_is_minus_advantage_token_and_sequence_mean() -> None:
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.5]])
    mask = torch.tensor([[1, 1], [1, 0]])
    adv = torch.tensor([1.0, -1.0])
    loss, stats = policy_loss(logp, logp.detach(), adv, mask, tis_cap=None)
    assert float(loss) == pytest.approx((-1 - 1 + 1) / 3)  # token-level: 3 masked tokens
    assert stats.tokens == 3 and stats.clip_frac == 0 and stats.ratio_mean == pytest.approx(1)
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, tis_cap=None,
                          aggregation="sequence")
    assert float(loss) == pytest.approx((-1 + 1) / 2)  # mean of per-sequence means


def test_clip_higher_is_asymmetric_and_pessimistic() -> None:
    mask = torch.ones(1, 1)
    up, down = math.log(1.6487212707), math.log(0.5)  # ratios e^0.5 and 0.5
    cases = [(up, 1.0, -1.28, 1.0),  # A>0, ratio above 1+0.28: clipped
             (up, -1.0, 1.6487212707, 0.0),  # A<0: the unclipped (worse) branch
             (down, 1.0, -0.5, 0.0),  # A>0, ratio low: unclipped
             (down, -1.0, 0.8, 1.0)]  # A<0, ratio below 1-0.2: clipped
    for log_ratio, a, want, frac in cases:
        loss, st = policy_loss(torch.tensor([[log_ratio]]), torch.zeros(1, 1),
                               torch.tensor([a]), mask, clip_low=0.2, clip_high=0.28,
                               tis_cap=None)
        assert float(loss) == pytest.approx(want, rel=1e-5)
        assert st.clip_frac == frac


def test_truncated_importance_weights() -> None:
    old = torch.tensor([[-1.0, -1.0, -1.0]])
    sampler = torch.tensor([[-2.0, -1.0, math.nan]])
    w = truncated_is_weights(old, sampler, cap=2.0)
    assert w[0].tolist() == pytest.approx([2.0, 1.0, 1.0])  # e^1 capped; equal; unknown -> 1
    loss, st = policy_loss(old.clone(), old, torch.tensor([1.0]), torch.ones(1, 3),
                           sampler_logp=sampler, tis_cap=2.0)
    assert float(loss) == pytest.approx(-(2 + 1 + 1) / 3)
    assert st.is_capped_frac == pytest.approx(1 / 3)


def test_kl_k3_value_and_penalty() -> None:
    assert float(kl_k3(torch.tensor(-1.0), torch.tensor(-2.0))) == pytest.approx(math.exp(-1))
    assert float(kl_k3(torch.tensor(-1.0), torch.tensor(-1.0))) == 0.0
    logp = torch.tensor([[-1.0]])
    loss, st = policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), tis_cap=None,
                           ref_logp=torch.tensor([[-2.0]]), kl_coef=0.5)
    assert float(loss) == pytest.approx(0.5 * math.exp(-1))
    assert st.kl == pytest.approx(math.exp(-1))


def test_aggregate_with_a_step_wide_denominator() -> None:
    per = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert float(aggregate(per, mask, "token")) == pytest.approx(2.0)
    assert float(aggregate(per, mask, "token", denominator=6.0)) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        aggregate(per, mask, "bogus")  # type: ignore[arg-type]


def _trajectory() -> Trajectory:
    return Trajectory("p", segments=[
        Segment("prompt", "P", [1, 2, 3]),
        Segment("model", "m", [4, 5], logprobs=[-0.1, -0.2]),
        Segment("tool", "t", [6, 7, 8]),
        Segment("model", "m", [9, 10], logprobs=[-0.3, -0.4]),
    ], finish_reason="answered")


def _grad_by_target(mask_tool_tokens: bool) -> tuple[list[int], Any]:
    sample = ScoredSample("g", 0, _trajectory(), 1.0, {}, True, advantage=1.0)
    batch = collate_samples([to_train_sample(sample, mask_tool_tokens=mask_tool_tokens)], 0)
    logits = torch.randn(1, 10, 16, requires_grad=True)
    logp = token_logprobs(logits, batch.input_ids)
    loss, _ = policy_loss(logp, logp.detach(), batch.advantages, batch.mask,
                          sampler_logp=batch.sampler_logp)
    loss.backward()
    # position t predicts token t + 1: the gradient that reaches each *target* token
    norms = logits.grad[0, :-1].abs().sum(-1)
    return batch.input_ids[0, 1:].tolist(), norms


def test_tool_and_prompt_tokens_receive_exactly_zero_gradient() -> None:
    targets, norms = _grad_by_target(mask_tool_tokens=True)
    for target, norm in zip(targets, norms.tolist(), strict=True):
        if target in (2, 3, 6, 7, 8):  # prompt and tool tokens
            assert norm == 0.0, f"token {target} got gradient {norm}"
        else:  # model tokens 4, 5, 9, 10
            assert norm > 0.0


def test_unmasked_ablation_trains_on_tool_tokens() -> None:
    targets, norms = _grad_by_target(mask_tool_tokens=False)
    by_target = dict(zip(targets, norms.tolist(), strict=True))
    assert all(by_target[t] > 0 for t in (6, 7, 8))
    assert by_target[2] == 0.0 and by_target[3] == 0.0  # the prompt never

