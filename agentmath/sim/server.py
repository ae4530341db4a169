"""A simpy model of one continuous-batching inference server (vLLM-like).

Each engine step decodes one token for every running request whose prompt is computed and
spends the rest of a token budget (``max_batched_tokens``) on chunked prefill of running and
newly admitted requests, FCFS; its duration comes from :class:`~.costs.ServerCostModel`.
Requests wait when ``max_running`` are running or the KV cache cannot hold their context; when
decoding fills the KV cache the newest running request is preempted (its blocks freed, recomputed
later, as vLLM v1 does). Prefill only costs tokens the prefix cache (:class:`~.kvcache.KVCache`)
does not already hold. With ``admission_s`` a request first passes the server's front end,
which takes requests one at a time (vLLM's API server), so a burst reaches the engine spread out.

Why the stepping is hand-written instead of one simpy event per step or per token: a paper-scale
run is ~10^8 tokens, i.e. millions of engine steps; at tens of microseconds per simpy event that
is minutes to hours. But while the running set is constant and nobody prefills, every step has
a known duration (``a + b*n + d*context``, the context growing by n tokens per step) and every
request gains one token per step, so the server jumps analytically to the next event that
changes the set: a completion, the KV cache filling up, or an arrival/abort/pause (a simpy
interrupt; the step in progress still finishes, as on a real engine). Steps with prefill are
simulated one by one; they are few (prefill is chunked in large budgets).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import simpy

from agentmath.errors import BackendError, RequestRejected
from agentmath.sim.costs import ServerCostModel, steps_covering
from agentmath.sim.kvcache import KVCache
from agentmath.sim.requests import ServerStats, SimRequest

__all__ = ["ServerStats", "SimRequest", "SimServer"]


class SimServer:
    """A continuous-batching server on simpy environment ``env`` (see the module docstring)."""

    def __init__(self, env: simpy.Environment, cost: ServerCostModel | None = None,
                 name: str = "sim-server") -> None:
        self.env = env
        self.cost = cost or ServerCostModel()
        self.name = name
        self.kv = KVCache(self.cost.kv_blocks, self.cost.block_size)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.stats = ServerStats()
        self.paused = False
        self.down = False
        self._wake: simpy.Event | None = None
        self._interruptible = False
        self._front_free = 0.0  # when the front end is done with the requests given to it
        c = self.cost  # the step costs while the front end works (cost.contention)
        self._contended = c.with_(**{k: getattr(c, k) * (1 + c.contention) for k in "abcde"})
        self._front: list[SimRequest] = []  # requests in the front end (cost.admission_s > 0)
        self.process = env.process(self._run())

    # ------------------------------------------------------------------ control

    def submit(self, prompt_len: int, out_len: int, hashes: list[int],
               on_done: Callable[[SimRequest], None] | None = None) -> SimRequest:
        """Queue a request for ``out_len`` tokens after ``prompt_len``; ``on_done`` is called
        (from simpy) when it is done, aborted or failed. RequestRejected when its context could
        never fit the KV cache; BackendError while the server is down."""
        if self.down:
            raise BackendError(f"{self.name} is down")
        bs = self.cost.block_size
        if -(-(prompt_len + out_len) // bs) > self.kv.blocks or out_len < 1:
            raise RequestRejected(f"{self.name}: {prompt_len} + {out_len} tokens do not fit "
                                  f"its KV cache of {self.kv.blocks * bs} tokens")
        req = SimRequest(prompt_len, out_len, hashes, on_done, self.env.now)
        self.stats.requests += 1
        if self.cost.admission_s > 0:  # through the front end first, one request at a time
            idle = self._front_free <= self.env.now
            self._front_free = max(self.env.now, self._front_free) + self.cost.admission_s
            if idle and self.cost.contention > 0:
                self._poke()  # the steps from the next one on run slower
            req.state = "admitting"
            self._front.append(req)
            self.env.process(self._admit_at(req, self._front_free))
        else:
            self._enqueue(req)
        return req

    def _admit_at(self, req: SimRequest, when: float):  # noqa: ANN202 - a simpy process
        """Queue ``req`` for the engine at ``when`` (the front end is done with it), unless it
        was aborted, interrupted or failed meanwhile."""
        yield self.env.timeout(when - self.env.now)
        if req in self._front:
            self._front.remove(req)
        if req.state == "admitting":
            self._enqueue(req)
        if self.cost.contention > 0 and self._front_free <= self.env.now:
            self._poke()  # the front end is idle: the steps from the next one on run as usual

    def _enqueue(self, req: SimRequest) -> None:
        req.state = "waiting"
        self.waiting.append(req)
        self.stats.max_waiting = max(self.stats.max_waiting, len(self.waiting))
        if len(self.running) < self.cost.max_running:
            self._poke()

    def abort(self, req: SimRequest) -> None:
        """Drop a request (its caller gave up): freed at the end of the step in progress."""
        if req.state in ("waiting", "admitting"):
            if req.state == "waiting":
                self.waiting.remove(req)
            req.state = "aborted"
            self.stats.aborted += 1
        elif req.state == "running":
            req.state = "aborted"
            self._poke()

    def interrupt(self, req: SimRequest) -> None:
        """End a request early, keeping the tokens it generated (its caller is told, with
        ``state`` "interrupted" and ``gen`` tokens): at the end of the step in progress when
        running, at once when waiting. Done or gone requests are left as they are."""
        if req.state in ("waiting", "admitting"):
            if req.state == "waiting":
                self.waiting.remove(req)
            req.state = "interrupted"
            self._end(req, released=True)
        elif req.state == "running":
            req.state = "interrupted"
            self._poke()

    def pause(self) -> None:
        """Stop stepping after the step in progress (a weight update); requests stay."""
        self.paused = True
        self._poke()

    def resume(self) -> None:
        """Step again after :meth:`pause`."""
        self.paused = False
        self._poke()

    def reset_prefix_cache(self) -> int:
        """Drop the evictable cached blocks; how many."""
        return self.kv.reset()

    def crash(self, reason: str = "crashed") -> None:
        """Fail every request (BackendError) and refuse new ones until :meth:`restart`."""
        self.down = True
        error = BackendError(f"{self.name} {reason}")
        admitting = [r for r in self._front if r.state == "admitting"]
        for req in [*self.running, *self.waiting, *admitting]:
            req.state, req.error = "failed", error
            self.stats.failed += 1
            if req.on_done is not None:
                req.on_done(req)
        self.running.clear()
        self.waiting.clear()
        self._front.clear()
        self.kv = KVCache(self.cost.kv_blocks, self.cost.block_size)
        self._poke()

    def restart(self) -> None:
        """Come back after :meth:`crash`, with an empty cache."""
        self.down = False
        self._poke()

    def idle_fraction(self) -> float:
        """Share of simulated time so far with no engine step running."""
        now = self.env.now
        return 1.0 - self.stats.busy_s / now if now > 0 else 1.0

    def _poke(self) -> None:
        """Wake the engine when idle, or end its analytic decode phase at the next step."""
        if self._wake is not None:
            if not self._wake.triggered:
                self._wake.succeed()
        elif self._interruptible:
            self._interruptible = False
            self.process.interrupt()

    # ------------------------------------------------------------------ engine loop

    def _run(self):  # noqa: ANN202 - a simpy process generator
        while True:
            if self.paused or self.down or not (self.running or self.waiting):
                self._wake = self.env.event()
                yield self._wake
                self._wake = None
                continue
            if any(r.prefill_left or r.state != "running" for r in self.running) or (
                    self.waiting and self._admissible()):
                yield from self._mixed_step()
            else:
                yield from self._decode_phase()

    def _step_costs(self) -> ServerCostModel:
        """The cost model of the steps starting now: slower while the front end works."""
        return self._contended if self._front_free > self.env.now else self.cost

    def _admissible(self) -> bool:
        """Whether the head of the queue could be admitted now (ignoring prefix hits)."""
        if len(self.running) >= self.cost.max_running:
            return False
        req = self.waiting[0]
        need = -(-(req.prompt_len + req.gen) // self.cost.block_size)
        return need <= self.kv.available or not self.running

    def _mixed_step(self):  # noqa: ANN202 - a simpy process generator
        """One engine step with prefill: decode tokens first, then prefill chunks, then admit."""
        self._finish_done()
        cost = self._step_costs()
        decode = [r for r in self.running if not r.prefill_left]
        decode = self._ensure_blocks(decode, 1)
        budget = cost.max_batched_tokens - len(decode)
        chunks: list[tuple[SimRequest, int]] = []
        for r in self.running:
            if r.prefill_left and budget > 0:
                c = min(r.prefill_left, budget)
                chunks.append((r, c))
                budget -= c
        while self.waiting and budget > 0 and len(self.running) < cost.max_running:
            r = self.waiting[0]
            if not self._admit(r):
                break
            self.waiting.popleft()
            self.running.append(r)
            c = min(r.prefill_left, budget)
            chunks.append((r, c))
            budget -= c
        if not decode and not chunks:
            return
        prefill = sum(c for _, c in chunks)
        context = sum(r.prompt_len + r.gen for r in decode) if cost.d else 0
        pairs = sum(c * (r.prompt_len + r.gen - r.prefill_left) + c * (c - 1) // 2
                    for r, c in chunks) if cost.e else 0  # keys prefill attention reads
        dt = cost.step_time(len(decode), prefill, context, pairs)
        yield self.env.timeout(dt)
        now = self.env.now
        st = self.stats
        st.steps += 1
        st.busy_s += dt
        st.prefill_tokens += prefill
        st.decode_tokens += len(decode)
        st.max_running = max(st.max_running, len(self.running))
        for r in decode:
            r.gen += 1
        for r, c in chunks:
            r.prefill_left -= c
            if not r.prefill_left:
                r.gen += 1
                if math.isnan(r.first_token):
                    r.first_token = now
        self._finish_done()

    def _decode_phase(self):  # noqa: ANN202 - a simpy process generator
        """Steps of a constant running set, all decoding: jump to the first completion (or the
        KV cache filling up), or to the end of the step in progress when poked."""
        running, cost = self.running, self._step_costs()
        n = len(running)
        k = min(r.out_len - r.gen for r in running)
        k = self._kv_steps(k)
        if k == 0:
            self._preempt(running[-1])
            return
        ctx0 = sum(r.prompt_len + r.gen for r in running) if cost.d else 0
        a, dd = cost.step_time(n, 0, ctx0), cost.d * n

        def span(s: int) -> float:
            return s * a + dd * s * (s - 1) / 2

        start = self.env.now
        self._interruptible = True
        try:
            yield self.env.timeout(span(k))
            s = k
        except simpy.Interrupt:
            elapsed = self.env.now - start
            s = steps_covering(elapsed, a, dd, k)
            rest = span(s) - elapsed
            if rest > 0:
                yield self.env.timeout(rest)
        finally:
            self._interruptible = False
        st = self.stats
        st.steps += s
        st.busy_s += span(s)
        st.decode_tokens += s * n
        st.max_running = max(st.max_running, n)
        for r in running:
            r.gen += s
        self._ensure_blocks(running, 0)
        self._finish_done()

    # ------------------------------------------------------------------ KV and requests

    def _admit(self, r: SimRequest) -> bool:
        """Take ``r`` into the running set if its KV fits: prefix hits acquired, the rest
        allocated, its full blocks registered; False (it waits) if the KV cache is full."""
        kv, bs = self.kv, self.cost.block_size
        tokens = r.prompt_len + r.gen
        hit, hit_evictable = kv.lookup(r.hashes, (tokens - 1) // bs)
        need = -(-tokens // bs) - hit
        if need > kv.available - hit_evictable:  # never when nothing runs (submit checks)
            return False
        kv.queries += tokens
        kv.hits += hit * bs
        r.tail = kv.acquire(r.hashes, hit)
        kv.allocate(need)
        r.plain = need
        full = min(tokens // bs, len(r.hashes))
        r.tail, taken = kv.register(r.tail, r.hashes, hit, full)
        r.plain -= taken
        r.registered = hit + taken
        r.prefill_left = tokens - hit * bs
        r.state = "running"
        if r.cached_tokens < 0:
            r.cached_tokens = hit * bs
            r.admitted = self.env.now
            self.stats.queue_s += r.admitted - r.arrival
        return True

    def _kv_steps(self, k: int) -> int:
        """The most decode steps (at most ``k``) whose new blocks fit the KV cache."""
        bs, avail, running = self.cost.block_size, self.kv.available, self.running
        if avail >= len(running) * (k // bs + 1):
            return k

        def need(s: int) -> int:
            return sum(-(-(r.prompt_len + r.gen + s) // bs) - r.registered - r.plain
                       for r in running)

        lo, hi = 0, k
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if need(mid) <= avail:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _ensure_blocks(self, reqs: list[SimRequest], ahead: int) -> list[SimRequest]:
        """Allocate blocks for ``ahead`` more tokens of each request, preempting the newest
        running requests while the KV cache is short; the requests still running."""
        bs, kv = self.cost.block_size, self.kv
        while True:
            wants = [-(-(r.prompt_len + r.gen + ahead) // bs) - r.registered - r.plain
                     for r in reqs]
            if sum(w for w in wants if w > 0) <= kv.available or len(self.running) <= 1:
                break
            victim = self.running[-1]
            self._preempt(victim)
            reqs = [r for r in reqs if r is not victim]
        for r, w in zip(reqs, wants, strict=True):
            if w > 0:
                kv.allocate(w)
                r.plain += w
        return reqs

    def _release(self, r: SimRequest) -> None:
        """Register the full blocks ``r`` computed, then return all its KV."""
        full = min((r.prompt_len + r.gen) // self.cost.block_size, len(r.hashes))
        if full > r.registered and r.state != "aborted":
            r.tail, taken = self.kv.register(r.tail, r.hashes, r.registered, full)
            r.plain -= taken
        self.kv.release(r.tail, r.plain)
        r.tail, r.plain, r.registered = None, 0, 0

    def _preempt(self, r: SimRequest) -> None:
        """Free ``r``'s KV (its computed blocks stay cached) and queue it first again (one
        aborted or interrupted meanwhile ends instead)."""
        self.running.remove(r)
        if r.state != "running":
            self._end(r)
            return
        self._release(r)
        r.state, r.prefill_left = "waiting", 0
        r.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(r)

    def _finish_done(self) -> None:
        """Release the requests that are complete or aborted and tell their callers."""
        done = [r for r in self.running if r.gen >= r.out_len or r.state != "running"]
        if not done:
            return
        self.running = [r for r in self.running if not (r.gen >= r.out_len
                                                        or r.state != "running")]
        for r in done:
            self._end(r)

    def _end(self, r: SimRequest, released: bool = False) -> None:
        """Release a request that left the running set (or the queue) and tell its caller."""
        if not released:
            self._release(r)
        r.finished = self.env.now
        if r.state == "aborted":
            self.stats.aborted += 1
            return
        r.gen = min(r.gen, r.out_len)
        if r.state == "interrupted" and r.gen < r.out_len:
            self.stats.interrupted += 1
        else:
            r.state = "done"
            self.stats.completed += 1
        if r.on_done is not None:
            r.on_done(r)

