"""Weighted reward functions for agentic GRPO.

A reward is a plain function ``reward(task, trajectory) -> float``. A run combines several as
weighted terms, each a :class:`RewardSpec` (a built-in name or a user function's import path, a
weight, keyword params) logged unweighted on its own, so the curves show what each term did.
:class:`RewardModel` scores a finished trajectory into a :class:`RewardBreakdown`; a bad spec
fails when the config is validated, naming the field.

The built-in rewards (accuracy, tool_efficiency, code_use, format, overlong, tool_error) and
correctness graded once per trajectory live in :mod:`agentmath.rl.builtin_rewards`; their
names are re-exported here, so the rewards API is this one module.

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

from agentmath.agent.trajectory import Trajectory
from agentmath.config import StrictModel, field_problems
from agentmath.errors import ConfigError
from agentmath.rl.builtin_rewards import (  # re-exported: the rewards API is one module
    BUILTIN_REWARDS,
    GRADE_TIMEOUT_S,
    PROPER_FINISH,
    RewardFn,
    accuracy_reward,
    ais_correct,
    final_answer,
    format_reward,
    is_correct,
    make_code_use_reward,
    make_overlong_reward,
    make_tool_efficiency_reward,
    tool_error_reward,
)
from agentmath.tasks import Task

ParamValue = bool | int | float | str
log = logging.getLogger(__name__)

__all__ = [
    "BUILTIN_REWARDS",
    "GRADE_TIMEOUT_S",
    "PROPER_FINISH",
    "RewardFn",
    "accuracy_reward",
    "ais_correct",
    "final_answer",
    "format_reward",
    "is_correct",
    "make_code_use_reward",
    "make_overlong_reward",
    "make_tool_efficiency_reward",
    "tool_error_reward",
]


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
