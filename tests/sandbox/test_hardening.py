"""Adversarial payloads for the weaknesses closed by the hardening pass (issue 8).

Each class has its own payloads: System V / POSIX IPC, work that outlives a snippet, workers
that outlive the zygote or the host, metadata outside the read allow-list, uids shared across
pools, forged or oversized replies, and output that is not valid Unicode. Every payload test
asserts that the payload was contained *and* that the host and the other sessions are unharmed:
the host's IPC objects and files are as they were, the zygote is alive, no stray process runs
in the pool's uids, a neighbouring session still holds its state, and a fresh session works.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentmath.config import SandboxConfig
from agentmath.sandbox import ExecResult, Sandbox
from agentmath.sandbox.uids import BLOCK, lease_uids
from tests.fixtures.sandbox_payloads import ESC, forge_frame

SECRET = f"ipc-secret-{uuid.uuid4().hex}"
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmat.restype = ctypes.c_void_p
IPC_CREAT, IPC_RMID = 0o1000, 0


# ----------------------------------------------------------------------------- host fixtures


#: The host's System V IPC objects are compared before and after payloads, and the module's
#: ``host`` fixture creates one: under pytest-xdist the module's tests share one worker, or the
#: fixture of a second worker (starting its share of the module) changes what the first sees.
pytestmark = pytest.mark.xdist_group("sandbox-host-ipc")


def sysvipc() -> dict[str, list[str]]:
    """The host's System V IPC objects, as /proc/sysvipc lists them."""
    out = {}
    for kind in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{kind}") as fh:
            out[kind] = sorted(fh.read().splitlines()[1:])
    return out


def cpu_ticks(pid: int) -> int:
    """User + system CPU time of a process, in clock ticks."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@dataclass
class HostState:
    tmp: Path
    secret_file: Path
    secret_link: Path
    shmid: int


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostState]:
    """A world-readable shared-memory segment holding a secret (as another user's program
    might leave one), a secret file, and a symlink whose *target* is a secret."""
    tmp = tmp_path_factory.mktemp("hardening")
    secret_file = tmp / "secret.txt"
    secret_file.write_text(SECRET)
    link = tmp / "link"
    link.symlink_to(f"/nonexistent/{SECRET}")
    shmid = _libc.shmget(0, 4096, IPC_CREAT | 0o644)
    assert shmid >= 0, ctypes.get_errno()
    addr = _libc.shmat(shmid, None, 0)
    ctypes.memmove(addr, SECRET.encode(), len(SECRET))
    _libc.shmdt(ctypes.c_void_p(addr))
    yield HostState(tmp, secret_file, link, shmid)
    _libc.shmctl(shmid, IPC_RMID, None)


@pytest.fixture(scope="module")
def neighbor(sandbox: Sandbox) -> Iterator[object]:
    """Another session of the same pool, holding state the payloads must not disturb."""
    session = sandbox.session()
    assert session.run(f"neighbor_state = {SECRET!r}[::-1]").ok
    yield session
    session.close()


def render(code: str, host: HostState) -> str:
    subs = {"@ESC@": ESC, "@SHMID@": str(host.shmid), "@SECRET_PATH@": repr(str(host.secret_file)),
            "@SECRET_LINK@": repr(str(host.secret_link)), "@TMPDIR@": repr(str(host.tmp))}
    for key, value in subs.items():
        code = code.replace(key, value)
    return code


def assert_unharmed(sandbox: Sandbox, neighbor: object, host: HostState, probe: type,
                    ipc_before: dict[str, list[str]], used_pids: list[int | None]) -> None:
    """The host, the pool and the neighbouring session are as they were."""
    assert sysvipc() == ipc_before, "the host's System V IPC objects changed"
    assert host.secret_file.read_text() == SECRET
    zygote = sandbox.pool._zygote.proc
    assert zygote is not None and zygote.poll() is None, "the zygote died"
    for pid in used_pids:
        assert pid is None or probe.wait_until(lambda p=pid: not probe.pid_alive(p), 5), (
            f"worker {pid} outlived its session")
    assert neighbor.run("neighbor_state").value == repr(SECRET[::-1])
    assert sandbox.run("6 * 7").value == "42"


def no_secret(result: ExecResult) -> None:
    blob = json.dumps(result.to_dict())
    assert SECRET not in blob and SECRET[::-1] not in blob, f"secret leaked: {result}"


# ----------------------------------------------------------------------------- expectations


def eperm(r: ExecResult) -> None:
    """A libc call returned -1 with errno EPERM (denied by seccomp)."""
    assert r.error is None and r.value == "(-1, 1)", r


def denied(r: ExecResult) -> None:
    """An OSError: denied (EPERM/EACCES), absent from the minimal root (ENOENT), or EROFS."""
    assert r.error_type in ("PermissionError", "FileNotFoundError", "OSError"), r
    assert not r.crashed and not r.timed_out, r


def value(expected: str) -> Callable[[ExecResult], None]:
    def check(r: ExecResult) -> None:
        assert r.error is None and r.value == expected, r

    return check


def crash(reason: str) -> Callable[[ExecResult], None]:
    def check(r: ExecResult) -> None:
        assert r.crashed and r.state_lost and r.error_type == "SandboxCrash", r
        assert reason in (r.error or ""), r

    return check


@dataclass
class Case:
    id: str
    code: str
    check: Callable[[ExecResult], None]
    marks: tuple = ()


X86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 syscall numbers")


# What a snippet may see of the host (agentmath/sandbox/rootfs.py, docs/sandbox.md): the read
# allow-list (the interpreter's own directories, agentmath's package, system libraries, three
# devices) at its real paths, and the directories on the way to it, each holding only the next
# name on that way. Wherever the checkout and its venv live (/work/x, /tmp/x/.venv, a pyenv under
# /root), nothing else of the host exists: none of the host's own entries in those directories.
def _ancestors(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts))]


def _allow_list() -> list[str]:
    import agentmath
    from agentmath.sandbox import isolation

    return isolation.python_read_paths([os.path.dirname(os.path.abspath(agentmath.__file__))])


ALLOWED = sorted({q for p in _allow_list() for q in (os.path.abspath(p), os.path.realpath(p))})
ON_THE_WAY = sorted({a for p in ALLOWED for a in _ancestors(p)})


def may_see(path: str) -> bool:
    """The path is on the way to an allow-listed path, or is one, or lies inside one."""
    return path in ON_THE_WAY or any(path == a or path.startswith(a.rstrip("/") + "/")
                                     for a in ALLOWED)


def _host_entries(directory: str, limit: int = 200) -> list[str]:
    try:
        names = sorted(os.listdir(directory))[:limit]
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names]


# The usual places, then every host entry of each directory on the way (/, /tmp when the
# checkout is there, /etc, /dev, /root above a pyenv, ...): all absent but the way itself.
HOST_PATHS = list(dict.fromkeys(
    ["/proc", "/sys", "/home", "/tmp", "/var", "/run", "/boot", "/mnt", "/etc/passwd",
     "/etc/hostname", "/bin/sh", "/usr/bin", "/root/.bashrc", "/dev/tty", "/dev/mem"]
    + [e for d in ON_THE_WAY for e in _host_entries(d)]))

CASES = [
    # --- 1. System V / POSIX IPC: nothing shared with the host, nothing that outlives a session
    Case("ipc_shmget_private", "@ESC@libc.shmget(0, 1 << 20, 0o1600), ctypes.get_errno()", eperm),
    Case("ipc_shmget_world_key",
         "@ESC@libc.shmget(0x41474d, 4096, 0o1666), ctypes.get_errno()", eperm),
    Case("ipc_shmat_host_segment",
         "@ESC@libc.shmat.restype = ctypes.c_long\nlibc.shmat(@SHMID@, None, 0o10000), "
         "ctypes.get_errno()", eperm),
    Case("ipc_shmctl_stat_host_segment",
         "@ESC@buf = ctypes.create_string_buffer(256)\nlibc.shmctl(@SHMID@, 2, buf), "
         "ctypes.get_errno()", eperm),
    Case("ipc_shm_info_listing",
         "@ESC@buf = ctypes.create_string_buffer(256)\nlibc.shmctl(0, 14, buf), ctypes.get_errno()",
         eperm),
    Case("ipc_msgget_queue", "@ESC@libc.msgget(0, 0o1666), ctypes.get_errno()", eperm),
    Case("ipc_semget", "@ESC@libc.semget(0, 4, 0o1666), ctypes.get_errno()", eperm),
    Case("ipc_raw_syscall_shmget", "@ESC@libc.syscall(29, 0, 4096, 0o1666), ctypes.get_errno()",
         eperm, (X86_64,)),
    Case("ipc_raw_syscall_msgget", "@ESC@libc.syscall(68, 0, 0o1666), ctypes.get_errno()",
         eperm, (X86_64,)),
    Case("ipc_posix_mq_open",
         "@ESC@libc.mq_open(b'/agentmath-mq', 0o102, 0o666, None), ctypes.get_errno()", eperm),
    Case("ipc_proc_sysvipc_listing", "open('/proc/sysvipc/shm').read()", denied),
    Case("ipc_posix_shm_file", "open('/dev/shm/agentmath-shm', 'w').write('x')", denied),
    # --- 3. outliving the pool: the parent-death signal cannot be undone
    Case("prctl_clear_pdeathsig", "@ESC@libc.prctl(1, 0, 0, 0, 0), ctypes.get_errno()", eperm),
    Case("prctl_pdeathsig_to_harmless",
         "@ESC@libc.prctl(1, 28, 0, 0, 0), ctypes.get_errno()", eperm),
    Case("prctl_child_subreaper", "@ESC@libc.prctl(36, 1, 0, 0, 0), ctypes.get_errno()", eperm),
    Case("prctl_ptracer_any",
         "@ESC@libc.prctl(0x59616d61, ctypes.c_ulong(-1), 0, 0, 0), ctypes.get_errno()", eperm),
    Case("prctl_set_mm", "@ESC@libc.prctl(35, 8, 0, 0, 0), ctypes.get_errno()", eperm),
    Case("prctl_pdeathsig_still_kill",
         "@ESC@v = ctypes.c_int()\nlibc.prctl(2, ctypes.byref(v), 0, 0, 0)\nv.value", value("9")),
    # --- 4. metadata outside the allow-list: such paths do not exist in the minimal root
    Case("stat_etc_shadow", "@ESC@os.stat('/etc/shadow')", denied),
    Case("lstat_host_secret_file", "@ESC@os.lstat(@SECRET_PATH@)", denied),
    Case("readlink_secret_symlink", "@ESC@os.readlink(@SECRET_LINK@)", denied),
    Case("exists_root_ssh", "@ESC@os.path.exists('/root/.ssh'), os.path.lexists(@SECRET_LINK@)",
         value("(False, False)")),
    Case("access_host_tmpdir", "@ESC@os.access(@TMPDIR@, os.F_OK)", value("False")),
    Case("proc_and_sys_absent",
         "@ESC@os.path.exists('/proc/self'), os.path.exists('/sys/kernel'), "
         "os.path.exists('/dev/shm'), os.path.exists('/dev/sda')",
         value("(False, False, False, False)")),
    Case("readlink_proc_self_exe", "@ESC@os.readlink('/proc/self/exe')", denied),
    Case("statvfs_home", "@ESC@os.statvfs('/home')", denied),
    Case("listdir_root_denied", "@ESC@os.listdir('/')", denied),
    Case("usual_host_paths_absent",
         f"@ESC@[p for p in {HOST_PATHS!r} + [@TMPDIR@] if os.path.lexists(p)]",
         value(repr([p for p in HOST_PATHS if may_see(p)]))),
    Case("listdir_etc", "@ESC@os.listdir('/etc')", denied),
    Case("write_into_site_packages",
         "import numpy\n@ESC@open(os.path.join(os.path.dirname(numpy.__file__), 'evil.py'), 'w')",
         denied),
    # --- 6. forged replies with the stolen request id: a crash with its true reason
    Case("forged_deep_nesting",
         forge_frame("b'{\"id\":%d,\"value\":' % _rid + b'[' * 50000 + b']' * 50000 + b'}'"),
         crash("nested deeper")),
    Case("forged_150000_digit_integer",
         forge_frame("b'{\"id\":%d,\"error_line\":' % _rid + b'7' * 150000 + b'}'"),
         crash("integer of 150000 digits")),
    Case("forged_huge_id", forge_frame("b'{\"id\":' + b'9' * 5000 + b'}'"),
         crash("integer of 5000 digits")),
    Case("forged_nan_duration", forge_frame("b'{\"id\":%d,\"duration_ms\":NaN}' % _rid"),
         crash("non-finite")),
    Case("forged_invalid_utf8", forge_frame("b'{\"id\":%d,\"stdout\":\"\\xff\\xfe\"}' % _rid"),
         crash("undecodable")),
    Case("forged_not_an_object", forge_frame("b'[%d]' % _rid"), crash("not a JSON object")),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_payload_is_contained(case: Case, sandbox: Sandbox, neighbor: object,
                              host: HostState, probe: type) -> None:
    ipc_before = sysvipc()
    session = sandbox.session()
    try:
        first = session.run("0")
        assert first.ok
        pids = [session.session.pid]
        result = session.run(render(case.code, host))
        pids.append(session.session.pid)
        case.check(result)
        no_secret(result)
        assert session.run("40 + 2").value == "42"  # the session goes on, whatever happened
    finally:
        session.close()
    assert_unharmed(sandbox, neighbor, host, probe, ipc_before, pids)


# ----------------------------------------------------------------------------- 6. and 7.


def test_forged_replies_never_raise_into_the_event_loop(sandbox: Sandbox, neighbor: object,
                                                        host: HostState, probe: type,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """No asyncio 'Fatal error ... data_received() call failed' for any malformed frame."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    for case in CASES:
        if case.id.startswith("forged_"):
            with sandbox.session() as session:
                session.run("0")
                case.check(session.run(render(case.code, host)))
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text
    assert_unharmed(sandbox, neighbor, host, probe, sysvipc(), [])


def test_forged_reply_fields_of_wrong_types_are_dropped(sandbox: Sandbox) -> None:
    with sandbox.session() as session:
        session.run("0")
        r = session.run(forge_frame(
            "json.dumps({'id': _rid, 'stdout': 5, 'value': ['a'], 'error_line': 'x', "
            "'duration_ms': 1e308, 'truncated': 'yes'}).encode()") + "1")
        assert r.stdout == "" and r.value is None and r.error_line is None, r
        assert 0 <= r.duration_ms <= 1e9, r
        assert session.run("2 + 2").value in ("4", None)  # next frame may be the stale reply
        assert session.run("3 + 3").value == "6"


def test_exception_class_with_huge_name_is_a_normal_error(sandbox: Sandbox) -> None:
    with sandbox.session() as session:
        session.run("kept = 1")
        r = session.run("E = type('E' * 600000, (Exception,), {})\nraise E('boom')")
        assert not r.crashed and not r.state_lost, r
        assert len(r.error_type) < 300 and "characters omitted" in r.error_type, r.error_type[:80]
        assert "boom" in r.error
        assert session.run("kept").value == "1"


UNSAFE = {
    "lone_surrogates_stdout": ("print('a\\ud800b\\udfffc')", "stdout", "a\ufffdb\ufffdc\n", 2),
    "terminal_escapes_stdout": ("print('\\x1b[2J\\x1b]0;pwned\\x07ok')", "stdout",
                                "\ufffd[2J\ufffd]0;pwned\ufffdok\n", 3),
    "nul_cr_c1_stderr": ("import sys\nsys.stderr.write('x\\x00y\\rz\\x9b1m')", "stderr",
                         "x\ufffdy\ufffdz\ufffd1m", 3),
    "surrogate_in_repr": ("class R:\n    def __repr__(self):\n        return '\\udcff\\x1b'\nR()",
                          "value", "\ufffd\ufffd", 2),
    "surrogate_in_error": ("raise ValueError('bad \\udc80\\x07')", "error", None, 2),
}


@pytest.mark.parametrize("code, field, expected, replaced", list(UNSAFE.values()),
                         ids=list(UNSAFE))
def test_output_leaves_as_valid_printable_text(sandbox: Sandbox, code: str, field: str,
                                               expected: str | None, replaced: int) -> None:
    with sandbox.session() as session:
        r = session.run(code)
        text = getattr(r, field)
        if expected is not None:
            assert text == expected, r
        assert r.sanitized == replaced, r
        assert text.isprintable() or set(text) - set(text.replace("\n", "").replace("\t", "")) \
            <= {"\n", "\t"} and text.replace("\n", "").replace("\t", "").isprintable(), text
        json.dumps(r.to_dict(), ensure_ascii=False).encode("utf-8")  # raises if not valid


def test_cli_exec_survives_invalid_unicode_and_runs_later_cells() -> None:
    program = ("print('\\ud800 lone')\n# %%\nprint('\\x1b[31mred\\x00')\n# %%\n"
               "print('still running')\n")
    proc = subprocess.run([sys.executable, "-m", "agentmath.cli", "sandbox", "exec"],
                          input=program, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(cells) == 3, proc.stdout
    assert cells[0]["stdout"] == "\ufffd lone\n" and cells[0]["sanitized"] == 1
    assert cells[1]["stdout"] == "\ufffd[31mred\ufffd\n"
    assert cells[2]["stdout"] == "still running\n"


# ------------------------------------------------------------------- 2. no work between snippets

IDLE_WORK = {
    "itimer_real_handler": ("sig.signal(sig.SIGALRM, burn)\n"
                            "sig.setitimer(sig.ITIMER_REAL, 0.01, 0.01)"),
    "itimer_prof_handler": ("sig.signal(sig.SIGPROF, burn)\n"
                            "sig.setitimer(sig.ITIMER_PROF, 0.01, 0.01)"),
    "itimer_virtual_handler": ("sig.signal(sig.SIGVTALRM, burn)\n"
                               "sig.setitimer(sig.ITIMER_VIRTUAL, 0.01, 0.01)"),
    "alarm_rearming_handler": ("def again(*a):\n    burn()\n    sig.alarm(1)\n"
                               "sig.signal(sig.SIGALRM, again)\nsig.alarm(1)"),
    "posix_timer_ctypes": (
        "sig.signal(sig.SIGALRM, burn)\ntid = ctypes.c_void_p()\n"
        "assert libc.timer_create(0, None, ctypes.byref(tid)) == 0\n"
        "spec = (ctypes.c_long * 4)(0, 10**7, 0, 10**7)\n"
        "assert libc.timer_settime(tid, 0, spec, None) == 0"),
    "patched_serve_loop_spins": (
        "w = sys.modules['agentmath.sandbox.worker']\n"
        "def spin(*a, **k):\n    while True:\n        pass\nw.read_message = spin"),
}


@pytest.mark.parametrize("setup", list(IDLE_WORK.values()), ids=list(IDLE_WORK))
def test_no_work_goes_on_between_snippets(setup: str, sandbox: Sandbox, neighbor: object,
                                          host: HostState, probe: type) -> None:
    """Whatever a snippet sets up, its worker uses no CPU once the snippet has returned."""
    prefix = ESC + "sig = real_import('signal')\ndef burn(*a):\n    sum(range(3 * 10**5))\n"
    session = sandbox.session()
    try:
        r = session.run(prefix + setup + "\n'armed'")
        assert r.value == "'armed'", r
        pid = session.session.pid
        time.sleep(0.1)
        before = cpu_ticks(pid)
        time.sleep(1.0)
        used = cpu_ticks(pid) - before
        assert used <= 1, f"an idle worker used {used} ticks of CPU between snippets"
        nxt = session.run("1 + 1", timeout=2)  # the next snippet pays for its own timers
        assert nxt.value == "2" or nxt.timed_out or nxt.crashed, nxt
        assert session.run("2 + 2", timeout=2).value in ("4", None)
    finally:
        session.close()
    assert_unharmed(sandbox, neighbor, host, probe, sysvipc(), [pid])


# ------------------------------------------------------------------------ 3. outliving the pool

HOLDER = r"""
import json, sys, time
from agentmath.config import SandboxConfig
from agentmath.sandbox import Sandbox
sb = Sandbox(SandboxConfig(base_uid=int(sys.argv[1]), max_sessions=4, spare_workers=1))
esc = sys.argv[2]
pids = []
for _ in range(3):
    s = sb.session()
    r = s.run(esc + "libc.prctl(1, 0, 0, 0, 0), ctypes.get_errno()")
    assert r.value == "(-1, 1)", r
    pids.append(s.session.pid)
print(json.dumps({"uids": sb.pool.uid_range, "pids": pids,
                  "zygote": sb.pool._zygote.proc.pid}), flush=True)
time.sleep(120)
"""


def _start_holder(base_uid: int) -> tuple[subprocess.Popen[str], dict]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(base_uid), ESC],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, "the pool-holding process did not start"
    return proc, json.loads(line)


@pytest.mark.parametrize("kill", ["host", "zygote", "host_and_zygote"])
def test_no_worker_outlives_its_pool(kill: str, probe) -> None:
    proc, info = _start_holder(70000)
    try:
        assert all(probe.pid_alive(pid) for pid in info["pids"])
        if kill in ("zygote", "host_and_zygote"):
            os.kill(info["zygote"], signal.SIGKILL)  # as the OOM killer would
        if kill in ("host", "host_and_zygote"):
            proc.kill()
        assert probe.wait_until(lambda: not any(probe.pid_alive(p) for p in info["pids"]), 10)
        assert probe.wait_until(lambda: not probe.sandbox_processes(*info["uids"]), 10), (
            probe.sandbox_processes(*info["uids"]))
    finally:
        proc.kill()
        proc.wait()


async def test_killed_zygote_is_replaced_and_leaves_no_orphan(probe) -> None:
    from agentmath.sandbox import SandboxPool

    async with SandboxPool(SandboxConfig(base_uid=71000, max_sessions=2, spare_workers=1)) as p:
        s = p.session()
        await s.run(ESC + "libc.prctl(1, 0, 0, 0, 0)")
        old_pid, zygote = s.pid, p._zygote.proc.pid
        os.kill(zygote, signal.SIGKILL)
        for _ in range(500):  # poll without blocking the loop, which must see the zygote die
            if not probe.pid_alive(old_pid) and p._zygote.dead.done():
                break
            await asyncio.sleep(0.02)
        assert not probe.pid_alive(old_pid), "the worker outlived its zygote"
        r = await s.run("1 + 1")
        assert r.value == "2" and r.state_lost, r
        assert p._zygote.proc.pid != zygote and p.zygote_restarts == 1
        await s.close()
    assert probe.wait_until(lambda: not probe.sandbox_processes(*p.uid_range), 10)


# ----------------------------------------------------------------------------- 5. uids


async def test_live_pools_never_share_a_uid(probe) -> None:
    from agentmath.sandbox import SandboxPool

    cfg = SandboxConfig(base_uid=72000, max_sessions=2, spare_workers=1)
    async with SandboxPool(cfg) as a, SandboxPool(cfg) as b:
        (a0, a1), (b0, b1) = a.uid_range, b.uid_range
        assert a1 <= b0 or b1 <= a0, (a.uid_range, b.uid_range)
        async with a.session() as sa, b.session() as sb:
            ua = int((await sa.run(ESC + "os.getuid()")).value)
            ub = int((await sb.run(ESC + "os.getuid()")).value)
        assert a0 <= ua < a1 and b0 <= ub < b1
    # Once both are closed their uids are free again.
    lease = lease_uids(72000, 3)
    assert lease.start == a.uid_range[0] or lease.start == b.uid_range[0]
    lease.release()


def test_uid_lease_is_dropped_when_its_holder_is_killed(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom agentmath.sandbox.uids import lease_uids\n"
         f"l = lease_uids(73000, 10, {str(tmp_path)!r})\nprint(l.start, flush=True)\n"
         "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        held = int(holder.stdout.readline())
        other = lease_uids(73000, 10, str(tmp_path))
        assert other.start >= held + BLOCK, "a held range was leased twice"
        other.release()
        holder.kill()
        holder.wait()
        again = lease_uids(73000, 10, str(tmp_path))
        assert again.start == held
        again.release()
    finally:
        holder.kill()
        holder.wait()


def test_uid_lease_skips_a_block_where_a_process_still_runs(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("uids are only switched to by a root host")
    start = -(-74000 // BLOCK) * BLOCK
    straggler = subprocess.Popen(["sleep", "30"], user=start + 3, group=start + 3)
    try:
        time.sleep(0.1)
        lease = lease_uids(74000, 10, str(tmp_path))
        assert lease.start >= start + BLOCK, lease.start
        lease.release()
    finally:
        straggler.kill()
        straggler.wait()


def test_ipc_objects_die_with_their_session(probe) -> None:
    """With seccomp off, only the private IPC namespace stands: a segment a session creates is
    invisible to the host and to later sessions and pools, and gone with the session."""
    cfg = SandboxConfig(base_uid=75000, max_sessions=2, spare_workers=0,
                        disable_protections=("seccomp",))
    before = sysvipc()
    key = 0x414D53
    with Sandbox(cfg) as sb:
        assert sb.protections["ipc_namespace"] and not sb.protections["seccomp"]
        with sb.session() as s:
            r = s.run(ESC + f"shmid = libc.shmget({key}, 1 << 20, 0o1600)\n"
                            f"libc.shmat.restype = ctypes.c_void_p\n"
                            f"addr = libc.shmat(shmid, None, 0)\n"
                            f"ctypes.memmove(addr, {SECRET!r}.encode(), 10)\nshmid >= 0")
            assert r.value == "True", r
            assert sysvipc() == before, "a session's segment is visible on the host"
            other = sb.session()
            seen = other.run(ESC + f"libc.shmget({key}, 0, 0), ctypes.get_errno()")
            assert seen.value == "(-1, 2)", seen  # ENOENT: another session does not see it
            other.close()
    with Sandbox(cfg) as later:
        seen = later.run(ESC + f"libc.shmget({key}, 0, 0), ctypes.get_errno()")
        assert seen.value == "(-1, 2)", seen
    assert sysvipc() == before
