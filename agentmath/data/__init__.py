"""Synthetic training problems: seeded multi-step word problems with text and structured
solutions (:mod:`agentmath.data.synthetic`). Turning them into tool trajectories is the data
engine's job (:mod:`agentmath.synth`)."""

from agentmath.data.synthetic import Step, generate_problems, split, to_task_rows

__all__ = ["Step", "generate_problems", "split", "to_task_rows"]
