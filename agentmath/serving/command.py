"""The ``vllm serve`` command line that agentmath's clients expect of a model server.

An evaluation through the native tool-call format needs vLLM's tool parser; a thinking model
needs its reasoning parser so that the reply's reasoning is kept apart; the per-request prompt
token counts (``--enable-prompt-tokens-details``) feed the router's statistics; an RL run's
weight pushes need dev mode and agentmath's worker extension (added by the caller from
:func:`agentmath.rl.vllm_ext.server_options`). :func:`vllm_serve_command` writes that command
from :class:`ServeConfig`, for ``agentmath serve`` (which runs or prints it) and for the tests,
which start their Qwen3-like server with it: the quickstart's command is the one tested.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from pydantic import Field

from agentmath.config import StrictModel, VLLMEngineConfig

__all__ = ["ServeConfig", "engine_flags", "shell_line", "vllm_serve_command"]


class ServeConfig(StrictModel):
    """A vLLM server of one model (``agentmath serve``)."""

    model: str = Field(..., min_length=1, description="Model directory (or hub id) to serve.")
    served_name: str | None = Field(None, description=(
        "Name clients ask for (--model of eval, solve and rl); default: the model's path."))
    host: str = Field("127.0.0.1", description="Address to listen on (0.0.0.0: every one).")
    port: int = Field(8000, ge=1, le=65535, description="Port to listen on.")
    engine: VLLMEngineConfig = Field(default_factory=VLLMEngineConfig, description=(
        "vLLM's engine settings (the offline backend's, agentmath.config.VLLMEngineConfig): "
        "each one that differs from its default becomes its vllm serve flag."))
    tool_call_parser: str | None = Field("hermes", description=(
        "vLLM's parser of native tool calls (hermes: Qwen's <tool_call> tags); none: off."))
    reasoning_parser: str | None = Field(None, description=(
        "vLLM's parser of thinking blocks (qwen3 for Qwen3 thinking models); keeps reasoning "
        "out of the reply's content."))
    rl: bool = Field(False, description=(
        "Add what an RL run's weight pushes need: dev mode and agentmath's worker extension."))
    lora_rank: int | None = Field(None, ge=1, le=512, description=(
        "With rl: serve LoRA adapters of this rank, loaded at run time (lora RL runs)."))


def vllm_serve_command(config: ServeConfig, *, vllm_bin: str = "vllm",
                       extra_args: Sequence[str] = ()) -> list[str]:
    """The argv of ``vllm serve`` for ``config``, ``extra_args`` last (the RL flags, or the
    CPU build's own)."""
    argv = [vllm_bin, "serve", config.model, "--host", config.host, "--port", str(config.port),
            "--served-model-name", config.served_name or config.model,
            "--generation-config", "vllm",  # the request's sampling, not the checkpoint's
            "--enable-prompt-tokens-details"]
    argv += engine_flags(config.engine)
    if config.tool_call_parser and config.tool_call_parser != "none":
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", config.tool_call_parser]
    if config.reasoning_parser:
        argv += ["--reasoning-parser", config.reasoning_parser]
    return [*argv, *extra_args]


def engine_flags(engine: VLLMEngineConfig) -> list[str]:
    """``vllm serve``'s flags for the engine settings that differ from their defaults (vLLM's
    server takes every engine argument as ``--name-in-kebab-case``; a boolean as the flag or
    its ``--no-`` form)."""
    flags: list[str] = []
    for name, value in engine.model_dump(exclude_defaults=True).items():
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag[2:])
        else:
            flags += [flag, str(value)]
    return flags


def shell_line(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """``argv`` with ``env`` as one line a POSIX shell runs."""
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()),
                     *map(shlex.quote, argv)])
