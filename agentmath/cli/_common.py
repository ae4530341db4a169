"""Helpers shared by the CLI's command groups: consoles, JSON output, sandbox configuration.

Kept free of heavy imports (pydantic, the sandbox) at module level so that ``agentmath --help``
stays fast; those are imported inside the functions that need them.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from agentmath.config import SandboxConfig

C = TypeVar("C")  # a run config (EvalConfig, RLConfig): pydantic, with model, format, loop

#: Shared CLI options, declared once so every command spells and documents them the same way.
SANDBOX_CONFIG_OPTION = typer.Option(
    None, "--config", "-c", metavar="FILE",
    help="Sandbox config file (.toml/.yaml); a top-level 'sandbox' table is used if present.")
SANDBOX_SET_OPTION = typer.Option(
    None, "--set", "-s", metavar="KEY=VALUE",
    help="Override one sandbox config field, e.g. --set cpu_s=30 (repeatable).")
SET_OPTION = typer.Option(None, "--set", "-s", metavar="KEY=VALUE", help=(
    "Override one config field, e.g. --set loop.max_tool_calls=4 (repeatable); options win "
    "over --set, which wins over the config file."))
JSON_OPTION = typer.Option(False, "--json", metavar="",
                           help="Print machine-readable JSON instead of tables.")
SANDBOX_URL_OPTION = typer.Option(None, "--sandbox-url", metavar="URL", help=(
    "Sandbox service (agentmath sandbox serve) to run the code on instead of a local "
    "sandbox; repeat to spread sessions over several."))
SANDBOX_TOKEN_OPTION = typer.Option(None, "--sandbox-token-file", metavar="FILE", help=(
    "File holding the sandbox service's token (default: $AGENTMATH_SANDBOX_TOKEN)."))
RAY_OPTION = typer.Option(None, "--ray", metavar="ADDRESS", help=(
    "Run the episodes on a Ray cluster (the ray extra): 'auto' joins this machine's "
    "cluster, 'local' starts one here, or a cluster address. Same seeds, same samples."))
RAY_WORKERS_OPTION = typer.Option(None, "--ray-workers", metavar="N", help=(
    "Rollout worker actors on the cluster (default: one per node with CPUs)."))


def config_option(settings: str, section: str | None = None) -> Any:
    """The ``--config FILE`` option of a command whose settings are ``settings`` (a config
    model's name); with ``section``, a file's table of that name is read when it has one."""
    table = f"; its '{section}' table if it has one" if section else ""
    return typer.Option(None, "--config", "-c", metavar="FILE",
                        help=f"{settings} file (TOML/YAML{table}).")


class _PlainHelpFlag:
    """Help in one placeholder style: ``--help`` shown as the flag it is, and an argument by
    its name alone (typer would add its Python type: ``<bool>``, ``<str>``, ``<path>``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:  # type: ignore[attr-defined]
            if param.param_type_name == "argument":
                param.display_type_rich = lambda ctx: None

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option


class Command(_PlainHelpFlag, TyperCommand):
    """The class of every agentmath command (``app.command(name, cls=Command)``)."""


class Group(_PlainHelpFlag, TyperGroup):
    """The class of every agentmath command group (``typer.Typer(cls=Group)``)."""


def ray_section(address: str | None, workers: int | None) -> dict[str, object] | None:
    """The config's ``ray`` section from --ray / --ray-workers (None: neither given)."""
    return {"address": address, "workers": workers} if address or workers else None


def err_console() -> Console:
    """A console on stderr, for messages to people that must not mix with JSON on stdout."""
    return Console(stderr=True)


def out_console() -> Console:
    """A console on stdout, for rich output to people."""
    return Console()


@contextlib.contextmanager
def stdout_for_json(json_out: bool) -> Iterator[None]:
    """While a ``--json`` command works, whatever a library prints to stdout (Ray echoes its
    nodes' error messages there, from a thread of its own) goes to stderr instead, so that
    stdout holds the one JSON document :func:`print_json` writes after."""
    if not json_out:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


def print_json(data: Any) -> None:
    """Print one JSON document on one line of stdout and flush (streaming consumers read it).

    Non-ASCII text is written as is where stdout speaks UTF-8, and as ``\\uXXXX`` escapes
    elsewhere (an ASCII or Latin-1 terminal, ``PYTHONIOENCODING=ascii``): the same JSON either
    way, never an encoding error. NaN and infinities (a diverged loss) are written as null.
    """
    from agentmath.jsonl import finite

    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    sys.stdout.write(json.dumps(finite(data), ensure_ascii=encoding not in ("utf8", "utf_8"),
                                allow_nan=False) + "\n")
    sys.stdout.flush()


def usage_error(message: str, code: int = 2) -> NoReturn:
    """Report a usage problem on stderr as ``Error: message`` and exit with ``code``.

    The message is printed literally (escaped), so ``agentmath[train]`` keeps its brackets.
    """
    from rich.markup import escape

    err_console().print(f"[bold red]Error:[/] {escape(message)}", highlight=False,
                        soft_wrap=True)
    raise typer.Exit(code)


#: The exit status of a run that finished but recorded samples as errors (the model server
#: failed them): what it saved is kept, and ``--retry-errors`` runs them again. 1 is a
#: failed startup check or I/O error, 2 a usage error.
ERRORED_SAMPLES_EXIT = 3


def checked(check: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a startup check of agentmath/backends/preflight.py (``check_backend``,
    ``check_model_dir``, ``check_server``) before any work: what the command needs is there
    (the server answers and serves the model, the model directory and its chat template).
    Its StartupCheckError exits 1 with the message, which names the URL, path or model;
    the notes it returns (``check_backend``: a server of several that does not answer) are
    said on stderr."""
    from agentmath.errors import StartupCheckError

    try:
        notes = check(*args, **kwargs)
    except StartupCheckError as exc:
        usage_error(str(exc), code=1)
    for note in notes or ():
        err_console().print(f"[bold yellow]warning:[/] {note}", highlight=False, soft_wrap=True)
    return notes


def trained_system_prompt(model: str, fmt: str) -> str | None:
    """The system prompt the local model directory ``model`` was trained with for the format
    ``fmt`` (:mod:`agentmath.models.prompts`), said on stderr when found; None when it has
    none (the format's default then applies). A malformed file exits 2 naming it."""
    from agentmath.errors import DataError
    from agentmath.models.prompts import FILE, trained_prompt

    try:
        prompt = trained_prompt(model, fmt)
    except DataError as exc:
        usage_error(str(exc))
    if prompt is not None:
        err_console().print(f"system prompt: the one {model} was trained with for {fmt} "
                            f"({FILE}; --system-prompt to use another)", highlight=False,
                            soft_wrap=True)
    return prompt


def with_trained_prompt(config: C) -> C:
    """``config`` (a run config with ``model``, ``format`` and ``loop``) with
    ``loop.system_prompt`` set to the prompt its local model was trained with
    (:func:`trained_system_prompt`) when it names none; as it is otherwise."""
    if config.loop.system_prompt is not None:
        return config
    stored = trained_system_prompt(config.model, config.format)
    if stored is None:
        return config
    return config.model_copy(update={
        "loop": config.loop.model_copy(update={"system_prompt": stored})})


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated with the non-None values of ``extra``, nested dicts merged."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict):
            out[key] = _merge(out.get(key) or {}, value)
        elif value is not None:
            out[key] = value
    return out


@contextlib.contextmanager
def training_errors(command: str, modules: Sequence[str]) -> Iterator[None]:
    """Run a training command's body: the ``train`` extra's ``modules`` are checked first
    (before any data or model is read); a missing extra or a bad input exits 2 with its
    message, an OS failure (unreadable model, disk full) exits 1; never a traceback."""
    from agentmath._lazy import require
    from agentmath.errors import AgentMathError, MissingExtraError

    try:
        for module in modules:
            require(module, "train")
        yield
    except MissingExtraError as exc:
        what = "the training extra" if exc.extra == "train" else f"the {exc.extra} extra"
        usage_error(f"agentmath {command} needs {what}: {exc}")
    except AgentMathError as exc:
        usage_error(str(exc))
    except OSError as exc:
        usage_error(f"{type(exc).__name__}: {exc}", code=1)


def build_config(model: Any, what: str, config_file: Path | None, sets: list[str] | None,
                 options: dict[str, Any], section: str | None = None) -> Any:
    """A config of type ``model`` from a file (its ``section`` table if it has one), ``--set``
    overrides, then the command's options (None values skipped, nested dicts merged).

    Any problem exits 2 with a message naming the file and each invalid field of the ``what``
    settings (a required field given nowhere: ``dataset: Field required``).
    """
    from pydantic import ValidationError

    from agentmath.config import apply_overrides, field_problems, read_config_file
    from agentmath.errors import ConfigError

    try:
        data = read_config_file(config_file) if config_file is not None else {}
        if section is not None and isinstance(data.get(section), dict):
            data = data[section]
        prefix = f"{section}." if section is not None else ""
        data = apply_overrides(data, [s.removeprefix(prefix) for s in sets or []])
        return model.model_validate(_merge(data, options))
    except ConfigError as exc:
        usage_error(str(exc))
    except ValidationError as exc:
        source = f" (config file {config_file}, --set and options)" if config_file else ""
        usage_error(f"invalid {what} settings{source}: {field_problems(exc)}")


def _sandbox_section(path: Path) -> str | None:
    """``"sandbox"`` when the file has a top-level sandbox table, else None (whole file)."""
    from agentmath.config import read_config_file

    data = read_config_file(path)
    return "sandbox" if isinstance(data.get("sandbox"), dict) else None


def load_sandbox_config(
    config_file: Path | None,
    sets: list[str] | None,
    options: dict[str, tuple[str, Any]] | None = None,
) -> SandboxConfig:
    """Build a :class:`SandboxConfig` from a file, ``--set`` overrides and dedicated options.

    ``options`` maps a config field to ``(option name, value)``; ``None`` values are skipped.
    Dedicated options are applied last, and a bad value is reported under the option's own name
    (``--timeout``), not the field's. Any problem exits 2 with a message naming its source.
    """
    from pydantic import ValidationError

    from agentmath.config import SandboxConfig, load_config
    from agentmath.errors import ConfigError

    overrides = [s.removeprefix("sandbox.") for s in sets or []]
    try:
        section = _sandbox_section(config_file) if config_file is not None else None
        config = load_config(SandboxConfig, config_file, overrides, section=section)
    except ConfigError as exc:
        usage_error(str(exc))
    for field, (option, value) in (options or {}).items():
        if value is None:
            continue
        try:
            setattr(config, field, value)  # validate_assignment checks the field's bounds
        except ValidationError as exc:
            problems = "; ".join(err["msg"] for err in exc.errors())
            usage_error(f"invalid value for {option}: {value!r}: {problems}")
    return config


def start_sandbox(config: SandboxConfig) -> Any:
    """Start a synchronous :class:`~agentmath.sandbox.Sandbox`, exiting 1 with a clear message
    when the sandbox cannot start (e.g. ``require_isolation`` on a host without the kernel
    features); errors in user code are never raised here, only failures of the sandbox itself.
    """
    from agentmath.errors import SandboxError
    from agentmath.sandbox import Sandbox

    try:
        return Sandbox(config)
    except (SandboxError, OSError) as exc:
        usage_error(f"the sandbox could not start: {exc}", code=1)
