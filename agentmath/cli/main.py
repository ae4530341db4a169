"""The ``agentmath`` command: a typer app with one module per command group.

Importing this module is cheap (typer and rich only): the sandbox and torch are imported inside
the commands that need them, and a settings model when the command whose options it generates
is built (agentmath/cli/_options.py).
"""

from __future__ import annotations

import typer

from agentmath import __version__
from agentmath.cli import datasets as datasets_cmd
from agentmath.cli import decontam as decontam_cmd
from agentmath.cli import demo as demo_cmd
from agentmath.cli import eval as eval_cmd
from agentmath.cli import example as example_cmd
from agentmath.cli import grade as grade_cmd
from agentmath.cli import grow as grow_cmd
from agentmath.cli import report as report_cmd
from agentmath.cli import rl as rl_cmd
from agentmath.cli import sandbox as sandbox_cmd
from agentmath.cli import sft as sft_cmd
from agentmath.cli import solve as solve_cmd
from agentmath.cli import synth as synth_cmd
from agentmath.cli._common import Command, Group, usage_error

app = typer.Typer(
    name="agentmath",
    cls=Group,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
app.add_typer(sandbox_cmd.app, name="sandbox")
app.command("demo", cls=Command)(demo_cmd.demo)
app.command("example", cls=Command)(example_cmd.example)
app.command("datasets", cls=Command)(datasets_cmd.datasets)
grade_cmd.register(app)
app.command("solve", cls=Command)(solve_cmd.solve)
app.command("report", cls=Command)(report_cmd.report)
app.command("eval", cls=Command)(eval_cmd.eval_command)
app.command("sft", cls=Command)(sft_cmd.sft)
app.command("grow", cls=Command)(grow_cmd.grow)
app.command("rl", cls=Command)(rl_cmd.rl)
app.command("decontam", cls=Command)(decontam_cmd.decontam)
app.command("dedup", cls=Command)(decontam_cmd.dedup)
app.command("synth", cls=Command)(synth_cmd.synth)


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
