"""SFT data order: a seeded permutation per epoch; grouped by length when asked."""

from __future__ import annotations

from agentmath.train.sft import SFTConfig, epoch_order


def test_epoch_order_is_a_seeded_permutation() -> None:
    cfg = SFTConfig(seed=3, batch_size=4)
    a = epoch_order(50, 0, cfg)
    assert sorted(a) == list(range(50)) and a == epoch_order(50, 0, cfg)
    assert a != epoch_order(50, 1, cfg)  # a new order every epoch


def test_group_by_length_pads_less_and_keeps_every_example() -> None:
    lengths = [(i * 37) % 200 + 10 for i in range(96)]  # mixed lengths
    plain = SFTConfig(seed=0, batch_size=8)
    grouped = SFTConfig(seed=0, batch_size=8, group_by_length=4)

    def padded(order: list[int]) -> int:
        batches = [order[i:i + 8] for i in range(0, len(order), 8)]
        return sum(8 * max(lengths[i] for i in b) for b in batches)

    g = epoch_order(96, 0, grouped, lengths)
    assert sorted(g) == list(range(96)) and g == epoch_order(96, 0, grouped, lengths)
    assert padded(g) < 0.8 * padded(epoch_order(96, 0, plain, lengths))
    window = 4 * 8  # each window of 4 batches holds the same examples as the plain order's
    p = epoch_order(96, 0, plain, lengths)
    for start in range(0, 96, window):
        assert sorted(g[start:start + window]) == sorted(p[start:start + window])
    assert epoch_order(96, 0, grouped) == p  # no lengths given: the plain order
