"""How a vLLM server lets a burst of requests into its engine: the front end's cost per request
and what a lockstep round of requests costs in engine steps, on one real vLLM-CPU server.

    python benchmarks/vllm_front_end.py [--server-url URL] [--json] [--repeats N]

What: (1) bursts of ``--burst`` one-token requests sharing an L-token prompt prefix (cached, so
little prefill) against one such request, for L in ``--lengths``: the wall-time difference per
extra request is what the front end (and the client) spend on each request, and the engine
steps of the burst say whether the requests entered together (1 step) or one by one (one step
each); (2) rounds as a lockstep (sync) rollout sends them: ``--round`` requests at once, fresh
700-token prompts, each for exactly k tokens (k long-tailed, a lognormal of median 36 clipped to
8-160, as the real rollout benchmark's turns), with logprobs: engine steps against the longest
k (equal when every request entered at once), and the wall time.

Why: ``agentmath.sim`` models the servers' front ends as a queue of ``admission_s`` per
request (``ServerCostModel``); this is the measurement behind it (docs/benchmarks.md). The
client runs on core 1 and the server on both cores, as in ``benchmarks/rollout.py``'s real half:
run it as ``OMP_NUM_THREADS=1 taskset -c 1 .venv/bin/python benchmarks/vllm_front_end.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmath import serving as srv  # noqa: E402
from benchmarks._common import print_table  # noqa: E402

MODEL = "tiny"


async def _one(client: httpx.AsyncClient, url: str, prompt: list[int], tokens: int,
               salt: str) -> list[int]:
    """Exactly ``tokens`` new tokens (logprobs on, as an RL rollout's requests); their ids."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "min_tokens": tokens,
            "ignore_eos": True, "temperature": 1.0, "return_token_ids": True, "logprobs": 0,
            "cache_salt": salt}
    response = await client.post(f"{url}/v1/completions", json=body, timeout=300.0)
    response.raise_for_status()
    return list(response.json()["choices"][0]["token_ids"])


async def _timed(client: httpx.AsyncClient, url: str, jobs: list[tuple[list[int], int]],
                 salt: str) -> tuple[float, float, list[list[int]]]:
    """(wall seconds, engine steps, ids) of ``jobs`` (prompt, tokens) sent all at once."""
    before = await srv.scrape_vllm(client, url)
    started = time.perf_counter()
    ids = await asyncio.gather(*(_one(client, url, p, k, salt) for p, k in jobs))
    wall = time.perf_counter() - started
    return wall, (await srv.scrape_vllm(client, url)).delta(before).steps, ids


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The burst rows and the round rows (see the module docstring)."""
    rng = np.random.default_rng(args.seed)
    bursts, rounds = [], []
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=512)) as client:
        await _one(client, url, [5] * 20, 4, "warm-up")
        for length in args.lengths:
            prefix = rng.integers(3, 256, length).tolist()
            await _one(client, url, prefix + [7] * 16, 1, "burst")  # the prefix, cached
            for _ in range(args.repeats):
                one, _, _ = await _timed(client, url, [(prefix + rng.integers(
                    3, 256, 16).tolist(), 1)], "burst")
                many, steps, _ = await _timed(client, url, [(prefix + rng.integers(
                    3, 256, 16).tolist(), 1) for _ in range(args.burst)], "burst")
                bursts.append({"prompt_tokens": length + 16, "requests": args.burst,
                               "per_extra_request_ms": 1e3 * (many - one) / (args.burst - 1),
                               "engine_steps": steps})
        for r in range(args.repeats):
            ks = np.clip(np.round(36 * np.exp(rng.normal(0, 0.9, args.round))), 8, 160)
            jobs = [(rng.integers(3, 256, 700).tolist(), int(k)) for k in ks]
            wall, steps, _ = await _timed(client, url, jobs, f"round-{r}")
            rounds.append({"requests": args.round, "longest_turn": int(ks.max()),
                           "tokens": int(ks.sum()), "engine_steps": steps, "wall_s": wall,
                           "steps_over_longest": steps / ks.max()})
    return {"bursts": bursts, "rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-url", help="a running vLLM server serving the model as 'tiny' "
                                         "(default: start one of the tiny test model)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 700, 1500])
    ap.add_argument("--burst", type=int, default=24, help="requests per burst")
    ap.add_argument("--round", type=int, default=24, help="requests per lockstep round")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    proc = None
    url = args.server_url
    if url is None:
        log_dir = Path(tempfile.mkdtemp(prefix="agentmath-front-end-"))
        [(proc, url)] = srv.start_vllm_servers(1, srv.default_model_dir(), log_dir,
                                               bind_cores=True)
    try:
        result = asyncio.run(measure(url, args))
    finally:
        if proc is not None:
            srv.stop_server(proc)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print_table("A burst of one-token requests against one (cached prompt prefix)",
                ["prompt tokens", "requests", "ms per extra request", "engine steps"],
                [[str(b["prompt_tokens"]), str(b["requests"]), f"{b['per_extra_request_ms']:.1f}",
                  f"{b['engine_steps']:.0f}"] for b in result["bursts"]])
    print_table("Lockstep rounds: fresh 700-token prompts, long-tailed turns, logprobs",
                ["requests", "longest turn", "tokens", "engine steps", "steps / longest",
                 "wall s"],
                [[str(x["requests"]), str(x["longest_turn"]), str(x["tokens"]),
                  f"{x['engine_steps']:.0f}", f"{x['steps_over_longest']:.2f}",
                  f"{x['wall_s']:.2f}"]
                 for x in result["rounds"]])


if __name__ == "__main__":
    main()
