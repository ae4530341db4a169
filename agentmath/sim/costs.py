"""The cost model of one simulated continuous-batching server, its presets and its calibration.

One engine step of a vLLM-like server decodes one token for every running request whose
prompt is computed and spends what is left of a per-step token budget on (chunked) prefill.
Its duration is modelled as::

    t_step = a + b * n_decode + c * prefill_tokens + d * context_tokens + e * prefill_context

``a`` is the fixed cost of a forward pass (reading the weights, launching kernels), ``b`` the
extra cost per sequence in the batch (sampling, the linear layers' per-row work), ``c`` the cost
of one prefilled token's matmuls, ``d`` the cost of attending over one cached token of context
in a decode step (reading its KV; this makes long agentic contexts slow), ``e`` the cost of one
(query, key) pair of prefill attention (``prefill_context`` sums the positions of the tokens
prefilled in the step: re-prefilling a long context grows quadratically). ``d`` and ``e`` are 0
when ignored. The numbers are either a preset (:meth:`ServerCostModel.h100_qwen3_8b`, grounded
in published measurements in :mod:`.hardware`; :meth:`ServerCostModel.cpu_tiny`) or fitted to
measurements of a real server (:meth:`ServerCostModel.fit`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from agentmath.sim.hardware import H100_SXM, QWEN3_8B, step_coefficients

__all__ = ["ServerCostModel", "StepMeasurement", "steps_covering"]


@dataclass(frozen=True, slots=True)
class StepMeasurement:
    """One measured engine step (or an average over steps of the same shape): ``n_decode``
    sequences decoding, ``prefill_tokens`` prompt tokens computed, ``context_tokens`` cached
    tokens attended over (0 when unknown), and its duration ``step_s`` in seconds."""

    n_decode: int
    step_s: float
    prefill_tokens: int = 0
    context_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ServerCostModel:
    """Step cost, capacities and prefix-cache granularity of one simulated server."""

    #: Fixed seconds per engine step (weights read, kernel launches, scheduler).
    a: float = 0.006
    #: Seconds per decoding sequence in the step.
    b: float = 7e-5
    #: Seconds per prefilled (uncached) prompt token in the step.
    c: float = 6e-5
    #: Seconds per token of cached context attended over in the step (KV reads; 0: ignored).
    d: float = 0.0
    #: Seconds per (prefilled token, earlier token) pair of prefill attention (0: ignored).
    e: float = 0.0
    #: Token budget of one step (decode tokens + prefill chunk), vLLM's max_num_batched_tokens.
    max_batched_tokens: int = 8192
    #: Most requests running at once (vLLM's max_num_seqs); the rest wait in the queue.
    max_running: int = 256
    #: KV cache capacity in tokens (rounded down to whole blocks); requests wait when it is full
    #: and the newest running request is preempted (recomputed later) when decoding fills it.
    kv_tokens: int = 360_000
    #: Tokens per KV block: the granularity of prefix caching and allocation (vLLM: 16).
    block_size: int = 16
    #: Seconds the server's front end spends on each request before its engine sees it, one
    #: request at a time (vLLM's API server is one process): on vLLM-CPU with the tiny model a
    #: burst of one-token requests enters the engine one per step, milliseconds apart whatever
    #: the prompt's length (docs/benchmarks.md has the figures). 0: requests reach the engine as
    #: they arrive (the paper-scale presets: no source states a front end's cost per request).
    admission_s: float = 0.0
    #: How much longer each engine step takes while the front end is taking a request: its
    #: time times ``1 + contention``. On a host whose few cores the engine's scheduler, the
    #: front end and the client share (a small CI machine), a request passing the
    #: front end slows the steps running meanwhile. The calibration measures it
    #: (:func:`agentmath.serving.metrics.measure_contention`; a noisy figure on a small
    #: shared host); 0: the servers' hosts have cores to spare (the paper-scale presets).
    contention: float = 0.0

    @property
    def kv_blocks(self) -> int:
        """KV capacity in blocks."""
        return self.kv_tokens // self.block_size

    def step_time(self, n_decode: int, prefill_tokens: int = 0, context_tokens: int = 0,
                  prefill_context: int = 0) -> float:
        """Seconds of one engine step of this shape (``prefill_context``: the summed positions
        of the prefilled tokens, i.e. the keys their attention reads)."""
        return (self.a + self.b * n_decode + self.c * prefill_tokens
                + self.d * context_tokens + self.e * prefill_context)

    def prefill_time(self, tokens: int, cached: int = 0) -> float:
        """Seconds to prefill ``tokens`` after ``cached`` tokens already in the cache, in
        ``max_batched_tokens`` chunks, nothing else in the steps."""
        total, pos = 0.0, cached
        while pos < cached + tokens:
            n = min(self.max_batched_tokens, cached + tokens - pos)
            total += self.step_time(0, n, 0, n * pos + n * (n - 1) // 2)
            pos += n
        return total

    def decode_rate(self, n: int, context_tokens: int = 0) -> float:
        """Tokens per second decoded by ``n`` running requests holding ``context_tokens``."""
        return n / self.step_time(n, 0, context_tokens)

    @property
    def best_decode_s_per_token(self) -> float:
        """Seconds per decoded token at the fullest batch, ignoring attention (``d``): the
        server's best rate, used by :func:`~agentmath.sim.ideal.ideal_makespan`."""
        n = min(self.max_running, self.max_batched_tokens)
        return self.a / n + self.b

    def with_(self, **changes: float | int) -> ServerCostModel:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ presets

    @classmethod
    def h100_qwen3_8b(cls) -> ServerCostModel:
        """An H100-80GB SXM serving Qwen3-8B in bf16 with vLLM, from the model's shape, the
        card's specs and published vLLM measurements (:mod:`.hardware`, each figure cited
        there; tested against them in ``tests/unit/test_simulator_costs.py``):

        * ``a`` = 6.85 ms: 16.4 GB of weights at 77% of 3.35 TB/s, plus 0.5 ms per step
          (7.2 ms measured at batch <= 10 for Llama-3-8B);
        * ``b`` = 8 us per sequence (12.7 ms measured at batch 256, short contexts);
        * ``c`` = 18.7 us per prefilled token (13.9 GFLOP at 75% of 989 TFLOPS) and ``e`` =
          0.85 ns per (token, earlier token) pair of attention: a 10k-token prompt ~0.23 s,
          an 80k one ~4.4 s;
        * ``d`` = 57 ns per context token per decode step: 144 KiB of KV per token (36 layers
          x 8 KV heads x 128 x 2 x bf16) at 77% of 3.35 TB/s;
        * ``kv_tokens`` = 392k: 0.9 x 79.6 GiB - 15.3 GiB of weights - 2.5 GiB, over 144 KiB;
        * ``max_batched_tokens`` 8192, ``max_running`` 256 (``max-num-seq`` of the measured
          runs), ``block_size`` 16: vLLM's defaults for online serving.

        Decode is bandwidth-bound: 256 sequences of 1.5k tokens step in ~31 ms (8.3k tok/s),
        but a server's KV (392k tokens) holds only ~23 agentic contexts of 17k tokens, whose
        steps take ~30 ms for 23 tokens (~770 tok/s).
        """
        coef = step_coefficients(QWEN3_8B, H100_SXM)
        return cls(a=float(coef["a"]), b=float(coef["b"]), c=float(coef["c"]),
                   d=float(coef["d"]), e=float(coef["e"]), max_batched_tokens=8192,
                   max_running=256, kv_tokens=int(coef["kv_tokens"]), block_size=16)

    @classmethod
    def cpu_tiny(cls) -> ServerCostModel:
        """vLLM-CPU 0.32 serving the project's 2.6M-parameter tiny model on 2 vCPUs, fitted
        (:meth:`fit`) to the throughputs in ``/work/shared/notes/inference-facts.md``: ~300
        tok/s for 1 request, ~1700 at 8 concurrent, ~3700 at 32, and a time to first token of
        ~100 ms for a 1.3k-token prompt cold against ~20 ms with 1280 tokens cached (60 prompt
        tokens per 80 ms -> ``c``). KV: ``VLLM_CPU_KVCACHE_SPACE=1`` GiB at 2 KiB per token (4
        layers x 2 KV heads x 64 x 2 x bf16) = 512k tokens; ``--max-model-len 2048``."""
        points = [StepMeasurement(1, 1 / 300), StepMeasurement(8, 8 / 1700),
                  StepMeasurement(32, 32 / 3700),
                  # Prefill: 1280 cached tokens saved ~80 ms of time to first token (the HTTP
                  # overhead, in both, cancels), i.e. a step with 1280 prefill tokens lasts
                  # about one batch-1 step plus 80 ms.
                  StepMeasurement(0, 1 / 300 + 0.080, prefill_tokens=1280)]
        fitted = cls.fit(points, fit_d=False)
        return replace(fitted, max_batched_tokens=2048, max_running=256, kv_tokens=512 * 1024,
                       block_size=16)

    # ------------------------------------------------------------------ calibration

    @classmethod
    def fit(cls, measurements: Sequence[StepMeasurement], *, fit_d: bool | None = None,
            base: ServerCostModel | None = None) -> ServerCostModel:
        """Least-squares ``a, b, c`` (and ``d`` when the points vary in context) from measured
        steps, each term kept non-negative; capacities come from ``base`` (defaults otherwise).

        Measurements are typically: decode throughput at several concurrencies with short
        prompts (``StepMeasurement(n, n / tokens_per_s)``), and prefill (time to first token
        of a long uncached prompt, minus that of a cached one) as a step with
        ``prefill_tokens``. Relative errors are minimised, so fast and slow steps count alike.
        """
        if not measurements:
            raise ValueError("fit needs at least one measurement")
        use_d = fit_d if fit_d is not None else len({m.context_tokens for m in measurements}) > 1
        columns = [lambda m: 1.0, lambda m: float(m.n_decode),
                   lambda m: float(m.prefill_tokens)]
        if use_d:
            columns.append(lambda m: float(m.context_tokens))
        x = np.array([[col(m) for col in columns] for m in measurements], dtype=float)
        y = np.array([m.step_s for m in measurements], dtype=float)
        w = 1.0 / np.maximum(y, 1e-12)
        active = list(range(len(columns)))
        coef = np.zeros(len(columns))
        while active:  # non-negative least squares by dropping negative terms
            sol, *_ = np.linalg.lstsq(x[:, active] * w[:, None], y * w, rcond=None)
            if (sol >= 0).all():
                coef[:] = 0.0
                coef[active] = sol
                break
            active.pop(int(np.argmin(sol)))
        start = base or cls()
        d = float(coef[3]) if use_d else start.d
        return replace(start, a=float(coef[0]), b=float(coef[1]), c=float(coef[2]), d=d)


def steps_covering(elapsed: float, a: float, dd: float, k: int) -> int:
    """The number of whole steps, starting at 0, by whose end ``elapsed`` seconds have passed
    in a decode phase whose steps cost ``a``, ``a + dd``, ``a + 2*dd``...: the smallest s with
    ``s*a + dd*s*(s-1)/2 >= elapsed`` (capped at k)."""
    if elapsed <= 0:
        return 0
    if dd <= 0:
        s = math.ceil(elapsed / a - 1e-9)
    else:
        b = a - dd / 2
        s = math.ceil((-b + math.sqrt(b * b + 2 * dd * elapsed)) / dd - 1e-9)
        while s > 0 and (s - 1) * a + dd * (s - 1) * (s - 2) / 2 >= elapsed:
            s -= 1
    return max(0, min(k, s))
