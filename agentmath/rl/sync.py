"""Weight sync from the trainer to the generators, and the policy version that tags samples.

After every optimizer step the generators must sample from the new weights, every later model
segment must carry the new policy version (so that staleness and importance weights are right),
and no prefix-cache entry computed under old weights may be reused. Two implementations:

* :class:`InProcessSync` — the ``hf`` generator in this process. When it shares the trainer's
  model object (the default: no copy, no memory doubling) the new weights are already live and
  only the version moves; a separate generator model gets the weights copied in (LoRA merged).
* ``agentmath.rl.sync_vllm.VLLMWeightSync`` — vLLM servers load the weights (or the LoRA
  adapter, under a new name per version) from disk and drop their prefix caches.
"""

from __future__ import annotations

from typing import Any, Protocol

from agentmath._lazy import require


class WeightSync(Protocol):
    """Pushes the trainer's weights to the generators as policy ``version``."""

    async def push(self, model: Any, tokenizer: Any, version: int) -> str | None:
        """Make ``version`` live; return the model name requests must now use (or None)."""
        ...

    async def aclose(self) -> None: ...


def _plain_state(model: Any) -> dict[str, Any]:
    """The full (LoRA-merged) state dict of ``model``, without touching it."""
    import copy

    if hasattr(model, "merge_and_unload"):
        model = copy.deepcopy(model).merge_and_unload()
    return model.state_dict()


class InProcessSync:
    """The trainer's weights into an in-process generator model (``HFBackend.model``)."""

    def __init__(self, generator_model: Any) -> None:
        self.generator_model = generator_model

    async def push(self, model: Any, tokenizer: Any, version: int) -> str | None:
        torch = require("torch", "train")
        if model is not self.generator_model:
            with torch.no_grad():
                self.generator_model.load_state_dict(_plain_state(model))
        self.generator_model.eval()
        return None

    async def aclose(self) -> None:
        return None
