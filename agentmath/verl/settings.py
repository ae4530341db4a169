"""The agentmath agent loop's settings inside verl, and what its instances share.

verl builds one agent-loop object per sample (``hydra.utils.instantiate`` of the registry
entry), passing the entry's extra keys to the constructor; the ``agentmath:`` mapping of the
agent-loop YAML becomes :class:`VerlLoopSettings` (validated: an unknown or bad field is a
:class:`~agentmath.errors.ConfigError` naming it). Since objects are per sample, the expensive
parts are shared per process: one sandbox client per event loop and settings (a local
:class:`~agentmath.sandbox.pool.SandboxPool` with its warm zygote, or a
:class:`~agentmath.sandbox.remote.RemoteSandbox` on sandbox services, both through
:func:`agentmath.sandbox.factory.open_sandbox`), and one reward model per reward settings.
No verl import.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from agentmath.config import LoopConfig, SandboxConfig, StrictModel, field_problems
from agentmath.errors import ConfigError
from agentmath.formats import get_format
from agentmath.rl.rewards import (
    GRADE_TIMEOUT_S,
    ParamValue,
    RewardModel,
    RewardSpec,
    agentmath_rewards,
    deepmath_rewards,
    default_rewards,
)
from agentmath.sandbox.client import SandboxClient
from agentmath.sandbox.factory import open_sandbox

#: Reward presets by name: agentmath/rl/rewards.py's published recipes.
REWARD_PRESETS = {"accuracy": default_rewards, "agentmath": agentmath_rewards,
                  "deepmath": deepmath_rewards}


class VerlLoopSettings(StrictModel):
    """How the ``agentmath`` agent loop runs an episode inside verl."""

    format: str = Field("code_interpreter", description=(
        "agentmath tool format (a text format: code_interpreter, markdown, tool_call, "
        "deepmath, ...); its instructions are the system prompt unless loop.system_prompt."))
    loop: LoopConfig = Field(default_factory=LoopConfig, description=(
        "Episode budgets (tool calls, model tokens, per-turn tokens, time, stop_on_answer). "
        "max_total_tokens is further capped at the prompt plus verl's response_length."))
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description=(
        "The local sandbox pool's limits (used when sandbox_url is empty)."))
    sandbox_url: list[str] = Field(default_factory=list, description=(
        "Sandbox service URLs (agentmath sandbox serve); empty: a local SandboxPool per "
        "agent-loop worker process."))
    sandbox_token_file: str | None = Field(None, description=(
        "File whose first token authenticates to the services (else $AGENTMATH_SANDBOX_TOKEN)."))
    rewards: Literal["accuracy", "agentmath", "deepmath"] | list[RewardSpec] = Field(
        "accuracy", description=(
            "A preset (accuracy; agentmath: accuracy + tool efficiency; deepmath: 0.1 accuracy "
            "+ 1.0 code use + overlong) or a list of weighted reward specs."))
    reward_params: dict[str, ParamValue] = Field(default_factory=dict, description=(
        "Keyword params of the preset (agentmath: alpha, beta, r_max; deepmath: "
        "accuracy_weight, code_weight, max_tokens, buffer, require_correct)."))
    grade_timeout_s: float = Field(GRADE_TIMEOUT_S, gt=0, le=600, description=(
        "Extraction and verification time per trajectory."))
    mask_tool_tokens: bool = Field(True, description=(
        "response_mask 0 on tool-output tokens (False: DeepMath's unmasked ablation)."))
    eos_token_ids: list[int] | None = Field(None, description=(
        "Ids that end the model's turn (None: the tokenizer's eos_token_id)."))
    problem_key: str = Field("problem", min_length=1, description=(
        "extra_info field holding the problem text; without it, the last user message of "
        "the dataset's prompt."))

    @field_validator("format")
    @classmethod
    def _known_format(cls, name: str) -> str:
        get_format(name)  # ConfigError (a ValueError) listing the known formats
        return name

    @field_validator("sandbox_url", mode="before")
    @classmethod
    def _url_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def reward_specs(self) -> list[RewardSpec]:
        """The reward terms: the preset's (with ``reward_params``) or the listed specs."""
        if isinstance(self.rewards, list):
            if self.reward_params:
                raise ConfigError("reward_params applies to a preset; put params in the specs")
            return list(self.rewards)
        try:
            return REWARD_PRESETS[self.rewards](**self.reward_params)
        except TypeError as exc:
            raise ConfigError(f"reward_params {self.reward_params!r} do not fit the "
                              f"{self.rewards!r} preset: {exc}") from None


def load_settings(data: Mapping[str, Any] | None) -> VerlLoopSettings:
    """Settings from the agent-loop YAML's ``agentmath:`` mapping (an OmegaConf DictConfig
    or a dict); a ConfigError names each bad field."""
    if data is None:
        return VerlLoopSettings()
    if hasattr(data, "_metadata"):  # an OmegaConf container: plain values, interpolations resolved
        from omegaconf import OmegaConf

        data = OmegaConf.to_container(data, resolve=True)  # type: ignore[assignment]
    try:
        return VerlLoopSettings.model_validate(dict(data))  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(field_problems(exc, "agentmath")) from None


@functools.lru_cache(maxsize=32)
def _reward_model(specs_json: str, grade_timeout_s: float) -> RewardModel:
    import json

    return RewardModel(json.loads(specs_json), grade_timeout_s=grade_timeout_s)


def reward_model(settings: VerlLoopSettings) -> RewardModel:
    """The settings' reward model, built once per process for equal reward settings."""
    import json

    specs = json.dumps([spec.model_dump() for spec in settings.reward_specs()], sort_keys=True)
    return _reward_model(specs, settings.grade_timeout_s)


# ---------------------------------------------------------------- one sandbox per loop
_Key = tuple[asyncio.AbstractEventLoop, str]
_sandboxes: dict[_Key, asyncio.Task[tuple[contextlib.AsyncExitStack, SandboxClient]]] = {}


def _sandbox_key(settings: VerlLoopSettings) -> str:
    return settings.model_dump_json(include={"sandbox", "sandbox_url", "sandbox_token_file"})


async def _open(settings: VerlLoopSettings) -> tuple[contextlib.AsyncExitStack, SandboxClient]:
    stack = contextlib.AsyncExitStack()
    client = await stack.enter_async_context(open_sandbox(
        settings.sandbox, settings.sandbox_url or None, settings.sandbox_token_file))
    return stack, client


async def shared_sandbox(settings: VerlLoopSettings) -> SandboxClient:
    """The sandbox client of these settings on the running event loop, opened by the first
    caller (concurrent first callers wait for the same opening) and kept open for the
    process's later samples; a failed opening is retried by the next caller."""
    loop = asyncio.get_running_loop()
    key = (loop, _sandbox_key(settings))
    task = _sandboxes.get(key)
    if task is None:
        task = _sandboxes[key] = loop.create_task(_open(settings))
    try:
        return (await asyncio.shield(task))[1]
    except Exception:
        if _sandboxes.get(key) is task:
            del _sandboxes[key]
        raise


async def close_shared_sandboxes() -> int:
    """Close the sandbox clients opened on the running event loop; how many were closed."""
    loop = asyncio.get_running_loop()
    closed = 0
    for key in [key for key in _sandboxes if key[0] is loop]:
        task = _sandboxes.pop(key)
        try:
            stack, _ = await task
        except Exception:  # noqa: BLE001 - it never opened (its caller saw why): nothing to close
            continue
        await stack.aclose()
        closed += 1
    return closed
