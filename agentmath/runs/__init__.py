"""Run directories on disk, below every stage that writes one (eval, synth, RL) or reads one
(the report): the file names (:mod:`~agentmath.runs.files`), the crash-safe record store and
config check (:mod:`~agentmath.runs.store`), the one-process-per-directory lock
(:mod:`~agentmath.runs.lock`), the dataset fingerprint a resumed run checks
(:mod:`~agentmath.runs.fingerprint`) and which directories are RL runs
(:mod:`~agentmath.runs.steplog`). Nothing here imports a stage.
"""
