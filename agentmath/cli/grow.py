"""``agentmath grow``: grow a tiny tool model in one or several tool formats on the CPU (see
agentmath/recipes/tool_model.py): synthetic problems, code injection verified in the sandbox,
a tokenizer, a Qwen3 model, SFT with tool output masked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from agentmath.cli._common import JSON_OPTION, build_config, out_console, print_json, usage_error

if TYPE_CHECKING:
    from agentmath.recipes.tool_model import GrownModel

CONFIG_OPTION = typer.Option(None, "--config", "-c", metavar="FILE", help=(
    "ToolModelConfig file (TOML/YAML; its 'grow' table if it has one)."))
SET_OPTION = typer.Option(None, "--set", "-s", metavar="KEY=VALUE", help=(
    "Override a config field, e.g. --set batch_size=8 (repeatable)."))


def _render(summary: GrownModel) -> None:
    from rich.table import Table

    console = out_console()
    table = Table(title="agentmath grow: code injection (sandbox-verified)")
    for col in ("format", "kept", "dropped", "seconds"):
        table.add_column(col, justify="left" if col == "format" else "right")
    for name, stats in summary.conversion.items():
        table.add_row(name, str(stats.kept), str(stats.dropped or "none"),
                      f"{stats.seconds:.1f}")
    console.print(table)
    loss = summary.final_loss
    console.print(f"SFT: {summary.config.steps} steps, final loss "
                  f"{loss:.3f}" if loss is not None else "SFT: no step trained")
    console.print(f"model + tokenizer: {summary.model_dir}")
    console.print(f"held-out problems: {summary.test}  ({summary.seconds:.0f} s in all)")


def grow(
    out: Path = typer.Option(Path("runs/tool-model"), "--out", "-o", metavar="DIR",
                             help="Where the data, model (DIR/final) and summary go."),
    formats: str = typer.Option(None, "--formats", metavar="NAMES", help=(
        "Comma-separated tool formats to train on (code_interpreter, markdown, tool_call, "
        "openai_tools, deepmath, deepmath_fewshot, nemo_skills, openmath, native); default "
        "code_interpreter.")),
    size: str = typer.Option(None, "--size", metavar="NAME",
                             help="Model size: nano, micro, tiny, small, base."),
    steps: int = typer.Option(None, "--steps", metavar="N", help="SFT steps (default 300)."),
    train_problems: int = typer.Option(None, "--train-problems", metavar="N",
                                       help="Training problems."),
    max_digits: int = typer.Option(None, "--max-digits", metavar="N",
                                   help="Largest operand, in digits."),
    seed: int = typer.Option(None, "--seed", metavar="N",
                             help="Seed of data, model and training."),
    config_file: Path = CONFIG_OPTION,
    sets: list[str] = SET_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Grow a tiny tool-using model: verified tool trajectories in the formats you name (each
    with its own system prompt), then SFT. Needs `pip install 'agentmath[train]'`."""
    from agentmath._lazy import require
    from agentmath.errors import AgentMathError, MissingExtraError
    from agentmath.recipes.tool_model import ToolModelConfig, build_tool_model

    names = [f.strip() for f in formats.split(",") if f.strip()] if formats else None
    config = build_config(ToolModelConfig, "grow", config_file, sets, section="grow", options={
        "formats": names, "model_size": size, "steps": steps, "train_problems": train_problems,
        "max_digits": max_digits, "seed": seed})
    try:
        for module in ("torch", "transformers", "tokenizers"):
            require(module, "train")
        summary = build_tool_model(config, out, stage=lambda _: None, progress=not json_out)
    except MissingExtraError as exc:
        usage_error(f"agentmath grow needs the training extra: {exc}")
    except AgentMathError as exc:
        usage_error(str(exc))
    if json_out:
        print_json(summary.to_dict())
    else:
        _render(summary)
