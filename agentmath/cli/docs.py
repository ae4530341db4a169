"""docs/cli.md, written from the CLI itself: ``python -m agentmath.cli.docs > docs/cli.md``.

Walks the click command tree that typer builds from :mod:`agentmath.cli.main` and writes, for
every command and sub-command, its usage line, its help and a table of its arguments and
options (placeholder, default, help). Plain text only (no rich markup, no terminal width), so
that the page is the same on every machine; tests/unit/test_cli_docs.py fails when the page in
the repository differs from what this writes.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

HEADER = """\
# Command-line reference

This page is generated from the CLI itself: `python -m agentmath.cli.docs > docs/cli.md`
(a test fails when it is stale). Every command takes `--help`; `agentmath --version` prints
the version.

Conventions shared by every command:

- Output is rich text for people; `--json` prints one JSON document instead (`sandbox exec`
  and `grade` always print JSON lines). Messages go to stderr.
- Usage errors (a bad option value, an unreadable or invalid config file) exit 2 with a
  message naming the option, file or field; a failure of the machinery itself exits 1.
- A command with settings takes `--config FILE` (TOML or YAML; the command's own table, e.g.
  `[rl]`, when the file has one) and `--set KEY=VALUE` (repeatable; dotted keys reach nested
  fields, `--set loop.max_tool_calls=4`, and list items by index, `--set 'rewards[1].weight=0.5'`;
  values are parsed as JSON when they are JSON). Options win over `--set`, which wins over the
  file. Options that mirror a setting are generated from its pydantic field: the same name
  (kebab-case; a trailing `_s`, seconds, left out), its description as the help, its bounds.
- The default backend of a command that runs a model is `openai` when a server URL is given
  (`--base-url`) and `hf` (the model directory, in this process) otherwise.
- Placeholders: `N` an integer, `NUMBER` a real number, `SECONDS` a duration, `FILE`, `DIR`,
  `URL`, `NAME` (one of a set of names), `NAMES` (comma-separated), `TEXT`, `KEY=VALUE`, or
  the noun of the thing itself (`MODEL`, `DATASET`, `DEVICE`, `ADDRESS`, `HOST`, `PORT`).
"""


# typer builds its commands with click's classes (its own copy of click): duck-typed here.


def _is_flag(param: Any) -> bool:
    return bool(getattr(param, "is_flag", False) or getattr(param, "count", False))


def subcommands(command: Any) -> dict[str, Any] | None:
    """A group's sub-commands by name, the lazily built ones too (None: not a group)."""
    if getattr(command, "commands", None) is None:
        return None
    import typer

    ctx = typer.Context(command)
    return {name: command.get_command(ctx, name) for name in command.list_commands(ctx)}


def _placeholder(param: Any) -> str:
    """The value placeholder of an option or argument (empty for a flag)."""
    if _is_flag(param) or param.metavar == "":
        return ""
    return str(param.metavar or param.name.upper())


def _default(param: Any) -> str:
    """The default shown in the table: the option's own, or the one its help states."""
    if param.required:
        return "required"
    default = param.default
    if _is_flag(param) and param.secondary_opts and default is not None:
        return f"`{param.opts[0] if default else param.secondary_opts[0]}`"
    if default is None or default is False or default == () or default == []:
        return ""
    if callable(default):
        return ""
    return f"`{default}`"


def _cell(text: str) -> str:
    """``text`` on one line, safe inside a Markdown table cell (a ``<tag>`` shown as text)."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def _names(param: Any) -> str:
    """How an option is written: its names, a flag's negative form, its placeholder."""
    if param.param_type_name == "argument":
        return f"`{_placeholder(param)}{'...' if param.nargs != 1 else ''}`"
    names = ", ".join([*param.opts, *param.secondary_opts])
    placeholder = _placeholder(param)
    return f"`{names}{' ' + placeholder if placeholder else ''}`"


def _help_text(param: Any) -> str:
    """The parameter's help, with a generated option's ``[default: X]`` moved out."""
    text = getattr(param, "help", None) or ""
    if "[default: " in text:
        text = text[:text.index("[default: ")].rstrip()
    return _cell(text)


def _generated_default(param: Any) -> str:
    """The default a generated option states in its help (its own default is None)."""
    text = getattr(param, "help", None) or ""
    if "[default: " not in text:
        return ""
    return "`" + text[text.index("[default: ") + 10:].rstrip("]").strip() + "`"


def _usage(path: list[str], command: Any) -> str:
    """The usage line: the command path, [OPTIONS], then the arguments (``...``: one or
    more); a group's: its path and COMMAND."""
    if subcommands(command) is not None:
        return " ".join([*path, "COMMAND [ARGS]..."])
    pieces = [*path, "[OPTIONS]"] if any(p.param_type_name == "option"
                                         for p in command.params) else list(path)
    for param in command.params:
        if param.param_type_name == "argument":
            name = _placeholder(param) + ("..." if param.nargs != 1 else "")
            pieces.append(name if param.required else f"[{name}]")
    return " ".join(pieces)


def _command(path: list[str], command: Any) -> list[str]:
    """The section of one command (and, for a group, of each of its sub-commands)."""
    lines = [f"## `{' '.join(path)}`", "", "```text", _usage(path, command), "```", ""]
    help_text = inspect.cleandoc(command.help or "")
    if help_text:
        lines += [help_text, ""]
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    if params:
        lines += ["| option | default | help |", "|---|---|---|"]
        for param in params:
            default = _default(param) or _generated_default(param)
            lines.append(f"| {_names(param)} | {default} | {_help_text(param)} |")
        lines.append("")
    subs = subcommands(command)
    for name in sorted(subs or {}):
        lines += _command([*path, name], subs[name])  # type: ignore[index]
    return lines


def _summary(path: list[str], command: Any) -> list[str]:
    """The overview table's rows: each command (a group's sub-commands) and the first
    sentence of its help."""
    subs = subcommands(command)
    if subs is not None:
        return [row for name in sorted(subs) for row in _summary([*path, name], subs[name])]
    first = inspect.cleandoc(command.help or "").split("\n\n")[0]
    sentence = _cell(first).split(". ")[0].rstrip(".") + "."
    anchor = "-".join(path).replace(" ", "-")
    return [f"| [`{' '.join(path)}`](#{anchor}) | {sentence} |"]


def render() -> str:
    """The whole page: the header, an overview, then every command in alphabetical order."""
    import typer.main

    from agentmath.cli.main import app

    root: Any = typer.main.get_command(app)
    commands = subcommands(root) or {}
    lines = [HEADER, "| command | what it does |", "|---|---|"]
    for name in sorted(commands):
        lines += _summary(["agentmath", name], commands[name])
    lines.append("")
    for name in sorted(commands):
        lines += _command(["agentmath", name], commands[name])
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":  # pragma: no cover - `python -m agentmath.cli.docs`
    sys.stdout.write(render())
