"""agentmath.serving.servers.with_affinity: a started server runs on the CPUs it is given, not on
the caller's pin (under ``taskset -c 1`` a vLLM server inheriting the pin served one request
at a time)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentmath.serving.servers import with_affinity

SHOW = [sys.executable, "-c", "import os, sys; print(sorted(os.sched_getaffinity(0)), "
        "sys.argv[1:], os.environ.get('AFFINITY_PROBE'))", "a b", "--flag"]


def test_command_runs_on_the_cpus_given_with_its_arguments_and_environment() -> None:
    mine = sorted(os.sched_getaffinity(0))
    out = subprocess.run(with_affinity([mine[0]], SHOW), capture_output=True, text=True,
                         check=True, env={**os.environ, "AFFINITY_PROBE": "kept"}).stdout
    assert out.strip() == f"[{mine[0]}] ['a b', '--flag'] kept"


def test_a_pinned_caller_does_not_pin_the_command() -> None:
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        pytest.skip("needs two CPUs to pin the caller to one")
    command = with_affinity(mine, SHOW)
    code = (f"import os, subprocess, sys; os.sched_setaffinity(0, {{{mine[-1]}}}); "
            f"sys.stdout.write(subprocess.run({command!r}, capture_output=True, "
            "text=True).stdout)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith(str(mine))


def test_no_cpu_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one CPU"):
        with_affinity([], SHOW)


def test_nice_lowers_the_commands_priority_below_the_callers() -> None:
    """``nice``: the server yields the CPU to the benchmark's client (a spinning engine loop
    otherwise takes an equal share of the client's core)."""
    mine = sorted(os.sched_getaffinity(0))
    show = [sys.executable, "-c", "import os; print(os.nice(0))"]
    base = int(subprocess.run(show, capture_output=True, text=True, check=True).stdout)
    out = subprocess.run(with_affinity(mine, show, nice=7), capture_output=True, text=True,
                         check=True).stdout
    assert int(out) == min(19, base + 7)
    with pytest.raises(ValueError, match="lowers priorities only"):
        with_affinity(mine, show, nice=-1)
