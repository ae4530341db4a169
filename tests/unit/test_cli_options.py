"""The CLI's options: the same names on every command (a table per command), placeholders in
one style, and options generated from the settings models (agentmath/cli/_options.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from agentmath.cli.docs import subcommands
from agentmath.cli.eval import eval_command
from agentmath.cli.main import app

runner = CliRunner()
ROOT: Any = typer.main.get_command(app)
COMMANDS: dict[str, Any] = subcommands(ROOT) or {}

#: command -> the options its --help must list (issue 43's goal list).
EXPECTED = {
    "demo": {"--config", "--set", "--device", "--out", "--json"},
    "eval": {"--config", "--set", "--model", "--device", "--out", "--json"},
    "solve": {"--config", "--set", "--model", "--device", "--json"},
    "sft": {"--config", "--set", "--model", "--device", "--out", "--json"},
    "rl": {"--config", "--set", "--model", "--device", "--out", "--json"},
    "synth": {"--config", "--set", "--out", "--json"},
    "decontam": {"--config", "--set", "--device", "--out", "--json"},
    "dedup": {"--config", "--set", "--device", "--out", "--json"},
    "report": {"--out", "--json", "--style"},
}
PLACEHOLDERS = {"", "N", "NUMBER", "SECONDS", "FILE", "DIR", "URL", "NAME", "NAMES", "TEXT",
                "KEY=VALUE", "MODEL", "DATASET", "DEVICE", "ADDRESS", "HOST", "PORT"}


def _names(command: Any) -> set[str]:
    return {name for p in command.params for name in (*p.opts, *p.secondary_opts)}


def _leaves(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    subs = subcommands(command)
    if subs is None:
        return [(path, command)]
    return [leaf for name, sub in sorted(subs.items()) for leaf in _leaves(sub, (*path, name))]


@pytest.mark.parametrize(("command", "options"), sorted(EXPECTED.items()))
def test_each_command_has_the_shared_options(command: str, options: set[str]) -> None:
    assert options <= _names(COMMANDS[command])
    result = runner.invoke(app, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    listed = set(re.findall(r"--[a-z][a-z0-9-]*", result.output))
    assert options <= listed, options - listed


def test_format_is_the_tool_format_wherever_it_appears() -> None:
    assert "--format" not in _names(COMMANDS["report"])
    for command in ("eval", "solve", "synth"):
        assert "--format" in _names(COMMANDS[command])


@pytest.mark.parametrize(("path", "command"), _leaves(ROOT), ids=lambda v: " ".join(v)
                         if isinstance(v, tuple) else "")
def test_placeholders_are_upper_case_nouns(path: tuple[str, ...], command: Any) -> None:
    for param in command.params:
        if param.param_type_name != "option" or param.is_flag:
            continue
        assert param.metavar in PLACEHOLDERS, (path, param.opts, param.metavar)
        assert not re.search(r"20\d\d-\d\d", param.help or ""), (path, param.opts)  # no dates


def test_one_default_for_the_backend_and_the_grading_timeout() -> None:
    from agentmath.config import SolveConfig
    from agentmath.eval.config import EvalConfig

    for model in (EvalConfig, SolveConfig):
        extra = {"dataset": "d"} if model is EvalConfig else {}
        assert model(model="m", **extra).backend == "hf"
        assert model(model="m", base_url="http://h:1", **extra).backend == "openai"
        assert model(model="m", backend="vllm", base_url="http://h:1", **extra).backend == "vllm"
    grade = next(p for p in COMMANDS["grade"].params if p.name == "timeout")
    assert grade.default == EvalConfig.model_fields["grade_timeout_s"].default


def test_a_generated_option_shows_its_fields_description() -> None:
    from agentmath.eval.config import EvalConfig

    result = runner.invoke(app, ["eval", "--help"], terminal_width=400)
    flat = " ".join(result.output.replace("│", " ").split())
    for field in ("samples", "http_timeout_s"):
        assert EvalConfig.model_fields[field].description in flat, field
    assert "--http-timeout SECONDS" in flat and "--max-tool-calls N" in flat


@pytest.mark.parametrize(("args", "option"), [
    (["eval", "--samples", "0", "-o", "x"], "--samples"),
    (["solve", "1+1", "--temperature", "9"], "--temperature"),
    (["dedup", "in.jsonl", "--ngram-threshold", "0"], "--ngram-threshold"),
    (["demo", "--copy-steps", "200000"], "--copy-steps"),
    (["rl", "--steps", "0"], "--steps"),
])
def test_a_bounded_field_rejects_a_bad_value_naming_the_option(args: list[str],
                                                               option: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert option in result.output and "out of range" in " ".join(result.output.split())


def test_options_win_over_set_which_wins_over_the_file(tmp_path: Path) -> None:
    """eval's command line parsed as the CLI parses it: the generated options given become
    the overrides, merged over --set, merged over the file."""
    from agentmath.cli._common import build_config
    from agentmath.cli._options import overrides
    from agentmath.eval.config import EvalConfig

    config = tmp_path / "eval.toml"
    config.write_text('dataset = "d.jsonl"\nmodel = "m"\nsamples = 2\nseed = 5\n'
                      "[loop]\nmax_tool_calls = 3\n")
    ctx = COMMANDS["eval"].make_context("eval", [
        "-c", str(config), "--set", "samples=3", "--set", "loop.max_tool_calls=4",
        "--samples", "7", "-o", str(tmp_path / "run")])
    generated = eval_command.generated_options
    given = overrides(generated, ctx.params)
    assert given == {"samples": 7}  # options not given override nothing
    built = build_config(EvalConfig, "eval", config, ctx.params["sets"], given)
    assert (built.samples, built.seed, built.loop.max_tool_calls) == (7, 5, 4)
    built = build_config(EvalConfig, "eval", config, [], {})
    assert (built.samples, built.loop.max_tool_calls) == (2, 3)


def test_set_reaches_a_command_that_had_none(tmp_path: Path) -> None:
    result = runner.invoke(app, ["dedup", str(tmp_path / "none.jsonl"), "--set",
                                 "ngram_n=0"])
    assert result.exit_code == 2
    assert "invalid dedup settings: ngram_n" in " ".join(result.output.split())
    config = tmp_path / "demo.toml"
    config.write_text("[demo]\nstart_attempts = 99\n")
    result = runner.invoke(app, ["demo", "-c", str(config), "--no-save-model", "-o",
                                 str(tmp_path / "demo")])
    assert result.exit_code == 2 and "start_attempts" in result.output
    assert not (tmp_path / "demo").exists()


def test_a_field_without_a_description_is_refused() -> None:
    from pydantic import BaseModel

    from agentmath.cli._options import make_option

    class Bare(BaseModel):
        x: int = 1

    with pytest.raises(ValueError, match="Bare.x has no description"):
        make_option(Bare, "x")


def test_one_base_url_is_a_string_and_several_a_list() -> None:
    from agentmath.cli._options import overrides

    generated = eval_command.generated_options
    for urls, expected in ((["http://a:1"], "http://a:1"),
                           (["http://a:1", "http://b:2"], ["http://a:1", "http://b:2"])):
        args = [x for url in urls for x in ("--base-url", url)]
        ctx = COMMANDS["eval"].make_context("eval", [*args, "-o", "run"])
        assert overrides(generated, ctx.params) == {"base_url": expected}


@pytest.mark.parametrize(("path", "command"), _leaves(ROOT), ids=lambda v: " ".join(v)
                         if isinstance(v, tuple) else "")
def test_help_shows_no_python_types(path: tuple[str, ...], command: Any) -> None:
    result = runner.invoke(app, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert not re.search(r"<(bool|str|int|float|path|list)", result.output), result.output


def test_the_demo_runs_with_the_file_set_and_options_merged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real command: the file gives seed, steps and bf16, --set overrides steps
    and seed, the option overrides seed again; the recipe gets the merged settings."""
    import agentmath.recipes.demo as recipe

    seen: list[Any] = []

    def fake_run_demo(cfg: Any, out: Path, save: Any, stage: Any) -> Any:
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(recipe, "run_demo", fake_run_demo)
    config = tmp_path / "demo.toml"
    config.write_text("[demo]\nseed = 1\nsteps = 10\nbf16 = true\n")
    result = runner.invoke(app, ["demo", "-c", str(config), "--set", "steps=20", "--set",
                                 "seed=2", "--seed", "3", "--no-save-model", "-o",
                                 str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert (seen[0].seed, seen[0].steps, seen[0].bf16) == (3, 20, True)
