"""``agentmath sandbox``: run code in the sandbox and report which protections are active."""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from agentmath.cli._common import (
    JSON_OPTION,
    SANDBOX_CONFIG_OPTION,
    SANDBOX_SET_OPTION,
    Command,
    Group,
    build_config,
    err_console,
    load_sandbox_config,
    out_console,
    print_json,
    start_sandbox,
    usage_error,
)
from agentmath.cli._options import GENERATED, config_options, option_name

if TYPE_CHECKING:
    from agentmath.sandbox import Sandbox

app = typer.Typer(
    name="sandbox",
    cls=Group,
    rich_markup_mode="markdown",
    add_completion=False,
    help="Run Python in the secure, stateful sandbox; show which protections are active.",
    no_args_is_help=True,
)

CELL_MARKER = "# %%"

#: What each protection means, for `sandbox info` (keys are agentmath.sandbox.PROTECTIONS).
PROTECTION_HELP: dict[str, str] = {
    "network_namespace": "empty network namespace: no interfaces, no sockets out",
    "landlock_fs": "Landlock: read-only allow-list, no writes, no exec",
    "landlock_net": "Landlock: no TCP bind/connect",
    "landlock_scope": "Landlock: no signals/abstract sockets outside the domain",
    "seccomp": "seccomp filter on dangerous syscalls",
    "setuid": "runs as an unprivileged uid, one per live worker",
    "rlimits": "memory, CPU-time, file and process limits",
    "no_new_privs": "no privilege gain through exec (PR_SET_NO_NEW_PRIVS)",
    "minimal_root": "private read-only root: paths outside the allow-list do not exist",
    "ipc_namespace": "System V IPC private to each worker, gone with it",
    "idle_freeze": "idle workers stopped between snippets: no work outlives a snippet",
}


def split_cells(program: str) -> list[str]:
    """Split a program into cells at lines that are exactly ``# %%`` (trailing spaces allowed).

    Cells that are empty or whitespace-only are dropped, so a leading marker (as in jupytext
    files) does not produce an empty cell 0.
    """
    cells: list[list[str]] = [[]]
    for line in program.splitlines():
        if line.rstrip() == CELL_MARKER:
            cells.append([])
        else:
            cells[-1].append(line)
    return ["\n".join(lines) for lines in cells if "".join(lines).strip()]


def read_program() -> str:
    """Read the program from stdin; exit 2 unless it is valid UTF-8 text.

    Python may decode undecodable bytes as lone surrogates (surrogateescape); those cannot be
    sent to the sandbox, so they are rejected here with a clear message.
    """
    try:
        text = sys.stdin.read()
        text.encode("utf-8")
    except UnicodeError as exc:
        usage_error(f"stdin is not valid UTF-8 text ({exc.reason} at position {exc.start})")
    return text


def cell_record(index: int, result: Any) -> dict[str, Any]:
    """One output line of ``sandbox exec``: the cell index, then every field of the result."""
    data = result.to_dict()
    return {"cell": index, **data}


@app.command("exec", cls=Command)
@config_options("agentmath.config:SandboxConfig",
                ("timeout_s", "memory_mb", "max_output_chars"), shorts={"timeout_s": "-t"})
def exec_cells(
    settings: dict[str, Any] = GENERATED,
    config: Path | None = SANDBOX_CONFIG_OPTION,
    sets: list[str] | None = SANDBOX_SET_OPTION,
) -> None:
    """Run a program from stdin, cell by cell, in ONE sandbox session (state persists).

    Cells are separated by lines that are exactly `# %%`. Prints one JSON object per cell
    per line: cell, stdout, stderr, value, error, error_type, timed_out, truncated, state_lost,
    crashed, sanitized, duration_ms. Errors in the code are data (exit 0); usage errors exit 2,
    a failure of the sandbox itself exits 1. Text is always valid Unicode: characters that are
    not (lone surrogates, control characters but newline and tab) become U+FFFD, counted in
    `sanitized`.

    Example: `printf 'x = 2**64\\n# %%%%\\nx + 1\\n' | agentmath sandbox exec`
    """
    cfg = load_sandbox_config(config, sets, {
        field: (option_name((field,)), value) for field, value in settings.items()})
    if sys.stdin.isatty():
        print("reading a program from stdin; end it with Ctrl-D", file=sys.stderr)
    cells = split_cells(read_program())
    if not cells:
        usage_error("no program on stdin: pipe Python code in, cells separated by '# %%' lines")
    from agentmath.errors import SandboxError

    with start_sandbox(cfg) as sandbox, sandbox.session() as session:
        for index, code in enumerate(cells):
            try:
                result = session.run(code)
            except SandboxError as exc:  # the sandbox itself failed: cells so far are printed
                usage_error(f"the sandbox failed at cell {index}: {exc}", code=1)
            print_json(cell_record(index, result))


def _info_data(sandbox: Sandbox, start_ms: float) -> dict[str, Any]:
    """The JSON document of ``sandbox info``."""
    protections: dict[str, bool] = sandbox.protections
    return {
        "protections": protections,
        "all_active": all(protections.values()),
        "notes": sandbox.notes,
        "preload_errors": sandbox.preload_errors,
        "start_ms": round(start_ms, 1),
        "platform": {"system": platform.system(), "kernel": platform.release(),
                     "python": platform.python_version()},
    }


def _print_info(data: dict[str, Any]) -> None:
    """Render ``sandbox info`` as a rich table for people."""
    from rich.table import Table

    console = out_console()
    table = Table(title="agentmath sandbox protections", title_justify="left")
    table.add_column("protection", style="bold")
    table.add_column("active", justify="center")
    table.add_column("what it does")
    for name, active in data["protections"].items():
        mark = "[green]yes[/]" if active else "[red]NO[/]"
        table.add_row(name, mark, PROTECTION_HELP.get(name, ""))
    console.print(table)
    for note in data["notes"]:
        console.print(f"  note: {note}", highlight=False)
    for module, error in data["preload_errors"].items():
        console.print(f"  [yellow]preload failed[/] {module}: {error}", highlight=False)
    plat = data["platform"]
    console.print(f"pool started in {data['start_ms']:.0f} ms on {plat['system']} "
                  f"{plat['kernel']}, Python {plat['python']}", highlight=False)
    if data["all_active"]:
        console.print("[green]All protections are active.[/]")
    else:
        console.print("[yellow]Some protections are not active on this host; see the notes "
                      "and docs/sandbox.md.[/]")


@app.command("info", cls=Command)
def info(
    as_json: bool = JSON_OPTION,
    config: Path | None = SANDBOX_CONFIG_OPTION,
    sets: list[str] | None = SANDBOX_SET_OPTION,
) -> None:
    """Start a sandbox pool and show which kernel protections are active on this host."""
    cfg = load_sandbox_config(config, sets)
    start = time.perf_counter()
    with start_sandbox(cfg) as sandbox:
        data = _info_data(sandbox, (time.perf_counter() - start) * 1000.0)
    if as_json:
        print_json(data)
    else:
        _print_info(data)


@app.command("serve", cls=Command)
@config_options("agentmath.sandbox.service.config:ServiceConfig",
                ("host", "port", "token_file", "allow_no_auth", "access_log"),
                shorts={"port": "-p"}, metavars={"host": "HOST", "port": "PORT"})
def serve(
    settings: dict[str, Any] = GENERATED,
    config: Path | None = typer.Option(
        None, "--config", "-c", metavar="FILE",
        help="Service config file (.toml/.yaml); a top-level 'service' table is used if "
             "present, with the sandbox settings in its 'sandbox' table."),
    sets: list[str] | None = typer.Option(
        None, "--set", "-s", metavar="KEY=VALUE",
        help="Override one service config field, e.g. --set idle_timeout_s=60 or "
             "--set sandbox.timeout_s=5 (repeatable)."),
) -> None:
    """Serve the sandbox over HTTP until SIGTERM or Ctrl-C (then shut down gracefully).

    Endpoints: POST /v1/sessions, POST /v1/sessions/{id}/run (numbered cells, each run at
    most once), GET/DELETE /v1/sessions/{id}, SandboxFusion's POST /run_code, GET /metrics
    (Prometheus) and GET /health (no token). Send the token as `Authorization: Bearer TOKEN`
    or in the URL (`http://agentmath:TOKEN@host:port`, HTTP Basic).
    """
    from agentmath.errors import ConfigError
    from agentmath.sandbox.service.config import ServiceConfig

    cfg: ServiceConfig = build_config(ServiceConfig, "service", config, sets, settings,
                                      section="service")
    if cfg.token_file is not None and not cfg.token_file.is_file():
        usage_error(f"token file {cfg.token_file} does not exist (create one with a token per "
                    "line, or pass --allow-no-auth)")
    import gc

    import uvicorn

    from agentmath.sandbox.service import create_app

    try:
        service = create_app(cfg)
    except ConfigError as exc:
        usage_error(str(exc))
    if cfg.token_file is None:
        err_console().print("[yellow]warning:[/] serving WITHOUT authentication "
                            "(--allow-no-auth): anyone who can reach the port can run code")
    server = uvicorn.Server(uvicorn.Config(service, host=cfg.host, port=cfg.port,
                                           lifespan="on", log_level="info",
                                           access_log=cfg.access_log,
                                           # no client address is used (auth is by token):
                                           # no X-Forwarded-* parsing on every request
                                           proxy_headers=False))
    # Everything loaded so far (the web stack, pydantic, the app) lives as long as the
    # process: out of the collector's reach, a full collection scans only what requests
    # create. Measured: gen-2 pauses of 19-45 ms during the paced benchmark before, each a
    # stall of every request in flight (docs/benchmarks.md).
    gc.collect()
    gc.freeze()
    server.run()  # uvicorn turns SIGTERM/SIGINT into a graceful shutdown (app lifespan)
    if not server.started:
        usage_error("the sandbox service could not start (see the log above)", code=1)
