"""HTTP client benchmark: what ``OpenAIBackend`` costs the client per request with many in flight.

    python benchmarks/http_client.py             # 64, 256 and 512 requests in flight
    python benchmarks/http_client.py --quick     # a smoke run
    python benchmarks/http_client.py --json      # one JSON object: rows

A stand-in completions server (``aiohttp.web`` in a process of its own: this script with
``--serve``) answers every ``/v1/completions`` after ``--delay-s`` with token ids, as vLLM does.
``OpenAIBackend`` keeps N requests in flight (its ``max_concurrency``) until each slot has sent
``--rounds`` requests, once on httpx's own transport (the baseline: agentmath's client before
2026-11-28, whose pool walks and polls every connection per request) and once on its default
(``agentmath._transport``: aiohttp's pool under httpx's API), a fresh client each, the two
alternating at each N. Printed per row: requests/s and the client's CPU per request (this
process's CPU time: the server runs in its own). The server's delay bounds requests/s at
N / delay; a client that reaches less is the limit itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import print_table  # noqa: E402
from _service import free_port  # noqa: E402


def serve(port: int, delay_s: float) -> None:
    """The stand-in server (runs until killed)."""
    from aiohttp import web

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        await asyncio.sleep(delay_s)
        n = int(body.get("max_tokens", 8))
        return web.json_response({
            "choices": [{"text": "x" * n, "token_ids": list(range(n)),
                         "finish_reason": "length", "stop_reason": None}],
            "usage": {"prompt_tokens": len(body.get("prompt", [])), "completion_tokens": n}})

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the stand-in server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"the stand-in server at {url} did not answer within {timeout_s:g} s")


async def measure(url: str, in_flight: int, transport: str, rounds: int) -> dict[str, Any]:
    """One row: ``in_flight`` slots sending ``rounds`` requests each, after one warm-up round."""
    import httpx

    from agentmath._keepalive import client_limits
    from agentmath.backends.base import SamplingParams
    from agentmath.backends.openai import OpenAIBackend

    # the baseline is what OpenAIBackend built before: httpx's transport with these limits
    custom = (httpx.AsyncHTTPTransport(limits=client_limits(in_flight))
              if transport == "httpx" else None)
    backend = OpenAIBackend(url, "stand-in", max_concurrency=in_flight, transport=custom)
    sampling = SamplingParams(temperature=1.0, logprobs=False)

    async def slot(n: int) -> None:
        for _ in range(n):
            await backend.generate([1, 2, 3], stop=[], max_tokens=8, sampling=sampling)

    try:
        await asyncio.gather(*(slot(1) for _ in range(in_flight)))
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(slot(rounds) for _ in range(in_flight)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        await backend.aclose()
    requests = in_flight * rounds
    return {"in_flight": in_flight, "transport": transport, "requests": requests,
            "requests_per_s": requests / wall, "client_cpu_ms_per_request": cpu / requests * 1e3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run (8 and 32 in flight)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--in-flight", type=int, nargs="+", default=None,
                        help="requests in flight per row (default 64 256 512)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="requests each slot sends per row (default 8; --quick 2)")
    parser.add_argument("--delay-s", type=float, default=0.2,
                        help="seconds the stand-in server takes per completion")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.serve is not None:
        serve(ns.serve, ns.delay_s)
        return 0
    in_flight = ns.in_flight or ([8, 32] if ns.quick else [64, 256, 512])
    rounds = ns.rounds or (2 if ns.quick else 8)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port),
                             "--delay-s", str(ns.delay_s)])
    rows = []
    try:
        _wait_healthy(url, proc)
        for n in in_flight:
            for transport in ("httpx", "agentmath"):
                rows.append(asyncio.run(measure(url, n, transport, rounds)))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    by = {(r["in_flight"], r["transport"]): r for r in rows}
    for r in rows:
        base = by[(r["in_flight"], "httpx")]["client_cpu_ms_per_request"]
        r["cpu_vs_httpx"] = r["client_cpu_ms_per_request"] / base
    if ns.json:
        print(json.dumps({"delay_s": ns.delay_s, "rounds": rounds, "rows": rows}))
        return 0
    labels = {"httpx": "httpx's own (before)", "agentmath": "aiohttp's pool (default)"}
    print_table(
        f"OpenAIBackend against a stand-in server answering in {ns.delay_s:g} s "
        f"({rounds} requests per slot)",
        ["in flight", "transport", "requests/s", "client CPU per request", "vs httpx's own"],
        [[str(r["in_flight"]), labels[r["transport"]], f"{r['requests_per_s']:,.0f}",
          f"{r['client_cpu_ms_per_request']:.3f} ms", f"{r['cpu_vs_httpx']:.2f}x"]
         for r in rows])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
