"""A minimal, read-only root file system for the sandbox (a private mount namespace).

Landlock confines what a worker may *open*, but not what it may *see*: ``stat``, ``lstat``,
``readlink`` and ``access`` work on any path, so a snippet could learn which files exist, their
sizes, owners and modes, and the targets of symlinks (a secret kept in a symlink's target
leaks). The zygote therefore moves, once, into its own mount namespace whose root is a small
read-only tmpfs holding nothing but the paths a snippet may read (the Python installation,
site-packages, system libraries, zoneinfo, three device nodes), each bind-mounted read-only,
nosuid. Every worker forked from the zygote inherits that view: any other path does not exist.
Landlock still applies on top of it.

What a snippet sees of the path to the interpreter: each allow-listed directory exists at its
real path (the interpreter and its modules name themselves by it: ``sys.prefix``, ``sys.path``,
every ``__file__``; moving them would break lazy imports and editable installs), so the
directories above it exist too, as empty read-only directories on the tmpfs that each hold
only the next name on that path (and a symlink on it is recreated with its target). A checkout
and venv under ``/tmp/x/.venv`` thus show ``/tmp`` and ``/tmp/x``, holding ``x`` and ``.venv``
only; nothing else of the host's ``/tmp`` (or of ``/``, ``/etc``, ``/dev``, a home directory
above a pyenv) exists. The names on those paths are all a snippet learns; it could read them
from ``sys.prefix`` anyway.

Written by hand because no library does this from Python (bubblewrap and nsjail are separate
programs that would cost a process launch per worker; the zygote design forks instead). Only
the zygote runs this code, before it serves any request.
"""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass, field

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
# Flags a bind mount inherits from its source and, in a user namespace, may not drop: statvfs's
# ST_* bit -> the MS_* bit that keeps it on remount (ST_RELATIME differs from MS_RELATIME).
_LOCKED_FLAGS = {MS_RDONLY: MS_RDONLY, MS_NOSUID: MS_NOSUID, MS_NODEV: MS_NODEV,
                 MS_NOEXEC: MS_NOEXEC, 1024: 1024, 2048: 2048, 4096: 1 << 21}
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}


class RootfsError(OSError):
    """A mount step failed; the zygote then reports the protection as inactive."""


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise RootfsError(err, f"{what}: {os.strerror(err)}")


@dataclass
class _Plan:
    """What to build in the new root, computed while the host's tree is still visible."""

    dirs: set[str] = field(default_factory=set)
    symlinks: dict[str, str] = field(default_factory=dict)
    binds: list[tuple[str, bool]] = field(default_factory=list)  # (real path, is a directory)
    fds: list[int] = field(default_factory=list)

    def open_sources(self) -> None:
        """O_PATH fds to every bind source, opened in the new mount namespace (a mount of the
        old one cannot be bound) and before the tmpfs hides whatever lies under it."""
        self.fds = [os.open(path, os.O_PATH | os.O_CLOEXEC) for path, _is_dir in self.binds]

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _parents(path: str) -> list[str]:
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def _add_path(plan: _Plan, path: str, bind: bool, depth: int = 0) -> str | None:
    """Plan ``path``: its symlinked components are recreated, its real location bind-mounted
    (when ``bind``; a path inside an already bound directory only needs its symlinks).

    Returns the real path (None if the path does not exist).
    """
    if depth > 16 or not os.path.lexists(path):
        return None
    current = "/"
    parts = [p for p in path.strip("/").split("/") if p]
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        if os.path.islink(current):
            plan.symlinks[current] = os.readlink(current)
            plan.dirs.update(_parents(current))
            resolved = os.path.join(os.path.dirname(current), plan.symlinks[current])
            rest = os.path.join(resolved, *parts[i + 1:])
            return _add_path(plan, os.path.normpath(rest), bind, depth + 1)
    real = os.path.realpath(path)
    if bind:
        is_dir = os.path.isdir(real)
        plan.dirs.update(_parents(real) + ([real] if is_dir else []))
        plan.binds.append((real, is_dir))
    return real


def _make_plan(paths: list[str]) -> _Plan:
    plan = _Plan()
    bound: list[str] = []
    # Shortest first, so a directory inside an already bound one is not bound twice.
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        real = os.path.realpath(path)
        inside = any(real == b or real.startswith(b.rstrip("/") + "/") for b in bound)
        got = _add_path(plan, path, bind=not inside)
        if got is not None and not inside:
            bound.append(got)
    return plan


def _mount(source: bytes | None, target: str, fstype: bytes | None, flags: int,
           data: bytes | None = None, what: str = "mount") -> None:
    _check(_libc.mount(source, target.encode(), fstype, flags, data), f"{what} {target}")


def _bind(fd: int, target: str, is_dir: bool) -> None:
    """Bind the object behind ``fd`` on ``target`` read-only, keeping the source's locked flags."""
    source = f"/proc/self/fd/{fd}".encode()
    _mount(source, target, None, MS_BIND | MS_REC, what="bind")
    st_flags = os.statvfs(target).f_flag
    locked = sum(ms for st, ms in _LOCKED_FLAGS.items() if st_flags & st)
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | locked
    if is_dir:
        flags |= MS_NODEV  # device nodes only come from the three explicit binds
    _mount(None, target, None, flags)


def _pivot(new_root: str) -> None:
    """Make ``new_root`` the root and detach the old one (chroot where pivot_root is unknown)."""
    os.chdir(new_root)
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is not None and _libc.syscall(number, b".", b".") == 0:
        _check(_libc.umount2(b".", MNT_DETACH), "umount old root")
    else:
        os.chroot(".")
    os.chdir("/")


def enter_minimal_root(paths: list[str], mount_point: str = "/tmp") -> tuple[bool, str]:
    """Move the calling process into a private mount namespace rooted at a minimal tree.

    ``paths`` are the only files and directories that will exist, read-only (device nodes among
    them, such as /dev/null, stay usable). ``mount_point`` is any existing directory: the tmpfs
    is mounted over it inside the new namespace only (the host's view is untouched). Returns
    (applied, description); on failure the process may already be in the new namespace, with
    its old root intact.
    """
    plan = _make_plan(paths)
    try:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _mount(b"none", "/", None, MS_REC | MS_PRIVATE)  # nothing propagates back to the host
        plan.open_sources()
        _mount(b"agentmath-root", mount_point, b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
               b"size=1m,mode=0755")
        for d in sorted(plan.dirs):
            os.makedirs(mount_point + d, mode=0o755, exist_ok=True)
        for link, target in plan.symlinks.items():
            if not os.path.lexists(mount_point + link):
                os.symlink(target, mount_point + link)
        for (path, is_dir), fd in zip(plan.binds, plan.fds, strict=True):
            target = mount_point + path
            if not is_dir and not os.path.exists(target):
                os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
            _bind(fd, target, is_dir)
        _mount(None, mount_point, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        _pivot(mount_point)
    except OSError as exc:
        return False, f"minimal root not applied: {exc}"
    finally:
        plan.close()
    return True, f"minimal read-only root: {len(plan.binds)} bind mounts, nothing else visible"
