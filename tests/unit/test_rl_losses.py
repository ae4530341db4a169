"""The GRPO objective's pure functions against hand-computed values, and the masking proof."""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from agentmath.agent.trajectory import Segment, Trajectory  # noqa: E402
from agentmath.rl.batch import ScoredSample, collate_samples, to_train_sample  # noqa: E402
from agentmath.rl.losses import (  # noqa: E402
    ISCorrection,
    aggregate,
    correction_weights,
    group_advantages,
    kl_k3,
    policy_loss,
    sampler_log_ratios,
    token_logprobs,
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
    loss, stats = policy_loss(logp, logp.detach(), adv, mask, correction=None)
    assert float(loss) == pytest.approx((-1 - 1 + 1) / 3)  # token-level: 3 masked tokens
    assert stats.tokens == 3 and stats.clip_frac == 0 and stats.ratio_mean == pytest.approx(1)
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, correction=None,
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
                               correction=None)
        assert float(loss) == pytest.approx(want, rel=1e-5)
        assert st.clip_frac == frac


def test_truncated_importance_weights() -> None:
    old = torch.tensor([[-1.0, -1.0, -1.0]])
    sampler = torch.tensor([[-2.0, -1.0, math.nan]])
    mask = torch.ones(1, 3)
    d = sampler_log_ratios(old, sampler, mask)
    assert d[0].tolist() == pytest.approx([1.0, 0.0, 0.0])  # unknown -> 0 (not corrected)
    w, changed = correction_weights(d, mask, ISCorrection("token_tis", cap=2.0))
    assert w[0].tolist() == pytest.approx([2.0, 1.0, 1.0])  # e^1 capped; equal; unknown -> 1
    assert changed[0].tolist() == [True, False, False]
    loss, st = policy_loss(old.clone(), old, torch.tensor([1.0]), mask,
                           sampler_logp=sampler, correction=ISCorrection("token_tis", cap=2.0))
    assert float(loss) == pytest.approx(-(2 + 1 + 1) / 3)
    assert st.is_capped_frac == pytest.approx(1 / 3)
    assert st.mismatch_masked == pytest.approx(1 / 3)


# Two sequences of three loss tokens (the second's last position is padding). Log-ratios
# d = log pi_trainer - log pi_sampler: row 0 [1.0, -0.2, 0.1], row 1 [-1.0, 0.05, (pad)].
OLD = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -1.0, -3.0]])
SAMPLER = torch.tensor([[-2.0, -0.8, -1.1], [-1.0, -1.05, -9.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


@pytest.mark.parametrize("correction, weights, changed", [
    (None, [[1, 1, 1], [1, 1, 0]], [[0, 0, 0], [0, 0, 0]]),
    (ISCorrection("none"), [[1, 1, 1], [1, 1, 0]], [[0, 0, 0], [0, 0, 0]]),
    (ISCorrection("token_tis", cap=2.0),
     [[2.0, math.exp(-0.2), math.exp(0.1)], [math.exp(-1.0), math.exp(0.05), 0]],
     [[1, 0, 0], [0, 0, 0]]),
    # the band [0.5, 2]: e^1 and e^-1 leave it, the rest keep their ratio
    (ISCorrection("token_mask", low=0.5, high=2.0),
     [[0, math.exp(-0.2), math.exp(0.1)], [0, math.exp(0.05), 0]],
     [[1, 0, 0], [1, 0, 0]]),
    # sequence log-ratios 0.9 and -0.95: e^0.9 = 2.46 is under a cap of 3, over one of 2
    (ISCorrection("sequence_tis", cap=3.0),
     [[math.exp(0.9)] * 3, [math.exp(-0.95)] * 2 + [0]], [[0, 0, 0], [0, 0, 0]]),
    (ISCorrection("sequence_tis", cap=2.0),
     [[2.0] * 3, [math.exp(-0.95)] * 2 + [0]], [[1, 1, 1], [0, 0, 0]]),
    # e^0.9 = 2.46 leaves [0.5, 2]: row 0 dropped; e^-0.95 = 0.39 leaves it too
    (ISCorrection("sequence_mask", low=0.5, high=2.0),
     [[0, 0, 0], [0, 0, 0]], [[1, 1, 1], [1, 1, 0]]),
    (ISCorrection("sequence_mask", low=0.3, high=3.0),
     [[math.exp(0.9)] * 3, [math.exp(-0.95)] * 2 + [0]], [[0, 0, 0], [0, 0, 0]]),
    # geometric means e^0.3 = 1.35 and e^-0.475 = 0.62: with [0.6, 1.4] both stay at weight 1,
    # with [0.7, 1.4] the second sequence is dropped
    (ISCorrection("geo_mask", low=0.6, high=1.4), [[1, 1, 1], [1, 1, 0]],
     [[0, 0, 0], [0, 0, 0]]),
    (ISCorrection("geo_mask", low=0.7, high=1.4), [[1, 1, 1], [0, 0, 0]],
     [[0, 0, 0], [1, 1, 0]]),
])
def test_each_sampler_correction_on_hand_made_logprobs(
        correction: ISCorrection | None, weights: list[list[float]],
        changed: list[list[int]]) -> None:
    d = sampler_log_ratios(OLD, SAMPLER, MASK)
    assert d.tolist() == [pytest.approx([1.0, -0.2, 0.1]), pytest.approx([-1.0, 0.05, 0.0])]
    w, hit = correction_weights(d, MASK, correction)
    got = (w * MASK).tolist()  # the padding's weight does not matter: it carries no loss
    for row, want in zip(got, weights, strict=True):
        assert row == pytest.approx(want, abs=1e-6)
    assert hit.int().tolist() == changed
    loss, st = policy_loss(OLD.clone(), OLD, torch.tensor([1.0, 1.0]), MASK,
                           sampler_logp=SAMPLER, correction=correction)
    # on-policy (ratio 1), advantage 1: the loss is minus the mean weight over the 5 tokens
    assert float(loss) == pytest.approx(-sum(map(sum, weights)) / 5, abs=1e-6)
    assert st.mismatch_masked == pytest.approx(sum(map(sum, changed)) / 5)


def test_the_mismatch_is_measured_whatever_the_correction() -> None:
    k3 = [math.exp(x) - x - 1 for x in (1.0, -0.2, 0.1, -1.0, 0.05)]
    for correction in (None, ISCorrection("token_tis"), ISCorrection("geo_mask", 0.9, 0.9)):
        _, st = policy_loss(OLD.clone(), OLD, torch.tensor([1.0, 1.0]), MASK,
                            sampler_logp=SAMPLER, correction=correction)
        assert st.mismatch_kl == pytest.approx(sum(k3) / 5)
        assert st.mismatch_max == pytest.approx(1.0)
    _, st = policy_loss(OLD.clone(), OLD, torch.tensor([1.0, 1.0]), MASK)  # no sampler logprobs
    assert (st.mismatch_kl, st.mismatch_max, st.mismatch_masked) == (0.0, 0.0, 0.0)


def test_a_correction_band_must_hold_one() -> None:
    with pytest.raises(ValueError, match="band must hold 1"):
        ISCorrection("token_mask", low=1.2, high=2.0)
    with pytest.raises(ValueError, match="cap must be positive"):
        ISCorrection("token_tis", cap=0.0)


def test_kl_k3_value_and_penalty() -> None:
    assert float(kl_k3(torch.tensor(-1.0), torch.tensor(-2.0))) == pytest.approx(math.exp(-1))
    assert float(kl_k3(torch.tensor(-1.0), torch.tensor(-1.0))) == 0.0
    logp = torch.tensor([[-1.0]])
    loss, st = policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), correction=None,
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

