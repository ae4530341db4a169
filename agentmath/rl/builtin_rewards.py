"""The built-in reward functions of agentic GRPO (the registry, specs and the weighted
model that combine them: :mod:`agentmath.rl.rewards`).

Accuracy means what ``agentmath eval`` means: the answer extracted from what the model wrote,
checked against the gold by :func:`agentmath.grading.grade` (math-verify in workers under a hard
timeout), through the grading seam eval uses (:func:`agentmath.grading.grade_answer`). Grading
is the expensive part, so it runs once per (finished) trajectory: the typed
:class:`~agentmath.grading.Grade` is cached in ``trajectory.grade`` and every term that depends
on correctness reads it from there (an error grade pays as a wrong one: 0).

Built-ins (``n`` is the number of tool calls; sources in each function's docstring)::

    accuracy         1[correct]                                           AgentMath, DeepMath
    tool_efficiency  1[correct] * 1[n > 0] * min(r_max, alpha + beta*n)   AgentMath
    code_use         1[n > 0], or 1[correct and n > 0] (require_correct)  DeepMath
    format           1[ended on its own (answered/eos) with an answer]
    overlong         soft overlong punishment on model tokens, in [-1, 0]  DAPO
    tool_error       -(failed tool calls / tool calls), in [-1, 0]

No torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from agentmath import grading
from agentmath.agent.trajectory import Trajectory
from agentmath.tasks import Task

RewardFn = Callable[[Task, Trajectory], float]

#: Eval's default ``grade_timeout_s``: extraction and verification together, per trajectory.
GRADE_TIMEOUT_S = 10.0
#: Finish reasons of an episode that ended on its own (not cut by a budget, not an error).
PROPER_FINISH = frozenset({"answered", "eos"})


# ---------------------------------------------------------------- correctness, graded once
def _known(traj: Trajectory) -> bool | None:
    """The cached verdict (an errored episode is never graded: an error grade), or None."""
    if traj.grade is None and traj.finish_reason == "error":
        traj.grade = grading.Grade.error("the episode ended in an error")
    return traj.grade.is_correct if traj.grade is not None else None


def is_correct(task: Task, trajectory: Trajectory, *, timeout: float = GRADE_TIMEOUT_S) -> bool:
    """Whether the trajectory's final answer is right, graded by the grading seam eval uses
    (:func:`agentmath.grading.grade_answer`) and cached in ``trajectory.grade``: only a correct
    verdict counts (wrong and error, e.g. a timeout or an unparsable gold, do not)."""
    known = _known(trajectory)
    if known is not None:
        return known
    trajectory.grade = grading.grade_answer(task.answer, trajectory.model_text,
                                            answer=trajectory.answer, timeout=timeout)
    return trajectory.grade.is_correct


async def ais_correct(task: Task, trajectory: Trajectory, *,
                      timeout: float = GRADE_TIMEOUT_S) -> bool:
    """:func:`is_correct` for asyncio: anything slow runs in a thread, the loop stays free."""
    known = _known(trajectory)
    if known is not None:
        return known
    trajectory.grade = await grading.agrade_answer(task.answer, trajectory.model_text,
                                                   answer=trajectory.answer, timeout=timeout)
    return trajectory.grade.is_correct


def final_answer(trajectory: Trajectory) -> str | None:
    """The loop's extracted answer, else the grader's, else one extracted from the model text."""
    if trajectory.answer is not None:
        return trajectory.answer
    if trajectory.grade is not None:
        return trajectory.grade.extracted
    return grading.extract_answer(trajectory.model_text)


# ---------------------------------------------------------------- built-in rewards
def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def accuracy_reward(task: Task, trajectory: Trajectory) -> float:
    """1.0 if the final answer is correct against ``task.answer`` by the project's grader (the
    extraction and math-verify check of ``agentmath eval``), else 0.0; an episode that ended in
    error scores 0. The outcome reward R_acc of AgentMath and of DeepMath."""
    return 1.0 if is_correct(task, trajectory) else 0.0


def format_reward(task: Task, trajectory: Trajectory) -> float:
    """1.0 when the episode ended on its own (finish reason ``answered`` or ``eos``, not a
    budget or an error) with an extractable final answer, else 0.0. A common shaping term (the
    R1-style format reward), adapted to agent episodes; neither paper uses it."""
    ended = trajectory.finish_reason in PROPER_FINISH
    return 1.0 if ended and final_answer(trajectory) is not None else 0.0


def tool_error_reward(task: Task, trajectory: Trajectory) -> float:
    """Minus the fraction of tool calls that failed (an error, a timeout or a crash:
    ``not result.ok``); 0.0 without tool calls. In [-1, 0], independent of how many calls were
    made, so it weighs code quality and never tool use itself. An agentmath addition."""
    calls = trajectory.tool_calls
    if not calls:
        return 0.0
    failed = sum(1 for s in calls if s.result is not None and not s.result.ok)
    return -failed / len(calls)


def make_tool_efficiency_reward(alpha: float = 0.1, beta: float = 0.01,
                                r_max: float = 1.0) -> RewardFn:
    """AgentMath's tool bonus (arXiv 2512.20745): R = R_acc + 1[R_acc = 1] * R_tool with
    R_tool = min(R_max, alpha + beta * N_code) if N_code > 0, else 0. This term is the bonus
    alone, ``1[correct] * 1[n > 0] * min(r_max, alpha + beta * n)`` for n tool calls. Defaults
    are the paper's (alpha=0.1, beta=0.01, R_max=1); any reals work (beta < 0: fewer calls)."""
    alpha, beta, r_max = _real("alpha", alpha), _real("beta", beta), _real("r_max", r_max)

    def tool_efficiency(task: Task, trajectory: Trajectory) -> float:
        n = len(trajectory.tool_calls)
        if n == 0 or not is_correct(task, trajectory):
            return 0.0
        return min(r_max, alpha + beta * n)

    return tool_efficiency


def make_code_use_reward(require_correct: bool = False) -> RewardFn:
    """DeepMath's code reward: 1.0 when the episode made at least one tool call, else 0.0.
    DeepMath's ``code_format_reward`` (IntelLabs/DeepMath, deep_math/rewards.py) pays for any
    tool call whether or not the answer is right; ``require_correct=True`` pays only correct
    episodes that used the tool."""
    if not isinstance(require_correct, bool):
        raise ValueError(f"require_correct must be true or false, got {require_correct!r}")

    def code_use(task: Task, trajectory: Trajectory) -> float:
        if not trajectory.tool_calls:
            return 0.0
        return 1.0 if not require_correct or is_correct(task, trajectory) else 0.0

    return code_use


def make_overlong_reward(max_tokens: int, buffer: int | None = None) -> RewardFn:
    """DAPO's soft overlong punishment (arXiv 2503.14476) on L = model tokens, L_max =
    ``max_tokens``, L_cache = ``buffer``: 0 if L <= L_max - L_cache, (L_max - L_cache - L) /
    L_cache up to L_max, -1 beyond. ``buffer`` defaults to a fifth of ``max_tokens`` (DAPO:
    4096 of 20480); 0 makes it a hard -1 over L_max."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if buffer is None:
        buffer = max_tokens // 5
    if isinstance(buffer, bool) or not isinstance(buffer, int) or not 0 <= buffer <= max_tokens:
        raise ValueError(f"buffer must be an integer in [0, max_tokens={max_tokens}], "
                         f"got {buffer!r}")
    start = max_tokens - buffer

    def overlong(task: Task, trajectory: Trajectory) -> float:
        length = trajectory.model_tokens
        if length <= start:
            return 0.0
        if length > max_tokens:
            return -1.0
        return (start - length) / buffer

    return overlong


#: Built-in name -> factory taking the spec's params and returning the reward function.
BUILTIN_REWARDS: dict[str, Callable[..., RewardFn]] = {
    "accuracy": lambda: accuracy_reward,
    "tool_efficiency": make_tool_efficiency_reward,
    "code_use": make_code_use_reward,
    "format": lambda: format_reward,
    "overlong": make_overlong_reward,
    "tool_error": lambda: tool_error_reward,
}
