"""The running decode batch of continuous batching (:mod:`~agentmath.backends.hf_continuous`).

:class:`DecodeBatch` holds the rows that decode together and their shared left-padded KV cache,
and does the two things a call into the model does: admit new rows (prefill, each distinct
prompt once, after a stashed prefix when the prompt continues a finished row:
:mod:`~agentmath.backends.hf_prefix`) and decode one step of every row. A plain loop over the
model's own forward and a ``DynamicCache`` whose layers append in place
(:mod:`~agentmath.backends.hf_kv`; why not a library's: the module docstring of
``hf_continuous``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmath._lazy import require
from agentmath.backends.base import Generation, SamplingParams
from agentmath.backends.hf_kv import (
    append_rows,
    drop_front,
    keep_rows,
    slab_cache,
    swap_remove_order,
)
from agentmath.backends.hf_prefix import KV, PrefixStash
from agentmath.backends.hf_sampling import BatchSampling, RowRandom, sample
from agentmath.errors import BackendError
from agentmath.models.kv import cache_argument

log = logging.getLogger(__name__)

# What a failing forward raises (a bad id: IndexError; shapes, memory: RuntimeError/ValueError).
_TORCH_ERRORS = (RuntimeError, ValueError, IndexError)

RunOnModelThread = Callable[..., Awaitable[Any]]


@dataclass(eq=False)
class Request:
    """One generation request as the in-process backend queues it (compared by identity)."""

    prompt: list[int]
    stop: tuple[str, ...]
    max_tokens: int
    sampling: SamplingParams
    future: asyncio.Future[Generation]


@dataclass(eq=False)
class Row(Request):
    """A request in continuous batching, from the queue to the end of its generation."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tail: str = ""  # the last stop_len characters of the pieces decoded so far
    stop_len: int = 0
    position: int = 0  # position id of the last sampled token, the next one fed to the model
    random: RowRandom | None = None  # a sampling row's own random stream; None when greedy
    stamp: int = 0  # the weights it was admitted under (PrefixStash's stamp)


class DecodeBatch:
    """The running rows and their shared left-padded KV cache; used on the model thread only.

    Invariant between calls: the cache holds every token of every row except its last sampled
    one (``Row.position`` is that token's position id), and ``mask`` [B, L] marks which of the
    cache's L columns are real for each row."""

    def __init__(self, model: Any, tokenizer: Any, eos_ids: Sequence[int], pad_id: int,
                 device: Any, prefixes: PrefixStash) -> None:
        self.torch = require("torch", "train")
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.prefixes = prefixes  # the batcher's, kept when a failure replaces this batch
        self.eos = frozenset(eos_ids)
        self.pad_id = pad_id
        self.cache_arg = cache_argument()  # the forward's cache keyword, per version
        self.rows: list[Row] = []
        self.cache: Any = None
        self.mask: Any = None
        self.params: BatchSampling | None = None
        self.pieces: dict[int, str] = {}

    # ------------------------------------------------------------------ one call
    def advance(self, admit: list[Row], drop: list[Row],
                steps: int) -> list[tuple[Row, Generation | BackendError]]:
        """Drop ``drop`` (cancelled), admit ``admit``, then decode ``steps`` steps; return the
        rows that ended, each with its generation or the error that failed it."""
        torch, model = self.torch, self.model
        done: list[tuple[Row, Generation | BackendError]] = []
        training = model.training  # a trainer sharing the model may leave it in train mode
        if training:
            model.eval()
        try:
            with torch.no_grad():
                if drop:
                    gone = set(drop)
                    self._drop([i for i, r in enumerate(self.rows) if r in gone])
                if admit:
                    stamp = self.prefixes.refresh()
                    for row in admit:
                        row.stamp = stamp
                    done += self._admit(admit)
                for _ in range(steps):
                    if not self.rows:
                        break
                    done += self._step()
        finally:
            if training:
                model.train()
        return done

    def _admit(self, rows: list[Row]) -> list[tuple[Row, Generation | BackendError]]:
        """Prefill ``rows`` and merge them in: those whose prompt extends a stashed prefix
        (:mod:`~agentmath.backends.hf_prefix`) prefill only the rest, in a group of their own."""
        cold: list[Row] = []
        warm: list[tuple[Row, tuple[int, KV]]] = []
        for row in rows:
            hit = self.prefixes.take(row.prompt) if self.prefixes.rows else None
            if hit is None:
                cold.append(row)
            else:
                warm.append((row, hit))
        done = self._admit_group(cold, None) if cold else []
        if warm:
            done += self._admit_group([r for r, _ in warm], [h for _, h in warm])
        return done

    def _admit_group(self, rows: list[Row], hits: list[tuple[int, KV]] | None
                     ) -> list[tuple[Row, Generation | BackendError]]:
        """Prefill ``rows`` together (after their stashed prefixes ``hits``) and merge them in;
        a group that fails is retried one row at a time, so that one bad request fails alone."""
        try:
            cache, mask, logits = self._prefill_unique(rows, hits)
        except _TORCH_ERRORS as exc:
            if len(rows) > 1:
                return [x for i, r in enumerate(rows)
                        for x in self._admit_group([r], None if hits is None else [hits[i]])]
            log.warning("prefill failed: %s", exc)
            return [(rows[0], BackendError(f"generation failed: {exc}"))]
        for row in rows:
            row.position = len(row.prompt)
        ended = self._record(rows, logits)
        gone = {i for i, _ in ended}
        keep = [i for i in range(len(rows)) if i not in gone]
        if keep:
            index = self.torch.tensor(keep, device=self.device)
            cache.batch_select_indices(index)
            self._merge([rows[i] for i in keep], cache, _trim(cache, mask[index]))
        return [(rows[i], g) for i, g in ended]

    def _prefill_unique(self, rows: list[Row], hits: list[tuple[int, KV]] | None
                        ) -> tuple[Any, Any, Any]:
        """:meth:`_prefill`, each distinct prompt once: the samples of a GRPO group arrive
        together with the same prompt, and their rows are copies of one prefill."""
        if hits is not None:
            return self._prefill(rows, hits)
        first: dict[tuple[int, ...], int] = {}
        where = [first.setdefault(tuple(r.prompt), len(first)) for r in rows]
        if len(first) == len(rows):
            return self._prefill(rows, None)
        seen = {i: r for r, i in zip(rows, where, strict=True)}  # index -> a row with it
        cache, mask, logits = self._prefill([seen[i] for i in range(len(first))], None)
        index = self.torch.tensor(where, device=self.device)
        cache.batch_select_indices(index)
        return cache, mask[index], logits[index]

    def _prefill(self, rows: list[Row], hits: list[tuple[int, KV]] | None
                 ) -> tuple[Any, Any, Any]:
        """Forward the prompts of ``rows`` in a cache of their own; return it, its mask and the
        logits at each prompt's last token. With ``hits`` (each row's stashed prefix length and
        KV) the cache starts with the prefixes, left-padded to the longest, and only the rest of
        each prompt is forwarded, left-padded too (padding inside a row is masked out)."""
        torch = self.torch
        done = [n for n, _ in hits] if hits else [0] * len(rows)
        width = max(len(r.prompt) - n for r, n in zip(rows, done, strict=True))
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (row, n) in enumerate(zip(rows, done, strict=True)):
            ids[i, width - len(row.prompt) + n:] = torch.tensor(row.prompt[n:])
            mask[i, width - len(row.prompt) + n:] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp_(min=0)
        cache = slab_cache(self.model.config)
        if hits:
            before = max(done)
            stacked = _stack_prefixes([kv for _, kv in hits], done, before)
            for layer, (keys, values) in enumerate(stacked):
                cache.update(keys, values, layer)
            head = torch.zeros((len(rows), before), dtype=torch.long, device=self.device)
            for i, n in enumerate(done):
                head[i, before - n:] = 1
            positions = positions + torch.tensor(done, device=self.device)[:, None]
            mask = torch.cat([head, mask], dim=1)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         use_cache=True, logits_to_keep=1, **{self.cache_arg: cache})
        return cache, mask, out.logits[:, -1]

    def _step(self) -> list[tuple[Row, Generation | BackendError]]:
        """One decode step of every running row; the rows that end leave the batch. A failing
        forward fails every running row (and leaves an empty batch)."""
        torch, rows = self.torch, self.rows
        last = torch.tensor([[r.ids[-1]] for r in rows], device=self.device)
        positions = torch.tensor([[r.position] for r in rows], device=self.device)
        mask = torch.cat([self.mask, self.mask.new_ones((len(rows), 1))], dim=1)
        try:
            out = self.model(input_ids=last, attention_mask=mask, position_ids=positions,
                             use_cache=True, **{self.cache_arg: self.cache})
        except _TORCH_ERRORS as exc:
            log.warning("decode step failed for %d rows: %s", len(rows), exc)
            self.rows, self.cache, self.mask, self.params = [], None, None, None
            return [(r, BackendError(f"generation failed: {exc}")) for r in rows]
        self.mask = mask
        for row in rows:
            row.position += 1
        ended = self._record(rows, out.logits[:, -1])
        if ended and self.prefixes.rows:
            self._stash([i for i, _ in ended])
        if ended:
            self._drop([i for i, _ in ended])
        return [(rows[i], g) for i, g in ended]

    # ------------------------------------------------------------------ rows
    def _record(self, rows: list[Row], logits: Any) -> list[tuple[int, Generation]]:
        """Sample a token for each of ``rows`` from ``logits``; return the rows that ended."""
        params = self.params if rows is self.rows and self.params is not None \
            else BatchSampling.of([r.sampling for r in rows], logits.shape[-1], self.device)
        if rows is self.rows:
            self.params = params
        tokens, lps = sample(logits, params, [r.random for r in rows])
        ended = []
        for i, (row, tok) in enumerate(zip(rows, tokens, strict=True)):
            row.ids.append(tok)
            if lps is not None and row.sampling.logprobs:
                row.logprobs.append(lps[i])
            gen = self._end(row, tok)
            if gen is not None:
                ended.append((i, gen))
        return ended

    def _end(self, row: Row, tok: int) -> Generation | None:
        """The row's generation if ``tok`` ends it, with ``HFBackend._cut``'s rules: end of
        turn, then a stop string in the pieces decoded one token at a time, then
        ``max_tokens``; the ids are all the ids sampled, the last included."""
        reason, matched = None, None
        if tok in self.eos:
            reason = "eos"
        elif row.stop:
            piece = self.pieces.get(tok)
            if piece is None:
                piece = self.pieces[tok] = self.tokenizer.decode([tok], skip_special_tokens=False)
            window = row.tail + piece
            matched = next((s for s in row.stop if s in window), None)
            row.tail = window[max(0, len(window) - row.stop_len):] if row.stop_len else ""
            reason = "stop" if matched is not None else None
        if reason is None and len(row.ids) >= row.max_tokens:
            reason = "length"
        if reason is None:
            return None
        return Generation(list(row.ids), self.tokenizer.decode(row.ids, skip_special_tokens=False),
                          reason, matched,  # type: ignore[arg-type]
                          list(row.logprobs) if row.sampling.logprobs else None)

    def _stash(self, index: list[int]) -> None:
        """Keep the KV of the rows at ``index`` (they just ended) for their next turn: the
        cache holds every token but the last one sampled."""
        for i in index:
            row = self.rows[i]
            real = self.mask[i].bool()
            kv = [(layer.keys[i][:, real], layer.values[i][:, real])
                  for layer in self.cache.layers]
            covered = row.prompt + row.ids[:-1]
            if kv and kv[0][0].shape[1] == len(covered):
                self.prefixes.put(covered, kv, row.stamp)

    def _drop(self, gone: list[int]) -> None:
        """Drop the rows at ``gone``; the last rows fill the holes, so the order changes
        (:func:`~agentmath.backends.hf_kv.swap_remove_order`). Drop the leading cache columns
        that are padding in every remaining row."""
        if not gone:
            return
        self.params = None
        if len(gone) == len(self.rows):
            self.rows, self.cache, self.mask = [], None, None
            return
        order = swap_remove_order(len(self.rows), gone)
        self.rows = [self.rows[i] for i in order]
        keep_rows(self.cache, order)
        self.mask = _trim(self.cache, self.mask[self.torch.tensor(order, device=self.device)])

    def _merge(self, rows: list[Row], cache: Any, mask: Any) -> None:
        """Append ``rows`` with their prefill ``cache`` and ``mask`` to the running batch,
        right-aligned: the shorter side is left-padded (mask 0) to the other's length."""
        self.params = None
        if not self.rows:
            self.rows, self.cache, self.mask = list(rows), cache, mask
            return
        pad = self.torch.nn.functional.pad
        old_len, new_len = self.mask.shape[1], mask.shape[1]
        width = max(old_len, new_len)
        append_rows(self.cache, cache, width)
        self.mask = self.torch.cat([pad(self.mask, (width - old_len, 0)),
                                    pad(mask, (width - new_len, 0))])
        self.rows += rows


def _stack_prefixes(kvs: list[KV], lengths: list[int], width: int) -> list[tuple[Any, Any]]:
    """Per layer, the rows' stashed keys and values left-padded with zeros to ``width``
    tokens and stacked into a batch [rows, heads, width, head_dim]."""
    torch = require("torch", "train")
    pad = torch.nn.functional.pad
    return [(torch.stack([pad(kv[layer][0], (0, 0, width - n, 0))
                          for kv, n in zip(kvs, lengths, strict=True)]),
             torch.stack([pad(kv[layer][1], (0, 0, width - n, 0))
                          for kv, n in zip(kvs, lengths, strict=True)]))
            for layer in range(len(kvs[0]))]


def _trim(cache: Any, mask: Any) -> Any:
    """Drop the leading columns of ``cache`` that are padding in every row; the mask left."""
    first = int(mask.any(0).int().argmax())
    if first:
        drop_front(cache, first)
    return mask[:, first:]

