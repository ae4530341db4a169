"""The sandbox started by a non-root host: weaker fallbacks, still contained and reported."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = r"""
import json
from agentmath.sandbox import Sandbox
with Sandbox() as sb:
    s = sb.session()
    esc = ("os = [c for c in object.__subclasses__() if c.__name__ == '_wrap_close'][0]"
           ".__init__.__globals__['sys'].modules['os']\n")
    out = {
        "protections": sb.protections,
        "state": [s.run("x = 3").error, s.run("x * 2").value],
        "kill_host": s.run(esc + "os.kill(%d, 9)").error_type,
        "write": s.run(esc + "open('/tmp/agentmath-nonroot-probe', 'w')").error_type,
        "timeout": s.run("while True: pass", timeout=0.5).timed_out,
    }
    print(json.dumps(out))
"""


def _system_python() -> str | None:
    """A python of the same version that an unprivileged user can execute."""
    for cand in (f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}",):
        if os.path.exists(cand):
            return cand
    return None


def test_nonroot_host_runs_contained(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to start a host as an unprivileged user")
    python = _system_python()
    site_dir = site.getsitepackages()[0]
    if python is None:
        pytest.skip("no system python of this version for an unprivileged user")
    check = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            python, "-c", f"import os; os.listdir({site_dir!r}); "
                            f"os.listdir({str(REPO)!r})"], capture_output=True)
    if check.returncode != 0:
        pytest.skip("the project or its site-packages are not readable by an unprivileged user")
    env = {"PYTHONPATH": f"{REPO}:{site_dir}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c",
         SCRIPT % os.getpid()], env=env, capture_output=True, text=True, timeout=120,
        cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    prot = out["protections"]
    assert prot["setuid"] is False  # no uid drop without root: reported, not hidden
    assert prot["network_namespace"] and prot["landlock_fs"] and prot["seccomp"]
    # The user namespace also carries the mount and IPC namespaces, and pidfds need no root.
    assert prot["minimal_root"] and prot["ipc_namespace"] and prot["idle_freeze"]
    assert out["state"] == [None, "6"]
    assert out["kill_host"] == "PermissionError"  # seccomp + Landlock signal scoping
    assert out["write"] == "PermissionError"
    assert out["timeout"] is True
    assert not os.path.exists("/tmp/agentmath-nonroot-probe")
