"""``agentmath rl``: agentic GRPO on the rollout engine (agentmath/rl/trainer.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from agentmath.cli._common import (
    JSON_OPTION,
    RAY_OPTION,
    RAY_WORKERS_OPTION,
    SANDBOX_TOKEN_OPTION,
    SANDBOX_URL_OPTION,
    build_config,
    out_console,
    print_json,
    ray_section,
    stdout_for_json,
    training_errors,
    with_trained_prompt,
)

CONFIG_OPTION = typer.Option(..., "--config", "-c", metavar="FILE", help=(
    "RLConfig file (TOML/YAML; its 'rl' table if it has one). Recipes: configs/rl/."))
OUT_OPTION = typer.Option(Path("runs/rl"), "--out", "-o", metavar="DIR", help=(
    "Run directory: checkpoints, metrics.jsonl, tensorboard/, final/ (resumes from it)."))
SET_OPTION = typer.Option(None, "--set", "-s", metavar="KEY=VALUE", help=(
    "Override a config field, e.g. --set loss.clip_high=0.28 (repeatable)."))


def _render(result: Any) -> None:
    from rich.table import Table

    table = Table(title=f"agentmath rl · {result.out_dir}")
    table.add_column("")
    table.add_column("value")
    from agentmath.rl.records import StageMove

    last = result.last
    rows = [("steps", str(result.steps)), ("policy version", str(result.policy_version)),
            ("stage", str(result.stage)),
            ("last reward", f"{last.reward_mean if last else 0:.3f}"),
            ("last accuracy", f"{last.accuracy if last else 0:.3f}"),
            ("stage changes", str(sum(isinstance(e, StageMove) for e in result.events))),
            ("resumed from", "-" if result.resumed_from is None
             else f"step {result.resumed_from}"),
            ("final model", result.final_dir or "-"), ("metrics", result.metrics),
            ("wall time", f"{result.wall_time_s:.1f} s")]
    for name, value in rows:
        table.add_row(name, value)
    out_console().print(table)


def rl(
    config_file: Path = CONFIG_OPTION,
    out: Path = OUT_OPTION,
    sets: list[str] = SET_OPTION,
    steps: int = typer.Option(None, "--steps", min=1, help="RL steps (overrides the file)."),
    resume: bool = typer.Option(True, "--resume/--restart", help=(
        "Continue from the newest checkpoint in --out, or start over (deleting them).")),
    sandbox_url: list[str] = SANDBOX_URL_OPTION,
    sandbox_token_file: Path = SANDBOX_TOKEN_OPTION,
    ray: str = RAY_OPTION,
    ray_workers: int = RAY_WORKERS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Train a tool-using model with agentic GRPO: rollouts through the agent loop and the
    sandbox, weighted rewards, masked clipped loss, weight sync, checkpoints. Needs
    `pip install 'agentmath[train]'`."""
    from agentmath.rl.config import RLConfig

    config = build_config(RLConfig, "rl", config_file, sets, section="rl",
                          options={"steps": steps,
                                   "sandbox_url": list(sandbox_url) if sandbox_url else None,
                                   "sandbox_token_file": (str(sandbox_token_file)
                                                          if sandbox_token_file else None),
                                   "ray": ray_section(ray, ray_workers)})
    config = with_trained_prompt(config)
    modules = ["torch", "transformers", "accelerate"] + (["peft"] if config.optim.lora else [])
    with training_errors("rl", modules), stdout_for_json(json_out):
        from agentmath.rl.trainer import train_rl

        result = train_rl(config, out, progress=not json_out, resume=resume)
    if json_out:
        print_json(result.to_dict())
    else:
        _render(result)
