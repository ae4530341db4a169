"""The floor under ``benchmarks/rl_step.py``'s rollout, in a process of its own (one thread):
how long transformers' forward of the start model alone takes to decode a step's tokens when
every sequence always sits in one full decode batch. Prints one line, ``FLOOR {json}``.

    python benchmarks/_rl_step_floor.py '{"model": DIR, "data": FILE, "tokens": 13210,
        "batch": 64, "repeats": 3}'

The best case of any generator that runs the model through transformers: the step's ``tokens``
model tokens decoded ``batch`` rows at a time (``ceil(tokens / batch)`` decode steps, each
a forward of all rows against the growing KV cache), after one prefill of ``batch`` prompts of
the training data cut to the shortest (no padding); greedy argmax, no sampling, no stop
strings, no tool calls, no waiting for the sandbox, no row ever idle. A real step decodes
episodes of uneven length with tool calls between turns, so its rollout can only be slower.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per run, as in the demo


def prompts(tokenizer: object, data: str, batch: int) -> list[list[int]]:
    """The first ``batch`` problems of the training file as token ids (repeated if fewer)."""
    from agentmath.jsonl import read_jsonl

    problems = [row["problem"] for row in read_jsonl(data, require=("problem",))]
    ids = [tokenizer(p)["input_ids"] for p in problems[:batch]]  # type: ignore[operator]
    return [ids[i % len(ids)] for i in range(batch)]


def decode_seconds(model: object, first: object, steps: int) -> tuple[float, float]:
    """(prefill s, decode s): one prefill of ``first`` (batch x length), then ``steps``
    one-token forwards of every row against the cache."""
    import torch
    from transformers import DynamicCache

    from agentmath.models.kv import cache_argument

    cache = DynamicCache()
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = model(input_ids=first, use_cache=True, **{cache_argument(): cache})  # type: ignore[operator]
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        t1 = time.perf_counter()
        for _ in range(steps):
            out = model(input_ids=nxt, use_cache=True, **{cache_argument(): cache})  # type: ignore[operator]
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def main() -> None:
    spec = json.loads(sys.argv[1])
    import torch
    import transformers

    torch.set_num_threads(1)
    tok = transformers.AutoTokenizer.from_pretrained(spec["model"])
    model = transformers.AutoModelForCausalLM.from_pretrained(spec["model"],
                                                              dtype=torch.float32).eval()
    batch = int(spec["batch"])
    rows = prompts(tok, spec["data"], batch)
    width = min(len(r) for r in rows)
    first = torch.tensor([r[:width] for r in rows])
    steps = math.ceil(int(spec["tokens"]) / batch)
    decode_seconds(model, first, 4)  # warm the allocator and kernels
    runs = [decode_seconds(model, first, steps) for _ in range(int(spec.get("repeats", 3)))]
    prefill = statistics.median(r[0] for r in runs)
    decode = statistics.median(r[1] for r in runs)
    print("FLOOR " + json.dumps({"tokens": steps * batch, "batch": batch, "prompt_tokens": width,
                                 "decode_steps": steps, "prefill_s": prefill,
                                 "decode_s": decode, "rollout_floor_s": prefill + decode,
                                 "decode_ms_per_step": 1000 * decode / steps}), flush=True)


if __name__ == "__main__":
    main()
