"""``agentmath serve``: start a vLLM server of a model with the flags agentmath's clients need
(agentmath.serving.command), or print its command line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import typer

from agentmath.cli._common import SET_OPTION, build_config, config_option, usage_error
from agentmath.cli._options import GENERATED, config_options

SERVE_FIELDS = ("served_name", "host", "port", "engine.tensor_parallel_size",
                "engine.max_model_len", "engine.dtype", "engine.gpu_memory_utilization",
                "engine.max_num_seqs", "engine.enable_prefix_caching", "tool_call_parser",
                "reasoning_parser", "rl", "lora_rank")

CONFIG_OPTION = config_option("ServeConfig")


@config_options("agentmath.serving.command:ServeConfig", SERVE_FIELDS,
                names={"rl": "--rl/--no-rl"})
def serve(
    model: str = typer.Argument(..., metavar="MODEL", help="Model directory (or hub id)."),
    settings: dict[str, Any] = GENERATED,
    print_only: bool = typer.Option(False, "--print", metavar="", help=(
        "Print the command line (with its environment) instead of running it.")),
    vllm_bin: str = typer.Option("vllm", "--vllm-bin", metavar="FILE", help=(
        "The vllm executable (default: vllm on PATH).")),
    config_file: Path = CONFIG_OPTION,
    sets: list[str] = SET_OPTION,
) -> None:
    """Serve MODEL with vLLM for `agentmath eval`, `solve`, `synth` (a teacher) or `rl`
    (`--rl`: weight pushes from the trainer). Runs `vllm serve` in this process's place; needs
    vLLM installed (`pip install 'agentmath[vllm]'`, on a GPU machine)."""
    from agentmath.errors import ConfigError
    from agentmath.rl.vllm_ext import server_options
    from agentmath.serving.command import ServeConfig, shell_line, vllm_serve_command

    config = build_config(ServeConfig, "serve", config_file, sets, {**settings, "model": model})
    if config.lora_rank is not None and not config.rl:
        usage_error("--lora-rank serves the adapters of an RL run: add --rl")
    extra: list[str] = []
    env: dict[str, str] = {}
    if config.rl:
        try:
            extra, env = server_options(lora_rank=config.lora_rank)
        except ConfigError as exc:
            usage_error(str(exc))
    argv = vllm_serve_command(config, vllm_bin=vllm_bin, extra_args=extra)
    if print_only:
        typer.echo(shell_line(argv, env))
        return
    found = shutil.which(vllm_bin)
    if found is None:
        usage_error(f"{vllm_bin}: not found; install vLLM (pip install 'agentmath[vllm]') or "
                    f"name the executable with --vllm-bin", code=1)
    os.execve(found, argv, {**os.environ, **env})
