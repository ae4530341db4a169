"""VLLMWeightSync without a server: the HTTP calls each mode makes, and the error paths (a
server answering 500, 404 without dev mode, malformed JSON, a refused cache reset, a refused
connection) as typed errors naming the server, over httpx.MockTransport."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentmath.backends.openai import OpenAIBackend
from agentmath.backends.router import Router
from agentmath.errors import BackendError, ConfigError
from agentmath.rl.sync_vllm import VLLMWeightSync, WeightSyncError, server_options, use_model
from agentmath.rl.vllm_ext import EXTENSION_DIR

A, B = "http://a:1", "http://b:2"
Handler = Callable[[httpx.Request], httpx.Response]


class FakeModel:
    """Writes what ``save_pretrained`` of a transformers model writes (enough for the check)."""

    def save_pretrained(self, directory: str, **_: Any) -> None:
        Path(directory, "config.json").write_text("{}")
        Path(directory, "model.safetensors").write_bytes(b"weights")


class FakePeft:
    peft_config = {"default": object()}
    active_adapter = "default"

    def get_base_model(self) -> FakeModel:
        return FakeModel()

    def save_pretrained(self, directory: str, selected_adapters: Any = None) -> None:
        Path(directory, "adapter_config.json").write_text("{}")
        Path(directory, "adapter_model.safetensors").write_bytes(b"adapter")


class FakeTokenizer:
    def save_pretrained(self, directory: str) -> None:
        Path(directory, "tokenizer.json").write_text("{}")


def vllm(log: list[tuple[str, str, Any]], override: Handler | None = None) -> Handler:
    """A fake vLLM server in dev mode with runtime LoRA; ``override`` answers first when it
    returns a response."""
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        log.append((f"{request.url.scheme}://{request.url.netloc.decode()}",
                    request.url.path + (f"?{request.url.query.decode()}"
                                        if request.url.query else ""), body))
        if override is not None and (response := override(request)) is not None:
            return response
        path = request.url.path
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "tiny", "parent": None},
                                                      {"id": "policy-v1", "parent": "tiny"}]})
        if path == "/collective_rpc":
            return httpx.Response(200, json={"results": [None]})
        if path == "/reset_prefix_cache":
            return httpx.Response(200, json={"success": True})
        if path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
            return httpx.Response(200, text="Success: LoRA adapter done.")
        return httpx.Response(404, json={"detail": "Not Found"})
    return handle


def make(tmp_path: Path, handler: Handler, urls: list[str] | None = None,
         **kwargs: Any) -> VLLMWeightSync:
    return VLLMWeightSync(urls or [A], tmp_path / "out", transport=httpx.MockTransport(handler),
                          **kwargs)


async def test_full_push_reloads_resets_and_names_the_served_model(tmp_path: Path) -> None:
    log: list[tuple[str, str, Any]] = []
    sync = make(tmp_path, vllm(log), urls=[A, B + "/v1"], keep=1)
    assert await sync.push(FakeModel(), FakeTokenizer(), 1) == "tiny"
    path = tmp_path / "out" / "policy-v1"
    assert {(u, p) for u, p, _ in log} == {
        (A, "/v1/models"), (A, "/collective_rpc"), (B, "/collective_rpc"),
        (A, "/reset_prefix_cache?reset_running_requests=true"),
        (B, "/reset_prefix_cache?reset_running_requests=true")}
    assert log[1][2] == {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}
    # after the reload, before the cache reset: the CPU GEMMs of the vocabulary layers rebuilt
    assert [(p, b) for u, p, b in log if u == A][1:] == [
        ("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}),
        ("/collective_rpc", {"method": "agentmath_refresh_cpu_gemms"}),
        ("/reset_prefix_cache?reset_running_requests=true", None)]
    assert (path / "tokenizer.json").exists() and sync.version == 1
    assert set(sync.last_timings) == {"save_s", "load_s"}
    assert await sync.push(FakeModel(), None, 2) == "tiny"  # the name is asked for once
    assert [p for _, p, _ in log].count("/v1/models") == 1
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["policy-v2"]  # keep=1
    with pytest.raises(ValueError, match="older"):
        await sync.push(FakeModel(), None, 1)
    await sync.aclose()


async def test_lora_push_uses_a_name_per_version_and_retires_old_adapters(
        tmp_path: Path) -> None:
    log: list[tuple[str, str, Any]] = []
    sync = make(tmp_path, vllm(log), lora=True, keep=2)
    names = [await sync.push(FakePeft(), None, v) for v in (1, 2, 3)]
    assert names == ["policy-v1", "policy-v2", "policy-v3"]
    loads = [b for _, p, b in log if p == "/v1/load_lora_adapter"]
    assert loads[2] == {"lora_name": "policy-v3", "load_inplace": True,
                        "lora_path": str(tmp_path / "out" / "policy-v3")}
    assert [b for _, p, b in log if p == "/v1/unload_lora_adapter"] == [
        {"lora_name": "policy-v1"}]
    assert not any(p.startswith("/reset_prefix_cache") for _, p, _ in log)  # names isolate
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["policy-v2", "policy-v3"]
    log.clear()
    assert await sync.push(FakePeft(), None, 3) == "policy-v3"  # same version: in place
    assert [p for _, p, _ in log] == ["/v1/load_lora_adapter",
                                      "/reset_prefix_cache?reset_running_requests=true"]
    with pytest.raises(ConfigError, match="PEFT"):
        await sync.push(FakeModel(), None, 4)
    await sync.aclose()


def _status(path: str, response: httpx.Response) -> Handler:
    return lambda request: response if request.url.path == path else None  # type: ignore[return-value]


@pytest.mark.parametrize(("path", "response", "expected"), [
    ("/collective_rpc", httpx.Response(500, json={"error": {"message": "Worker failed"}}),
     "returned HTTP 500.*Worker failed"),
    ("/collective_rpc", httpx.Response(404, json={"detail": "Not Found"}),
     "VLLM_SERVER_DEV_MODE=1"),
    ("/collective_rpc", httpx.Response(200, text="<html>oops"), "not JSON.*oops"),
    ("/collective_rpc", httpx.Response(200, json=["no results"]), "not {'results'"),
    ("/reset_prefix_cache", httpx.Response(200, json={"success": False}),
     "did not reset the prefix cache"),
    ("/reset_prefix_cache", httpx.Response(200, text="{broken"), "not JSON"),
])
async def test_a_failing_server_is_a_typed_error_naming_it(
        tmp_path: Path, path: str, response: httpx.Response, expected: str) -> None:
    log: list[tuple[str, str, Any]] = []
    def fail_b(request: httpx.Request) -> httpx.Response | None:
        return _status(path, response)(request) if request.url.host == "b" else None
    sync = make(tmp_path, vllm(log, fail_b), urls=[A, B], served_name="tiny")
    with pytest.raises(WeightSyncError, match=expected) as info:
        await sync.push(FakeModel(), None, 1)
    assert isinstance(info.value, BackendError)
    assert list(info.value.failures) == [B] and B in str(info.value)
    assert f"already on them: ['{A}']" in str(info.value)
    assert sync.version is None  # not recorded: pushing version 1 again is the retry
    await sync.aclose()


async def test_a_server_without_the_worker_extension_gets_the_push_and_one_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A server started by hand without server_options' flags has no refresh method: the push
    goes on (on GPUs nothing is missed) and the sync warns once per server."""
    missing = httpx.Response(500, json={"error": {"message": (
        "Call to collective_rpc method failed: Worker failed with error ''CPUWorker' object "
        "has no attribute 'agentmath_refresh_cpu_gemms''")}})

    def no_extension(request: httpx.Request) -> httpx.Response | None:
        refresh = request.url.path == "/collective_rpc" and b"refresh" in request.content
        return missing if refresh else None
    log: list[tuple[str, str, Any]] = []
    sync = make(tmp_path, vllm(log, no_extension), served_name="tiny")
    with caplog.at_level("WARNING", logger="agentmath.rl.sync_vllm"):
        assert await sync.push(FakeModel(), None, 1) == "tiny"
        assert await sync.push(FakeModel(), None, 2) == "tiny"
    warnings = [r for r in caplog.records if "worker extension" in r.getMessage()]
    assert len(warnings) == 1 and A in warnings[0].getMessage()
    assert [p for _, p, _ in log].count("/reset_prefix_cache?reset_running_requests=true") == 2
    await sync.aclose()

    other = httpx.Response(500, json={"error": {"message": "Worker failed: out of memory"}})
    sync = make(tmp_path / "other", vllm([], lambda r: other if b"refresh" in r.content
                                         else None), served_name="tiny")
    with pytest.raises(WeightSyncError, match="out of memory"):  # any other failure is one
        await sync.push(FakeModel(), None, 1)
    await sync.aclose()


async def test_lora_errors_name_the_server_and_the_missing_setting(tmp_path: Path) -> None:
    log: list[tuple[str, str, Any]] = []
    not_found = httpx.Response(404, json={"detail": "Not Found"})
    sync = make(tmp_path, vllm(log, _status("/v1/load_lora_adapter", not_found)), lora=True)
    with pytest.raises(WeightSyncError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING") as info:
        await sync.push(FakePeft(), None, 1)
    assert f"{A}/v1/load_lora_adapter" in str(info.value)
    await sync.aclose()


async def test_unreachable_server_and_missing_base_model(tmp_path: Path) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)
    sync = make(tmp_path, refuse, served_name="tiny")
    with pytest.raises(WeightSyncError, match=f"{A}/collective_rpc failed: ConnectError"):
        await sync.push(FakeModel(), None, 1)
    await sync.aclose()
    empty = httpx.Response(200, json={"data": []})
    sync = make(tmp_path, vllm([], _status("/v1/models", empty)))
    with pytest.raises(WeightSyncError, match="lists no base model"):
        await sync.push(FakeModel(), None, 1)
    await sync.aclose()


async def test_a_save_without_weights_is_refused_before_any_server_call(tmp_path: Path) -> None:
    class NoWeights(FakeModel):
        def save_pretrained(self, directory: str, **_: Any) -> None:
            Path(directory, "config.json").write_text("{}")
    log: list[tuple[str, str, Any]] = []
    sync = make(tmp_path, vllm(log), served_name="tiny")
    with pytest.raises(BackendError, match="safetensors"):
        await sync.push(NoWeights(), None, 1)
    assert log == [] and list((tmp_path / "out").iterdir()) == []  # nothing half-written
    await sync.aclose()


def test_config_errors_server_options_and_use_model(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError):
        VLLMWeightSync([], tmp_path)
    with pytest.raises(ConfigError):
        VLLMWeightSync(A, tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        VLLMWeightSync([A], tmp_path, keep=0)
    extension = ["--worker-extension-cls", "agentmath_vllm_ext.WeightSyncExtension"]
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert server_options() == (extension, {"VLLM_SERVER_DEV_MODE": "1",
                                            "PYTHONPATH": f"{EXTENSION_DIR}:/elsewhere"})
    assert (EXTENSION_DIR / "agentmath_vllm_ext.py").is_file()
    monkeypatch.delenv("PYTHONPATH")
    args, env = server_options(lora_rank=12, keep=3)
    assert args == [*extension, "--enable-lora", "--max-lora-rank", "16", "--max-loras", "3",
                    "--max-cpu-loras", "3"]
    assert env == {"VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
                   "PYTHONPATH": str(EXTENSION_DIR)}
    with pytest.raises(ConfigError):
        server_options(lora_rank=1024)
    backend = OpenAIBackend(A, "tiny")
    use_model(backend, "policy-v3")
    assert backend.model == "policy-v3"
    router = Router.from_urls([A, B], "tiny")
    use_model(router, "policy-v4")
    assert [s.backend.model for s in router._servers] == ["policy-v4", "policy-v4"]
    with pytest.raises(TypeError):
        use_model(object(), "x")


async def test_restore_loads_the_last_version_again_after_an_outage(tmp_path: Path) -> None:
    log: list[tuple[str, str, Any]] = []
    full = make(tmp_path, vllm(log), urls=[A, B], served_name="tiny")
    await full.restore()  # nothing pushed yet: the servers run what they were started from
    assert log == []
    await full.push(FakeModel(), None, 1)
    log.clear()
    await full.restore()
    assert sorted((u, p) for u, p, _ in log) == [
        (A, "/collective_rpc"), (A, "/collective_rpc"),
        (A, "/reset_prefix_cache?reset_running_requests=true"),
        (B, "/collective_rpc"), (B, "/collective_rpc"),
        (B, "/reset_prefix_cache?reset_running_requests=true")]
    assert log[0][2]["kwargs"]["weights_path"] == str(tmp_path / "out" / "policy-v1")
    await full.aclose()
    lora_log: list[tuple[str, str, Any]] = []
    lora = make(tmp_path / "lora", vllm(lora_log), lora=True)
    await lora.push(FakePeft(), None, 2)
    lora_log.clear()
    await lora.restore()  # a restarted server learns the adapter requests name
    assert [(p, b and b.get("lora_name")) for _, p, b in lora_log] == [
        ("/v1/load_lora_adapter", "policy-v2"),
        ("/reset_prefix_cache?reset_running_requests=true", None)]
    await lora.aclose()


async def test_a_worker_restores_the_version_its_episodes_run_under(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Ray each worker's client sees the outage; it loads the trainer's pushed version
    again with the sync's restorer (picklable, sent in the WorkerSpec), the files unseen."""
    import pickle

    log: list[tuple[str, str, Any]] = []
    full = make(tmp_path, vllm(log), urls=[A, B], served_name="tiny")
    await full.push(FakeModel(), None, 1)
    lora = make(tmp_path / "lora", vllm(log), lora=True)
    await lora.push(FakePeft(), None, 2)
    restorers = [pickle.loads(pickle.dumps(s.restorer())) for s in (full, lora)]
    await full.aclose()
    await lora.aclose()
    client = httpx.AsyncClient

    def mocked(**kwargs: Any) -> httpx.AsyncClient:
        return client(**{**kwargs, "transport": httpx.MockTransport(vllm(log))})

    monkeypatch.setattr(httpx, "AsyncClient", mocked)
    log.clear()
    await restorers[0](1)
    assert sorted((u, p) for u, p, _ in log) == [
        (A, "/collective_rpc"), (A, "/collective_rpc"),
        (A, "/reset_prefix_cache?reset_running_requests=true"),
        (B, "/collective_rpc"), (B, "/collective_rpc"),
        (B, "/reset_prefix_cache?reset_running_requests=true")]
    assert log[0][2]["kwargs"]["weights_path"] == str(tmp_path / "out" / "policy-v1")
    log.clear()
    await restorers[1](2)
    assert [(p, b and b.get("lora_name")) for _, p, b in log] == [
        ("/v1/load_lora_adapter", "policy-v2"),
        ("/reset_prefix_cache?reset_running_requests=true", None)]
    assert log[0][2]["lora_path"] == str(tmp_path / "lora" / "out" / "policy-v2")
