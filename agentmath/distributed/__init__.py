"""Scale-out on Ray: rollout workers as Ray actors, episodes placed across them by the driver.

* :mod:`~agentmath.distributed.worker`: :class:`WorkerSpec` (what a worker needs to run
  episodes, picklable) and :class:`RolloutWorker` (the actor: a rollout engine with its own
  model client and sandbox on its node).
* :mod:`~agentmath.distributed.engine`: :class:`RayRolloutEngine`, the driver's side, with the
  contract of :meth:`agentmath.rollout.scheduler.RolloutEngine.stream` (groups out as they
  complete, every sample to ``on_sample`` the moment it finishes): it places each episode on a
  worker (its group's worker first, for prefix reuse, else the least loaded), and runs again,
  from scratch and with the same seed, an episode whose worker or node died.
* :mod:`~agentmath.distributed.iterations`: :class:`RayIterations`, the RL trainer's steps on
  that engine (each step's groups drawn, run to their end, returned in draw order).
* :mod:`~agentmath.distributed.cluster`: connecting to a cluster (``ray`` imported only here,
  with a clear message when the extra is missing).

Nothing in this package imports Ray at import time.
"""

from agentmath.distributed.worker import RolloutWorker, WorkerSpec

__all__ = ["RolloutWorker", "WorkerSpec"]
