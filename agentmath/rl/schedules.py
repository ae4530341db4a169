"""Schedules of an RL run: sampling temperature, learning rate, and multi-stage budgets.

* :func:`linear` — DeepMath anneals the sampling temperature linearly, 1.2 -> 0.7, so that
  early steps explore and late steps sharpen.
* :func:`lr_factor` — linear warmup then constant, linear or cosine decay (a multiplier of
  the peak learning rate, as a ``LambdaLR`` wants it).
* :class:`StageController` — AgentMath's multi-stage training: budgets (context, tool calls,
  partial-rollout segment) grow from one stage to the next when the truncation rate over a
  window of recent samples passes a threshold (10% in the paper): the model has learned to
  use all of its budget and is being cut off, so it gets more. Pure state, serialisable for
  exact resume; every transition is returned to the caller to log.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Decay = Literal["constant", "linear", "cosine"]


def linear(start: float, end: float, step: int, total: int) -> float:
    """``start`` at step 0, ``end`` at step ``total`` - 1 and after, linear in between."""
    if total <= 1:
        return end
    t = min(max(step, 0), total - 1) / (total - 1)
    return start + (end - start) * t


def lr_factor(done: int, warmup: int, total: int, decay: Decay = "linear",
              min_factor: float = 0.0) -> float:
    """Multiplier of the peak LR for the optimizer step after ``done`` steps: linear warmup
    over ``warmup`` steps, then ``decay`` to ``min_factor`` at ``total``."""
    if done < warmup:
        return (done + 1) / warmup
    if decay == "constant":
        return 1.0
    frac = min(1.0, (done - warmup) / max(1, total - warmup))
    if decay == "linear":
        return max(min_factor, 1.0 - frac * (1.0 - min_factor))
    return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(math.pi * frac))


@dataclass(frozen=True, slots=True)
class Stage:
    """The budgets of one training stage."""

    max_total_tokens: int  # context budget of an episode
    max_model_tokens: int  # tokens the model may write in an episode
    max_tool_calls: int
    segment_tokens: int | None = None  # partial rollout: model tokens per iteration


@dataclass(frozen=True, slots=True)
class StageChange:
    """A transition, for the log: at ``step``, ``rate`` over the window passed the threshold."""

    step: int
    old: int
    new: int
    rate: float


@dataclass(slots=True)
class StageState:
    """A :class:`StageController`'s state: the stage index and the window's
    ``(truncated, total)`` per step."""

    index: int
    steps: list[tuple[int, int]]

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "steps": [list(s) for s in self.steps]}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> StageState:
        """Also reads a state written before steps were kept whole (``recent``: one flag per
        sample), as one step."""
        if "steps" in state:
            return cls(int(state["index"]), [(int(t), int(n)) for t, n in state["steps"]])
        flags = [bool(x) for x in state.get("recent", [])]
        return cls(int(state["index"]), [(sum(flags), len(flags))] if flags else [])


class StageController:
    """Moves through ``stages`` when the windowed truncation rate passes ``threshold``.

    ``observe(step, truncated, total)`` feeds one step's counts. The window is the newest whole
    steps that hold at least ``window`` samples of the current stage; once it is full and the
    fraction truncated in it is >= ``threshold``, the next stage starts (the window restarts,
    so one stage change cannot immediately trigger another). Whole steps, not the last
    ``window`` samples: a step's samples have no meaningful order, and a step larger than the
    window must count with its real mix (appending its truncated samples first and keeping
    the last ``window`` flags saw none of them, so no run ever moved on).
    """

    def __init__(self, stages: list[Stage], *, threshold: float = 0.1, window: int = 256,
                 stage: int = 0) -> None:
        if not stages:
            raise ValueError("at least one stage is needed")
        self.stages = stages
        self.threshold = threshold
        self.window = window
        self.index = stage
        self._steps: deque[tuple[int, int]] = deque()  # (truncated, total) per step

    @property
    def stage(self) -> Stage:
        return self.stages[self.index]

    @property
    def seen(self) -> int:
        """Samples in the window."""
        return sum(n for _, n in self._steps)

    @property
    def rate(self) -> float:
        """Truncated fraction over the window so far (0 when empty)."""
        seen = self.seen
        return sum(t for t, _ in self._steps) / seen if seen else 0.0

    def observe(self, step: int, truncated: int, total: int) -> StageChange | None:
        """Record a step's samples; return the transition if one happens now."""
        if truncated < 0 or total < truncated:
            raise ValueError(f"bad counts: {truncated} truncated of {total}")
        if total:
            self._steps.append((truncated, total))
        while len(self._steps) > 1 and self.seen - self._steps[0][1] >= self.window:
            self._steps.popleft()  # the newer steps fill the window without it
        last = self.index == len(self.stages) - 1
        if last or self.seen < self.window or self.rate < self.threshold:
            return None
        change = StageChange(step, self.index, self.index + 1, self.rate)
        self.index += 1
        self._steps.clear()
        return change

    def state(self) -> StageState:
        """What a checkpoint saves: the stage and the window."""
        return StageState(self.index, list(self._steps))

    def restore(self, state: StageState) -> None:
        """Continue from a checkpoint's :meth:`state`."""
        self.index = state.index
        self._steps = deque(state.steps)

    def state_dict(self) -> dict[str, object]:
        return self.state().to_dict()

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Also reads a checkpoint written before steps were kept whole (``recent``: one flag
        per sample), as one step."""
        self.restore(StageState.from_dict(state))
