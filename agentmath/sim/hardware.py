"""Where the H100 cost model's figures come from: the model's shape, the card, and published
measurements of vLLM serving an 8B model on an H100, each cited beside its constant.

:func:`step_coefficients` turns a :class:`ModelShape` and an :class:`Accelerator` into the
coefficients of :class:`~agentmath.sim.costs.ServerCostModel` (``a, b, c, d, e`` and the KV
capacity) from first principles -- bytes read per decode step over the HBM bandwidth, FLOPs per
prefilled token over the achieved FLOP rate -- with the efficiencies taken from (or checked
against) the published numbers below. ``tests/unit/test_simulator_costs.py`` checks the
resulting model against those numbers within the tolerances stated there.

Published measurements used (numbers as stated in the source):

* **[L10]/[L320]** LambdaLabsML/vllm-benchmark (github.com/LambdaLabsML/vllm-benchmark),
  ``results/prompt_10|prompt_320/1xH100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_len2048.json``:
  vLLM 0.6.0 with ``--num-scheduler-steps 10`` (tokens stream in chunks of 10 steps), bf16
  Llama-3-8B-Instruct on one H100-80GB-SXM, ShareGPT prompts all sent at once.
  [L10]: 10 prompts (mean 137 input, 187 output tokens): ``median_itl_ms`` 72.30 per 10-step
  chunk, i.e. **7.2 ms per decode step at batch <= 10**; ``median_tpot_ms`` 7.56.
  [L320]: 320 prompts with ``max-num-seq=256`` (mean 205 input, 204 output tokens): the
  10-step chunks take 0.125-0.131 s while ~256 requests run (the first chunks of the ITL
  lists), i.e. **~12.7 ms per decode step at batch 256** with short (~300-token) contexts.
* **[LB]** the same repository's ``benchmark_v0.md``: Llama 3.1 8B, tp=1, rps=inf, 5000
  prompts, ``max-num-seq=256``: v0.6.0 with 10 scheduler steps **8,088 output tokens/s**,
  median TPOT 25.57 ms. Its prompt and output lengths are not stated, and its TPOT includes
  the prefill steps of the requests replacing finished ones, so it is an end-to-end reference
  only (the model's decode-only step at batch 256 is faster: 12.7 ms, as [L320]); not tested.
* **[JM]** johnmusgrave.com, "vLLM throughput-latency sweep on NVIDIA A100": Llama-3.1-8B
  bf16, vLLM 0.23.0, "decode at one request per time runs at about 75 tokens/sec, roughly
  **77% of the GPU's memory-bandwidth ceiling**" (A100 40GB, 1.56 TB/s).
* **[KV]** notes of a vLLM "Distributed KV Cache Store" discussion, quoting a
  chart of "Llama-3.1-8B-Instruct on H100" prefill ("GPU compute") time by prompt length:
  **~200 ms at 10k tokens, ~1,100 at 40k, ~2,100 at 60k, ~3,800 at 80k, ~7,000 at 100k**.
  Read off a chart and second-hand: the tests give it a 30% tolerance.
* **Specs**: NVIDIA H100 SXM5 80 GB: 3.35 TB/s HBM3, 989 TFLOPS dense bf16 (1,979 with
  sparsity), 81,559 MiB visible to CUDA. Qwen3-8B (huggingface.co/Qwen/Qwen3-8B model card and
  config): 8.2B parameters, 6.95B non-embedding, 36 layers, 32 query / 8 KV heads, head dim
  128, untied 151,936 x 4,096 embeddings. vLLM's default ``gpu_memory_utilization`` is 0.9.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["H100_SXM", "LLAMA3_8B", "QWEN3_1_7B", "QWEN3_30B_A3B", "QWEN3_4B", "QWEN3_8B",
           "Accelerator", "ModelShape", "step_coefficients"]

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the cost of a dense decoder depends on."""

    name: str
    params: float  # all parameters (bytes read per step = params x dtype_bytes)
    non_embedding_params: float  # the matmuls every token goes through
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2  # bf16
    hidden_size: int = 0  # the residual width; 0: q_heads x head_dim (true of Qwen3-8B)

    @property
    def hidden(self) -> int:
        """The residual stream's width (activations scale with it)."""
        return self.hidden_size or self.q_heads * self.head_dim

    @property
    def active_params(self) -> float:
        """Parameters each token's matmuls go through (training FLOPs): the non-embedding
        ones, which for a mixture of experts are the active experts' (see the presets)."""
        return self.non_embedding_params

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer: 2 x layers x kv_heads x head_dim x dtype bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def flops_per_token(self) -> float:
        """Matmul FLOPs of one token through the layers (the LM head runs only on the tokens
        sampled, counted in ``b``)."""
        return 2.0 * self.non_embedding_params

    @property
    def attention_flops_per_pair(self) -> int:
        """FLOPs of one (query, key) pair over all layers and heads: QK^T and PV, 2 x 2 x
        head_dim each per head."""
        return 4 * self.layers * self.q_heads * self.head_dim


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One GPU as the cost model sees it."""

    name: str
    memory_bytes: float  # visible to CUDA
    hbm_bytes_per_s: float
    dense_bf16_flops: float


#: Qwen3-8B (model card: 8.2B parameters, 6.95B non-embedding; config: 36 layers, 32 q / 8 kv
#: heads, head_dim 128).
QWEN3_8B = ModelShape("Qwen3-8B", 8.19e9, 6.95e9, 36, 32, 8, 128)
#: Qwen3-4B (model card: 4.0B parameters, 3.6B non-embedding; config: 36 layers, 32 q / 8 kv
#: heads, head_dim 128, hidden 2,560, tied embeddings).
QWEN3_4B = ModelShape("Qwen3-4B", 4.02e9, 3.6e9, 36, 32, 8, 128, hidden_size=2560)
#: Qwen3-1.7B (model card: 1.7B, 1.4B non-embedding; 28 layers, 16 q / 8 kv heads, head_dim
#: 128, hidden 2,048, tied embeddings).
QWEN3_1_7B = ModelShape("Qwen3-1.7B", 1.7e9, 1.4e9, 28, 16, 8, 128, hidden_size=2048)
#: Qwen3-30B-A3B, a mixture of experts (model card: 30.5B parameters, 3.3B activated, 29.9B
#: non-embedding; 48 layers, 32 q / 4 kv heads, head_dim 128, hidden 2,048, 128 experts of
#: which 8 per token, untied 151,936 x 2,048 embeddings). ``params`` is every weight (memory,
#: and a decode step at a large batch reads nearly every expert); ``non_embedding_params`` is
#: what one token goes through: 3.3B activated less the two 0.31B embedding matrices.
QWEN3_30B_A3B = ModelShape("Qwen3-30B-A3B", 30.5e9, 2.7e9, 48, 32, 4, 128, hidden_size=2048)
#: Llama-3-8B, the model of the published measurements (32 layers, 32 q / 8 kv heads, head_dim
#: 128, 128,256-token vocabulary, untied embeddings): used to check the model against them.
LLAMA3_8B = ModelShape("Llama-3-8B", 8.03e9, 8.03e9 - 2 * 128_256 * 4096, 32, 32, 8, 128)
#: NVIDIA H100 SXM5 80 GB (datasheet: 3.35 TB/s, 989 dense bf16 TFLOPS; 81,559 MiB in CUDA).
H100_SXM = Accelerator("H100-80GB-SXM", 81_559 * (1 << 20), 3.35e12, 989e12)

#: Achieved share of HBM bandwidth when a decode step streams weights and KV: 77%, as [JM]
#: measured for vLLM decoding an 8B model (on an A100; that it carries over to the H100 is an
#: assumption, checked by [L10] below).
BANDWIDTH_EFFICIENCY = 0.77
#: Fixed per-step cost beyond reading the weights (scheduling, launches, sampling): 0.5 ms.
#: Not published; set so that the model gives [L10]'s 7.2 ms step at batch <= 10.
STEP_OVERHEAD_S = 0.5e-3
#: Extra seconds per sequence in a decode step: 8 us. Not published as such; derived from [L320]
#: (12.7 ms at batch 256, ~300-token contexts) minus the weights, overhead and KV terms. It is
#: small because at 256 rows an 8B model's matmuls are still bandwidth-bound (256 x 16 GFLOP
#: = 4.1 TFLOP, ~4 ms at peak, under the ~6 ms of weight reads).
PER_SEQUENCE_S = 8e-6
#: Achieved share of dense bf16 FLOP/s in prefill matmuls (75%) and in prefill attention (70%,
#: FlashAttention-class kernels). Not published for this setup; chosen so that the model
#: matches [KV]'s prefill times within 30% from 10k to 100k tokens (+27% at 40k, -18% at
#: 100k, for Llama-3-8B's shape).
PREFILL_MATMUL_EFFICIENCY = 0.75
PREFILL_ATTENTION_EFFICIENCY = 0.70
#: vLLM's default gpu_memory_utilization (engine arguments documentation).
GPU_MEMORY_UTILIZATION = 0.9
#: Memory vLLM keeps besides weights and KV: the activation peak it profiles at
#: max_num_batched_tokens=8192, CUDA graphs, non-torch allocations. 2.5 GiB is an assumption
#: (vLLM logs it per run; it is a few GiB for an 8B model).
NON_KV_BYTES = 2.5 * GIB


def step_coefficients(model: ModelShape = QWEN3_8B,
                      gpu: Accelerator = H100_SXM) -> dict[str, float | int]:
    """``a, b, c, d, e`` and ``kv_tokens`` of :class:`~agentmath.sim.costs.ServerCostModel`
    for ``model`` on ``gpu`` under vLLM (see the module docstring for each figure):

    * ``a`` = weights / (77% of HBM bandwidth) + 0.5 ms: a decode step reads every weight once;
    * ``b`` = 8 us per sequence in the step;
    * ``c`` = matmul FLOPs per token / (75% of dense bf16 peak): prefill is compute-bound;
    * ``d`` = KV bytes per token / (77% of HBM bandwidth): each decode step reads the KV of
      every running sequence's context;
    * ``e`` = attention FLOPs per (query, key) pair / (70% of peak): a prefilled token at
      position p attends to p earlier tokens, so prefill grows quadratically with context;
    * ``kv_tokens`` = (0.9 x memory - weights - 2.5 GiB) / KV bytes per token.
    """
    bandwidth = BANDWIDTH_EFFICIENCY * gpu.hbm_bytes_per_s
    kv_bytes = GPU_MEMORY_UTILIZATION * gpu.memory_bytes - model.weight_bytes - NON_KV_BYTES
    return {
        "a": model.weight_bytes / bandwidth + STEP_OVERHEAD_S,
        "b": PER_SEQUENCE_S,
        "c": model.flops_per_token / (PREFILL_MATMUL_EFFICIENCY * gpu.dense_bf16_flops),
        "d": model.kv_bytes_per_token / bandwidth,
        "e": model.attention_flops_per_pair / (PREFILL_ATTENTION_EFFICIENCY
                                               * gpu.dense_bf16_flops),
        "kv_tokens": int(kv_bytes // model.kv_bytes_per_token),
    }
