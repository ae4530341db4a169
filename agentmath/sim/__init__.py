"""A discrete-event simulation of inference servers and a sandbox, in which the real asyncio
rollout scheduler, router and agent loop run unchanged, in virtual time.

* ``clock.py``: :func:`run_simulated` runs a coroutine on an event loop whose clock is a
  simpy environment (``asyncio.sleep`` and timeouts are virtual; simpy resolves futures).
* ``server.py``: :class:`SimServer`, a continuous-batching server (token budget, chunked
  prefill, KV capacity, preemption, block-level prefix cache) stepped analytically;
  ``backend.py``: :class:`SimServerBackend`, its :class:`~agentmath.backends.base.Backend`.
* ``costs.py``: :class:`ServerCostModel` (step cost, presets, ``fit`` to measurements).
* ``sandbox.py``: :class:`SimSandbox`, a worker pool with scripted tool latencies.
* ``workload.py``: :class:`Workload`, AgentMath-like episode scripts, reproducible per episode.
* ``policy.py``: :class:`SimPolicy`, the simulated model (synthetic ids, parseable text).
* ``ideal.py``: :func:`ideal_makespan`, a lower bound no schedule can beat.
* ``fleet.py``: :func:`build_fleet`, N servers + backends + sandbox on one environment.
"""

from agentmath.rollout.simulator.backend import SimServerBackend
from agentmath.rollout.simulator.clock import (
    SimEventLoop,
    SimulationDeadlock,
    current_env,
    run_simulated,
    wait_event,
)
from agentmath.rollout.simulator.costs import ServerCostModel, StepMeasurement
from agentmath.rollout.simulator.fleet import SimFleet, build_fleet
from agentmath.rollout.simulator.ideal import IdealMakespan, ideal_makespan
from agentmath.rollout.simulator.kvcache import BlockHasher, KVCache
from agentmath.rollout.simulator.policy import SimPolicy
from agentmath.rollout.simulator.sandbox import SandboxModel, SimSandbox, SimSession
from agentmath.rollout.simulator.server import ServerStats, SimRequest, SimServer
from agentmath.rollout.simulator.workload import EpisodeScript, LogNormal, Turn, Workload

__all__ = ["BlockHasher", "EpisodeScript", "IdealMakespan", "KVCache", "LogNormal",
           "SandboxModel", "ServerCostModel", "ServerStats", "SimEventLoop", "SimFleet",
           "SimPolicy", "SimRequest", "SimSandbox", "SimServer", "SimServerBackend",
           "SimSession", "SimulationDeadlock", "StepMeasurement", "Turn", "Workload",
           "build_fleet", "current_env", "ideal_makespan", "run_simulated", "wait_event"]
