"""``agentmath solve``: run the agent loop on one problem and show the trajectory."""

from __future__ import annotations

from pathlib import Path

import typer

from agentmath import _loop as event_loop
from agentmath.cli._common import (
    JSON_OPTION,
    out_console,
    print_json,
    trained_system_prompt,
    usage_error,
)


def default_model_dir() -> Path:
    """Where ``agentmath demo`` saves its trained tool model (the embedded default)."""
    return Path.home() / ".cache" / "agentmath" / "demo-tool-model"


# The demo's model is tiny and knows only the demo's story problems: on
# any other text it rambles to its token budget, which a new user should not take for a bug.
DEMO_MODEL_HINT = (
    "note: the default model is the one `agentmath demo` trained, a tiny model that "
    "knows only the demo's story problems, e.g. \"A pump runs for 836 minutes. It moves 969 "
    "liters each minute. The water is poured equally into 627 tanks. How many liters go in "
    "each tank?\"; for other problems pass --model (a model directory) or --backend openai "
    "with --base-url.")


def solve(
    problem: str = typer.Argument(..., help="The problem text."),
    backend: str = typer.Option("hf", help="openai | hf | vllm"),
    model: str = typer.Option(None, help="Served model name (openai) or model directory "
                              "(hf, vllm). Default: the model trained by `agentmath demo`."),
    base_url: str = typer.Option(None, "--base-url", help="OpenAI-compatible server URL."),
    fmt: str = typer.Option("code_interpreter", "--format", help="Tool format name."),
    temperature: float = typer.Option(0.0, min=0.0, max=5.0, help="Sampling temperature."),
    max_tool_calls: int = typer.Option(8, min=0, help="Tool calls allowed."),
    max_model_tokens: int = typer.Option(1024, min=1, help="Model tokens allowed."),
    tool_timeout: float = typer.Option(10.0, min=0.01, help="Seconds per snippet."),
    system_prompt: str = typer.Option(None, help="System prompt (default: the format's)."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Solve one problem with a model that calls the sandbox; show reasoning, code and outputs."""
    from agentmath.agent.loop import run_episode
    from agentmath.backends import make_backend
    from agentmath.backends.base import SamplingParams
    from agentmath.config import LoopConfig
    from agentmath.errors import AgentMathError
    from agentmath.formats import get_format
    from agentmath.sandbox import SandboxPool

    demo_model = model is None
    if model is None:
        model = str(default_model_dir())
        if backend != "openai" and not Path(model).exists():
            usage_error(f"no --model given and no demo model at {model}: run `agentmath demo` "
                        "first, or pass --model")
    if system_prompt is None and backend != "openai":
        system_prompt = trained_system_prompt(model, fmt)
    if system_prompt is None and demo_model:
        from agentmath.recipes.demo import TOOL_SYSTEM

        system_prompt = TOOL_SYSTEM  # a demo model saved before models kept their prompt
    try:
        tool_format = get_format(fmt)
        loop_cfg = LoopConfig(max_tool_calls=max_tool_calls, max_model_tokens=max_model_tokens,
                              tool_timeout_s=tool_timeout, system_prompt=system_prompt)
        engine = make_backend(backend, model, base_url=base_url)
    except (AgentMathError, ValueError) as exc:
        usage_error(str(exc))

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
