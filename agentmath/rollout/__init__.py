"""The rollout engine: many episodes at once over one or more inference servers.

* ``scheduler.py``: :class:`RolloutEngine`, request-level async scheduling (no batch barrier;
  groups streamed out as soon as complete), a synchronous lockstep baseline, and partial
  rollout across iterations with a staleness bound.
* ``records.py``: the typed records passed between stages (group requests, samples, groups,
  iteration statistics).
* ``router.py``: a prefix-aware, load-aware router that is itself a Backend over N servers.
* ``simulator/``: a discrete-event simulation of servers and sandbox that drives the same
  scheduler and router code in virtual time (``benchmarks/rollout.py --simulate``).
"""
