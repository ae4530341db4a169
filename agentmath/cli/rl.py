"""``agentmath rl``: agentic GRPO on the rollout engine (agentmath/rl/trainer.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from agentmath.cli._common import (
    JSON_OPTION,
    RAY_OPTION,
    RAY_WORKERS_OPTION,
    SET_OPTION,
    build_config,
    checked,
    config_option,
    out_console,
    print_json,
    ray_section,
    stdout_for_json,
    training_errors,
    with_trained_prompt,
)
from agentmath.cli._options import GENERATED, config_options

OUT_OPTION = typer.Option(Path("runs/rl"), "--out", "-o", metavar="DIR", help=(
    "Run directory: checkpoints, metrics.jsonl, tensorboard/, final/ (resumes from it)."))
RL_FIELDS = ("model", "device", "format", "steps", "seed", "sandbox_url", "sandbox_token_file")


def _startup_checks(config: Any) -> None:
    """The policy's model directory and chat template, and each generator server (it answers
    and serves the policy's name) before any work; exit 1 naming what is wrong."""
    from agentmath.backends.preflight import check_model_dir, check_server

    checked(check_model_dir, config.model)
    if config.generator.backend == "openai":
        for url in config.generator.base_urls:
            checked(check_server, url, config.served_model_name())


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


CONFIG_OPTION = config_option("RLConfig", "rl")


@config_options("agentmath.rl.config:RLConfig", RL_FIELDS)
def rl(
    config_file: Path = CONFIG_OPTION,
    out: Path = OUT_OPTION,
    sets: list[str] = SET_OPTION,
    settings: dict[str, Any] = GENERATED,
    resume: bool = typer.Option(True, "--resume/--restart", metavar="", help=(
        "Continue from the newest checkpoint in --out, or start over (deleting them).")),
    ray: str = RAY_OPTION,
    ray_workers: int = RAY_WORKERS_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Train a tool-using model with agentic GRPO: rollouts through the agent loop and the
    sandbox, weighted rewards, masked clipped loss, weight sync, checkpoints. Needs
    `pip install 'agentmath[train]'`. Recipes: configs/rl/. The model directory and the
    generator servers are checked first: exit 1 naming what is wrong."""
    from agentmath.rl.config import RLConfig

    config = build_config(RLConfig, "rl", config_file, sets, section="rl",
                          options={**settings, "ray": ray_section(ray, ray_workers)})
    config = with_trained_prompt(config)
    modules = ["torch", "transformers", "accelerate"] + (["peft"] if config.optim.lora else [])
    _startup_checks(config)
    with training_errors("rl", modules), stdout_for_json(json_out):
        from agentmath.rl.trainer import train_rl

        result = train_rl(config, out, progress=not json_out, resume=resume)
    if json_out:
        print_json(result.to_dict())
    else:
        _render(result)
