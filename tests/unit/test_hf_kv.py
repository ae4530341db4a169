"""The continuous decode batch's KV cache (agentmath/backends/hf_kv.py): slab layers append,
drop rows, add rows and forget padding columns in place, and hold what transformers'
``DynamicLayer`` (``torch.cat`` / ``index_select``) would hold."""

from __future__ import annotations

import random
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentmath.backends.hf_kv import (  # noqa: E402
    GROWTH,
    LEFT_ROOM,
    append_rows,
    drop_front,
    keep_rows,
    slab_cache,
    slab_layer_class,
    swap_remove_order,
)
from agentmath.models.tiny import build_model, build_tokenizer  # noqa: E402
from tests.fixtures.corpus import synthetic_conversations  # noqa: E402

HEADS, DIM = 2, 4


def _kv(rows: int, cols: int, seed: int) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, HEADS, cols, DIM, generator=g),
            torch.randn(rows, HEADS, cols, DIM, generator=g))


def _storage(t: Any) -> int:
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("seed", range(20))
def test_swap_remove_order_keeps_the_rest_and_moves_only_from_beyond_the_end(seed: int) -> None:
    rng = random.Random(seed)
    rows = rng.randint(1, 12)
    gone = rng.sample(range(rows), rng.randint(0, rows))
    order = swap_remove_order(rows, gone)
    assert sorted(order) == sorted(set(range(rows)) - set(gone))
    assert all(i == j or i >= len(order) for j, i in enumerate(order))


def test_appends_are_written_in_place_and_equal_a_concatenation() -> None:
    layer = slab_layer_class()()
    keys, values = _kv(3, 5, 0)
    layer.update(keys, values)
    base = _storage(layer.keys)
    want_k, want_v = keys, values
    for step in range(GROWTH):
        k, v = _kv(3, 1, step + 1)
        got_k, got_v = layer.update(k, v)
        want_k, want_v = torch.cat([want_k, k], -2), torch.cat([want_v, v], -2)
        assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)
    assert _storage(layer.keys) == base  # no step copied the cache
    layer.update(*_kv(3, 1, 99))  # the buffer is full now: one copy into a larger one
    assert layer.get_seq_length() == 5 + GROWTH + 1 and _storage(layer.keys) != base


def test_rows_leave_and_join_in_place() -> None:
    layer = slab_layer_class()()
    keys, values = _kv(5, 6, 0)
    layer.update(keys, values)
    base = _storage(layer.keys)
    order = swap_remove_order(5, [1, 3])
    layer.keep_rows(order)
    assert torch.equal(layer.keys, keys[order]) and torch.equal(layer.values, values[order])
    # a newcomer 9 columns long widens the window to the left; the old rows' new columns are
    # padding (the batch's mask hides them), the newcomer's own columns hold its KV
    new_k, new_v = _kv(2, 9, 1)
    layer.append_rows(new_k, new_v, width=9)
    assert layer.keys.shape == (5, HEADS, 9, DIM)
    assert torch.equal(layer.keys[:3, :, 3:], keys[order]) and torch.equal(layer.keys[3:], new_k)
    assert torch.equal(layer.values[3:], new_v)
    assert _storage(layer.keys) == base  # the rows dropped made room for the two
    # a sixth row does not fit: one copy into buffers with GROWTH more rows; a shorter
    # newcomer is right-aligned, zeros before it
    short_k, short_v = _kv(1, 2, 2)
    before = layer.keys.clone()
    layer.append_rows(short_k, short_v, width=9)
    assert torch.equal(layer.keys[:5], before)
    assert torch.equal(layer.keys[5, :, 7:], short_k[0]) and not layer.keys[5, :, :7].any()
    base = _storage(layer.keys)
    drop_k = layer.keys[:, :, 4:].clone()
    layer.drop_front(4)
    assert torch.equal(layer.keys, drop_k) and _storage(layer.keys) == base


def test_keys_replaced_from_outside_are_honoured() -> None:
    layer = slab_layer_class()()
    layer.update(*_kv(2, 3, 0))
    replaced_k, replaced_v = _kv(2, 4, 1)
    layer.keys, layer.values = replaced_k, replaced_v  # as DynamicLayer's own methods do
    k, v = _kv(2, 1, 2)
    got_k, _ = layer.update(k, v)
    assert torch.equal(got_k, torch.cat([replaced_k, k], -2))
    layer.batch_select_indices(torch.tensor([1, 1, 0]))
    assert torch.equal(layer.keys, torch.cat([replaced_k, k], -2)[[1, 1, 0]])


def test_a_model_decodes_the_same_with_a_slab_cache_as_with_dynamic_cache() -> None:
    """The model's own forward over a slab cache, rows dropped and joined between steps, gives
    the logits it gives over transformers' DynamicCache rebuilt with cat / index_select."""
    tok = build_tokenizer(synthetic_conversations(40), vocab_size=300)
    model = build_model(tok, "nano", seed=0).eval()
    ids = torch.randint(3, 290, (4, 7), generator=torch.Generator().manual_seed(0))
    slab, plain = slab_cache(model.config), None
    with torch.no_grad():
        from transformers import DynamicCache

        plain = DynamicCache(config=model.config)
        a = model(input_ids=ids, cache=slab, use_cache=True).logits
        b = model(input_ids=ids, cache=plain, use_cache=True).logits
        assert torch.allclose(a, b, atol=1e-5)
        nxt = ids[:, -1:]
        for step in range(3):
            position = torch.full((len(nxt), 1), 7 + step)
            a = model(input_ids=nxt, position_ids=position, cache=slab, use_cache=True).logits
            b = model(input_ids=nxt, position_ids=position, cache=plain, use_cache=True).logits
            assert torch.allclose(a, b, atol=1e-5)
        order = swap_remove_order(4, [0])
        keep_rows(slab, order)
        plain.batch_select_indices(torch.tensor(order))
        for mine, theirs in zip(slab.layers, plain.layers, strict=True):
            assert torch.equal(mine.keys, theirs.keys)
        drop_front(slab, 2)
        for layer in plain.layers:
            layer.keys, layer.values = layer.keys[:, :, 2:], layer.values[:, :, 2:]
        joined = slab_cache(model.config)
        model(input_ids=ids[:1, :4], cache=joined, use_cache=True)
        append_rows(slab, joined, width=8)
        for mine, theirs, new in zip(slab.layers, plain.layers, joined.layers, strict=True):
            assert torch.equal(mine.keys[:3, :, -8:], theirs.keys)
            assert torch.equal(mine.keys[3, :, -4:], new.keys[0])


def test_a_much_longer_newcomer_widens_the_buffers_without_adding_rows() -> None:
    layer = slab_layer_class()()
    keys, values = _kv(2, 3, 0)
    layer.update(keys, values)
    layer.keep_rows(swap_remove_order(2, [0]))
    long_k, long_v = _kv(1, 3 + LEFT_ROOM + 10, 1)  # more columns than the room on the left
    layer.append_rows(long_k, long_v, width=long_k.shape[-2])
    assert torch.equal(layer.keys[1], long_k[0])
    assert torch.equal(layer.keys[0, :, -3:], keys[1])
    row_bytes = layer.keys.shape[1] * layer.keys.element_size() * DIM
    columns = layer.keys.untyped_storage().nbytes() // row_bytes // 2  # two rows held
    # room for the window, LEFT_ROOM before it and GROWTH after it, in two rows (not 2 + GROWTH)
    assert columns == long_k.shape[-2] + LEFT_ROOM + GROWTH
