"""Admission control: how many episodes may be advancing at once.

Episodes are bounded by count (``max_in_flight``) and, optionally, by the context tokens they
hold (``max_in_flight_tokens``). The token bound matters for long agentic episodes: a server's
prefix cache can only keep an episode's KV across its tool calls while the contexts of all the
episodes it serves fit in KV memory; admit more and their caches evict each other, every turn
re-prefills its whole context, and servers preempt. Counting contexts (the episodes' current
lengths, which grow as they run) keeps the working set inside the fleet's KV, like
AgentMath's length-weighted load. An episode is always admitted when nothing is in flight, so a
single context larger than the bound still runs.

Contexts grow after admission, so the token bound is also checked before every model turn
(:meth:`Admission.before_turn`): an episode whose next turn would take the active contexts past
the bound steps aside (it stops counting: its KV may be evicted) and queues again behind the
others. Fewer episodes then run at full speed with their caches intact instead of all of them
thrashing.

Waiters form one FIFO queue and are let in from its head as room appears (no thundering herd:
each release wakes only the episodes it makes room for). The running contexts are summed
incrementally (each episode's length as last seen, updated at its turns), so every check is
O(1) however many episodes are in flight.
"""

from __future__ import annotations

import asyncio
from collections import deque

from agentmath.agent.episode import Episode


class Admission:
    """A FIFO gate for episodes, bounded by count and optionally by context tokens."""

    def __init__(self, max_episodes: int, max_tokens: int | None = None) -> None:
        self.max_episodes = max_episodes
        self.max_tokens = max_tokens
        self.running: set[Episode] = set()
        self._ctx: dict[Episode, int] = {}  # context of each running episode, as last seen
        self._held = 0  # their sum
        self._queue: deque[tuple[Episode, asyncio.Future[None]]] = deque()

    # ------------------------------------------------------------------------------ public
    async def acquire(self, episode: Episode) -> None:
        """Wait until ``episode`` may run, then count it in. Under a token bound, a new
        episode's prompt is rendered first so that its length counts."""
        if self.max_tokens is not None:
            await episode.prepare()  # a failure finishes the episode; advance returns at once
        await self._enter(episode)

    async def before_turn(self, episode: Episode) -> None:
        """Under a token bound: go on if the active contexts still fit, else step aside and
        queue again (see the module docstring)."""
        if self.max_tokens is None:
            return
        self._note(episode)
        if self._held <= self.max_tokens or len(self.running) <= 1:
            return
        self._leave(episode)
        self._drain()
        await self._enter(episode)

    async def release(self, episode: Episode) -> None:
        """Count ``episode`` out (it finished, parked or failed) and let waiters in."""
        self._leave(episode)
        self._drain()

    # ------------------------------------------------------------------------------ queue
    async def _enter(self, episode: Episode) -> None:
        if not self._queue and self._fits(episode):
            self._admit(episode)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((episode, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # let in just as it was cancelled
                self._leave(episode)
                self._drain()
            raise

    def _drain(self) -> None:
        """Let in waiters from the head of the queue while they fit."""
        while self._queue:
            episode, fut = self._queue[0]
            if fut.cancelled():
                self._queue.popleft()
                continue
            if not self._fits(episode):
                break
            self._queue.popleft()
            self._admit(episode)
            fut.set_result(None)

    def _note(self, episode: Episode) -> None:
        """Update the running total with ``episode``'s context as it is now."""
        if episode in self._ctx:
            now = episode.driver.context_tokens()
            self._held += now - self._ctx[episode]
            self._ctx[episode] = now

    def _leave(self, episode: Episode) -> None:
        self.running.discard(episode)
        self._held -= self._ctx.pop(episode, 0)

    def _need(self, episode: Episode) -> int:
        # an episode not started yet holds nothing now but will grow like the others: it
        # counts as the mean of those running
        return episode.driver.context_tokens() or self._held // max(1, len(self.running))

    def _fits(self, episode: Episode) -> bool:
        if not self.running:
            return True
        if len(self.running) >= self.max_episodes:
            return False
        return self.max_tokens is None or self._held + self._need(episode) <= self.max_tokens

    def _admit(self, episode: Episode) -> None:
        if self.max_tokens is not None:
            need = self._need(episode)
            self._ctx[episode] = need
            self._held += need
        self.running.add(episode)
