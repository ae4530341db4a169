"""The rollout engine: many episodes at once over one or more inference servers.

* ``scheduler.py``: :class:`RolloutEngine`, request-level async scheduling (no batch barrier;
  groups streamed out as soon as complete), a synchronous lockstep baseline, and partial
  rollout across iterations with a staleness bound.
* ``records.py``: the typed records passed between stages (group requests, samples, groups,
  iteration statistics).

The router over N servers is a backend (:mod:`agentmath.backends.router`); the simulator that
drives this engine in virtual time, and the local server launchers, are :mod:`agentmath.sim`.
"""
