"""An estimate of a trainer rank's GPU memory under FSDP (agentmath/train/sharding.py), from
the model's shape: what docs/gpu.md quotes for sharded training, marked as an estimate.

Per rank, for P parameters over N ranks, with bf16 = true (FSDP2 mixed precision: float32
master shards, bfloat16 compute):

* the float32 weight shard, its float32 gradient shard and AdamW's two float32 moments:
  4 + 4 + 8 = 16 bytes x P / N (a LoRA run: the frozen shard's 4 bytes x P / N and the
  adapter's 16 bytes a parameter);
* the weights FSDP has gathered at one time, in bfloat16: the root unit (embeddings, final
  norm, head), held from the forward to the end of the backward, plus two decoder layers
  (the one that runs and the one prefetched); during backward, a unit's unsharded float32
  gradient before its reduce-scatter;
* activations: what autograd keeps of each decoder layer for a micro-batch's tokens.
  Without activation checkpointing, per token and layer, the bfloat16 inputs of its matmuls,
  norms and activation function (the attention kernel keeps no score matrix):
  2 x (6 x hidden + 2 x q_dim + 4 x kv_dim + 4 x intermediate) bytes; with it, the layer's
  input (2 x hidden bytes) for every layer plus one layer's full set while it is recomputed;
* logits: float32 over the vocabulary for every token that needs them, twice (the logits
  and the log-softmax the loss keeps for backward). SFT computes them only from the first
  trained position on (``logits_to_keep``); an RL micro-batch needs them for every row token.

Not counted: the CUDA context and allocator fragmentation (1-3 GiB in practice), temporary
buffers of the collectives, and the optimizer step's transient copies. The figures are an
estimate, not a measurement: none of them has been checked on a GPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["QWEN3_1_7B", "QWEN3_4B", "QWEN3_8B", "QWEN3_30B_A3B", "RankMemory", "TrainShape",
           "fsdp_rank_memory"]

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class TrainShape:
    """What a decoder's training memory depends on."""

    name: str
    params: float
    embedding_params: float  # the root unit: embeddings (and an untied head)
    layers: int
    hidden: int
    intermediate: int
    q_dim: int  # query heads x head dim
    kv_dim: int  # key-value heads x head dim
    vocab: int

    @property
    def layer_params(self) -> float:
        return (self.params - self.embedding_params) / self.layers

    def activation_bytes_per_token_layer(self) -> int:
        """bfloat16 tensors autograd keeps of one token in one layer (module docstring)."""
        return 2 * (6 * self.hidden + 2 * self.q_dim + 4 * self.kv_dim + 4 * self.intermediate)


#: Qwen3-4B (model card: 4.0B parameters, 3.6B non-embedding; config: 36 layers, hidden 2560,
#: intermediate 9728, 32 query / 8 key-value heads of dim 128, 151,936-token vocabulary,
#: tied embeddings).
QWEN3_4B = TrainShape("Qwen3-4B", 4.02e9, 151_936 * 2560, 36, 2560, 9728, 32 * 128, 8 * 128,
                      151_936)


#: Qwen3-1.7B (model card: 1.7B parameters; config: 28 layers, hidden 2048, intermediate
#: 6144, 16 query / 8 key-value heads of dim 128, tied embeddings).
QWEN3_1_7B = TrainShape("Qwen3-1.7B", 1.7e9, 151_936 * 2048, 28, 2048, 6144, 16 * 128,
                        8 * 128, 151_936)
#: Qwen3-8B (model card: 8.2B parameters; config: 36 layers, hidden 4096, intermediate 12288,
#: 32 query / 8 key-value heads of dim 128, untied embeddings: two 151,936 x 4,096 matrices).
QWEN3_8B = TrainShape("Qwen3-8B", 8.19e9, 2 * 151_936 * 4096, 36, 4096, 12288, 32 * 128,
                      8 * 128, 151_936)
#: Qwen3-30B-A3B (model card: 30.5B parameters, 3.3B active; config: 48 layers, hidden 2048,
#: 128 experts of intermediate 768 of which 8 per token, 32 query / 4 key-value heads of dim
#: 128, untied embeddings). ``intermediate`` is the active experts' (8 x 768): what one
#: token's activations hold; the weights counted are every expert's.
QWEN3_30B_A3B = TrainShape("Qwen3-30B-A3B", 30.5e9, 2 * 151_936 * 2048, 48, 2048, 8 * 768,
                           32 * 128, 4 * 128, 151_936)


@dataclass(frozen=True, slots=True)
class RankMemory:
    """Bytes one rank holds at its peak, by kind (module docstring)."""

    weights: float  # float32 shard (LoRA: frozen shard + adapter)
    gradients: float  # float32 shard
    optimizer: float  # AdamW moments, float32
    gathered: float  # bf16 full weights of the units gathered at once + one unsharded grad
    activations: float
    logits: float

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.gathered
                + self.activations + self.logits)

    def gib(self) -> dict[str, float]:
        """Each kind and the total, in GiB (rounded to 0.1)."""
        return {k: round(v / GIB, 1) for k, v in {**asdict(self), "total": self.total}.items()}


def fsdp_rank_memory(shape: TrainShape = QWEN3_4B, *, ranks: int = 8,
                     tokens_per_rank: int = 8192, logit_tokens: int | None = None,
                     activation_checkpointing: bool = True, lora_params: float = 0.0,
                     cpu_offload: bool = False) -> RankMemory:
    """The estimated peak memory of one rank training ``shape`` sharded over ``ranks``, with a
    micro-batch of ``tokens_per_rank`` tokens (rows x length) of which ``logit_tokens`` (all
    by default) need logits; ``lora_params``: trainable adapter parameters (0: full
    fine-tuning); ``cpu_offload``: shards, gradients and AdamW state in CPU memory."""
    trained = lora_params or shape.params
    weights = 4 * (shape.params + lora_params) / ranks
    gradients, optimizer = 4 * trained / ranks, 8 * trained / ranks
    if cpu_offload:
        weights = gradients = optimizer = 0.0
    unit = max(shape.embedding_params, shape.layer_params)
    gathered = 2 * (shape.embedding_params + 2 * shape.layer_params) + 4 * unit
    per_layer = shape.activation_bytes_per_token_layer() * tokens_per_rank
    activations = (2 * shape.hidden * tokens_per_rank * shape.layers + per_layer
                   if activation_checkpointing else per_layer * shape.layers)
    keep = tokens_per_rank if logit_tokens is None else logit_tokens
    logits = 2 * 4 * shape.vocab * keep
    return RankMemory(weights, gradients, optimizer, gathered, activations, logits)
