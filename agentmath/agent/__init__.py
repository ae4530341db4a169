"""The agent: one episode of a model reasoning with a Python sandbox.

* :class:`Episode` (``episode.py``): a pausable episode, advanced in segments, parked and
  resumed (possibly under newer weights); token-exact for text formats.
* ``drivers.py``: the model side (text formats over ``generate``; native chat tool calls).
* :func:`run_episode`, :func:`run_chat_episode` (``loop.py``): one-shot conveniences.
* :class:`Trajectory`, :class:`Segment` (``trajectory.py``): the record of an episode.
* Tool formats live in :mod:`agentmath.formats`.
"""

from __future__ import annotations

from agentmath.agent.episode import Episode
from agentmath.agent.loop import run_chat_episode, run_episode
from agentmath.agent.prompts import CHAT_SYSTEM_PROMPT, build_messages
from agentmath.agent.trajectory import FINISH_REASONS, Segment, Trajectory

__all__ = ["CHAT_SYSTEM_PROMPT", "FINISH_REASONS", "Episode", "Segment", "Trajectory",
           "build_messages", "run_chat_episode", "run_episode"]
