"""``agentmath solve``: run the agent loop on one problem and show the trajectory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from agentmath import _loop as event_loop
from agentmath.cli._common import (
    JSON_OPTION,
    SET_OPTION,
    build_config,
    checked,
    config_option,
    out_console,
    print_json,
    trained_system_prompt,
    usage_error,
)
from agentmath.cli._options import GENERATED, VLLM_FIELDS, config_options


def default_model_dir() -> Path:
    """Where ``agentmath demo`` saves its trained tool model (the embedded default)."""
    return Path.home() / ".cache" / "agentmath" / "demo-tool-model"


# The demo's model is tiny and knows only the demo's story problems: on
# any other text it rambles to its token budget, which a new user should not take for a bug.
DEMO_MODEL_HINT = (
    "note: the default model is the one `agentmath demo` trained, a tiny model that "
    "knows only the demo's story problems, e.g. \"A pump runs for 836 minutes. It moves 969 "
    "liters each minute. The water is poured equally into 627 tanks. How many liters go in "
    "each tank?\"; for other problems pass --model (a model directory, or a served model's "
    "name with --base-url).")


SOLVE_FIELDS = ("model", "backend", "base_url", "device", "format", "temperature",
                "loop.max_tool_calls", "loop.max_model_tokens", "loop.max_total_tokens",
                "loop.max_tokens_per_turn", "loop.tool_timeout_s", "loop.time_limit_s",
                "loop.system_prompt", *VLLM_FIELDS)


CONFIG_OPTION = config_option("SolveConfig")


@config_options("agentmath.config:SolveConfig", SOLVE_FIELDS)
def solve(
    problem: str = typer.Argument(..., metavar="PROBLEM", help="The problem text."),
    settings: dict[str, Any] = GENERATED,
    config_file: Path = CONFIG_OPTION,
    sets: list[str] = SET_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Solve one problem with a model that calls the sandbox; show reasoning, code and outputs.
    The server (or the model directory and its chat template) is checked first: exit 1
    naming what is wrong."""
    from agentmath.agent.loop import run_episode
    from agentmath.backends import BackendSettings, build_backend
    from agentmath.backends.base import SamplingParams
    from agentmath.backends.preflight import check_backend
    from agentmath.backends.registry import check_backend as known_backend
    from agentmath.config import SolveConfig
    from agentmath.errors import AgentMathError
    from agentmath.formats import get_format
    from agentmath.sandbox import SandboxPool

    config = build_config(SolveConfig, "solve", config_file, sets, settings)
    demo_model = config.model is None
    model = str(default_model_dir()) if demo_model else config.model
    if demo_model and config.backend != "openai" and not Path(model).exists():
        usage_error(f"no --model given and no demo model at {model}: run `agentmath demo` "
                    "first, or pass --model")
    engine_settings = BackendSettings(model, config.base_url, device=config.device,
                                      vllm=config.vllm)
    try:  # a usage error (exit 2) is said before the startup checks (exit 1)
        known_backend(config.backend)
        tool_format = get_format(config.format)
    except (AgentMathError, ValueError) as exc:
        usage_error(str(exc))
    checked(check_backend, config.backend, engine_settings)
    loop_cfg = config.loop
    system_prompt = loop_cfg.system_prompt
    if system_prompt is None and config.backend != "openai":
        system_prompt = trained_system_prompt(model, config.format)
    if system_prompt is None and demo_model:
        from agentmath.recipes.demo import TOOL_SYSTEM

        system_prompt = TOOL_SYSTEM  # a demo model saved before models kept their prompt
    loop_cfg = loop_cfg.model_copy(update={"system_prompt": system_prompt})
    try:
        engine = build_backend(config.backend, engine_settings)
    except (AgentMathError, ValueError) as exc:
        usage_error(str(exc))
    temperature = config.temperature

    async def go():  # noqa: ANN202 - local
        async with SandboxPool() as pool:
            try:
                return await run_episode(problem, engine, tool_format, pool, loop_cfg,
                                         SamplingParams(temperature=temperature))
            finally:
                await engine.aclose()

    traj = event_loop.run(go())
    if json_out:
        print_json(traj.to_dict())
        return
    from agentmath.cli._trajectory_view import render_trajectory

    render_trajectory(traj, out_console())
    if demo_model and traj.answer is None:
        out_console().print(DEMO_MODEL_HINT, highlight=False)
