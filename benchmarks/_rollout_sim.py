"""The simulated half of ``benchmarks/rollout.py``: AgentMath's table at paper scale.

The real scheduler (:class:`RolloutEngine`, :class:`PartialRollout`) and the real router
(:class:`Router`) run unchanged in simulated time (:mod:`agentmath.sim`): simpy
models continuous-batching servers (step cost, KV capacity, a block-level prefix cache keyed by
policy version) and the sandbox (a worker pool, lognormal snippet latency). An RL run is a
sequence of iterations, each collecting ``batch_groups`` complete groups; between iterations the
policy version goes up (new weights: prefix caches keyed by the old version are useless) and
the servers pause for ``--sync-s`` seconds (the weight update).

Rows, each adding one thing to the one above: ``sync`` (lockstep turns, a barrier per turn and
per batch, requests spread round-robin), ``+async`` (request-level scheduling; only the
iteration is a barrier), ``+partial`` (segment budgets, oversampling, parking across
iterations), ``+router`` (the prefix-aware weighted router instead of round-robin).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from agentmath.backends.base import current_tag
from agentmath.backends.router import Router, RouterConfig
from agentmath.config import RolloutConfig
from agentmath.formats import get_format
from agentmath.rollout.partial import PartialRollout
from agentmath.rollout.records import GroupRequest
from agentmath.rollout.scheduler import RolloutEngine
from agentmath.sim.costs import ServerCostModel
from agentmath.sim.fleet import build_fleet
from agentmath.sim.ideal import servers_for_step, step_regime
from agentmath.sim.placement import PinnedPlacement
from agentmath.sim.sandbox import SandboxModel
from agentmath.sim.workload import LogNormal, Workload


class HitBound:
    """Wraps the engine's backend and counts the prefix-cache hits a perfect cache would give
    (the ideal hit rate): a request may reuse what its episode computed before under the same
    policy version (its previous context and output), or else its group's prompt once a
    sibling computed it under this version; nothing across versions. Block-aligned, in
    tokens, over the same queries (prompt tokens) the servers count."""

    def __init__(self, inner: Any, block: int) -> None:
        self.inner, self.block = inner, block
        self.hits = self.queries = 0
        self._last: dict[tuple[str, int], int] = {}
        self._prompts: dict[tuple[str | None, int], int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def generate(self, prompt_ids: Any, **kwargs: Any) -> Any:
        return await self._counted(prompt_ids, self.inner.generate(prompt_ids, **kwargs))

    async def generate_interruptible(self, prompt_ids: Any, **kwargs: Any) -> Any:
        return await self._counted(prompt_ids,
                                   self.inner.generate_interruptible(prompt_ids, **kwargs))

    async def _counted(self, prompt_ids: Any, call: Any) -> Any:
        tag = current_tag.get()
        assert tag is not None
        key = (tag.episode_id, tag.policy_version)
        group = (tag.group_id, tag.policy_version)
        reusable = self._last.pop(key, None)
        if reusable is None:
            reusable = self._prompts.get(group, 0)
            first = self._last.get((tag.episode_id, -1)) is None
            if first:  # an episode's first request: its prompt is the group's
                self._last[(tag.episode_id, -1)] = 1
                self._prompts.setdefault(group, len(prompt_ids))
            else:
                reusable = 0
        reusable = min(reusable, len(prompt_ids)) // self.block * self.block
        self.hits += reusable
        self.queries += len(prompt_ids)
        gen = await call
        self._last[key] = len(prompt_ids) + len(gen.token_ids)
        return gen

    @property
    def rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None


@dataclass(frozen=True)
class Variant:
    """One row: how the engine schedules and how the router routes."""

    name: str
    mode: str  # RolloutConfig.mode
    partial: bool
    policy: str  # RouterConfig.policy


VARIANTS = (Variant("sync", "sync", False, "round_robin"),
            Variant("+async", "async", False, "round_robin"),
            Variant("+partial", "async", True, "round_robin"),
            Variant("+router", "async", True, "prefix_aware"))


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the simulated run."""
    group = parser.add_argument_group("simulation (--simulate)")
    group.add_argument("--groups", type=int, default=1024,
                       help="problems (GRPO groups) in the stream; --steps takes what it needs")
    group.add_argument("--group-size", type=int, default=8, help="samples per problem (G)")
    group.add_argument("--batch-groups", type=int, default=64, help="groups per RL step")
    group.add_argument("--servers", type=int, default=8, help="inference servers")
    group.add_argument("--segments", type=int, default=4,
                       help="partial rollout: segments an episode's token budget is cut into")
    group.add_argument("--oversample", type=float, default=1.0,
                       help="partial rollout: episodes in flight per episode of a batch")
    group.add_argument("--sync-s", type=float, default=10.0,
                       help="seconds the servers pause for a weight update per iteration")
    group.add_argument("--sandbox-workers", type=int, default=512)
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--cost", choices=("h100", "cpu_tiny"), default="h100",
                       help="server cost preset")
    group.add_argument("--kv-fraction", type=float, default=0.8,
                       help="async rows: context tokens in flight, as a fraction of the fleet's "
                            "KV capacity (RolloutConfig.max_in_flight_tokens; 0: no bound)")
    group.add_argument("--rows", nargs="*", default=None,
                       help="only these rows (sync always runs: it is the baseline)")
    group.add_argument("--steps", type=int, default=8,
                       help="stop after this many RL steps (iterations), a steady state as "
                            "seconds per RL step are measured (0: run every group to the end)")
    group.add_argument("--kv-tokens", type=int, default=None,
                       help="override the preset's KV cache capacity (tokens per server)")
    group.add_argument("--warmup", type=int, default=0,
                       help="partial rows: run this many RL steps first and measure the "
                            "--steps after them, so that parked work is carried in as well as "
                            "out (steady state); moves +partial and +router")
    group.add_argument("--stale-kv", action="store_true",
                       help="keep KV computed under older weights reusable after a weight "
                            "update (no cache salt by version); moves +partial and +router")
    group.add_argument("--interrupt-turns", action="store_true",
                       help="partial rows: at an iteration's end cut the running model turns "
                            "(kept, continued next iteration) instead of letting them end "
                            "(RolloutConfig.interrupt_turns); moves +partial and +router")
    group.add_argument("--sync-placement", choices=("round_robin", "pinned"),
                       default="round_robin",
                       help="sync row: each request to the next server (round_robin: every "
                            "turn re-prefills its context elsewhere) or each episode pinned to "
                            "one server (pinned: a batch sharded over data-parallel engines, "
                            "as TRL's colocated vLLM and verl's sync rollout do); moves sync")
    group.add_argument("--workload", action="append", default=[], metavar="KEY=VALUE",
                       help="a scalar Workload field (calls_shape, calls_mean, group_sigma, "
                            "episode_sigma, max_calls, max_episode_tokens) or turn_sigma (the "
                            "turns' spread at the same mean turn); the shapes the paper does "
                            "not state (agentmath/sim/workload.py); repeatable")
    group.add_argument("--router-option", action="append", default=[], metavar="KEY=VALUE",
                       help="a RouterConfig field for the +router row (w_base, l_base, "
                            "spill_factor, spill_slack, max_in_flight_per_server); repeatable")


def _config(variant: Variant, workload: Workload, cost: ServerCostModel,
            ns: argparse.Namespace) -> RolloutConfig:
    batch = ns.batch_groups * workload.group_size
    tokens = int(ns.kv_fraction * cost.kv_tokens * ns.servers) or None
    if variant.mode == "sync":  # lockstep: the whole batch at once, as TRL and DeepMath do
        return RolloutConfig(mode="sync", max_in_flight=batch)
    if not variant.partial:
        return RolloutConfig(mode=variant.mode, max_in_flight=batch, max_in_flight_tokens=tokens)
    return RolloutConfig(mode="async", max_in_flight=int(batch * ns.oversample),
                         max_in_flight_tokens=tokens,
                         # a replay of a real run gives its own segment and staleness
                         segment_tokens=(getattr(ns, "segment_tokens", None)
                                         or workload.max_episode_tokens // ns.segments),
                         max_staleness=getattr(ns, "max_staleness", ns.segments),
                         stale="regenerate",
                         max_parked_sessions=getattr(ns, "max_parked_sessions", 10**6),
                         max_new_groups=getattr(ns, "max_new_groups", None),
                         interrupt_turns=getattr(ns, "interrupt_turns", False))


def simulate(variant: Variant, workload: Workload, cost: ServerCostModel,
             ns: argparse.Namespace, measure_after: int = 0) -> dict[str, Any]:
    """One row: the run of ``workload`` under ``variant``, in simulated time (the makespan
    counts from the end of the first ``measure_after`` iterations: a warm-up)."""
    sandbox = SandboxModel(workers=ns.sandbox_workers,
                           max_sessions=getattr(ns, "sandbox_max_sessions", None),
                           call_overhead_s=getattr(ns, "tool_overhead_s", 0.0))
    fleet = build_fleet(workload, ns.servers, cost, sandbox,
                        stale_kv=getattr(ns, "stale_kv", False))
    options: dict[str, Any] = {"max_in_flight_per_server": cost.max_running}
    if variant.policy == "prefix_aware":
        for item in getattr(ns, "router_option", None) or []:
            key, _, value = item.partition("=")
            options[key] = float(value) if "." in value else int(value)
    router: Any = Router(fleet.backends, RouterConfig(policy=variant.policy, **options))
    if variant.mode == "sync" and getattr(ns, "sync_placement", "round_robin") == "pinned":
        router = PinnedPlacement(fleet.backends)
    bound = HitBound(router, cost.block_size)
    engine = RolloutEngine(bound, fleet.sandbox, get_format("code_interpreter"),
                           loop=workload.loop_config(), config=_config(variant, workload, cost, ns))
    requests = [GroupRequest(task, workload.group_size) for task in workload.tasks()]
    run = PartialRollout(engine, requests)
    totals = {"iterations": 0, "groups": 0, "regenerated": 0, "dropped_groups": 0,
              "wasted_tokens": 0, "interrupted": 0}

    started = [0.0]

    async def main() -> None:
        while True:
            result = await run.iteration(ns.batch_groups)
            totals["iterations"] += 1
            if totals["iterations"] == measure_after:
                started[0] = float(fleet.env.now)
            if totals["iterations"] > measure_after:  # the groups of measured iterations
                totals["groups"] += len(result.groups)
            for key in ("regenerated", "dropped_groups", "wasted_tokens", "interrupted"):
                totals[key] += getattr(result.stats, key)
            if result.exhausted or totals["iterations"] == ns.steps:
                break
            if not ns.sync_s:
                engine.set_policy_version(engine.version + 1)
                continue
            for server in fleet.servers:  # the weight update: servers stop, then go on
                server.pause()
            await asyncio.sleep(ns.sync_s)
            for server in fleet.servers:
                server.resume()
            engine.set_policy_version(engine.version + 1)
        await run.aclose()

    wall = time.perf_counter()
    fleet.run(main)
    report = fleet.report()
    busy = [s["busy_s"] for s in report["servers"]]
    mean = sum(busy) / len(busy)
    return {"name": variant.name, "makespan_s": report["sim_time_s"] - started[0],
            "prefix_hit_rate": report["prefix_cache_hit_rate"], "ideal_hit_rate": bound.rate,
            "idle_fraction": report["idle_fraction"],
            "imbalance": (max(busy) - min(busy)) / mean if mean else 0.0,
            "prefill_tokens": report["prefill_tokens"], "decode_tokens": report["decode_tokens"],
            "preemptions": report["preemptions"], **totals,
            "ideal_makespan_s": report["ideal_makespan_s"] * (
                totals["groups"] / workload.n_groups),
            "s_per_step": (report["sim_time_s"] - started[0]) / max(
                1, totals["iterations"] - measure_after),
            # tokens decoded per iteration over what an average batch needs: ~1 in a steady
            # state; above 1, work is piling up parked (partial rows measured too early)
            "decode_vs_batch_work": report["decode_tokens"] / max(1, totals["iterations"]) / (
                report["ideal"]["decode_tokens"] * ns.batch_groups / workload.n_groups),
            "wall_s": time.perf_counter() - wall}


#: The slow end of the paper's ``+router`` row (750-900 s per RL step, its fleet not stated).
PAPER_ROUTER_S_PER_STEP = 900.0


def replace_ns(ns: argparse.Namespace, **changes: Any) -> argparse.Namespace:
    """A copy of ``ns`` with some options changed."""
    return argparse.Namespace(**{**vars(ns), **changes})


WORKLOAD_FIELDS = ("calls_shape", "calls_mean", "group_sigma", "episode_sigma", "max_calls",
                   "max_episode_tokens", "turn_sigma")


def workload_of(ns: argparse.Namespace) -> Workload:
    """The workload of the options: the paper's statistics, with ``--workload`` changes."""
    changes: dict[str, Any] = {}
    for item in getattr(ns, "workload", None) or []:
        key, _, value = item.partition("=")
        if key not in WORKLOAD_FIELDS:
            raise SystemExit(f"--workload {item}: not one of {', '.join(WORKLOAD_FIELDS)}")
        changes[key] = int(value) if key.startswith("max_") else float(value)
    sigma = changes.pop("turn_sigma", None)  # the turns' spread at the same mean
    workload = Workload(seed=ns.seed, n_groups=ns.groups, group_size=ns.group_size, **changes)
    return workload if sigma is None else workload.with_turn_sigma(sigma)


def run_sim(ns: argparse.Namespace) -> dict[str, Any]:
    """Every variant on the same workload; rows with speedups, plus the ideal makespan."""
    workload = workload_of(ns)
    cost = (ServerCostModel.h100_qwen3_8b() if ns.cost == "h100" else ServerCostModel.cpu_tiny())
    if ns.kv_tokens:
        cost = cost.with_(kv_tokens=ns.kv_tokens)
    rows = []
    for v in VARIANTS:
        if v.name != "sync" and ns.rows and v.name not in ns.rows:
            continue
        warmup = ns.warmup if v.partial and ns.steps else 0  # parked work carried in
        rows.append(simulate(v, workload, cost, replace_ns(ns, steps=ns.steps + warmup),
                             measure_after=warmup))
    base = rows[0]["makespan_s"]
    for row in rows:
        row["speedup_vs_sync"] = base / row["makespan_s"]
        row["vs_ideal"] = row["makespan_s"] / row["ideal_makespan_s"]
    ideal = rows[0]["ideal_makespan_s"]
    pauses = (rows[0]["iterations"] - 1) * ns.sync_s
    regime = step_regime(workload, ns.servers, cost, ns.batch_groups)
    need = servers_for_step(workload, cost, ns.batch_groups, PAPER_ROUTER_S_PER_STEP)
    notes = [f"a step's work bound {regime.work_s:,.0f} s, its longest episode alone "
             f"{regime.longest_episode_s:,.0f} s (tail ratio {regime.tail_ratio:.2f}), "
             f"lockstep bound {regime.lockstep_s:,.0f} s on any fleet; the paper's "
             f"{PAPER_ROUTER_S_PER_STEP:.0f} s per step needs >= {need:.1f} servers"]
    return {"workload": asdict(replace(workload)), "servers": ns.servers,
            "cost_model": asdict(cost), "batch_groups": ns.batch_groups,
            "sync_s": ns.sync_s, "kv_fraction": ns.kv_fraction, "stale_kv": ns.stale_kv,
            "interrupt_turns": ns.interrupt_turns,
            "warmup": ns.warmup, "sync_placement": ns.sync_placement,
            "router_options": ns.router_option, "ideal_makespan_s": ideal,
            "ideal_plus_weight_updates_s": ideal + pauses, "rows": rows,
            "regime": {**asdict(regime), "tail_ratio": regime.tail_ratio,
                       # the paper's fastest row (750-900 s per step) needs this fleet at least
                       "servers_for_900_s_per_step": need}, "notes": notes}


def replay_settings(cal: dict[str, Any]) -> tuple[Workload, argparse.Namespace]:
    """The workload and the engine settings of a recorded real run (its ``calibration``), as
    :func:`simulate` takes them: the same engine the real rows ran, not ``--simulate``'s
    defaults (until 2026-11-28 the replay's partial row ran segments of 380 tokens where the
    real ran 320, a staleness bound of 5 where it ran 2, no bound on parked sessions or on the
    sandbox's live sessions, and the default draw bound; runs that did not record a setting
    ran with the value taken here)."""
    engine = cal["engine"]
    wl = dict(cal["workload"])
    for key in ("prompt_tokens", "turn_tokens", "tool_tokens", "tool_latency_s"):
        wl[key] = LogNormal(**wl[key])
    workload = Workload(**wl)
    in_flight = engine["max_in_flight"]
    ns = argparse.Namespace(batch_groups=engine["batch_groups"], servers=cal["servers"],
                            segments=max(1, workload.max_episode_tokens
                                         // engine["segment_tokens"]),
                            segment_tokens=engine["segment_tokens"],
                            max_staleness=engine["max_staleness"],
                            oversample=in_flight / (engine["batch_groups"] * workload.group_size),
                            sync_s=0.0, sandbox_workers=engine["sandbox_workers"],
                            # the real pool's live sessions and the parked ones it allowed
                            # (episodes parked beyond them replay their cells on resuming)
                            sandbox_max_sessions=engine.get("sandbox_max_sessions",
                                                            3 * in_flight),
                            max_parked_sessions=engine.get("max_parked_sessions", in_flight),
                            # an iteration may draw the whole finite workload, as the real
                            # rows' may (since 2026-11-26 05:49, before every stored trace)
                            max_new_groups=engine.get("max_new_groups", workload.n_groups),
                            kv_fraction=0.0, steps=None, tool_overhead_s=0.0,
                            interrupt_turns=bool(engine.get("interrupt_turns", False)))
    return workload, ns


def replay(real: dict[str, Any]) -> dict[str, Any]:
    """The real run's workload and engine settings, simulated with the cost model fitted to
    the real servers: simulated vs measured makespan per row (the calibration check)."""
    cal = real["calibration"]
    engine, fitted = cal["engine"], dict(cal["fitted"])
    # the host's measured share of each tool call (the loop, the sandbox, a client sharing
    # its core with the servers' front ends: the contention the cost model has no term for),
    # added to every simulated call: each row's own where the run measured it without
    # barriers or parking in it (runs since 2026-11-26 evening), else the +async row's
    tool_overhead = (cal.get("tool_overhead_s") or {}).get("median", 0.0)
    by_row = cal.get("tool_overhead_by_row") or {}
    # the servers' front ends take requests one at a time, each for the calibration's measured
    # cost of one more request in a burst, and slow the steps meanwhile by its measured
    # contention (runs before 2026-11-27 evening recorded neither in their fitted model, and
    # no contention at all: 0; they had added the request cost to each request in parallel)
    cost = ServerCostModel(**fitted).with_(admission_s=cal.get("request_overhead_s", 0.0),
                                           contention=cal.get("contention") or 0.0)
    workload, ns = replay_settings(cal)
    measured = {row["name"]: row["makespan_s"] for row in real["rows"]}
    rows = []
    for variant in VARIANTS:
        if variant.name not in measured:
            continue
        warmup = engine["warmup_iterations_partial_rows"] if variant.partial else 0
        ns.steps = warmup + engine["iterations"]
        ns.tool_overhead_s = (by_row.get(variant.name) or {}).get("median", tool_overhead)
        sim = simulate(variant, workload, cost, ns, measure_after=warmup)
        rows.append({"name": variant.name, "real_makespan_s": measured[variant.name],
                     "sim_makespan_s": sim["makespan_s"],
                     "sim_vs_real": sim["makespan_s"] / measured[variant.name],
                     "sim_prefix_hit_rate": sim["prefix_hit_rate"],
                     "sim_regenerated": sim["regenerated"],
                     "tool_overhead_s": ns.tool_overhead_s})
    return {"cost_model": asdict(cost), "tool_overhead_s": tool_overhead, "rows": rows,
            "within_25_percent": all(abs(r["sim_vs_real"] - 1) <= 0.25 for r in rows)}
