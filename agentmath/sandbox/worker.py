"""The code that runs inside a sandbox worker: a notebook-like executor and its serve loop.

A worker is one session: its globals persist across snippets like notebook cells. The
executor captures stdout/stderr in capped buffers (head and tail kept, inside the worker, so a
flood never reaches the host), shows the repr of a final expression, and turns exceptions into
a short message for the model. The import allow-list here is a usability layer only; the
security boundary is the process and its kernel protections (see isolation.py).
"""

from __future__ import annotations

import ast
import builtins
import io
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from agentmath.sandbox import isolation
from agentmath.sandbox.notebook import display, ipython_stand_ins, parse_cell, skipped_note
from agentmath.sandbox.protocol import read_message, send_message

_MAX_ERROR_CHARS = 2000
_IMPLICIT_IMPORTS = frozenset({"_strptime"})
_MAX_TYPE_CHARS = 200  # an exception class may have any name, even a 600 KB one


class CappedStream(io.TextIOBase):
    """A text stream that keeps the first and last characters written, up to a limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._head_budget = limit // 2
        self._tail_budget = limit - self._head_budget
        self._head: list[str] = []
        self._head_len = 0
        self._tail: list[str] = []
        self._tail_len = 0
        self.total = 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        n = len(s)
        self.total += n
        room = self._head_budget - self._head_len
        if room > 0:
            self._head.append(s[:room])
            self._head_len += min(room, n)
            s = s[room:]
        if s:
            s = s[-self._tail_budget :]
            self._tail.append(s)
            self._tail_len += len(s)
            if self._tail_len > 2 * self._tail_budget:  # compact now and then, not every write
                joined = "".join(self._tail)[-self._tail_budget :]
                self._tail, self._tail_len = [joined], len(joined)
        return n

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def getvalue(self) -> str:
        head = "".join(self._head)
        tail = "".join(self._tail)
        if not self.truncated:
            return head + tail
        tail = tail[-self._tail_budget :]
        omitted = self.total - len(head) - len(tail)
        return f"{head}\n... [{omitted} characters omitted] ...\n{tail}"


def _cap(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    half = limit // 2
    return f"{text[:half]} ... [{len(text) - limit} characters omitted] ... {text[-half:]}", True


def make_import_guard(allowed: Iterable[str]) -> Callable[..., Any]:
    """An ``__import__`` that admits only allow-listed top-level modules (usability layer)."""
    # Imported by C code on behalf of a snippet (datetime.strptime), so through this guard.
    allowed_set = frozenset(allowed) | _IMPLICIT_IMPORTS
    real_import = builtins.__import__
    stand_ins = ipython_stand_ins()  # IPython.display for notebook-trained code (notebook.py)

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
        if level != 0:
            raise ImportError("relative imports are not available in the sandbox")
        top = name.partition(".")[0]
        if top not in allowed_set:
            if name in stand_ins:  # IPython.display, when IPython itself is not allowed
                return stand_ins[name] if fromlist else stand_ins[top]
            raise ImportError(
                f"module {name!r} is not available in the sandbox "
                f"(allowed: {', '.join(sorted(allowed_set))})"
            )
        return real_import(name, globals, locals, fromlist, level)

    return guarded_import


class Executor:
    """Runs snippets in one persistent namespace, as notebook cells."""

    def __init__(self, allowed_modules: Iterable[str], max_output_chars: int,
                 max_value_chars: int) -> None:
        safe_builtins = dict(vars(builtins))
        safe_builtins["__import__"] = make_import_guard(allowed_modules)
        safe_builtins["display"] = display  # a notebook's builtin, in notebook-trained code
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": safe_builtins}
        self.max_output_chars = max_output_chars
        self.max_value_chars = max_value_chars
        self.cells: list[str] = []  # sources, for error messages that quote a line

    def _compile(self, code: str, filename: str) -> tuple[Any, Any, list[str]]:
        """The cell's statements and its final expression (shown, as in a notebook), compiled,
        and the notebook command lines set aside to parse it (``agentmath.sandbox.notebook``)."""
        tree, skipped = parse_cell(code, filename)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        body = compile(tree, filename, "exec") if tree.body else None
        expr = compile(last, filename, "eval") if last is not None else None
        return body, expr, skipped

    def _describe_error(self, exc: BaseException, cell: int) -> tuple[str, int | None]:
        """'Type: message (line N: source)' with N the innermost line of the current cell."""
        etype, _ = _cap(type(exc).__name__, _MAX_TYPE_CHARS)
        try:
            message = str(exc) if not isinstance(exc, SyntaxError) else (exc.msg or "")
        except Exception:  # noqa: BLE001 - a user exception whose __str__ itself fails
            message = "<exception str() failed>"
        where_cell, line = None, None
        if isinstance(exc, SyntaxError) and exc.filename and exc.filename.startswith("<cell-"):
            where_cell, line = int(exc.filename[6:-1]), exc.lineno
        for frame, lineno in traceback.walk_tb(exc.__traceback__):
            fname = frame.f_code.co_filename
            if fname.startswith("<cell-"):
                where_cell, line = int(fname[6:-1]), lineno
        text = f"{etype}: {message}" if message else etype
        if line is not None and where_cell is not None:
            lines = self.cells[where_cell - 1].splitlines() if where_cell <= len(self.cells) else []
            src = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            prefix = "" if where_cell == cell else f"cell {where_cell}, "
            text += f" ({prefix}line {line}: {src})" if src else f" ({prefix}line {line})"
        text, _ = _cap(text, _MAX_ERROR_CHARS)
        return text, (line if where_cell == cell else None)

    def run(self, code: str) -> dict[str, Any]:
        """Execute one snippet; returns the non-default fields of an ExecResult.

        Only fields that differ from ExecResult's defaults are returned, which keeps the reply
        small: the round trip of a trivial snippet is dominated by such constant costs.
        """
        self.cells.append(code)
        cell = len(self.cells)
        filename = f"<cell-{cell}>"
        out, err = CappedStream(self.max_output_chars), CappedStream(self.max_output_chars)
        result: dict[str, Any] = {}
        saved = sys.stdout, sys.stderr, sys.stdin
        # A fresh stdin per cell: input() sees end of file even after a cell closed it.
        sys.stdout, sys.stderr, sys.stdin = out, err, io.StringIO("")
        start = time.perf_counter()
        try:
            body, expr, skipped = self._compile(code, filename)
            if skipped:
                err.write(skipped_note(skipped))
            if body is not None:
                exec(body, self.namespace)  # noqa: S102 - the sandbox's purpose
            if expr is not None:
                value = eval(expr, self.namespace)  # noqa: S307
                if value is not None:
                    self.namespace["_"] = value
                    result["value"], capped = _cap(repr(value), self.max_value_chars)
                    if capped:
                        result["truncated"] = True
        except BaseException as exc:  # noqa: BLE001 - any error in user code is data
            if not _clean_exit(exc):
                result["error"], result["error_line"] = self._describe_error(exc, cell)
                result["error_type"], _ = _cap(type(exc).__name__, _MAX_TYPE_CHARS)
        finally:
            sys.stdout, sys.stderr, sys.stdin = saved
        result["duration_ms"] = (time.perf_counter() - start) * 1000.0
        if out.total:
            result["stdout"] = out.getvalue()
        if err.total:
            result["stderr"] = err.getvalue()
        if out.truncated or err.truncated:
            result["truncated"] = True
        return result


def _clean_exit(exc: BaseException) -> bool:
    """A script's normal end: ``exit()``, ``quit()`` or ``sys.exit(0)`` (SystemExit with code
    None or 0), which model code writes as its last line as in a ``python file.py`` runner. It
    ends the cell there, like its last line, and is no error; another code is one."""
    return isinstance(exc, SystemExit) and exc.code in (None, 0)


def _apply_protections(spec: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """Per-worker protections, in the only order that works (uid, limits, Landlock, seccomp)."""
    done: dict[str, Any] = {}
    isolation.die_with_parent(ctx["zygote_pid"])
    # Before the uid drop: a new IPC namespace needs CAP_SYS_ADMIN (in the worker's user ns).
    done["ipc_namespace"] = ctx.get("ipc_namespace", True) and isolation.enter_ipc_namespace()
    done["setuid"] = (isolation.drop_privileges(spec["uid"], ctx.get("keep_read", False))
                      if ctx["root"] and ctx.get("setuid", True) else False)
    isolation.die_with_parent(ctx["zygote_pid"])  # a uid change clears the death signal
    isolation.set_limits(spec["memory_mb"], spec["cpu_s"], unprivileged=os.geteuid() != 0)
    # Below the host in priority: a spinning snippet must not delay the host's timeout timer.
    # Never above the niceness it already has (a host started under `nice -n 10`): lowering
    # it needs privileges the worker no longer has (EACCES).
    os.setpriority(os.PRIO_PROCESS, 0, max(5, os.getpriority(os.PRIO_PROCESS, 0)))
    done["rlimits"] = True
    done["landlock_scope"] = ctx.get("landlock", True) and isolation.landlock_scope_self()
    program = ctx.get("seccomp")
    done["seccomp"] = bool(program) and isolation.load_seccomp(program)
    done["no_new_privs"] = True
    return done


def worker_main(chan_fd: int, spec: dict[str, Any], ctx: dict[str, Any]) -> None:
    """Entry point of a freshly forked worker: protect, then serve requests until EOF."""
    os.dup2(1, 2)  # the zygote's fd 0 and 1 are /dev/null: C-level output goes nowhere
    os.dup2(chan_fd, 3)
    os.closerange(4, 1 << 16)  # the zygote's control socket must not stay reachable
    sock = socket.socket(fileno=3)
    os.environ.clear()
    try:
        protections = _apply_protections(spec, ctx)
        executor = Executor(spec["allowed_modules"], spec["max_output_chars"],
                            spec["max_value_chars"])
    except Exception as exc:  # noqa: BLE001 - reported to the host, which raises SandboxError
        send_message(sock, {"op": "hello", "error": f"{type(exc).__name__}: {exc}"})
        raise
    send_message(sock, {"op": "hello", "pid": os.getpid(), "protections": protections})
    reader = sock.makefile("rb", buffering=1 << 16)  # one recv per request, not two
    while True:
        request = read_message(reader)
        if request is None:
            os._exit(0)
        if request.get("op") == "exec":
            reply = executor.run(str(request.get("code", "")))
        else:
            reply = {"error": f"unknown op {request.get('op')!r}"}
        reply["id"] = request.get("id")
        del request  # the request id should not linger where a snippet can find it easily
        send_message(sock, reply)
