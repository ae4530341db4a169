"""The rollout engine's test bench: a discrete-event simulation of inference servers and a
sandbox, in which the real asyncio rollout scheduler, router and agent loop run unchanged, in
virtual time. The real local vLLM servers it is measured against are started and read by
:mod:`agentmath.serving`.

* ``clock.py``: :func:`run_simulated` runs a coroutine on an event loop whose clock is a
  simpy environment (``asyncio.sleep`` and timeouts are virtual; simpy resolves futures).
* ``server.py``: :class:`SimServer`, a continuous-batching server (token budget, chunked
  prefill, KV capacity, preemption, block-level prefix cache) stepped analytically;
  ``backend.py``: :class:`SimServerBackend`, its :class:`~agentmath.backends.base.Backend`.
* ``costs.py``: :class:`ServerCostModel` (step cost, presets, ``fit`` to measurements);
  ``hardware.py``: where the H100 preset's figures come from (model shape, card, cited vLLM
  measurements).
* ``sandbox.py``: :class:`SimSandbox`, a worker pool with scripted tool latencies.
* ``workload.py``: :class:`Workload`, AgentMath-like episode scripts, reproducible per episode.
* ``policy.py``: :class:`SimPolicy`, the simulated model (synthetic ids, parseable text).
* ``ideal.py``: :func:`ideal_makespan`, a lower bound no schedule can beat; :func:`step_regime`,
  whether an RL step is bound by its work or by its longest episode.
* ``placement.py``: :class:`PinnedPlacement`, a lockstep baseline's episodes pinned to servers.
* ``fleet.py``: :func:`build_fleet`, N servers + backends + sandbox on one environment.
* ``bench.py``: ``python -m agentmath.sim.bench``, how fast the simulator itself runs.
"""

from agentmath.sim.backend import SimServerBackend
from agentmath.sim.clock import (
    SimEventLoop,
    SimulationDeadlock,
    current_env,
    run_simulated,
    wait_event,
)
from agentmath.sim.costs import ServerCostModel, StepMeasurement
from agentmath.sim.fleet import SimFleet, build_fleet
from agentmath.sim.ideal import (
    IdealMakespan,
    StepRegime,
    ideal_makespan,
    servers_for_step,
    step_regime,
)
from agentmath.sim.kvcache import BlockHasher, KVCache
from agentmath.sim.placement import PinnedPlacement
from agentmath.sim.policy import SimPolicy
from agentmath.sim.requests import ServerStats, SimRequest
from agentmath.sim.sandbox import SandboxModel, SimSandbox, SimSession
from agentmath.sim.server import SimServer
from agentmath.sim.workload import EpisodeScript, LogNormal, Turn, Workload

__all__ = ["BlockHasher", "EpisodeScript", "IdealMakespan", "KVCache", "LogNormal",
           "PinnedPlacement", "SandboxModel", "ServerCostModel", "ServerStats", "SimEventLoop",
           "SimFleet", "SimPolicy", "SimRequest", "SimSandbox", "SimServer", "SimServerBackend",
           "SimSession", "SimulationDeadlock", "StepMeasurement", "StepRegime", "Turn", "Workload",
           "build_fleet", "current_env", "ideal_makespan", "run_simulated", "servers_for_step",
           "step_regime", "wait_event"]
