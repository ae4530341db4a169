"""The KV cache of finished generations, kept for the episode's next turn (continuous batching).

An agent's next request is its last prompt, the tokens it just generated, the tool's output and
the next turn's header: everything but the tail was already in the running batch's KV cache
when the generation ended. Re-prefilling the whole conversation at every turn costs about half
of the continuous generator's time in multi-turn GRPO episodes (a py-spy profile of the demo's
GRPO model shows it). :class:`PrefixStash` keeps the KV
of each finished row, keyed by the token ids it covers, and hands it to the first later request
whose prompt extends them, which then prefills only the new tail.

Why by hand: transformers' generation has no cross-request prefix cache for a batch that
changes between steps, and vLLM's (the production path, ``backend = "openai"``) lives in its
own server.

Entries are only valid under the weights that computed them: the stash is stamped with a
version of the model's parameters (the sum of their in-place version counters, which every
optimizer step and weight load moves) and is emptied when that changes; a row admitted under
older weights is not stashed. Bounded to ``rows`` entries, least recently stashed first out.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

KV = list[tuple[Any, Any]]  # per layer: keys, values [heads, tokens, head_dim] of one row


class PrefixStash:
    """Finished rows' KV by the token ids they cover; used on the model thread only."""

    def __init__(self, model: Any, rows: int) -> None:
        self.model = model
        self.rows = rows
        self.entries: OrderedDict[tuple[int, ...], KV] = OrderedDict()
        self.stamp = self._weights()
        self.hits = 0  # requests that reused a prefix
        self.reused_tokens = 0  # prompt tokens they did not prefill

    def _weights(self) -> int:
        """Moves whenever a parameter is changed in place (``Tensor._version``)."""
        return sum(p._version for p in self.model.parameters())

    def refresh(self) -> int:
        """Empty the stash if the weights changed since it was filled; the current stamp."""
        stamp = self._weights()
        if stamp != self.stamp:
            self.entries.clear()
            self.stamp = stamp
        return stamp

    def put(self, ids: Sequence[int], kv: KV, stamp: int) -> None:
        """Keep ``kv`` (computed under weights ``stamp``) for the tokens ``ids``."""
        if not self.rows or stamp != self.stamp or not ids:
            return
        key = tuple(ids)
        self.entries.pop(key, None)
        self.entries[key] = kv
        while len(self.entries) > self.rows:
            self.entries.popitem(last=False)

    def take(self, prompt: Sequence[int]) -> tuple[int, KV] | None:
        """Remove and return the longest entry that is a proper prefix of ``prompt`` (at least
        one token must be left to prefill: its logits start the generation)."""
        best: tuple[int, ...] | None = None
        for key in self.entries:
            n = len(key)
            if n < len(prompt) and (best is None or n > len(best)) \
                    and prompt[n - 1] == key[-1] and tuple(prompt[:n]) == key:
                best = key
        if best is None:
            return None
        self.hits += 1
        self.reused_tokens += len(best)
        return len(best), self.entries.pop(best)
