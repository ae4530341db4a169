"""Block-level KV memory with an LRU prefix cache, as vLLM's automatic prefix caching works.

KV memory is ``blocks`` blocks of ``block_size`` tokens. A full block is identified by a
*chained* hash of all tokens up to its end (and of a salt: the policy version, so that KV
computed under older weights is never reused), so two requests share a block exactly when
they share the whole prefix up to it. Blocks in use by running requests are reference counted;
a block whose last user finished stays cached but *evictable*, in LRU order, until its memory
is needed: the cache's capacity is whatever KV the running requests leave free. Hits and
queries are counted in tokens, like vLLM's ``prefix_cache_hits``/``prefix_cache_queries``.

:class:`BlockHasher` computes the chained hashes incrementally per episode: every turn of an
agentic episode extends the previous context, so only the new blocks are hashed (O(new tokens)
per call instead of O(context)), which matters at 10^8 tokens.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BlockHasher", "KVCache", "Segment"]

#: Blocks evicted at least per eviction (from the LRU leaf's tail), to batch the bookkeeping of
#: one-block decode growth; the extra blocks are the next ones LRU would evict anyway.
EVICT_BATCH = 32


@dataclass(slots=True)
class _Chain:
    salt: int
    tokens: int  # tokens covered by ``hashes`` (a multiple of the block size)
    hashes: list[int]
    last: tuple[int, ...]  # the last hashed block's ids, to check a context extends this chain


class BlockHasher:
    """Chained block hashes of token sequences, cached per episode (LRU-bounded)."""

    def __init__(self, block_size: int, max_tracked: int = 1 << 14) -> None:
        if block_size < 1:
            raise ValueError("block_size must be at least 1")
        self.block_size = block_size
        self.max_tracked = max_tracked
        self._chains: OrderedDict[str, _Chain] = OrderedDict()

    def hashes(self, key: str | None, salt: int, ctx: Sequence[int],
               out: Sequence[int] = ()) -> list[int]:
        """Hashes of the full blocks of ``ctx + out`` (a list that later calls of the same
        ``key`` may extend in place; its first ``(len(ctx) + len(out)) // block_size`` entries
        never change)."""
        bs = self.block_size
        chain = self._chains.get(key) if key is not None else None
        if (chain is None or chain.salt != salt or len(ctx) < chain.tokens
                or (chain.tokens and tuple(ctx[chain.tokens - bs:chain.tokens]) != chain.last)):
            chain = _Chain(salt, 0, [], ())
        start = chain.tokens
        tail = list(ctx[start:])
        tail.extend(out)
        full = len(tail) - len(tail) % bs
        h = chain.hashes[-1] if chain.hashes else hash(("agentmath-sim-kv", salt))
        append = chain.hashes.append
        blocks = iter(tail[:full])
        for block in zip(*[blocks] * bs, strict=False):  # each full block's ids, a tuple
            h = hash((h, block))
            append(h)
        if full:
            chain.tokens = start + full
            chain.last = tuple(tail[full - bs:full])
        if key is not None:
            self._chains[key] = chain
            self._chains.move_to_end(key)
            if len(self._chains) > self.max_tracked:
                self._chains.popitem(last=False)
        return chain.hashes

    def forget(self, key: str) -> None:
        """Drop an episode's cached chain."""
        self._chains.pop(key, None)


class Segment:
    """A run of cached blocks registered together (one request's new blocks), a node of the
    cache's radix tree: its blocks continue its parent's. ``users`` counts the running
    requests whose context holds it; at 0 it is evictable, leaves first, tail blocks first."""

    __slots__ = ("parent", "start", "hashes", "users", "children", "stamp", "alive")

    def __init__(self, parent: Segment | None, start: int, hashes: list[int]) -> None:
        self.parent = parent
        self.start = start  # depth (block index) of its first block
        self.hashes = hashes
        self.users = 1
        self.children = 0
        self.stamp = 0
        self.alive = True


class KVCache:
    """``blocks`` KV blocks: free, held by running requests, or cached and evictable.

    Cached blocks form a radix tree of :class:`Segment` runs (so taking or returning a context
    of n blocks costs O(segments on its path), not O(n)); an index maps every cached block's
    hash to its segment. Eviction takes the least recently released leaf segment's tail
    blocks first; so along any path the cached blocks are a prefix, and a lookup is a binary
    search. Eviction only truncates the segment: its index entries go stale (an entry counts
    only if its segment still holds that hash at that depth) and are swept when stale ones
    outnumber the cache, so evicting costs O(1) per segment, not a dict deletion per block.
    Counts prefix-cache hits and queries in tokens.
    """

    def __init__(self, blocks: int, block_size: int) -> None:
        self.blocks = blocks
        self.block_size = block_size
        self.free = blocks
        self.evictable = 0  # blocks in segments no running request holds
        self.where: dict[int, Segment] = {}
        self._heap: list[tuple[int, int, Segment]] = []  # evictable leaves by release time
        self._clock = 0
        self._pushes = 0
        self.hits = 0
        self.queries = 0
        self.evictions = 0

    @property
    def available(self) -> int:
        """Blocks an allocation can get (free + evictable)."""
        return self.free + self.evictable

    @property
    def used(self) -> int:
        """Blocks held by running requests."""
        return self.blocks - self.free - self.evictable

    def find(self, h: int, depth: int) -> Segment | None:
        """The segment caching the block of hash ``h`` at ``depth``, None if it is not cached."""
        seg = self.where.get(h)
        if seg is None:
            return None
        i = depth - seg.start
        return seg if 0 <= i < len(seg.hashes) and seg.hashes[i] == h else None

    def lookup(self, hashes: Sequence[int], limit: int) -> tuple[int, int]:
        """(leading blocks of ``hashes[:limit]`` that are cached, how many of those are
        evictable, i.e. not held by a running request)."""
        find = self.find
        lo, hi = 0, min(limit, len(hashes))
        while lo < hi:  # cached blocks of a chain are a prefix of it
            mid = (lo + hi + 1) // 2
            if find(hashes[mid - 1], mid - 1) is not None:
                lo = mid
            else:
                hi = mid - 1
        if not lo:
            return 0, 0
        evictable = 0
        seg: Segment | None = self.find(hashes[lo - 1], lo - 1)
        while seg is not None:
            if not seg.users:
                evictable += min(len(seg.hashes), lo - seg.start)
            seg = seg.parent
        return lo, evictable

    def _split(self, seg: Segment, depth: int) -> Segment:
        """Cut ``seg`` at ``depth``; the head part (a new segment, the parent of ``seg``)."""
        cut = depth - seg.start
        head = Segment(seg.parent, seg.start, seg.hashes[:cut])
        head.users, head.stamp, head.children = seg.users, seg.stamp, 1
        seg.hashes = seg.hashes[cut:]
        seg.start, seg.parent = depth, head
        self.where.update(dict.fromkeys(head.hashes, head))
        return head

    def _hold(self, seg: Segment | None) -> None:
        """One more user for ``seg`` and its ancestors."""
        while seg is not None:
            if not seg.users:
                self.evictable -= len(seg.hashes)
            seg.users += 1
            seg = seg.parent

    def acquire(self, hashes: Sequence[int], hit: int) -> Segment | None:
        """Hold the cached path of ``hashes[:hit]`` (from :meth:`lookup`); its last segment."""
        if not hit:
            return None
        seg = self.find(hashes[hit - 1], hit - 1)
        assert seg is not None, "acquire needs a hit from lookup"
        if hit < seg.start + len(seg.hashes):
            seg = self._split(seg, hit)
        self._hold(seg)
        return seg

    def allocate(self, n: int) -> None:
        """Take ``n`` free blocks, evicting least recently used cached ones as needed."""
        if n <= 0:
            return
        if n > self.available:
            raise RuntimeError(f"KV allocation of {n} blocks with {self.available} available")
        while self.free < n:
            self._evict(n - self.free)
        self.free -= n

    def _push(self, stamp: int, seg: Segment) -> None:
        self._pushes += 1
        heapq.heappush(self._heap, (stamp, self._pushes, seg))

    def check(self) -> None:
        """Assert the bookkeeping is consistent (for tests; O(cached blocks))."""
        segs = {id(s): s for s in self.where.values() if s.hashes}
        assert all(self.where[h] is s for s in segs.values() for h in s.hashes)
        assert all(s.parent is None or s.parent.hashes for s in segs.values())
        idle = sum(len(s.hashes) for s in segs.values() if not s.users)
        assert idle == self.evictable, (idle, self.evictable)
        assert 0 <= self.free and self.used >= 0

    def _evict(self, want: int) -> None:
        stamp, _, seg = heapq.heappop(self._heap)
        if not seg.alive or seg.users or seg.children or seg.stamp != stamp:
            return  # a stale entry
        k = min(max(want, EVICT_BATCH), len(seg.hashes))
        del seg.hashes[len(seg.hashes) - k:]  # their index entries are now stale
        self.free += k
        self.evictable -= k
        self.evictions += k
        if seg.hashes:
            self._push(stamp, seg)
            return
        seg.alive = False
        parent = seg.parent
        if parent is not None:
            parent.children -= 1
            if not parent.users and not parent.children:
                self._push(parent.stamp, parent)

    def register(self, tail: Segment | None, hashes: Sequence[int], start: int,
                 end: int) -> tuple[Segment | None, int]:
        """Give a request's plain blocks at depths ``[start, end)`` (continuing its path,
        which ends with ``tail``) their hashes, so later requests can hit them. Blocks already
        cached there are shared instead and the request's copies freed. Returns the new end of
        its path and how many of its plain blocks were used (shared or registered)."""
        used = 0
        where = self.where
        while start < end and (seg := self.find(hashes[start], start)) is not None:
            if seg.start != start or seg.parent is not tail:
                return tail, used  # not a continuation of this path: leave the rest plain
            stop = _agree(seg.hashes, hashes, start, min(end, seg.start + len(seg.hashes)))
            if stop < seg.start + len(seg.hashes):
                seg = self._split(seg, stop)
            if not seg.users:
                self.evictable -= len(seg.hashes)
            seg.users += 1
            self.free += stop - start
            used += stop - start
            tail, start = seg, stop
        if start < end:
            new = Segment(tail, start, list(hashes[start:end]))
            if tail is not None:
                tail.children += 1
            where.update(dict.fromkeys(new.hashes, new))
            used += end - start
            tail = new
            if len(where) > 3 * self.blocks + 4096:
                self._sweep()
        return tail, used

    def _sweep(self) -> None:
        """Rebuild the index from the live segments (drops the stale entries)."""
        live = {id(seg): seg for seg in self.where.values() if seg.hashes}
        self.where = {}
        for seg in live.values():
            self.where.update(dict.fromkeys(seg.hashes, seg))

    def _release_path(self, seg: Segment | None) -> None:
        """One user fewer for ``seg`` and its ancestors; those left unused become evictable."""
        self._clock += 1
        while seg is not None:
            seg.users -= 1
            if not seg.users:
                self.evictable += len(seg.hashes)
                seg.stamp = self._clock
                if not seg.children:
                    self._push(self._clock, seg)
            seg = seg.parent

    def release(self, tail: Segment | None, plain: int) -> None:
        """Return a request's blocks: its path becomes evictable where no one else holds it,
        its plain blocks free."""
        self._release_path(tail)
        self.free += plain

    def reset(self) -> int:
        """Drop every evictable cached block (vLLM's reset_prefix_cache); how many."""
        n = self.evictable
        while self._heap and self.evictable:
            self._evict(self.blocks)
        return n


def _agree(cached: list[int], hashes: Sequence[int], start: int, limit: int) -> int:
    """The depth up to which a segment's blocks (``cached``, starting at depth ``start``, whose
    first block matched) agree with ``hashes``, at most ``limit``: one C-level comparison when
    they all agree, else a binary search (agreeing blocks are a prefix: the hashes chain)."""
    n = limit - start
    if cached[:n] == list(hashes[start:limit]):
        return limit
    lo, hi = 1, n  # cached[:lo] agrees, cached[:hi + 1] does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cached[mid - 1] == hashes[start + mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return start + lo
