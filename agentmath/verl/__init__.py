"""agentmath inside verl (the RL engine, 0.9.1): its agent loop and its router as verl plug-ins.

* :mod:`agentmath.verl.agent_loop`: ``AgentMathAgentLoop``, registered as verl agent loop
  ``agentmath``: one agentmath episode per sample (formats, sandbox, budgets, rewards),
  returned as verl's ``AgentLoopOutput`` (tool tokens masked). Imports verl.
* :mod:`agentmath.verl.router`: ``AgentMathRouter``, verl's ``rollout.router_config_path``
  plug-in with agentmath's prefix-aware, load-aware routing policy.
* :mod:`agentmath.verl.backend` (verl's server manager as an agentmath Backend),
  :mod:`agentmath.verl.convert` (trajectory -> verl fields), :mod:`agentmath.verl.settings`
  (the agent loop's settings, shared sandbox and reward model), :mod:`agentmath.verl.data`
  (tasks as verl dataset rows).

verl pins an older transformers than agentmath's main environment, so it lives in its own
virtualenv (``scripts/install_verl.sh`` -> ``.venv-verl``; ``pip install agentmath[verl]`` in
an environment of its own). Only ``agent_loop`` imports verl; nothing here is imported by
``import agentmath``. See docs/verl.md.
"""
