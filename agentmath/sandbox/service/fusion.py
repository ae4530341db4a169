"""SandboxFusion's ``POST /run_code``, served by this sandbox.

The request and response shapes are those of the ``sandbox-fusion`` client's pydantic models
(``sandbox_fusion/models.py``: RunCodeRequest, RunCodeResponse, CommandRunResult), so verl's
sandbox tool and the ``sandbox_fusion.run_code`` client work against this service unchanged.
Only Python runs here; each request gets a fresh session (a fresh worker process), as each
SandboxFusion run is a fresh process.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentmath.sandbox.result import ExecResult

PYTHON_LANGUAGES = frozenset({"python", "python3"})
#: SandboxFusion's return code for a run it could finish (Python exits 1 on an exception).
_EXCEPTION_RETURN_CODE = 1


class RunCodeRequest(BaseModel):
    """SandboxFusion's RunCodeRequest; unknown fields are ignored (newer clients)."""

    model_config = ConfigDict(extra="ignore")

    code: str = Field(..., description="The program to run.")
    language: str = Field(..., description="Only python (or python3) is supported here.")
    compile_timeout: float = Field(10, ge=0, description="Ignored: Python is not compiled.")
    run_timeout: float = Field(10, gt=0, le=3600, description="Wall-clock limit of the run.")
    stdin: str | None = Field(None, description="Text the program reads from sys.stdin.")
    files: dict[str, str | None] = Field(default_factory=dict, description=(
        "Not supported: the sandbox has no writable filesystem (must be empty)."))
    fetch_files: list[str] = Field(default_factory=list, description=(
        "Not supported: the sandbox writes no files (must be empty)."))


def with_stdin(code: str, stdin: str | None) -> str:
    """``code`` reading ``stdin`` from ``sys.stdin``: one line is put in front of it (the worker
    gives every cell an empty stdin), and :func:`response_from_result` takes it off again."""
    if not stdin:
        return code
    return f"import sys as _s, io as _io; _s.stdin = _io.StringIO({stdin!r}); del _s, _io\n{code}"


def _unshift(result: ExecResult) -> ExecResult:
    """Line numbers of ``result`` as in the program without the stdin line."""
    if result.error_line is not None and result.error_line > 1:
        line = result.error_line
        result.error_line = line - 1
        if result.error is not None:
            result.error = result.error.replace(f"(line {line}: ", f"(line {line - 1}: ")
    return result


def unsupported_field(request: RunCodeRequest) -> tuple[str, str] | None:
    """(field, message) when the request asks for something this sandbox cannot do."""
    if request.language not in PYTHON_LANGUAGES:
        return "language", (f"language {request.language!r} is not supported by this "
                            "sandbox; only 'python' (alias 'python3') runs here")
    if request.files:
        return "files", "files are not supported: the sandbox has no writable filesystem"
    if request.fetch_files:
        return "fetch_files", "fetch_files is not supported: the sandbox writes no files"
    return None


def _traceback_text(result: ExecResult) -> str:
    """What Python would print on stderr for the exception (the sandbox keeps it short)."""
    where = f'  File "<main>", line {result.error_line}, in <module>\n' \
        if result.error_line is not None else ""
    return f"Traceback (most recent call last):\n{where}{result.error}\n"


def response_from_result(result: ExecResult, shifted: bool = False) -> dict[str, Any]:
    """The RunCodeResponse for one run, with script semantics.

    Output is as a script would print it (a final expression is not echoed); an exception is a
    finished run with return code 1 and the traceback in stderr; a time-out is
    TimeLimitExceeded; a crashed worker is a finished run with a non-zero return code. Any of
    these makes the overall status Failed, as in SandboxFusion. ``shifted``: the code ran
    with the stdin line of :func:`with_stdin` in front.
    """
    if shifted:
        result = _unshift(result)
    run: dict[str, Any] = {"status": "Finished", "execution_time": result.duration_ms / 1000.0,
                           "cpu_time": None, "return_code": 0, "stdout": result.stdout,
                           "stderr": result.stderr}
    if result.timed_out:
        run.update(status="TimeLimitExceeded", return_code=None)
    elif result.error is not None:
        run.update(return_code=_EXCEPTION_RETURN_CODE,
                   stderr=result.stderr + _traceback_text(result))
    ok = run["status"] == "Finished" and run["return_code"] == 0
    return {"status": "Success" if ok else "Failed", "message": "" if ok else
            (result.error or "").split("\n", 1)[0], "compile_result": None, "run_result": run,
            "executor_pod_name": None, "files": {}}
