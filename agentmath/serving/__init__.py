"""Real local inference servers, for rollouts, tests and benchmarks: start ``vllm serve`` and
the ``vllm-router`` gateway and stop them (:mod:`.servers`); read what they did from their own
counters, watch how busy they are, and measure their step costs to calibrate the simulator's
cost model (:mod:`.metrics`). vLLM lives in its own virtualenv, so a server is always a
subprocess.

The package sits above :mod:`agentmath.sim` (the calibration fits its cost model) and
:mod:`agentmath.recipes` (a tiny tool model is grown when no model is named).
"""

from agentmath.serving.metrics import (
    BusySampler,
    StepCosts,
    VllmMetrics,
    calibrate,
    measure_contention,
    measure_step_costs,
    scrape_vllm,
    server_shape,
)
from agentmath.serving.servers import (
    VLLM_ROUTER_POLICIES,
    default_bin,
    default_model_dir,
    free_port,
    start_vllm_router,
    start_vllm_server,
    start_vllm_servers,
    stop_server,
    with_affinity,
)

__all__ = ["VLLM_ROUTER_POLICIES", "BusySampler", "StepCosts", "VllmMetrics", "calibrate",
           "default_bin", "default_model_dir", "free_port", "measure_contention",
           "measure_step_costs", "scrape_vllm", "server_shape", "start_vllm_router",
           "start_vllm_server", "start_vllm_servers", "stop_server", "with_affinity"]
