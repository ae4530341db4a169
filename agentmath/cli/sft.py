"""``agentmath sft``: supervised fine-tuning with tool-output masking (agentmath.train.sft)."""

from __future__ import annotations

from pathlib import Path

import typer

from agentmath.cli._common import (
    JSON_OPTION,
    build_config,
    out_console,
    print_json,
    training_errors,
)

# Options with a Path/list type, declared once at module level (ruff B008).
DATA_OPTION = typer.Option(..., "--data", "-d", metavar="FILE.jsonl", help=(
    "SFT examples: {messages, completion: [{text, train}]} per line."))
OUT_OPTION = typer.Option(..., "--out", "-o", help=(
    "Run directory: checkpoints, loss.jsonl, final/ (resumes if it has checkpoints)."))
CONFIG_OPTION = typer.Option(None, "--config", "-c", metavar="FILE",
                             help="SFTConfig file (TOML/YAML; its 'sft' table if it has one).")
SET_OPTION = typer.Option(None, "--set", "-s", metavar="KEY=VALUE",
                          help="Override a config field, e.g. --set warmup_steps=10 (repeatable).")


def sft(
    data: Path = DATA_OPTION,
    model: str = typer.Option(..., "--model", "-m", help="Model directory (HF format) to tune."),
    out: Path = OUT_OPTION,
    lora: bool = typer.Option(None, "--lora/--full", help="Train a LoRA adapter (merged in "
                              "final/) or all the weights (default: the config's, full)."),
    max_steps: int = typer.Option(None, "--max-steps", help="Optimizer steps."),
    lr: float = typer.Option(None, "--lr", help="Peak learning rate."),
    batch_size: int = typer.Option(None, "--batch-size", help="Examples per micro-batch."),
    grad_accum: int = typer.Option(None, "--grad-accum", help="Micro-batches per step."),
    max_length: int = typer.Option(None, "--max-length", help="Tokens kept per example."),
    seed: int = typer.Option(None, "--seed", help="Seed of the init and the data order."),
    resume: bool = typer.Option(True, "--resume/--restart", help=(
        "Continue from the newest checkpoint in --out, or start over (deleting them).")),
    config_file: Path = CONFIG_OPTION,
    sets: list[str] = SET_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Fine-tune a model on tool-integrated trajectories; loss only on the model's own tokens
    (prompt and tool output are masked). Needs `pip install 'agentmath[train]'`."""
    from agentmath.train.sft import SFTConfig

    config = build_config(SFTConfig, "sft", config_file, sets, section="sft", options={
        "lora": lora, "max_steps": max_steps, "learning_rate": lr, "batch_size": batch_size,
        "grad_accum": grad_accum, "max_length": max_length, "seed": seed})
    with training_errors("sft", ["torch", "transformers"] + (["peft"] if config.lora else [])):
        from agentmath.train.sft import train_sft

        result = train_sft(config, data, model, out, progress=not json_out, resume=resume)
    if json_out:
        print_json(result.to_dict())
        return
    from rich.table import Table

    table = Table(title=f"sft · {model}")
    table.add_column("")
    table.add_column("value")
    examples = result.examples
    rows = [("steps", str(result.steps)),
            ("final loss", "-" if result.final_loss is None else f"{result.final_loss:.4f}"),
            ("trainable tokens", f"{result.trainable_tokens:,}"),
            ("examples", f"{examples['kept']} kept of {examples['total']} "
                         f"({examples['truncated']} truncated, {examples['dropped']} dropped)"),
            ("resumed from", "-" if result.resumed_from is None else f"step {result.resumed_from}"),
            ("final model", result.final_dir or "-"), ("adapter", result.adapter_dir or "-"),
            ("loss log", result.loss_log), ("wall time", f"{result.wall_time_s:.1f} s")]
    for name, value in rows:
        table.add_row(name, value)
    out_console().print(table)
