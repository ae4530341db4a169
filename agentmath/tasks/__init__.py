"""Tasks and their data: the :class:`Task` record (:mod:`.task`), the dataset loaders
(:mod:`.datasets`: built-in benchmarks, local files, the Hugging Face hub), the one reader of
data files people hand agentmath (:mod:`.files`), the seeded synthetic word problems
(:mod:`.synthetic`) and the scripted examples (:mod:`.examples`)."""

from agentmath.tasks.datasets import (
    BUILTIN,
    DATA_DIR_ENV,
    BuiltinInfo,
    data_dirs,
    dataset_summary,
    find_builtin,
    load_tasks,
)
from agentmath.tasks.task import Task

__all__ = ["BUILTIN", "DATA_DIR_ENV", "BuiltinInfo", "Task", "data_dirs", "dataset_summary",
           "find_builtin", "load_tasks"]
