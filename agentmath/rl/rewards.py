"""Weighted reward functions for agentic GRPO.

A reward is a plain function ``reward(task, trajectory) -> float``. A run combines several as
weighted terms, each a :class:`RewardSpec` (a built-in name or a user function's import path, a
weight, keyword params) logged unweighted on its own, so the curves show what each term did.
:class:`RewardModel` scores a finished trajectory into a :class:`RewardBreakdown`; a bad spec
fails when the config is validated, naming the field.

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

A user reward that raises (or returns no finite number) does not stop training: its term counts
0.0, and the error is appended to ``trajectory.reward_errors`` and logged. No torch.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from agentmath import grading
from agentmath.agent.trajectory import Trajectory
from agentmath.config import StrictModel, field_problems
from agentmath.datasets import Task
from agentmath.errors import ConfigError

RewardFn = Callable[[Task, Trajectory], float]
ParamValue = bool | int | float | str
log = logging.getLogger(__name__)

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


# ---------------------------------------------------------------- resolving a spec
def _import_target(path: str) -> Callable[..., Any]:
    """The callable named by ``package.module:function`` (a clear ValueError otherwise)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"reward {path!r}: an import path looks like 'package.module:function'")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - importing runs the user's module, which may raise anything
        raise ValueError(f"reward {path!r}: cannot import module {module_name!r}: "
                         f"{type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"reward {path!r}: module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"reward {path!r}: {attr!r} is not callable (it is a "
                         f"{type(obj).__name__})")
    return obj


def resolve_reward(name: str) -> Callable[..., Any]:
    """The built-in factory, or the user function an import path names."""
    if name in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[name]
    if ":" not in name:
        raise ValueError(f"unknown reward {name!r}: use a built-in "
                         f"({', '.join(sorted(BUILTIN_REWARDS))}) or an import path "
                         f"'package.module:function'")
    return _import_target(name)


def _check_call(name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                params: dict[str, Any]) -> None:
    """Raise a ValueError naming the reward when ``fn(*args, **params)`` cannot bind."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to check (a C function): checked on call
        return
    try:
        sig.bind(*args, **params)
    except TypeError as exc:
        takes = ", ".join(p for p in sig.parameters if p not in ("task", "trajectory"))
        raise ValueError(f"reward {name!r}: params {params!r} do not fit: {exc} "
                         f"(it takes: {takes or 'no params'})") from None


def build_reward(name: str, params: Mapping[str, ParamValue] | None = None) -> RewardFn:
    """The reward function of a built-in (its factory called with ``params``) or of a user
    function (called as ``fn(task, trajectory, **params)``); a ValueError names the reward."""
    params = dict(params or {})
    target = resolve_reward(name)
    if name not in BUILTIN_REWARDS:
        _check_call(name, target, (None, None), params)
        return functools.partial(target, **params) if params else target
    _check_call(name, target, (), params)
    try:
        return target(**params)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"reward {name!r}: bad params {params!r}: {exc}") from None


class RewardSpec(StrictModel):
    """One weighted reward term of a GRPO run (validated, and resolved, when loaded)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(..., min_length=1, description=(
        "A built-in (accuracy, tool_efficiency, code_use, format, overlong, tool_error) or a "
        "user reward's import path 'package.module:function', called as fn(task, trajectory, "
        "**params) -> float."))
    weight: float = Field(1.0, ge=0, allow_inf_nan=False, description=(
        "Weight of the term in the total reward; 0 logs the term without training on it."))
    params: dict[str, ParamValue] = Field(default_factory=dict, validate_default=True, description=(
        "Keyword params of the built-in's factory or of the user function."))
    key: str | None = Field(None, min_length=1, description=(
        "Name of the term in logs (default: the built-in's name, or the function's name); "
        "repeated names get a suffix (_2, _3, ...)."))

    @field_validator("name")
    @classmethod
    def _resolvable(cls, name: str) -> str:
        resolve_reward(name)
        return name

    @field_validator("params")
    @classmethod
    def _fitting(cls, params: dict[str, ParamValue],
                 info: ValidationInfo) -> dict[str, ParamValue]:
        if "name" in info.data:  # absent when the name itself was invalid
            build_reward(info.data["name"], params)
        return params

    @property
    def is_builtin(self) -> bool:
        return self.name in BUILTIN_REWARDS

    @property
    def label(self) -> str:
        """The term's name before de-duplication."""
        if self.key:
            return self.key
        return self.name if self.is_builtin else self.name.rpartition(":")[2].rpartition(".")[2]

    def build(self) -> RewardFn:
        return build_reward(self.name, self.params)


def parse_rewards(items: Sequence[RewardSpec | Mapping[str, Any]],
                  where: str = "rewards") -> list[RewardSpec]:
    """Specs from specs or dicts; a :class:`ConfigError` names each bad field
    (``rewards[1].weight: ...``)."""
    specs: list[RewardSpec] = []
    for index, item in enumerate(items):
        if isinstance(item, RewardSpec):
            specs.append(item)
            continue
        try:
            specs.append(RewardSpec.model_validate(item))
        except ValidationError as exc:
            raise ConfigError(field_problems(exc, f"{where}[{index}]")) from None
    if not specs:
        raise ConfigError(f"{where}: at least one reward is needed")
    return specs


def unique_keys(labels: Sequence[str]) -> list[str]:
    """``labels`` with repeats made unique: a, a, a -> a, a_2, a_3."""
    keys: list[str] = []
    for label in labels:
        key, n = label, 1
        while key in keys:
            n += 1
            key = f"{label}_{n}"
        keys.append(key)
    return keys


# ---------------------------------------------------------------- composition
@dataclass(slots=True)
class RewardBreakdown:
    """A trajectory's reward: the weighted ``total``, each term's unweighted value by key, and
    whether it was graded correct."""

    total: float
    terms: dict[str, float] = field(default_factory=dict)
    correct: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _reward_error(trajectory: Trajectory, key: str, text: str) -> float:
    trajectory.reward_errors.append(f"{key}: {text}")
    log.warning("reward %s failed (the term counts 0): %s", key, text)
    return 0.0


def _guarded(key: str, fn: RewardFn) -> RewardFn:
    """A user reward that records its failures on the trajectory instead of raising them."""
    def guarded(task: Task, trajectory: Trajectory) -> float:
        try:
            value = float(fn(task, trajectory))
        except Exception as exc:  # noqa: BLE001 - a user reward may raise anything; it costs its term, not the run
            return _reward_error(trajectory, key, f"{type(exc).__name__}: {exc}")
        if not math.isfinite(value):
            return _reward_error(trajectory, key, f"returned {value!r}, not a finite number")
        return value

    return guarded


@dataclass(frozen=True, slots=True)
class _Term:
    key: str
    weight: float
    fn: RewardFn
    user: bool


def _term(key: str, spec: RewardSpec) -> _Term:
    fn = spec.build()
    user = not spec.is_builtin
    return _Term(key, spec.weight, _guarded(key, fn) if user else fn, user)


class RewardModel:
    """The weighted sum of reward terms; grading runs once per trajectory (cached on it)."""

    def __init__(self, specs: Sequence[RewardSpec | Mapping[str, Any]] | None = None, *,
                 grade_timeout_s: float = GRADE_TIMEOUT_S) -> None:
        if not grade_timeout_s > 0:
            raise ConfigError(f"grade_timeout_s must be > 0 seconds, got {grade_timeout_s!r}")
        self.specs = parse_rewards(default_rewards() if specs is None else specs)
        self.grade_timeout_s = grade_timeout_s
        keys = unique_keys([spec.label for spec in self.specs])
        self._terms = [_term(key, spec) for key, spec in zip(keys, self.specs, strict=True)]

    @property
    def keys(self) -> list[str]:
        """The terms' keys, in spec order (the keys of :attr:`RewardBreakdown.terms`)."""
        return [term.key for term in self._terms]

    @property
    def weights(self) -> dict[str, float]:
        return {term.key: term.weight for term in self._terms}

    def score(self, task: Task, trajectory: Trajectory) -> RewardBreakdown:
        """Grade (once) and score ``trajectory``, a finished episode of ``task``."""
        correct = is_correct(task, trajectory, timeout=self.grade_timeout_s)
        return self._combine(task, trajectory, correct)

    async def ascore(self, task: Task, trajectory: Trajectory) -> RewardBreakdown:
        """:meth:`score` for asyncio: grading, and any user reward, run off the event loop."""
        correct = await ais_correct(task, trajectory, timeout=self.grade_timeout_s)
        if any(term.user for term in self._terms):
            return await asyncio.to_thread(self._combine, task, trajectory, correct)
        return self._combine(task, trajectory, correct)

    def _combine(self, task: Task, trajectory: Trajectory, correct: bool) -> RewardBreakdown:
        terms = {term.key: float(term.fn(task, trajectory)) for term in self._terms}
        total = math.fsum(term.weight * terms[term.key] for term in self._terms)
        return RewardBreakdown(total, terms, correct)


# ---------------------------------------------------------------- published recipes
#: Accuracy alone, weight 1 (immutable; :func:`default_rewards` gives a fresh list).
DEFAULT_REWARDS: tuple[RewardSpec, ...] = (RewardSpec(name="accuracy", weight=1.0),)


def default_rewards() -> list[RewardSpec]:
    return list(DEFAULT_REWARDS)


def agentmath_rewards(*, alpha: float = 0.1, beta: float = 0.01,
                      r_max: float = 1.0) -> list[RewardSpec]:
    """AgentMath's R_total = R_acc + 1[R_acc = 1] * min(R_max, alpha + beta * N_code)."""
    return [RewardSpec(name="accuracy", weight=1.0),
            RewardSpec(name="tool_efficiency", weight=1.0,
                       params={"alpha": alpha, "beta": beta, "r_max": r_max})]


def deepmath_rewards(*, accuracy_weight: float = 0.1, code_weight: float = 1.0,
                     max_tokens: int | None = 5000, buffer: int | None = None,
                     require_correct: bool = False) -> list[RewardSpec]:
    """DeepMath's recipe (IntelLabs/DeepMath configs/training.yaml: reward_funcs
    [open_r1_accuracy, code_format], reward_weights [0.1, 1.0]: the code reward weighs 10:1
    against accuracy, as its README says), plus DAPO's soft overlong term at the accuracy
    weight for DeepMath's length cap (5k completion tokens in its README; None leaves it out:
    DeepMath itself only truncates)."""
    specs = [RewardSpec(name="accuracy", weight=accuracy_weight),
             RewardSpec(name="code_use", weight=code_weight,
                        params={"require_correct": require_correct})]
    if max_tokens is not None:
        params: dict[str, ParamValue] = {"max_tokens": max_tokens}
        if buffer is not None:
            params["buffer"] = buffer
        specs.append(RewardSpec(name="overlong", weight=accuracy_weight, params=params))
    return specs
