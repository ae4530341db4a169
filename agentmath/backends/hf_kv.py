"""The KV cache of the continuous decode batch (:mod:`~agentmath.backends.hf_decode`): layers
that append, add rows and drop rows in place.

transformers' ``DynamicLayer`` grows its keys and values with ``torch.cat`` at every decode
step, and a batch whose rows come and go was rebuilt with ``index_select`` and ``cat``: each
step, each row that ended and each group admitted copied the whole cache. With dozens of rows
of a few hundred tokens, that copying is a large share of a decode step on a CPU (torch
profiler and py-spy over ``benchmarks/generator.py``), beside the forward itself.

A slab layer keeps keys and values in buffers with room to grow in both the row and the column
dimension (``[row capacity, heads, column capacity, head_dim]``) and hands the model views of
the live rows and filled columns ``[:rows, :, start:end]``. So a decode step writes one column;
an ended row is replaced by the last live row (one row copied, and the row order changes: the
caller reorders its own per-row state with the same order, :func:`swap_remove_order`); admitted
rows are written after the live ones, and a longer newcomer widens the window to the left
(padding columns, masked by the caller). Buffers are copied only when full.

Why by hand: transformers' ``StaticLayer`` preallocates too, but writes every row at one shared
``cache_position``, and this batch is left-padded with rows added and removed between steps; a
layer class is the extension point transformers' ``Cache`` offers (``Cache.layers``), so the
model's own forward and attention run unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from agentmath._lazy import require

GROWTH = 64  # columns (and rows) added at least when a buffer is full
LEFT_ROOM = 32  # free columns kept before the window for longer newcomers


def slab_cache(config: Any) -> Any:
    """A ``DynamicCache`` for ``config`` with one slab layer per layer (continuous batching
    accepts only models whose layers all use full attention)."""
    cache = require("transformers", "train").DynamicCache(config=config)
    slab = slab_layer_class()
    cache.layers = [slab() for _ in cache.layers]
    return cache


def swap_remove_order(rows: int, gone: Sequence[int]) -> list[int]:
    """The rows to keep, as old indices in their new order, when the rows ``gone`` leave: each
    hole is filled by the last kept row, so every kept row either stays where it is or moves
    from beyond the new end (``order[j] == j or order[j] >= len(order)``)."""
    dead = set(gone)
    order = list(range(rows))
    end = rows
    for hole in sorted(dead):
        if hole >= end:
            break
        end -= 1
        while end > hole and end in dead:
            end -= 1
        order[hole] = end
    return [order[j] for j in range(rows - len(dead))]


@functools.cache
def slab_layer_class() -> type:
    """The slab layer class, built on first use so that importing this module does not import
    transformers (see the module docstring)."""
    dynamic = require("transformers", "train").cache_utils.DynamicLayer

    class SlabLayer(dynamic):  # type: ignore[misc, valid-type]
        """``DynamicLayer`` whose ``keys`` / ``values`` are views ``[:rows, :, start:end]`` of
        larger buffers. Keys assigned from outside (``DynamicLayer``'s own methods do) are
        honoured: the next operation copies them into new buffers."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._k: Any = None
            self._v: Any = None
            self._handed: Any = None  # the keys view handed out last
            self._rows = self._start = self._end = 0

        def _views(self) -> None:
            rows, start, end = self._rows, self._start, self._end
            self.keys = self._handed = self._k[:rows, :, start:end]
            self.values = self._v[:rows, :, start:end]

        def _ensure_own(self) -> None:
            if self.keys is not self._handed:
                self.adopt(self.keys, self.values)

        def adopt(self, keys: Any, values: Any, *, rows: int = 0, left: int = LEFT_ROOM,
                  right: int = GROWTH) -> None:
            """Copy ``keys`` / ``values`` [n_rows, heads, n, head_dim] into new zeroed buffers
            with room for ``rows`` rows in all, ``left`` columns before and ``right`` after."""
            n_rows, heads, n, dim = keys.shape
            cap = max(rows, n_rows)
            self._k = keys.new_zeros((cap, heads, left + n + right, dim))
            self._v = values.new_zeros((cap, heads, left + n + right, values.shape[-1]))
            self._k[:n_rows, :, left:left + n] = keys
            self._v[:n_rows, :, left:left + n] = values
            self._rows, self._start, self._end = n_rows, left, left + n
            self.is_initialized = True
            self.device = keys.device
            self._views()

        def update(self, key_states: Any, value_states: Any, *args: Any,
                   **kwargs: Any) -> tuple[Any, Any]:
            """Append the new columns in place (into larger buffers only when full)."""
            new = key_states.shape[-2]
            if not self.is_initialized or self.keys is None or self.keys.numel() == 0:
                self.adopt(key_states, value_states, right=max(GROWTH, new))
                return self.keys, self.values
            self._ensure_own()
            if self._end + new > self._k.shape[-2]:
                used = self._end - self._start
                self.adopt(self.keys, self.values, rows=self._k.shape[0],
                           right=max(GROWTH, new, used // 2))
            self._k[:self._rows, :, self._end:self._end + new] = key_states
            self._v[:self._rows, :, self._end:self._end + new] = value_states
            self._end += new
            self._views()
            return self.keys, self.values

        def drop_front(self, n: int) -> None:
            """Forget the first ``n`` columns (padding in every row) without copying."""
            self._ensure_own()
            self._start += n
            self._views()

        def keep_rows(self, order: Sequence[int]) -> None:
            """Keep the rows ``order`` (old indices, in their new order); only the rows that
            change place are copied."""
            self._ensure_own()
            moved = [(j, i) for j, i in enumerate(order) if i != j]
            if moved:
                torch = require("torch", "train")
                dst = torch.tensor([j for j, _ in moved], device=self._k.device)
                src = torch.tensor([i for _, i in moved], device=self._k.device)
                cols = slice(self._start, self._end)
                self._k[dst, :, cols] = self._k[src, :, cols]  # the source is read first
                self._v[dst, :, cols] = self._v[src, :, cols]
            self._rows = len(order)
            self._views()

        def batch_select_indices(self, indices: Any) -> None:
            """Keep the rows at ``indices`` (any order, repeats allowed): one copy."""
            if self.get_seq_length() > 0:
                self.adopt(self.keys[indices], self.values[indices])

        def append_rows(self, keys: Any, values: Any, width: int) -> None:
            """Add rows ``keys`` / ``values`` [n_rows, heads, n, head_dim] after the live ones,
            right-aligned with them; the window becomes ``width`` >= both widths wide (the
            columns it gains are zeros, or a dropped row's data: the caller masks them)."""
            self._ensure_own()
            n_rows, n = keys.shape[0], keys.shape[-2]
            start = self._end - width
            needed, capacity = self._rows + n_rows, self._k.shape[0]
            if start < 0 or needed > capacity:
                self.adopt(self.keys, self.values,  # more rows only when they do not fit
                           rows=capacity if needed <= capacity
                           else max(needed, capacity + GROWTH),
                           left=width - (self._end - self._start) + LEFT_ROOM,
                           right=GROWTH)
                start = self._end - width
            rows = slice(self._rows, self._rows + n_rows)
            self._k[rows, :, start:self._end - n] = 0
            self._v[rows, :, start:self._end - n] = 0
            self._k[rows, :, self._end - n:self._end] = keys
            self._v[rows, :, self._end - n:self._end] = values
            self._rows += n_rows
            self._start = start
            self._views()

    return SlabLayer


def keep_rows(cache: Any, order: Sequence[int]) -> None:
    """Keep the rows ``order`` of every layer (:func:`swap_remove_order`)."""
    for layer in cache.layers:
        layer.keep_rows(order)


def append_rows(cache: Any, new: Any, width: int) -> None:
    """Add the rows of the cache ``new`` to ``cache``, the window ``width`` columns wide."""
    for mine, theirs in zip(cache.layers, new.layers, strict=True):
        mine.append_rows(theirs.keys, theirs.values, width)


def drop_front(cache: Any, n: int) -> None:
    """Forget the first ``n`` columns of every layer of ``cache`` (padding in every row)."""
    for layer in cache.layers:
        layer.drop_front(n)
