"""One row of ``benchmarks/rl_step.py``, in a process of its own: GRPO steps of the demo's
configuration with whichever ``agentmath`` is first on ``sys.path`` (this checkout, or an older
commit's worktree put first on PYTHONPATH by rl_step.py). Prints one line, ``ROW {json}``.

    python benchmarks/_rl_step_driver.py '{"model": ..., "data": ..., "out": ..., "steps": 4,
        "config": "frozen" | "demo", "generator": {...}, "overrides": {...}, "quick": false}'

(``quick``: a smoke run, 1 prompt x 2 samples a step and 64 model tokens an episode.)

``config``: ``demo`` is today's ``agentmath.recipes.demo.rl_config`` (budget stages, void-turn
filter); ``frozen`` is the demo's GRPO run as it was written when the step was first measured
(commit b333b8a: accuracy reward, 8 prompts x 8 samples, 320 model tokens, up to 6 tool calls,
async rollouts on the in-process model, no stages, no filters), spelled out here so that old
and new code run the very same settings. It imports only agentmath's public API of that time
(``RLConfig``, ``train_rl(..., on_step=...)``, the step record's timing fields), and nothing of
this directory, so that an old commit's package runs it unchanged.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per run, as in the demo

QUICK_TOKENS = 64  # a smoke run's model-token budget per episode
TOOL_SYSTEM = "Solve the problem. Run Python in <code> blocks; results come back in <interpreter>."


def frozen_config(model: str, data: str, steps: int) -> dict:
    """The demo's GRPO settings at commit b333b8a (its learning rate aside: 1e-4 as today)."""
    return {
        "model": model, "format": "code_interpreter", "data": {"dataset": data},
        "steps": steps, "group_size": 8, "prompts_per_step": 8, "seed": 0,
        "rewards": [{"name": "accuracy", "weight": 1.0}],
        "optim": {"learning_rate": 1e-4}, "temperature": {"start": 1.0},
        "loss": {"mask_tool_tokens": True, "micro_batch_size": 32},
        "loop": {"system_prompt": TOOL_SYSTEM, "max_model_tokens": 320, "max_tool_calls": 6},
        "rollout": {"mode": "async", "max_in_flight": 128},
        "generator": {"max_batch": 64}, "checkpoint_every": 0, "tensorboard": False}


def build(spec: dict) -> object:
    from agentmath.rl.config import RLConfig

    if spec["config"] == "demo":
        from agentmath.recipes.demo import DemoConfig, rl_config

        cfg = rl_config(DemoConfig(rl_steps=spec["steps"], max_digits=3), spec["model"],
                        Path(spec["data"]), masked=True).model_dump()
    else:
        cfg = frozen_config(spec["model"], spec["data"], spec["steps"])
    cfg["generator"] = {**cfg["generator"], **spec.get("generator", {})}
    cfg.update(spec.get("overrides", {}))  # top-level RLConfig fields of the row
    if spec.get("quick"):  # a smoke run: 1 prompt x 2 samples a step, 64 model tokens each
        cfg.update(prompts_per_step=1, group_size=2)
        cfg["loop"] = {**cfg["loop"], "max_model_tokens": QUICK_TOKENS}
        if cfg.get("stages"):
            cfg["stages"] = {**cfg["stages"], "stages": [
                {**stage, "max_model_tokens": QUICK_TOKENS} for stage in cfg["stages"]["stages"]]}
    return RLConfig.model_validate(cfg)


def main() -> None:
    import torch

    torch.set_num_threads(1)
    spec = json.loads(sys.argv[1])
    from agentmath.rl.trainer import train_rl

    rows: list = []
    started = time.monotonic()
    train_rl(build(spec), spec["out"], progress=False, resume=False, on_step=rows.append)
    print("ROW " + json.dumps({
        "wall_s": time.monotonic() - started,
        "steps": [{"step_s": r.step_s, "rollout_s": r.rollout_s, "train_s": r.train_s,
                   "model_tokens_mean": r.model_tokens_mean, "samples_per_s": r.samples_per_s,
                   "reward_mean": r.reward_mean, "groups_trained": r.groups_trained}
                  for r in rows]}), flush=True)


if __name__ == "__main__":
    main()
