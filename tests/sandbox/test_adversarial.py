"""Adversarial payloads: each one must be contained by the kernel layer, and the host unharmed.

The import allow-list is a usability layer, so almost every payload first goes *around* it
(``ESC`` below reaches the real ``os``, ``sys``, ``ctypes`` and ``__import__`` through
``object.__subclasses__()``) and then asserts that Landlock / seccomp / rlimits / the uid drop /
the network namespace still stop it. Every test checks two things: the specific way the
sandbox contained the payload (reported as data), and that the host is unharmed (files
unchanged, no marker created, zygote alive, no stray processes, a fresh session works).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import select
import socket
import stat
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentmath.config import SandboxConfig
from agentmath.sandbox import ExecResult, Sandbox
from tests.fixtures.sandbox_payloads import ESC

# Filled from the ``probe`` fixture (conftest) by the autouse fixture below.
SECRET_ENV = SECRET_VALUE = ""
pid_alive = proc_info = sandbox_processes = wait_until = None  # type: ignore[assignment]


@pytest.fixture(autouse=True, scope="module")
def _probe_helpers(probe):
    global SECRET_ENV, SECRET_VALUE, pid_alive, proc_info, sandbox_processes, wait_until
    SECRET_ENV, SECRET_VALUE = probe.secret_env, probe.secret_value
    pid_alive, proc_info = probe.pid_alive, probe.proc_info
    sandbox_processes, wait_until = probe.sandbox_processes, probe.wait_until

TOKEN = uuid.uuid4().hex[:12]
TMP_MARKER = f"/tmp/agentmath-pwned-{TOKEN}"


# ----------------------------------------------------------------------------- host fixtures


class Listener:
    """A TCP listener on the host's loopback that counts the connections it receives."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            ready, _, _ = select.select([self.sock], [], [], 0.05)
            if ready:
                conn, _ = self.sock.accept()
                self.accepted += 1
                conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()


@dataclass
class Host:
    tmp: Path
    secret: Path
    ssh_key: Path
    victim: Path
    marker: Path
    listener: Listener
    snapshot: dict[str, tuple[bytes, int]] = field(default_factory=dict)

    def take_snapshot(self) -> dict[str, tuple[bytes, int]]:
        return {str(p): (hashlib.sha256(p.read_bytes()).digest(), stat.S_IMODE(p.stat().st_mode))
                for p in (self.secret, self.ssh_key, self.victim)}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("host")
    secret = tmp / "secret.txt"
    secret.write_text(f"TOP SECRET {SECRET_VALUE}\n")
    ssh = tmp / "home" / ".ssh"
    ssh.mkdir(parents=True)
    key = ssh / "id_rsa"
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET_VALUE}\n")
    key.chmod(0o600)
    victim = tmp / "victim.txt"
    victim.write_text("do not delete\n")
    victim.chmod(0o644)
    listener = Listener()
    h = Host(tmp, secret, key, victim, tmp / "pwned", listener)
    h.snapshot = h.take_snapshot()
    yield h
    listener.close()


def render(code: str, host: Host, sandbox: Sandbox, neighbor_pid: int | None) -> str:
    zygote = sandbox.pool._zygote.proc
    assert zygote is not None
    subs = {
        "@ESC@": ESC,
        "@SECRET_PATH@": repr(str(host.secret)),
        "@SSH_KEY@": repr(str(host.ssh_key)),
        "@VICTIM@": repr(str(host.victim)),
        "@TMPDIR@": repr(str(host.tmp)),
        "@MARKER@": repr(str(host.marker)),
        "@TMP_MARKER@": repr(TMP_MARKER),
        "@PORT@": str(host.listener.port),
        "@HOST_PID@": str(os.getpid()),
        "@ZYGOTE_PID@": str(zygote.pid),
        "@NEIGHBOR_PID@": str(neighbor_pid),
        "@SECRET_ENV@": repr(SECRET_ENV),
    }
    for key, value in subs.items():
        code = code.replace(key, value)
    return code


def assert_no_secret(result: ExecResult) -> None:
    blob = " ".join(str(v) for v in result.to_dict().values())
    assert SECRET_VALUE not in blob, f"host secret leaked into the result: {result}"


def assert_host_unharmed(sandbox: Sandbox, host: Host, worker_pids: list[int | None]) -> None:
    """The host's files, listener, zygote and process table are as they should be."""
    assert host.take_snapshot() == host.snapshot, "a host file was changed, removed or chmodded"
    assert not host.marker.exists(), "payload created a marker file in the host tmp dir"
    assert not os.path.exists(TMP_MARKER), "payload created a marker file in /tmp"
    assert host.listener.accepted == 0, "the host's loopback listener received a connection"
    assert os.environ.get(SECRET_ENV) == SECRET_VALUE
    zygote = sandbox.pool._zygote.proc
    assert zygote is not None and zygote.poll() is None, "the zygote died"
    # Every worker this test used is gone; every sandbox process left is a zygote child.
    assert wait_until(lambda: not any(pid_alive(p) for p in worker_pids)), (
        f"worker processes outlived their session: {worker_pids}")
    cfg = sandbox.pool.config
    uids = sandbox.pool.uid_range
    # Workers of the previous one-shot runs are killed asynchronously: allow them a moment.
    wait_until(lambda: len(sandbox_processes(*uids)) <= cfg.spare_workers)
    procs = sandbox_processes(*uids)
    assert all(info["ppid"] == zygote.pid for info in procs.values()), procs
    assert len(procs) <= cfg.spare_workers, f"stray sandbox processes: {procs}"
    # And the pool still serves fresh sessions.
    assert sandbox.run("6 * 7").value == "42"


# ----------------------------------------------------------------------------- expectations


def error(kind: str, contains: str | None = None) -> Callable[[ExecResult], None]:
    def check(r: ExecResult) -> None:
        assert r.error_type == kind, r
        assert not r.timed_out and not r.crashed and not r.state_lost, r
        if contains is not None:
            assert contains in (r.error or ""), r

    check.__name__ = f"error_{kind}"
    return check


def denied() -> Callable[[ExecResult], None]:
    """A file-system access refused: by Landlock or seccomp (EPERM/EACCES), by the minimal
    root where the path does not exist there (ENOENT), or read-only (EROFS)."""
    def check(r: ExecResult) -> None:
        assert r.error_type in ("PermissionError", "FileNotFoundError", "OSError"), r
        assert not r.timed_out and not r.crashed and not r.state_lost, r
        if r.error_type == "OSError":
            assert "Read-only file system" in (r.error or ""), r

    check.__name__ = "denied"
    return check


def value(expected: str) -> Callable[[ExecResult], None]:
    def check(r: ExecResult) -> None:
        assert r.error is None, r
        assert r.value == expected, r

    return check


def timeout() -> Callable[[ExecResult], None]:
    def check(r: ExecResult) -> None:
        assert r.timed_out and r.state_lost, r
        assert r.error_type == "TimeoutError" and not r.crashed, r

    return check


def crash(reason: str) -> Callable[[ExecResult], None]:
    def check(r: ExecResult) -> None:
        assert r.crashed and r.state_lost and not r.timed_out, r
        assert r.error_type == "SandboxCrash", r
        assert reason in (r.error or ""), r

    return check


def nonzero_int_value(r: ExecResult) -> None:
    assert r.error is None and r.value is not None, r
    assert int(r.value) != 0, r


def dev_mem_error(r: ExecResult) -> None:
    denied()(r)


def truncated_flood(r: ExecResult) -> None:
    assert r.ok and r.truncated, r
    assert r.stdout.startswith("0\n1\n2\n"), r.stdout[:50]
    assert r.stdout.rstrip().endswith("99999"), r.stdout[-50:]
    assert "characters omitted" in r.stdout
    assert len(r.stdout) < 8192 + 200


def truncated_stderr(r: ExecResult) -> None:
    assert r.ok and r.truncated and r.stdout == "", r
    assert r.stderr.startswith("HEAD") and r.stderr.endswith("TAIL"), r.stderr[:20]
    assert len(r.stderr) < 8192 + 200


def raw_fd_output(r: ExecResult) -> None:
    # fd 1 and 2 of a worker are /dev/null: raw writes vanish, nothing reaches the host.
    assert r.ok and r.stdout == "" and r.stderr == "" and not r.truncated, r
    assert r.value == "(10000000, 10000000)"


def escape_is_unprivileged(r: ExecResult) -> None:
    assert r.error is None, r
    uid, euid, gid, groups = eval(r.value)  # noqa: S307 - a tuple of ints from our own payload
    assert uid >= 61000 and euid == uid and gid == uid and groups == [], r


# ----------------------------------------------------------------------------- payloads


@dataclass
class Case:
    id: str
    code: str
    check: Callable[[ExecResult], None]
    timeout: float | None = None
    post: Callable[[Sandbox], None] | None = None
    marks: tuple = ()


def next_session_sees_clean_builtins(sandbox: Sandbox) -> None:
    with sandbox.session() as s:
        r = s.run("import math\nprint('still printing')\nmath.sqrt(16)")
        assert r.ok and r.stdout == "still printing\n" and r.value == "4.0", r
        assert s.run("__import__('os')").error_type == "ImportError"


def next_session_sees_real_math(sandbox: Sandbox) -> None:
    with sandbox.session() as s:
        r = s.run("import math\nmath.pi, math.sqrt(9)")
        assert r.value == "(3.141592653589793, 3.0)", r


def next_session_has_no_globals(sandbox: Sandbox) -> None:
    with sandbox.session() as s:
        r = s.run("LEAKED")
        assert r.error_type == "NameError", r


CASES: list[Case] = [
    # --- the usability layer itself (the rest of the file goes around it)
    Case("import_os_blocked", "import os", error("ImportError", "not available")),
    Case("dunder_import_os_blocked", "__import__('os')", error("ImportError")),
    Case("import_subprocess_blocked", "import subprocess", error("ImportError")),
    Case("escape_reaches_os_but_uid_unprivileged",
         "@ESC@os.getuid(), os.geteuid(), os.getgid(), os.getgroups()", escape_is_unprivileged),
    # --- reading secrets
    Case("env_secret_os_environ", "@ESC@os.environ.get(@SECRET_ENV@), len(os.environ)",
         value("(None, 0)")),
    Case("env_secret_libc_getenv",
         "@ESC@libc.getenv.restype = ctypes.c_char_p\nlibc.getenv(@SECRET_ENV@.encode()) is None",
         value("True")),
    Case("proc_self_environ", "@ESC@open('/proc/self/environ', 'rb').read()",
         denied()),
    Case("proc_1_environ", "@ESC@open('/proc/1/environ', 'rb').read()", denied()),
    Case("proc_host_environ", "@ESC@open('/proc/@HOST_PID@/environ', 'rb').read()",
         denied()),
    Case("proc_host_mem", "@ESC@f = open('/proc/@HOST_PID@/mem', 'rb')", denied()),
    Case("proc_zygote_mem", "@ESC@f = open('/proc/@ZYGOTE_PID@/mem', 'rb')",
         denied()),
    Case("proc_other_worker_mem", "@ESC@f = open('/proc/@NEIGHBOR_PID@/mem', 'rb')",
         denied()),
    Case("proc_listdir", "@ESC@os.listdir('/proc')", denied()),
    Case("etc_shadow", "open('/etc/shadow').read()", denied()),
    Case("etc_passwd", "open('/etc/passwd').read()", denied()),
    Case("host_secret_file", "open(@SECRET_PATH@).read()", denied()),
    Case("host_ssh_key", "open(@SSH_KEY@).read()", denied()),
    Case("host_tmpdir_listdir", "@ESC@os.listdir(@TMPDIR@)", denied()),
    # --- writing / deleting files
    Case("write_tmp", "open(@TMP_MARKER@, 'w').write('x')", denied()),
    Case("write_host_tmpdir", "open(@MARKER@, 'w').write('x')", denied()),
    Case("append_secret_file", "open(@SECRET_PATH@, 'a').write('x')", denied()),
    Case("os_open_creat", "@ESC@os.open(@MARKER@, os.O_WRONLY | os.O_CREAT, 0o644)",
         denied()),
    Case("libc_open_creat",
         "@ESC@libc.open(@TMP_MARKER@.encode(), 0o101, 0o644), ctypes.get_errno()",
         value("(-1, 1)")),
    Case("os_remove_host_file", "@ESC@os.remove(@VICTIM@)", denied()),
    Case("os_mkdir", "@ESC@os.mkdir(@MARKER@)", denied()),
    Case("os_rename", "@ESC@os.rename(@VICTIM@, @MARKER@)", denied()),
    Case("os_chmod", "@ESC@os.chmod(@VICTIM@, 0o777)", denied()),
    Case("os_symlink", "@ESC@os.symlink('/etc/passwd', @MARKER@)", denied()),
    Case("importlib_os_remove",
         "@ESC@sys.modules['importlib'].import_module('os').remove(@SECRET_PATH@)",
         denied()),
    Case("write_proc_self", "@ESC@os.open('/proc/self/comm', os.O_WRONLY)",
         denied()),
    # --- network
    Case("socket_socket", "@ESC@socket.socket(socket.AF_INET, socket.SOCK_STREAM)",
         error("PermissionError")),
    Case("connect_host_listener", "@ESC@socket.create_connection((b'127.0.0.1', @PORT@), 1)",
         error("PermissionError")),
    Case("libc_socket", "@ESC@libc.socket(2, 1, 0), ctypes.get_errno()", value("(-1, 1)")),
    Case("dns_getaddrinfo", "@ESC@socket.getaddrinfo(b'example.com', 443)", error("gaierror")),
    # --- processes and programs
    Case("os_system", "@ESC@os.system('touch ' + @TMP_MARKER@)", nonzero_int_value),
    Case("subprocess_run", "@ESC@real_import('subprocess').run(['touch', @TMP_MARKER@])",
         error("PermissionError")),
    Case("os_execv", "@ESC@os.execv('/bin/sh', ['sh', '-c', 'touch ' + @TMP_MARKER@])",
         error("PermissionError")),
    Case("os_fork", "@ESC@os.fork()", error("PermissionError")),
    Case("os_posix_spawn",
         "@ESC@os.posix_spawn('/bin/sh', ['sh', '-c', 'touch ' + @TMP_MARKER@], {})",
         error("PermissionError")),
    Case("os_forkpty", "@ESC@os.forkpty()", error("PermissionError")),
    Case("fork_bomb", "@ESC@while True:\n    os.fork()", error("PermissionError")),
    Case("ctypes_fork_bomb", "@ESC@sorted({libc.fork() for _ in range(200)})", value("[-1]")),
    Case("ctypes_system",
         "@ESC@libc.system(('touch ' + @TMP_MARKER@).encode())", nonzero_int_value),
    Case("ctypes_syscall_kill_host",
         "@ESC@libc.syscall(62, @HOST_PID@, 9), ctypes.get_errno()", value("(-1, 1)")),
    Case("ctypes_ptrace_attach_zygote",
         "@ESC@libc.ptrace(16, @ZYGOTE_PID@, 0, 0), ctypes.get_errno()", value("(-1, 1)")),
    Case("x32_abi_fork_syscall", "@ESC@libc.syscall(0x40000000 | 57)",
         crash("SIGSYS")),
    Case("i386_int80_syscall",
         "@ESC@libc.mmap.restype = ctypes.c_void_p\n"
         "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,"
         " ctypes.c_int, ctypes.c_long]\n"
         "code = bytes([0xb8, 2, 0, 0, 0, 0xcd, 0x80, 0xc3])  # mov eax, 2 (fork); int 0x80; ret\n"
         "addr = libc.mmap(None, 4096, 7, 0x22, -1, 0)\n"
         "ctypes.memmove(addr, code, len(code))\n"
         "ctypes.CFUNCTYPE(ctypes.c_int)(addr)()", crash("SIGSYS")),
    Case("cffi_system_if_importable",
         "@ESC@ffi = real_import('cffi').FFI()\nffi.cdef('int system(const char *);')\n"
         "ffi.dlopen(None).system(('touch ' + @TMP_MARKER@).encode())",
         # cffi comes with some extras (ray's dependencies): then system() runs and fails
         # (no fork, no shell), as through ctypes; the marker file is checked either way.
         nonzero_int_value if importlib.util.find_spec("cffi") else error("ModuleNotFoundError")),
    # --- privileges, namespaces, devices
    Case("setuid_0", "@ESC@os.setuid(0)", error("PermissionError")),
    Case("unshare_user_ns", "@ESC@libc.unshare(0x10000000), ctypes.get_errno()",
         value("(-1, 1)")),
    Case("mount_tmpfs", "@ESC@libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno()",
         value("(-1, 1)")),
    Case("chroot", "@ESC@os.chroot('/')", error("PermissionError")),
    Case("dev_mem", "open('/dev/mem', 'rb')", dev_mem_error),
    # --- builtins tampering and cross-session leaks
    Case("builtins_tampering",
         "__builtins__['__import__'] = lambda *a, **k: None\n__builtins__['print'] = None\n"
         "@ESC@bi = sys.modules['builtins']\nbi.print = None\n"
         "bi.__import__ = lambda *a, **k: None\n"
         "'tampered'", value("'tampered'"), post=next_session_sees_clean_builtins),
    Case("monkeypatch_math_pi", "import math\nmath.pi = 3\nmath.sqrt = lambda x: 0\nmath.pi",
         value("3"), post=next_session_sees_real_math),
    Case("global_leak", "LEAKED = 'from session A'\nLEAKED", value("'from session A'"),
         post=next_session_has_no_globals),
    # --- resources
    Case("bytearray_1e10", "bytearray(10**10)", error("MemoryError")),
    Case("list_1e10", "[0] * 10**10", error("MemoryError")),
    Case("str_1e11", "' ' * 10**11", error("MemoryError")),
    Case("numpy_zeros_1e11", "import numpy\nnumpy.zeros(10**11)", error("MemoryError")),
    Case("gradual_memory_bomb", "chunks = []\nwhile True:\n    chunks.append(bytes(10**8))",
         error("MemoryError")),
    Case("stdout_flood", "for i in range(100000):\n    print(i)", truncated_flood),
    Case("stderr_flood", "import warnings\n@ESC@sys.stderr.write('HEAD' + 'x' * 10**7 + 'TAIL')",
         truncated_stderr),
    Case("raw_fd_flood", "@ESC@os.write(1, b'x' * 10**7), os.write(2, b'y' * 10**7)",
         raw_fd_output),
    Case("infinite_loop", "while True:\n    pass", timeout(), timeout=1),
    Case("sleep_forever", "import time\ntime.sleep(10**6)", timeout(), timeout=0.5),
    Case("c_level_bigint", "10 ** (3 * 10**7)", timeout(), timeout=1),
    Case("threading_thread",
         "@ESC@real_import('threading').Thread(target=lambda: None, daemon=True).start()",
         error("RuntimeError", "can't start new thread")),
    Case("_thread_start_new_thread",
         "@ESC@real_import('_thread').start_new_thread(lambda: None, ())",
         error("RuntimeError", "can't start new thread")),
    Case("ignore_signals_then_loop",
         "@ESC@sig = real_import('signal')\n"
         "for s in (sig.SIGTERM, sig.SIGALRM, sig.SIGINT, sig.SIGXCPU, sig.SIGHUP):\n"
         "    sig.signal(s, sig.SIG_IGN)\nwhile True:\n    pass", timeout(), timeout=1),
    Case("block_all_signals_then_loop",
         "@ESC@sig = real_import('signal')\nsig.pthread_sigmask(sig.SIG_BLOCK, set(sig.Signals))\n"
         "while True:\n    pass", timeout(), timeout=1),
    Case("kill_parent_zygote", "@ESC@os.kill(os.getppid(), 9)", error("PermissionError")),
    Case("kill_pid_1", "@ESC@os.kill(1, 9)", error("PermissionError")),
    Case("kill_host_pid", "@ESC@os.kill(@HOST_PID@, 9)", error("PermissionError")),
    Case("kill_everything", "@ESC@os.kill(-1, 9)", error("PermissionError")),
    Case("killpg_own_group", "@ESC@os.killpg(0, 9)", error("PermissionError")),
    Case("recursion_error", "def f(n):\n    return f(n + 1)\nf(0)", error("RecursionError")),
    # unbounded recursion through a C wrapper: the worker's 512 MB stack overflows (0.7 s)
    Case("c_stack_overflow_with_high_recursionlimit",
         "@ESC@sys.setrecursionlimit(10**8)\nimport functools\n@functools.lru_cache(None)\n"
         "def f(n):\n    return f(n + 1)\nf(0)", crash("segmentation fault")),
    Case("os_exit_0", "@ESC@os._exit(0)", crash("exited with code 0")),
    Case("close_channel_then_spin", "@ESC@os.close(3)\nwhile True:\n    pass",
         crash("the session was restarted")),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_payload_is_contained(case: Case, sandbox: Sandbox, host: Host) -> None:
    neighbor = None
    if "@NEIGHBOR_PID@" in case.code:
        neighbor = sandbox.session()
        assert neighbor.run(f"neighbor_secret = {SECRET_VALUE!r}").ok
    session = sandbox.session()
    pids: list[int | None] = []
    try:
        sandbox._call(session.session.start())
        pids.append(session.session.pid)
        if neighbor is not None:
            pids.append(neighbor.session.pid)
        code = render(case.code, host, sandbox, neighbor.session.pid if neighbor else None)
        result = session.run(code, timeout=case.timeout)
        pids.append(session.session.pid)
        case.check(result)
        assert_no_secret(result)
        if result.state_lost:
            assert session.session.pid != pids[0], "a lost session must be on a fresh worker"
            assert session.run("os").error_type == "NameError"  # state really gone
        # The same session keeps working after the payload, whatever it did.
        assert session.run("41 + 1").value == "42"
        if case.post is not None:
            case.post(sandbox)
    finally:
        session.close()
        if neighbor is not None:
            neighbor.close()
    assert_host_unharmed(sandbox, host, pids)


# ----------------------------------------------------------------------------- CPU-time limit


@pytest.fixture(scope="module")
def cpu_sandbox():
    sb = Sandbox(SandboxConfig(cpu_s=1, timeout_s=30, spare_workers=1, base_uid=64000))
    yield sb
    sb.close()


@pytest.mark.parametrize("code, reason", [
    pytest.param("while True:\n    pass", "CPU-time limit", id="busy_loop_sigxcpu"),
    pytest.param(ESC + "sig = real_import('signal')\nsig.signal(sig.SIGXCPU, sig.SIG_IGN)\n"
                 "while True:\n    pass", "SIGKILL", id="sigxcpu_ignored_then_sigkill"),
])
def test_cpu_time_limit_kills_long_timeout_snippet(cpu_sandbox: Sandbox, code: str,
                                                   reason: str) -> None:
    with cpu_sandbox.session() as s:
        start = time.monotonic()
        r = s.run(code)
        assert time.monotonic() - start < 10, "the CPU limit, not the 30 s timeout, must stop it"
        assert r.crashed and r.state_lost and not r.timed_out, r
        assert reason in (r.error or ""), r
        assert s.run("x = 1\nx + 1").value == "2"
    assert cpu_sandbox.run("1 + 1").value == "2"


# ----------------------------------------------------------------------------- the worker channel


def _forge(body: str) -> str:
    """Snippet code that writes one well-formed reply frame with ``body`` onto fd 3."""
    return (ESC + f"_b = json.dumps({body}).encode()\n"
            "os.write(3, struct.pack('>I', len(_b)) + _b)\n")


CHANNEL_GARBAGE = {
    "non_frame_bytes": ESC + "os.write(3, b'garbage garbage garbage')\n1",
    "oversize_header": ESC + "os.write(3, struct.pack('>I', 2**31))\n1",
    "non_object_json": ESC + "os.write(3, struct.pack('>I', 9) + b'[1, 2, 3]')\n1",
}


@pytest.mark.parametrize("code", list(CHANNEL_GARBAGE.values()), ids=list(CHANNEL_GARBAGE))
def test_channel_garbage_host_survives(sandbox: Sandbox, host: Host, code: str) -> None:
    """Garbage on the worker's own channel (fd 3): the host and the pool survive."""
    session = sandbox.session()
    sandbox._call(session.session.start())
    pids = [session.session.pid]
    try:
        try:
            session.run(code)
        except Exception:  # noqa: BLE001 - whether it raises is test_channel_garbage_is_data
            pass
        r = session.run("2 + 2")  # the session recovers on a fresh worker at the latest here
        pids.append(session.session.pid)
        assert r.value == "4" or r.crashed, r
        assert session.run("3 + 3").value == "6"
    finally:
        session.close()
    assert_host_unharmed(sandbox, host, pids)


@pytest.mark.parametrize("code", list(CHANNEL_GARBAGE.values()), ids=list(CHANNEL_GARBAGE))
def test_channel_garbage_is_reported_as_crash(sandbox: Sandbox, code: str) -> None:
    with sandbox.session() as session:
        r = session.run(code)
        assert r.crashed and r.state_lost and r.error_type == "SandboxCrash", r
        assert "broke the protocol" in r.error
        assert session.run("2 + 2").value == "4"


def test_forged_reply_does_not_desync_session(sandbox: Sandbox) -> None:
    """A reply without the request's id is a protocol violation: the worker is stopped."""
    with sandbox.session() as session:
        session.run("kept = 1")
        r = session.run(_forge("{'value': 'FORGED'}") + "'real'")
        assert r.value != "FORGED" and r.crashed and r.state_lost, r
        assert session.run("1 + 1").value == "2"


# The request id is in the worker's memory, so a determined snippet can find it by walking the
# interpreter's frames. Then the forged reply is accepted (the snippet controls its own
# result, as it could by printing), but the real reply that follows is unsolicited, so the
# worker is stopped at once and the next snippet learns that its state was lost.
_FORGE_WITH_ID = ESC + (
    "_f = sys._getframe()\n"
    "while 'request' not in _f.f_locals:\n    _f = _f.f_back\n"
    "_b = json.dumps({'value': 'FORGED', 'id': _f.f_locals['request']['id']}).encode()\n"
    "os.write(3, struct.pack('>I', len(_b)) + _b)\n")


def _stopped_or_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("T", "Z", "X") or not pid_alive(pid)


def test_forged_reply_with_stolen_id_is_caught_by_the_next_frame(sandbox: Sandbox) -> None:
    """The real reply that follows the forged one is unsolicited: the worker is stopped at once
    if it got it out before being frozen, else its next request reads it and fails. Either way
    the forger runs nothing more in between, and its state is lost."""
    with sandbox.session() as session:
        session.run("kept = 1")
        first = session.run(_FORGE_WITH_ID + "'real'")
        pid = session.session.pid
        assert wait_until(lambda: _stopped_or_gone(pid)), "violating worker kept running"
        after = session.run("kept")
        assert after.state_lost, (first, after)
        assert after.error_type in ("NameError", "SandboxCrash"), after
        assert wait_until(lambda: not pid_alive(pid)), "violating worker was not killed"
        assert session.run("2 + 2").value == "4"


def test_forged_reply_cannot_keep_burning_cpu(sandbox: Sandbox) -> None:
    """Forging then spinning: without the id the worker is stopped at once, not at cpu_s."""
    with sandbox.session() as session:
        session.run("0")
        pid = session.session.pid
        r = session.run(_forge("{'value': 'done'}") + "while True:\n    pass", timeout=1)
        assert r.crashed and not r.ok, r
        assert wait_until(lambda: not pid_alive(pid)), "the spinning worker was not stopped"
        assert session.run("1").value == "1"


def test_channel_flood_does_not_grow_host_memory(sandbox: Sandbox) -> None:
    def rss_mb() -> int:
        with open("/proc/self/status") as fh:
            return int(fh.read().split("VmRSS:")[1].split()[0]) // 1024

    session = sandbox.session()
    try:
        before = rss_mb()
        r = session.run(ESC + "_b = json.dumps({'x': 'a' * 2**20}).encode()\n"
                              "_f = struct.pack('>I', len(_b)) + _b\nwhile True:\n"
                              "    os.write(3, _f)", timeout=1)
        time.sleep(1.0)
        grown = rss_mb() - before
    finally:
        session.close()
    assert r.crashed, r
    assert grown < 100, f"host RSS grew by {grown} MiB from one session's channel flood"


def test_forged_reply_output_is_capped_by_host(sandbox: Sandbox) -> None:
    """Even a reply the host accepts (stolen id) is re-capped to the configured limits."""
    with sandbox.session() as session:
        code = _FORGE_WITH_ID.replace("{'value': 'FORGED',", "{'stdout': 'x' * 10**5,")
        r = session.run(code + "1")
        limit = sandbox.pool.config.max_output_chars
        assert len(r.stdout) <= limit + 200, len(r.stdout)
        assert r.truncated


# ----------------------------------------------------------------------------- pool-level


def test_protections_all_active_as_root(sandbox: Sandbox) -> None:
    if os.geteuid() != 0:
        pytest.skip("setuid needs a root host")
    assert sandbox.protections == dict.fromkeys(sandbox.protections, True)
    assert len(sandbox.protections) == 11


def test_each_session_has_its_own_uid_and_process(sandbox: Sandbox) -> None:
    a, b = sandbox.session(), sandbox.session()
    try:
        ra = a.run(ESC + "os.getuid(), os.getpid()")
        rb = b.run(ESC + "os.getuid(), os.getpid()")
        (ua, pa), (ub, pb) = eval(ra.value), eval(rb.value)  # noqa: S307
        assert ua != ub and pa != pb
        zygote = sandbox.pool._zygote.proc
        assert proc_info(pa)["ppid"] == zygote.pid and proc_info(pa)["uid"] == ua
    finally:
        a.close()
        b.close()
    assert wait_until(lambda: not pid_alive(pa) and not pid_alive(pb))
