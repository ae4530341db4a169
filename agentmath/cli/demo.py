"""``agentmath demo``: the project's main job — train two tiny models on the CPU and show
that tool use beats text-only reasoning (see agentmath/recipes/demo.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from agentmath.cli._common import (
    JSON_OPTION,
    SET_OPTION,
    build_config,
    config_option,
    err_console,
    out_console,
    print_json,
    usage_error,
)
from agentmath.cli._options import GENERATED, config_options

if TYPE_CHECKING:
    from agentmath.recipes.summary import DemoSummary

OUT_OPTION = typer.Option(Path("runs/demo"), "--out", "-o", metavar="DIR",
                          help="Where data, models, runs and the report go.")
DEMO_FIELDS = ("seed", "steps", "model_size", "train_problems", "test_problems", "copy_steps",
               "start_attempts", "device", "bf16")


def _render(summary: DemoSummary) -> None:
    from rich.table import Table

    console = out_console()
    sampling = summary.sampling
    sampled = "sampled accuracy" if sampling is None else (
        f"sampled accuracy ({sampling.samples} at T={sampling.temperature:g} on "
        f"{sampling.problems})")
    table = Table(title="agentmath demo: held-out test problems (greedy: 1 sample each)")
    for col in ("model", "greedy accuracy", sampled, "mean model tokens",
                "tool calls / sample", "problems"):
        table.add_column(col, justify="right" if col != "model" else "left")
    for row in summary.models:
        table.add_row(row.model, f"{row.accuracy:.1%}",
                      "-" if row.sampled_accuracy is None else f"{row.sampled_accuracy:.1%}",
                      f"{row.mean_model_tokens:.0f}", f"{row.tool_calls_per_sample:.2f}",
                      str(row.n))
    console.print(table)
    head = summary.headroom
    console.print(f"the tool model's headroom before GRPO: greedy pass@1 "
                  f"{head.greedy_pass_at_1:.1%}, pass@{head.k} {head.pass_at_k:.1%} at "
                  f"temperature {head.temperature} ({head.problems} {head.split} problems)")
    if len(summary.starts) > 1:  # the first start failed its headroom: others were grown
        for start in summary.starts:
            console.print(f"  start {start.attempt} (SFT seed {start.sft_seed}): pass@"
                          f"{start.headroom.k} {start.headroom.pass_at_k:.1%}"
                          + (" <- GRPO ran from this one" if start.used else ""))
    for row in summary.models:
        for ev in row.stage_transitions or []:
            console.print(f"{row.model}: budget stage {ev.old} -> {ev.new} at step "
                          f"{ev.step} (truncation rate {ev.rate:.1%}; tool calls "
                          f"{ev.budgets.max_tool_calls})")
    conv = summary.conversion
    console.print(f"the tool model's SFT data: {conv.kept} verified tool trajectories "
                  f"(dropped {conv.dropped or 'none'}) and {conv.text or 0} text "
                  f"chain-of-thoughts; total time {summary.seconds:.0f} s")
    console.print(f"report: {summary.report.viewer} (and plots beside it)")
    chosen_by = ", ".join(f"{row.model} {row.validation_accuracy:.1%}"
                          for row in summary.models if row.validation_accuracy is not None)
    console.print(f"tool model saved to {summary.tool_model} ({summary.tool_model_is}, the "
                  "default for `agentmath solve`" + (
                      f"; chosen by greedy accuracy on the validation problems: {chosen_by})"
                      if chosen_by else ")"))


CONFIG_OPTION = config_option("DemoConfig", "demo")


@config_options("agentmath.recipes.demo_config:DemoConfig", DEMO_FIELDS)
def demo(
    out: Path = OUT_OPTION,
    settings: dict[str, Any] = GENERATED,
    save_model: bool = typer.Option(True, "--save-model/--no-save-model", metavar="",
                                    help="Save the tool model as solve's default."),
    config_file: Path = CONFIG_OPTION,
    sets: list[str] = SET_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Train a text-only and a tool-using tiny model with the same budget on synthetic
    problems, improve the tool model with agentic GRPO, evaluate all of them through the agent
    loop and the sandbox, compare them."""
    from agentmath.cli.solve import default_model_dir
    from agentmath.errors import AgentMathError, MissingExtraError
    from agentmath.recipes.demo import run_demo

    # options left out (None) keep the file's or the recipe's values; a bad value exits 2
    from agentmath.recipes.demo_config import DemoConfig

    cfg = build_config(DemoConfig, "demo", config_file, sets, settings, section="demo")
    console = err_console()
    try:
        with console.status("starting") as status:
            summary = run_demo(cfg, out, default_model_dir() if save_model else None,
                               stage=lambda msg: (status.update(msg), console.log(msg)))
    except MissingExtraError as exc:
        usage_error(str(exc))
    except AgentMathError as exc:
        usage_error(str(exc), code=1)
    if json_out:
        print_json(summary.to_dict())
    else:
        _render(summary)
