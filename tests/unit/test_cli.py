"""Tests of the ``agentmath`` command line: help, sandbox exec/info, demo, usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from agentmath import __version__
from agentmath.cli.main import app
from agentmath.cli.sandbox import split_cells

runner = CliRunner()
EXEC_KEYS = {"cell", "stdout", "stderr", "value", "error", "timed_out", "truncated",
             "state_lost", "duration_ms"}  # fmt: skip


def _command_paths(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the app (the root, groups and leaves), found by walking it."""
    from agentmath.cli.docs import subcommands

    paths = [prefix]
    for name, sub in sorted((subcommands(command) or {}).items()):
        paths += _command_paths(sub, (*prefix, name))
    return paths


def _exec(program: str, *args: str) -> tuple[int, list[dict[str, Any]]]:
    """Run ``sandbox exec`` on ``program``; return the exit code and the parsed JSON lines."""
    result = runner.invoke(app, ["sandbox", "exec", *args], input=program)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return result.exit_code, lines


def _flat(text: str) -> str:
    """Collapse whitespace (rich wraps long messages) so assertions match whole phrases."""
    return " ".join(text.replace("│", " ").split())


ALL_COMMANDS = _command_paths(typer.main.get_command(app))


def test_every_command_is_found() -> None:
    assert {("sandbox", "exec"), ("sandbox", "info"), ("example",), ("demo",)} <= set(ALL_COMMANDS)


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda p: " ".join(p) or "agentmath")
def test_help_works_for_every_command(path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"agentmath {__version__}"


def test_import_is_light() -> None:
    """Importing the CLI must not pull in torch, nor start or import the sandbox."""
    code = ("import sys, agentmath.cli.main; "
            "print(sorted(m for m in ('torch', 'agentmath.sandbox') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_console_module_entry_point() -> None:
    out = subprocess.run([sys.executable, "-m", "agentmath.cli", "--version"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"agentmath {__version__}"


def test_split_cells() -> None:
    program = "# %%\nx = 1\n# %%  \n\n# %%\ny = x\n#%% not a marker\n"
    assert split_cells(program) == ["x = 1", "y = x\n#%% not a marker"]


def test_exec_three_cells_keep_state() -> None:
    code, lines = _exec("x = 2**64\n# %%\nprint(x + 1)\n# %%\nx * 2\n")
    assert code == 0
    assert [line["cell"] for line in lines] == [0, 1, 2]
    assert all(EXEC_KEYS <= line.keys() for line in lines)
    assert lines[1]["stdout"] == "18446744073709551617\n"
    assert lines[2]["value"] == str(2**65)
    assert not any(line["error"] or line["state_lost"] for line in lines)


def test_exec_error_cell_is_data() -> None:
    code, lines = _exec("x = 5\n# %%\n1 / 0\n# %%\nx\n")
    assert code == 0
    assert len(lines) == 3
    assert "ZeroDivisionError" in lines[1]["error"]
    assert lines[2]["error"] is None and lines[2]["value"] == "5"


def test_exec_timeout_reports_timed_out() -> None:
    code, lines = _exec("while True:\n    pass\n# %%\n1 + 1\n", "--timeout", "0.5")
    assert code == 0
    assert lines[0]["timed_out"] is True and lines[0]["state_lost"] is True
    assert lines[0]["duration_ms"] < 5000
    assert lines[1]["value"] == "2"  # the session goes on, on a fresh worker


def test_exec_options_and_config_file(tmp_path: Path) -> None:
    config = tmp_path / "agentmath.toml"
    config.write_text("[sandbox]\ntimeout_s = 5\nmax_output_chars = 4096\n")
    code, lines = _exec("print('a' * 1000)\n", "--config", str(config),
                        "--max-output-chars", "64")
    assert code == 0
    assert lines[0]["truncated"] is True
    assert len(lines[0]["stdout"]) < 1000


@pytest.mark.parametrize(("args", "message"), [
    (["--timeout", "0"], "Invalid value for '--timeout'"),
    (["--timeout", "-1"], "out of range (must be > 0"),
    (["--memory-mb", "5"], "Invalid value for '--memory-mb'"),
    (["--set", "no_such_field=1"], "no_such_field"),
    (["--set", "timeout_s"], "not of the form key=value"),
    (["--config", "/nonexistent/agentmath.toml"], "cannot read config file"),
])  # fmt: skip
def test_exec_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["sandbox", "exec", *args], input="1 + 1\n")
    assert result.exit_code == 2
    assert message in _flat(result.output)
    assert result.stdout.strip() == "" or not result.stdout.lstrip().startswith("{")


def test_exec_bad_config_file_names_file_and_field(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("sandbox:\n  timeout_s: soon\n")
    result = runner.invoke(app, ["sandbox", "exec", "-c", str(config)], input="1\n")
    assert result.exit_code == 2
    assert str(config) in _flat(result.output) and "timeout_s" in result.output


def test_exec_unparsable_option_exits_2() -> None:
    result = runner.invoke(app, ["sandbox", "exec", "--timeout", "soon"], input="1\n")
    assert result.exit_code == 2
    assert "--timeout" in result.output


def test_exec_empty_program_is_a_usage_error() -> None:
    result = runner.invoke(app, ["sandbox", "exec"], input="  \n# %%\n")
    assert result.exit_code == 2
    assert "no program on stdin" in result.output


def test_sandbox_info_json() -> None:
    from agentmath.sandbox import PROTECTIONS

    result = runner.invoke(app, ["sandbox", "info", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data["protections"]) == set(PROTECTIONS)
    assert data["all_active"] == all(data["protections"].values())
    assert isinstance(data["notes"], list)


def test_sandbox_info_table() -> None:
    result = runner.invoke(app, ["sandbox", "info"])
    assert result.exit_code == 0, result.output
    assert "seccomp" in result.output and "protection" in result.output


def test_example_json_reports_correct_answer(tmp_path: Path) -> None:
    result = runner.invoke(app, ["example", "--json", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["correct"] is True and summary["scripted"] is True
    assert summary["computed"] == summary["expected"] == summary["boxed"]
    assert len(summary["timings_ms"]["cells"]) == 3
    saved = json.loads((tmp_path / "run" / "trajectory.json").read_text())
    assert saved["correct"] is True and len(saved["steps"]) == 3


def test_example_rich_output_is_honest(tmp_path: Path) -> None:
    result = runner.invoke(app, ["example", "--no-out"])
    assert result.exit_code == 0, result.output
    text = _flat(result.output)
    assert "no model" in text and "correct" in text and "\\boxed{" in text


def test_exec_rejects_stdin_that_is_not_utf8() -> None:
    result = runner.invoke(app, ["sandbox", "exec"], input=b"x = '\xff\xfe'\n")
    assert result.exit_code == 2
    assert "not valid UTF-8" in _flat(result.output)


def test_usage_errors_print_brackets_literally(capsys) -> None:
    import typer as _typer

    from agentmath.cli._common import usage_error

    try:
        usage_error("install it with: pip install 'agentmath[train]'")
    except _typer.Exit as exc:
        assert exc.exit_code == 2
    assert "agentmath[train]" in capsys.readouterr().err
