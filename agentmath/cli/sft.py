"""``agentmath sft``: supervised fine-tuning with tool-output masking (agentmath.train.sft)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from agentmath.cli._common import (
    JSON_OPTION,
    SET_OPTION,
    build_config,
    checked,
    config_option,
    out_console,
    print_json,
    training_errors,
    usage_error,
)
from agentmath.cli._options import GENERATED, config_options

# Options with a Path/list type, declared once at module level (ruff B008).
DATA_OPTION = typer.Option(None, "--data", "-d", metavar="FILE", help=(
    "SFT examples (JSONL): {messages, completion: [{text, train}]} per line (overrides the "
    "config file's data)."))
OUT_OPTION = typer.Option(..., "--out", "-o", metavar="DIR", help=(
    "Run directory: checkpoints, loss.jsonl, final/ (resumes if it has checkpoints)."))
SFT_FIELDS = ("lora", "max_steps", "learning_rate", "batch_size", "grad_accum", "max_length",
              "seed", "device", "bf16")


CONFIG_OPTION = config_option("SFTConfig", "sft")


def _sends_tools(data: Path) -> bool:
    """Whether the data's first record is a native tool-call conversation with ``tools``
    (agentmath/train/chat_records.py): the chat template must then take them. A file that
    does not read says nothing here; the trainer reports it, naming the line."""
    import json

    from agentmath.train.chat_records import is_chat_record

    try:
        with data.open(encoding="utf-8") as handle:
            first = next((line for line in handle if line.strip()), "")
        row = json.loads(first) if first else None
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(row, dict) and is_chat_record(row) and bool(row.get("tools"))


@config_options("agentmath.train.sft_config:SFTConfig", SFT_FIELDS, names={"lora": "--lora/--full"},
                shorts={"learning_rate": "--lr"})
def sft(
    data: Path | None = DATA_OPTION,
    model: str | None = typer.Option(None, "--model", "-m", metavar="MODEL", help=(
        "Model directory (HF format) to tune (overrides the config file's model).")),
    out: Path = OUT_OPTION,
    settings: dict[str, Any] = GENERATED,
    resume: bool = typer.Option(True, "--resume/--restart", metavar="", help=(
        "Continue from the newest checkpoint in --out, or start over (deleting them).")),
    config_file: Path = CONFIG_OPTION,
    sets: list[str] = SET_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Fine-tune a model on tool-integrated trajectories; loss only on the model's own tokens
    (prompt and tool output are masked). Needs `pip install 'agentmath[train]'`. The model
    directory and its chat template are checked first: exit 1 naming what is wrong."""
    from agentmath.backends.preflight import check_model_dir
    from agentmath.train.sft_config import SFTConfig

    given = {"data": None if data is None else str(data), "model": model}
    config = build_config(SFTConfig, "sft", config_file, sets, {**settings, **given},
                          section="sft")
    if config.data is None or config.model is None:
        name, flag = ("data", "--data FILE") if config.data is None else ("model", "--model DIR")
        usage_error(f"no SFT {name}: give {flag}, or {name} = ... in the --config file")
    checked(check_model_dir, config.model, needs_tools=_sends_tools(Path(config.data)))
    with training_errors("sft", ["torch", "transformers"] + (["peft"] if config.lora else [])):
        from agentmath.train.sft import train_sft

        result = train_sft(config, config.data, config.model, out, progress=not json_out,
                           resume=resume)
    if json_out:
        print_json(result.to_dict())
        return
    from rich.table import Table

    table = Table(title=f"sft · {config.model}")
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
