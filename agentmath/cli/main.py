"""The ``agentmath`` command: a typer app with one module per command group.

Importing this module is cheap (typer and rich only): the sandbox and torch are imported inside
the commands that need them. The commands whose options are generated from a settings model
(agentmath/cli/_options.py) are built only when named, so that ``agentmath grade`` or
``agentmath --version`` import none of those models.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
import typer.main

from agentmath import __version__
from agentmath.cli import datasets as datasets_cmd
from agentmath.cli import example as example_cmd
from agentmath.cli import grade as grade_cmd
from agentmath.cli import grow as grow_cmd
from agentmath.cli import report as report_cmd
from agentmath.cli._common import Command, Group, usage_error

#: Commands built when named: name -> (module in agentmath.cli, function or typer app).
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "sandbox": ("sandbox", "app"), "demo": ("demo", "demo"), "solve": ("solve", "solve"),
    "eval": ("eval", "eval_command"),
    "sft": ("sft", "sft"), "rl": ("rl", "rl"), "decontam": ("decontam", "decontam"),
    "dedup": ("decontam", "dedup"), "synth": ("synth", "synth"), "serve": ("serve", "serve"),
}
#: The order ``agentmath --help`` lists the commands in.
ORDER = ("sandbox", "demo", "example", "datasets", "grade", "solve", "report", "serve", "eval",
         "sft", "grow", "rl", "decontam", "dedup", "synth")
APP_SETTINGS: dict[str, Any] = {"rich_markup_mode": "markdown", "add_completion": False,
                                "pretty_exceptions_show_locals": False}


def build_lazy(name: str) -> Any:
    """The click command of the lazy command ``name``: its module imported, its options made."""
    module, attr = LAZY_COMMANDS[name]
    found = getattr(importlib.import_module(f"agentmath.cli.{module}"), attr)
    if isinstance(found, typer.Typer):  # a command group
        return typer.main.get_command(found)
    single = typer.Typer(**APP_SETTINGS)
    single.command(name, cls=Command)(found)
    return typer.main.get_command(single)


class LazyGroup(Group):
    """The root command group: the commands of :data:`LAZY_COMMANDS` are built (and their
    settings models imported) the first time they are asked for."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = {*super().list_commands(ctx), *LAZY_COMMANDS}
        return sorted(names, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            self.add_command(build_lazy(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)


app = typer.Typer(name="agentmath", cls=LazyGroup, no_args_is_help=True, **APP_SETTINGS)
app.command("example", cls=Command)(example_cmd.example)
app.command("datasets", cls=Command)(datasets_cmd.datasets)
grade_cmd.register(app)
app.command("report", cls=Command)(report_cmd.report)
app.command("grow", cls=Command)(grow_cmd.grow)


def _print_version(value: bool) -> None:
    """Eager ``--version`` callback: print the version and exit before any command runs."""
    if value:
        typer.echo(f"agentmath {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_print_version, is_eager=True, metavar="",
        help="Print the version and exit."),
) -> None:
    """Build, train and evaluate tool-integrated math reasoning agents.

    Rich output for people, `--json` for programs. Start with `agentmath demo`; see
    `agentmath sandbox --help` for the sandbox.
    """
    from agentmath._loop import choice
    from agentmath.errors import ConfigError

    try:
        choice()  # a bad AGENTMATH_EVENT_LOOP is a message before any work, not a traceback
    except ConfigError as exc:
        usage_error(str(exc))


if __name__ == "__main__":  # pragma: no cover - `python -m agentmath.cli.main`
    app()
