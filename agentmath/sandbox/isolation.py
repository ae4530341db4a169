"""Kernel protections for sandbox processes: namespaces, Landlock, seccomp, rlimits, uids.

Each mechanism is applied where it is cheapest. The zygote (one per pool) enters a fresh
network namespace and a read-only Landlock domain once, so every worker it forks inherits them
for free. Each worker then, right after fork, drops to its own unprivileged uid, sets rlimits
and no_new_privs, adds a Landlock layer that scopes signals and abstract sockets to itself, and
loads a seccomp filter compiled once in the zygote. Every step reports whether it took effect,
so the pool can say which protections are active instead of failing silently.

Nothing here is imported by the host except :func:`describe` helpers; it runs in the zygote
and the workers.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import sys
from collections.abc import Iterable

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

# Landlock (include/uapi/linux/landlock.h); the syscall numbers are the same on every arch.
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
# All filesystem rights known per ABI version (index = ABI): everything not granted is denied.
_FS_ALL_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1,
                  5: (1 << 16) - 1}  # fmt: skip
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

# Syscalls a snippet never needs. Denied with EPERM so Python raises a clean PermissionError
# (or "can't start new thread") instead of dying; names unknown on this arch are skipped.
DENIED_SYSCALLS: tuple[str, ...] = (
    # new processes, threads and programs
    "execve", "execveat", "fork", "vfork", "clone", "clone3",
    # the network (the namespace already has no interfaces; this is a second layer)
    "socket", "socketpair", "connect", "bind", "listen",
    # touching other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kill", "tkill", "tgkill",
    "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
    "kcmp",
    # file system changes (Landlock denies them too; this also covers kernels without it)
    "creat", "unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat",
    "rmdir", "symlink", "symlinkat", "link", "linkat", "chmod", "fchmod", "fchmodat",
    "fchmodat2", "chown", "fchown", "lchown", "fchownat", "truncate", "ftruncate", "mknod",
    "mknodat", "utime", "utimes", "utimensat", "futimesat", "memfd_create", "openat2",
    # privileges, namespaces and the kernel itself
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
    "setfsuid", "setfsgid", "capset", "unshare", "setns", "mount", "umount2", "pivot_root",
    "chroot", "keyctl", "add_key", "request_key", "init_module", "finit_module",
    "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "acct", "quotactl", "syslog", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "sethostname", "setdomainname", "open_by_handle_at", "name_to_handle_at",
    "iopl", "ioperm", "vhangup", "personality", "fanotify_init", "move_mount", "open_tree",
    "fsopen", "fsmount", "fspick",
    # System V and POSIX IPC: objects that could outlive the session or reach other processes
    # (each worker also has a private IPC namespace; this is a second layer)
    "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget",
    "semop", "semtimedop", "semctl", "ipc", "mq_open", "mq_unlink", "mq_timedsend",
    "mq_timedreceive", "mq_notify", "mq_getsetattr",
)  # fmt: skip

# prctl options a snippet could use to outlive the pool or open itself to others: undoing the
# parent-death signal (then a killed zygote would leave the worker running as an orphan),
# becoming a subreaper, naming a ptracer, rewriting its memory map's metadata.
PR_SET_MM, PR_SET_CHILD_SUBREAPER, PR_SET_PTRACER = 35, 36, 0x59616D61
DENIED_PRCTL_OPTIONS = (PR_SET_PDEATHSIG, PR_SET_MM, PR_SET_CHILD_SUBREAPER, PR_SET_PTRACER)

_O_WRONLY, _O_RDWR, _O_CREAT, _O_TRUNC, _O_APPEND = 0o1, 0o2, 0o100, 0o1000, 0o2000


def _prctl(option: int, arg2: int = 0) -> bool:
    return _libc.prctl(option, ctypes.c_ulong(arg2), 0, 0, 0) == 0


def _errno_text() -> str:
    err = ctypes.get_errno()
    return f"{errno.errorcode.get(err, err)}: {os.strerror(err)}"


# ----------------------------------------------------------------------------- namespaces


def enter_network_namespace() -> tuple[bool, str]:
    """Move the calling process into a new, empty network namespace (only a loopback, down).

    As root this is a plain ``unshare(CLONE_NEWNET)``; otherwise it first creates a user
    namespace mapping the caller's uid, which unprivileged users may do on most kernels.
    """
    if _libc.unshare(CLONE_NEWNET) == 0:
        return True, "network namespace"
    if os.geteuid() == 0:
        return False, f"unshare(CLONE_NEWNET) failed: {_errno_text()}"
    uid, gid = os.geteuid(), os.getegid()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return False, f"unshare(CLONE_NEWUSER|CLONE_NEWNET) failed: {_errno_text()}"
    try:
        with open("/proc/self/setgroups", "w") as fh:
            fh.write("deny")
        with open("/proc/self/uid_map", "w") as fh:
            fh.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as fh:
            fh.write(f"{gid} {gid} 1")
    except OSError as exc:
        return False, f"user namespace id maps: {exc}"
    return True, "user+network namespace"


def enter_ipc_namespace() -> bool:
    """Give the calling worker its own System V IPC namespace (gone when the worker exits).

    Shared-memory segments, message queues and semaphores created in it are invisible to every
    other process and are destroyed with the namespace's last process, so nothing a session
    makes can outlive it or reach another session. Needs CAP_SYS_ADMIN in the worker's user
    namespace: call it before dropping privileges.
    """
    return _libc.unshare(CLONE_NEWIPC) == 0


# ----------------------------------------------------------------------------- Landlock


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The Landlock ABI version of the running kernel, or 0 when Landlock is unavailable."""
    version = _syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    return max(int(version), 0)


def _attr_size(abi: int) -> int:
    return 8 if abi < 4 else 16 if abi < 6 else 24


def _restrict(attr: _RulesetAttr, abi: int, rules: Iterable[tuple[str, int]] = ()) -> None:
    fd = _syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), _attr_size(abi), 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {_errno_text()}")
    try:
        for path, allowed in rules:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path that does not exist needs no rule
            try:
                if not os.path.isdir(path):
                    allowed &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE
                rule = _PathBeneath(allowed & attr.fs, pfd)
                if _syscall(SYS_LANDLOCK_ADD_RULE, fd, LANDLOCK_RULE_PATH_BENEATH,
                            ctypes.byref(rule), 0) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}): {_errno_text()}")
            finally:
                os.close(pfd)
        if not _prctl(PR_SET_NO_NEW_PRIVS, 1):
            raise OSError(ctypes.get_errno(), f"PR_SET_NO_NEW_PRIVS: {_errno_text()}")
        if _syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {_errno_text()}")
    finally:
        os.close(fd)


# What a snippet reads besides Python's own directories: shared objects, time zones, devices.
_SYSTEM_READ_PATHS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo",
                      "/etc/ld.so.cache", "/dev/null", "/dev/urandom", "/dev/zero")


def python_own_paths(extra: Iterable[str] = ()) -> list[str]:
    """The interpreter's own directories (prefixes, standard library, site-packages, ``extra``).

    These are what a worker reads when it imports a module lazily, so they are the paths whose
    permissions decide whether an unprivileged uid can import (unlike ``/usr/lib`` or the
    device nodes, which are always world-readable).
    """
    import sysconfig

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"),
             sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), *extra}
    paths.update(p for p in sys.path if p and os.path.isabs(p)
                 and p.endswith(("site-packages", "dist-packages")))
    return sorted(p for p in paths if p and os.path.exists(p))


def python_read_paths(extra: Iterable[str] = ()) -> list[str]:
    """Everything a snippet must read: Python's own directories and the system paths above."""
    system = (p for p in _SYSTEM_READ_PATHS if os.path.exists(p))
    return sorted(set(python_own_paths(extra)).union(system))


def landlock_readonly(read_paths: Iterable[str]) -> tuple[int, str]:
    """Deny every write, every execute and TCP, and reads outside ``read_paths``.

    Returns (abi, description); abi 0 means Landlock could not be applied.
    """
    abi = landlock_abi()
    if abi == 0:
        return 0, "Landlock not available in this kernel"
    fs_all = _FS_ALL_BY_ABI.get(abi, _FS_ALL_BY_ABI[5])
    net = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0
    attr = _RulesetAttr(fs_all, net, 0)
    rules = [(p, FS_READ_FILE | FS_READ_DIR) for p in read_paths]
    try:
        _restrict(attr, abi, rules)
    except OSError as exc:
        return 0, f"Landlock failed: {exc}"
    return abi, f"Landlock ABI {abi}: read-only allow-list, no writes, no exec, no TCP"


def landlock_scope_self() -> bool:
    """Confine signals and abstract unix sockets to this process (Landlock ABI >= 6)."""
    abi = landlock_abi()
    if abi < 6:
        return False
    try:
        _restrict(_RulesetAttr(0, 0, SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET), abi)
    except OSError:
        return False
    return True


# ----------------------------------------------------------------------------- seccomp


def build_seccomp_bpf() -> tuple[bytes | None, str]:
    """Compile the worker's seccomp filter once (in the zygote) and return its BPF program."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:
        return None, f"seccomp unavailable (pyseccomp/libseccomp: {exc})"
    try:
        filt = sc.SyscallFilter(sc.ALLOW)
        deny = sc.ERRNO(errno.EPERM)
        skipped = []
        for name in DENIED_SYSCALLS:
            try:
                filt.add_rule(deny, name)
            except (ValueError, RuntimeError, OSError):
                skipped.append(name)  # not a syscall on this architecture
        for option in DENIED_PRCTL_OPTIONS:
            filt.add_rule(deny, "prctl", sc.Arg(0, sc.EQ, option))
        # Opening for writing is denied whatever the path (a second layer under Landlock).
        for flag in (_O_WRONLY, _O_RDWR, _O_CREAT, _O_TRUNC, _O_APPEND):
            for name, idx in (("open", 1), ("openat", 2)):
                try:
                    filt.add_rule(deny, name, sc.Arg(idx, sc.MASKED_EQ, flag, flag))
                except (ValueError, RuntimeError, OSError):
                    pass
        read_fd, write_fd = os.pipe()
        try:
            with os.fdopen(write_fd, "wb", closefd=True) as out:
                filt.export_bpf(out)
            with os.fdopen(read_fd, "rb", closefd=True) as inp:
                program = inp.read()
        except OSError as exc:
            return None, f"seccomp export failed: {exc}"
    except (RuntimeError, OSError, ValueError) as exc:
        return None, f"seccomp filter failed: {exc}"
    note = f"seccomp: {len(DENIED_SYSCALLS) - len(skipped)} syscalls denied, no write opens"
    return program, note


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_seccomp(program: bytes) -> bool:
    """Install a BPF program built by :func:`build_seccomp_bpf` on the calling process."""
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if not _prctl(PR_SET_NO_NEW_PRIVS, 1):
        return False
    return _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0


# ----------------------------------------------------------------------------- per worker


def set_limits(memory_mb: int, cpu_s: int, unprivileged: bool) -> None:
    """Apply the worker's rlimits (memory, CPU, no file writes, no processes, few fds)."""
    mem = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    # SIGXCPU at the soft limit names the cause; SIGKILL one second later if it is ignored.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
    _grow_stack_limit()
    if unprivileged:
        # Only enforced for non-root users: hence the uid drop before it matters.
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


#: The main thread's stack may grow this far (default limit: 8 MB). Model code raises the
#: recursion limit (``sys.setrecursionlimit(10**6)``) for memoised recursions thousands deep,
#: and each level through a C wrapper (``lru_cache``) takes C stack: at 8 MB a recursion
#: 20,000 deep crashed the worker. Only touched pages count (against the memory limit).
STACK_BYTES = 512 * 1024 * 1024


def _grow_stack_limit() -> None:
    """Raise the stack's soft limit to :data:`STACK_BYTES` (at most the hard limit). The
    worker was forked, not exec'd, so its stack may grow until the mappings the kernel placed
    below it at the zygote's exec (a gap of at least 128 MB)."""
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    want = STACK_BYTES if hard == resource.RLIM_INFINITY else min(STACK_BYTES, hard)
    resource.setrlimit(resource.RLIMIT_STACK, (want, hard))


PR_SET_KEEPCAPS = 8
CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def readable_by_others(paths: Iterable[str]) -> bool:
    """Whether a user with no relation to the owners can reach and read every path.

    Python installed under a private home (e.g. pyenv in a 0700 /root) is not; then workers
    running as an unprivileged uid need CAP_DAC_READ_SEARCH to import lazily loaded modules.
    """
    for path in paths:
        current = os.path.abspath(path)
        while True:
            try:
                mode = os.stat(current).st_mode
            except OSError:
                return False
            need = 0o005 if os.path.isdir(current) else 0o004
            if mode & need != need:
                return False
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return True


def drop_privileges(uid: int, keep_read_search: bool = False) -> bool:
    """Become ``uid`` (group ``uid``, no supplementary groups). Only possible from root.

    With ``keep_read_search`` the process keeps exactly one capability, CAP_DAC_READ_SEARCH,
    so it can read Python's files under a private home. Only pass it when Landlock confines
    reads (Landlock is not bypassed by capabilities) and seccomp denies open_by_handle_at.
    """
    if os.geteuid() != 0:
        return False
    os.setgroups([])
    if keep_read_search:
        _prctl(PR_SET_KEEPCAPS, 1)
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if keep_read_search:
        bit = 1 << CAP_DAC_READ_SEARCH
        data = (_CapData * 2)(_CapData(bit, bit, 0), _CapData(0, 0, 0))
        header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
        if _libc.capset(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), f"capset: {_errno_text()}")
        _prctl(PR_SET_KEEPCAPS, 0)
    return os.geteuid() == uid


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when our parent (the zygote) dies; exit if it already did."""
    _prctl(PR_SET_PDEATHSIG, 9)
    if os.getppid() != parent_pid:
        os._exit(1)
