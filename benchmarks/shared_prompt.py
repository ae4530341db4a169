"""The policy update with and without the shared prompt (``loss.share_prompt``), in one run.

    python benchmarks/shared_prompt.py            # prompts of 32, 96, 240 and 960 tokens
    python benchmarks/shared_prompt.py --json
    python benchmarks/shared_prompt.py --quick    # a smoke run: one short prompt, 2 x 4 rows
    python benchmarks/shared_prompt.py --prompts 240 --groups 8 --group-size 8
    python benchmarks/shared_prompt.py --device cuda --size small   # on a GPU

A GRPO step's samples come in groups that share their prompt. The update either forwards
every row whole (``share_prompt = 0``) or runs each group's prompt once and the rows' own
tokens against its KV cache (``agentmath/rl/update.py``, ``forward_logprobs``). For each prompt
length, the same synthetic samples (``--groups`` x ``--group-size`` rows, each row's own
tokens uniform in 100-320, the demo's budget; random ids, loss on the row's own tokens) go
through the forward and backward of the whole update both ways, micro-batched as the updater
does (``--micro-batch`` rows; per prompt when shared), on a fresh ``--size`` model (``micro``),
on ``--device`` (the CPU, one thread unless ``--threads``; on CUDA the clock waits for the
device). Printed: seconds per update (median of ``--repeats``), the speed-up,
and the largest difference of a trained token's log-probability between the two (float
rounding: the two are the same computation reordered).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402


def samples_for(prompt_len: int, groups: int, group_size: int, vocab: int,
                seed: int) -> list[Any]:
    """``groups`` x ``group_size`` training samples, each group one random prompt."""
    from agentmath.rl.batch import TrainSample

    rng = random.Random(seed)
    out = []
    for _ in range(groups):
        prompt = [rng.randrange(3, vocab) for _ in range(prompt_len)]
        for _ in range(group_size):
            own = [rng.randrange(3, vocab) for _ in range(rng.randint(100, 320))]
            out.append(TrainSample(prompt + own, [0] * prompt_len + [1] * len(own),
                                   [-0.5] * (prompt_len + len(own)), rng.choice((-1.0, 1.0)),
                                   1.0))
    return out


def one_update(model: Any, samples: list[Any], micro: int, share: int,
               device: str = "cpu") -> tuple[float, Any]:
    """Seconds of one update's forwards and backwards; the trained log-probabilities, in
    sample order (on the CPU)."""
    import torch

    from agentmath.rl.batch import collate_samples, prefix_micro_batches
    from agentmath.rl.update import forward_logprobs

    plan = prefix_micro_batches(samples, micro, share)  # as the updater plans (0: whole rows)
    cuda = device.startswith("cuda")
    model.zero_grad(set_to_none=True)
    found: dict[int, Any] = {}
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for rows, prefix in plan:
        batch = collate_samples(rows, pad_id=0, prefix=prefix).to(device)
        _, logp = forward_logprobs(model, batch)
        weights = batch.advantages[:, None].expand_as(logp)
        (logp[batch.mask] * weights[batch.mask]).sum().backward()
        for i, row in enumerate(rows):
            found[id(row)] = logp.detach()[i][batch.mask[i]]
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return seconds, torch.cat([found[id(s)].cpu() for s in samples])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, nargs="+", default=[32, 96, 240, 960],
                    help="prompt lengths in tokens, one row each")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda where there is a GPU")
    ap.add_argument("--size", default="micro", help="tiny model size (agentmath.models.tiny)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="a smoke run (seconds)")
    ns = ap.parse_args(argv)
    if ns.quick:
        ns.prompts, ns.groups, ns.group_size, ns.repeats = [40], 2, 4, 1
    os.environ.setdefault("OMP_NUM_THREADS", str(ns.threads))
    import torch

    from agentmath.models.tiny import build_model, build_tokenizer

    torch.set_num_threads(ns.threads)
    tokenizer = build_tokenizer(["1 + 1 = 2. The answer is \\boxed{2}."] * 20, vocab_size=300)
    model = build_model(tokenizer, ns.size, seed=0).to(ns.device)
    model.train()
    vocab = len(tokenizer)
    rows = []
    for prompt_len in ns.prompts:
        samples = samples_for(prompt_len, ns.groups, ns.group_size, vocab, seed=prompt_len)
        times: dict[str, list[float]] = {"whole": [], "shared": []}
        logps: dict[str, Any] = {}
        for _ in range(ns.repeats):
            for name, share in (("whole", 0), ("shared", 1)):
                seconds, logps[name] = one_update(model, samples, ns.micro_batch, share,
                                                  ns.device)
                times[name].append(seconds)
        whole, shared = statistics.median(times["whole"]), statistics.median(times["shared"])
        rows.append({"prompt_tokens": prompt_len, "rows": len(samples),
                     "row_tokens_mean": statistics.mean(len(s.ids) for s in samples),
                     "whole_s": whole, "shared_s": shared, "speedup": whole / shared,
                     "max_logp_diff": float((logps["whole"] - logps["shared"]).abs().max())})
    result = {"model": ns.size, "device": ns.device, "threads": ns.threads,
              "micro_batch": ns.micro_batch, "repeats": ns.repeats,
              "torch": torch.__version__, "rows": rows}
    if ns.json:
        print(json.dumps(result))
        return 0
    print_table(f"The update's forwards and backwards, {ns.groups} x {ns.group_size} rows, "
                f"{ns.size} model on {ns.device}, {ns.threads} thread(s), median of {ns.repeats}",
                ["prompt tokens", "row tokens (mean)", "whole rows s", "shared prompt s",
                 "speed-up", "max |logp diff|"],
                [[str(r["prompt_tokens"]), f"{r['row_tokens_mean']:.0f}", f"{r['whole_s']:.2f}",
                  f"{r['shared_s']:.2f}", f"{r['speedup']:.2f}x", f"{r['max_logp_diff']:.1e}"]
                 for r in rows])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
