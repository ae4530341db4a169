"""The zygote: a warm process that forks sandbox workers on request.

It is started once per pool with a minimal environment, imports numpy, sympy and friends,
compiles the seccomp filter, enters an empty network namespace and a read-only Landlock domain,
freezes its heap for copy-on-write sharing, then serves a SOCK_SEQPACKET control socket:

* ``spawn`` (with a socket fd attached): fork a worker on that socket; reply its pid.
* ``kill``: SIGKILL a worker that has not been reaped yet (no pid-reuse race: only this loop
  reaps, so a pid it still lists is the worker).
* on SIGCHLD it reaps and sends ``exit`` events with the status.

When the host goes away (end of stream on the control socket) it kills every worker and exits,
so no process outlives the pool.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import sys
import warnings
from collections.abc import Callable
from typing import Any

from agentmath.sandbox import isolation, rootfs
from agentmath.sandbox.worker import worker_main

_MAX_CONTROL = 1 << 16
_LIBC = ctypes.CDLL(None, use_errno=True)


class _Sigaction(ctypes.Structure):
    """glibc's struct sigaction (same layout on x86_64 and aarch64)."""

    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ubyte * 128),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


SA_NOCLDSTOP = 1


def no_sigchld_on_stop() -> bool:
    """Add SA_NOCLDSTOP to the installed SIGCHLD handler (Python's API cannot set flags).

    The host stops and continues each idle worker around every snippet; without this flag each
    of those would wake the zygote for a SIGCHLD that carries no exit to reap.
    """
    if not sys.platform.startswith("linux") or os.uname().machine not in ("x86_64", "aarch64"):
        return False
    action = _Sigaction()
    if _LIBC.sigaction(signal.SIGCHLD, None, ctypes.byref(action)) != 0:
        return False
    action.flags |= SA_NOCLDSTOP
    return _LIBC.sigaction(signal.SIGCHLD, ctypes.byref(action), None) == 0


def _send(ctrl: socket.socket, message: dict[str, Any]) -> None:
    ctrl.sendall(json.dumps(message).encode())


def _prepare(setup: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Preload modules and apply the zygote-wide protections. Returns (ctx, report)."""
    preload_errors = {}
    skip = set(setup.get("disable", ()))

    def unless_disabled(name: str, off: Any, apply: Callable[[], tuple[Any, str]]) -> tuple:
        """``apply()``, or (``off``, a note) when config switched protection ``name`` off."""
        return (off, f"{name} disabled by config") if name in skip else apply()

    # Namespaces first: a user namespace can only be entered while the process has one thread,
    # and a preloaded library might start one.
    netns, netns_note = unless_disabled("network_namespace", False,
                                        isolation.enter_network_namespace)
    # Codecs are imported lazily by str.encode/decode; load them all while files are readable.
    # Other allowed modules are not preloaded: they import lazily in a worker (the minimal
    # root keeps them readable), so a rarely used heavy one (pandas) costs no memory here.
    import encodings
    import pkgutil

    codecs = [f"encodings.{m.name}" for m in pkgutil.iter_modules(encodings.__path__)]
    for name in [*setup.get("preload", []), *codecs]:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a missing optional module is reported
            if not name.startswith("encodings."):  # platform-specific codecs may be absent
                preload_errors[name] = f"{type(exc).__name__}: {exc}"
    for name in setup.get("allowed", []):  # allowed but absent: say so now, not at import
        try:
            missing = importlib.util.find_spec(name) is None
        except (ImportError, ValueError):
            missing = True
        if missing:
            preload_errors[name] = "ModuleNotFoundError: not installed"
    # Math code prints big integers (3000! has 9,131 digits), and Python refuses to convert one
    # of more than 4,300 digits to text, a guard against a request that makes a server spend
    # quadratic time: here the cell's timeout already bounds that time, and output is capped.
    sys.set_int_max_str_digits(0)
    # plt.show() on Agg only says it cannot show; a model reading that would be misled.
    warnings.filterwarnings("ignore", message=".*non-interactive.*cannot be shown")
    devnull = os.open("/dev/null", os.O_RDWR)  # opened before Landlock forbids it
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
    program, seccomp_note = unless_disabled("seccomp", None, isolation.build_seccomp_bpf)
    pkg_dir = os.path.dirname(os.path.dirname(os.path.abspath(isolation.__file__)))
    read_paths = isolation.python_read_paths([pkg_dir])
    root_ok, root_note = unless_disabled("minimal_root", False,
                                         lambda: rootfs.enter_minimal_root(read_paths))
    abi, landlock_note = unless_disabled("landlock", 0,
                                         lambda: isolation.landlock_readonly(read_paths))
    # Python under a private directory (pyenv in a 0700 /root) needs a capability to be read
    # by another uid; the minimal root's own directories are open, so it rarely does there.
    keep_read = (os.geteuid() == 0 and abi > 0 and program is not None
                 and not isolation.readable_by_others(isolation.python_own_paths([pkg_dir])))
    if keep_read:
        landlock_note += ("; Python lives under a private directory, so workers keep "
                          "CAP_DAC_READ_SEARCH (reads stay confined by Landlock)")
    # Workers fork from this thread alone, but say so if a preloaded library started another.
    thread_note = f"the zygote has {threads} threads after preload (workers have one)" \
        if threads > 1 else ""
    gc.collect()
    gc.freeze()  # the heap stays shared with workers instead of being touched by their gc
    root = os.geteuid() == 0 and "user" not in netns_note
    ctx = {"zygote_pid": os.getpid(), "root": root, "seccomp": program, "keep_read": keep_read,
           "ipc_namespace": "ipc_namespace" not in skip, "setuid": "setuid" not in skip,
           "landlock": abi > 0}
    report = {
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "preload_errors": preload_errors,
        "zygote_protections": {
            "network_namespace": netns,
            "landlock_fs": abi > 0,
            "landlock_net": abi >= 4,
            "landlock_abi": abi,
            "seccomp_available": program is not None,
            "minimal_root": root_ok,
            "root": root,
        },
        "notes": [netns_note, root_note, landlock_note, seccomp_note, thread_note],
    }
    return ctx, report


def _fork_worker(chan_fd: int, spec: dict[str, Any], ctx: dict[str, Any]) -> int:
    pid = os.fork()
    if pid == 0:  # the child never returns into the zygote loop
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            worker_main(chan_fd, spec, ctx)
            code = 0
        except BaseException:  # noqa: BLE001 - whatever happens, the child must not return
            code = 2
        finally:
            os._exit(code)
    os.close(chan_fd)
    return pid


def _send_spawned(ctrl: socket.socket, request_id: Any, pid: int) -> None:
    """Answer a spawn with the worker's pid and, where the kernel has them, a pidfd for it.

    The pidfd lets the host stop, continue and kill that very process without a pid-reuse
    race (it is opened here, while the worker is an unreaped child and its pid cannot be
    reused); the host freezes idle workers with it.
    """
    message = json.dumps({"op": "spawned", "id": request_id, "pid": pid}).encode()
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        ctrl.sendall(message)
        return
    try:
        socket.send_fds(ctrl, [message], [pidfd])
    finally:
        os.close(pidfd)


def _exit_event(pid: int, status: int) -> dict[str, Any]:
    if os.WIFSIGNALED(status):
        return {"op": "exit", "pid": pid, "signal": os.WTERMSIG(status), "code": None}
    return {"op": "exit", "pid": pid, "signal": None, "code": os.WEXITSTATUS(status)}


def _reap(ctrl: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(ctrl, _exit_event(pid, status))


def _handle(ctrl: socket.socket, ctx: dict[str, Any], children: set[int]) -> bool:
    """Handle one control message; False when the host asked to stop or went away."""
    data, fds, _flags, _addr = socket.recv_fds(ctrl, _MAX_CONTROL, 1)
    if not data:
        return False
    request = json.loads(data)
    op = request.get("op")
    if op == "spawn":
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            _send(ctrl, {"op": "error", "id": request.get("id"), "error": "spawn without fd"})
            return True
        pid = _fork_worker(fds[0], request["spec"], ctx)
        children.add(pid)
        _send_spawned(ctrl, request.get("id"), pid)
    elif op == "kill":
        pid = int(request["pid"])
        if pid in children:
            os.kill(pid, signal.SIGKILL)
    elif op == "shutdown":
        return False
    return True


def serve(ctrl: socket.socket, ctx: dict[str, Any]) -> None:
    """Serve control requests until the host closes the socket; then kill all workers."""
    children: set[int] = set()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    no_sigchld_on_stop()  # the host freezes idle workers: no wake-up for each stop
    try:
        while True:
            ready, _, _ = select.select([ctrl, wake_r], [], [])
            if wake_r in ready:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
                _reap(ctrl, children)
            if ctrl in ready and not _handle(ctrl, ctx, children):
                break
    except (BrokenPipeError, ConnectionResetError):
        pass  # the host is gone: fall through to cleanup
    finally:
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in list(children):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def main() -> None:
    """``python -m agentmath.sandbox.zygote FD``: FD is the control socket from the host."""
    ctrl = socket.socket(fileno=int(sys.argv[1]))
    setup = json.loads(ctrl.recv(_MAX_CONTROL))
    ctx, report = _prepare(setup)
    _send(ctrl, {"op": "ready", **report})
    serve(ctrl, ctx)


if __name__ == "__main__":
    main()
