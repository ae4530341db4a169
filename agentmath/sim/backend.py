""":class:`SimServerBackend`: the :class:`~agentmath.backends.base.Backend` of one simulated
server, so that the real agent loop, scheduler and router run against it unchanged.

``generate`` asks the simulated model (:class:`~.policy.SimPolicy`) what it writes, hashes the
context's blocks (salted with the request tag's policy version, so a weight update invalidates
the prefix cache, as vLLM's ``cache_salt`` per version does; with ``salt_by_version=False`` KV
computed under older weights is reused, as an engine that keeps stale KV across a weight
update within the staleness bound does), submits the request to the
:class:`~.server.SimServer` and awaits its completion through the clock bridge: the coroutine
resumes at the simulated time the server finished it. ``render_prompt`` and ``tokenize`` cost
no simulated time.

For the router it has the optional methods of a real server backend: ``prefix_cache_counters``
(vLLM's hit/query counters in tokens), ``healthy``, and ``metrics`` (vLLM's gauge names).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

from agentmath.backends.base import Generation, SamplingParams, current_tag, nothing_sampled
from agentmath.errors import BackendError
from agentmath.sim.clock import current_env
from agentmath.sim.kvcache import BlockHasher
from agentmath.sim.policy import SimPolicy
from agentmath.sim.requests import SimRequest
from agentmath.sim.server import SimServer

__all__ = ["SimServerBackend"]

LOGPROB = -0.5  #: the logprob reported for every sampled token


class SimServerBackend:
    """The Backend of one :class:`SimServer`, playing ``policy``'s scripts."""

    def __init__(self, server: SimServer, policy: SimPolicy,
                 hasher: BlockHasher | None = None, *, salt_by_version: bool = True) -> None:
        self.server = server
        self.policy = policy
        self.name = server.name
        if hasher is not None and hasher.block_size != server.cost.block_size:
            raise ValueError("the hasher's block size differs from the server's")
        self.hasher = hasher or BlockHasher(server.cost.block_size)
        self.closed = False
        self.salt_by_version = salt_by_version

    async def render_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The prompt ids of the workload problem in ``messages``."""
        return self.policy.prompt_ids(messages)

    async def tokenize(self, text: str) -> list[int]:
        """Ids of a tool output (about ``len(text) / chars_per_token``)."""
        return self.policy.tool_ids(text)

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        """Run the next piece of the episode's script on the simulated server."""
        return await self._generate(prompt_ids, stop, max_tokens, sampling, None)

    async def generate_interruptible(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                                     max_tokens: int, sampling: SamplingParams,
                                     interrupt: asyncio.Event) -> Generation:
        """As :meth:`generate`; once ``interrupt`` is set the request ends at the end of the
        server's step in progress with the tokens it generated (``Interruptible``)."""
        if interrupt.is_set():
            return nothing_sampled(sampling, server=self.name, interrupted=True)
        return await self._generate(prompt_ids, stop, max_tokens, sampling, interrupt)

    async def _generate(self, prompt_ids: Sequence[int], stop: Sequence[str], max_tokens: int,
                        sampling: SamplingParams, interrupt: asyncio.Event | None) -> Generation:
        if self.closed:
            raise BackendError(f"{self.name} is closed")
        if current_env() is not self.server.env:
            raise RuntimeError(f"{self.name} belongs to another simpy environment")
        tag = current_tag.get()
        planned = self.policy.plan(prompt_ids, tag, max_tokens, stop)
        salt = tag.policy_version if tag is not None and self.salt_by_version else 0
        hashes = self.hasher.hashes(tag.episode_id if tag is not None else None, salt,
                                    prompt_ids, planned.token_ids)
        fut: asyncio.Future[SimRequest] = asyncio.get_running_loop().create_future()

        def done(req: SimRequest) -> None:
            if not fut.done():
                fut.set_result(req)

        req = self.server.submit(len(prompt_ids), len(planned.token_ids), hashes, done)
        watch = None
        if interrupt is not None:  # the server cuts the request when the event is set
            watch = asyncio.ensure_future(interrupt.wait())
            watch.add_done_callback(lambda _: self.server.interrupt(req))
        try:
            await fut
        except asyncio.CancelledError:
            self.server.abort(req)
            raise
        finally:
            if watch is not None:
                watch.cancel()
        if req.error is not None:
            raise req.error
        interrupted = req.state == "interrupted"
        if interrupted:  # the same script, cut where the server stopped it
            if req.gen == 0:
                return nothing_sampled(sampling, server=self.name, interrupted=True)
            planned = self.policy.plan(prompt_ids, tag, req.gen, stop)
        self.policy.commit(len(prompt_ids), tag, planned)
        n = len(planned.token_ids)
        info: dict[str, object] = {"server": self.name, "cached_tokens": max(0, req.cached_tokens),
                                   "latency_s": req.finished - req.arrival,
                                   "preemptions": req.preemptions}
        if not math.isnan(req.admitted):  # an interrupted request may never have been let in
            info["queue_s"] = req.admitted - req.arrival
        if not math.isnan(req.first_token):
            info["ttft_s"] = req.first_token - req.arrival
        return Generation(planned.token_ids, planned.text, planned.finish_reason,  # type: ignore[arg-type]
                          planned.stop_string, [LOGPROB] * n if sampling.logprobs else None,
                          info, interrupted=interrupted)

    async def aclose(self) -> None:
        """Refuse further requests (the simulated server itself runs on)."""
        self.closed = True

    # ------------------------------------------------------------------ what a router reads

    async def prefix_cache_counters(self) -> tuple[int, int]:
        """(prefix-cache hits, queries) in tokens since start, like vLLM's /metrics."""
        return self.server.kv.hits, self.server.kv.queries

    async def healthy(self) -> bool:
        """False while the simulated server is down (crashed)."""
        return not self.server.down

    async def metrics(self) -> dict[str, float]:
        """vLLM-style gauges and counters of the simulated server."""
        server, kv = self.server, self.server.kv
        return {"num_requests_running": float(len(server.running)),
                "num_requests_waiting": float(len(server.waiting)),
                "kv_cache_usage_perc": kv.used / kv.blocks if kv.blocks else 0.0,
                "prefix_cache_hits": float(kv.hits), "prefix_cache_queries": float(kv.queries),
                "num_preemptions": float(server.stats.preemptions),
                "idle_fraction": server.idle_fraction()}
