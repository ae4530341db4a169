"""The backend registry (agentmath/backends/registry.py): one line makes a backend known to
make_backend and to every config that names one; each factory reads the settings it needs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentmath.backends import BACKENDS, BackendSettings, make_backend
from agentmath.backends.openai import OpenAIBackend
from agentmath.backends.router import Router
from agentmath.backends.scripted import ScriptedBackend
from agentmath.eval.config import EvalConfig
from agentmath.synth.config import EndpointConfig


def test_a_registered_backend_is_built_by_name_and_accepted_by_configs(monkeypatch) -> None:  # noqa: ANN001
    seen: list[BackendSettings] = []

    def factory(settings: BackendSettings) -> ScriptedBackend:
        seen.append(settings)
        return ScriptedBackend([])

    monkeypatch.setitem(BACKENDS, "scripted", factory)
    backend = make_backend("scripted", "m", base_url="http://x:1", timeout_s=3.0)
    assert isinstance(backend, ScriptedBackend)
    assert seen == [BackendSettings("m", "http://x:1", timeout_s=3.0)]
    assert EndpointConfig(backend="scripted").backend == "scripted"
    assert EvalConfig(dataset="d", model="m", backend="scripted").backend == "scripted"


def test_an_unknown_backend_names_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown backend 'nope'; choose one of openai, hf"):
        make_backend("nope", "m")
    with pytest.raises(ValidationError, match="unknown backend 'nope'"):
        EndpointConfig(backend="nope")
    with pytest.raises(ValidationError, match="backend\n.*unknown backend 'nope'"):
        EvalConfig(dataset="d", model="m", backend="nope")
    with pytest.raises(TypeError):
        make_backend("openai", "m", base_url="http://x:1", temperature=0.5)


async def test_openai_reads_its_http_settings_and_routes_over_several_urls() -> None:
    one = make_backend("openai", "m", base_url="http://127.0.0.1:1", timeout_s=7.0,
                       max_retries=2)
    assert isinstance(one, OpenAIBackend) and (one.model, one.timeout_s, one.max_retries) == (
        "m", 7.0, 2)
    many = make_backend("openai", "m", base_url=["http://127.0.0.1:1", "http://127.0.0.1:2"],
                        max_retries=2)
    assert isinstance(many, Router)
    for backend in (one, many):
        await backend.aclose()
    with pytest.raises(ValueError, match="needs --base-url"):
        make_backend("openai", "m")


def test_http_options_carry_only_what_was_given() -> None:
    assert BackendSettings("m").http_options() == {}
    assert BackendSettings("m", timeout_s=1.0, api_key="k").http_options() == {
        "api_key": "k", "timeout_s": 1.0}


async def test_a_synth_endpoint_waits_out_an_outage_as_configured() -> None:
    from agentmath.synth.run import make_endpoint

    held = make_endpoint(EndpointConfig(model="m", base_url="http://127.0.0.1:1"))
    off = make_endpoint(EndpointConfig(model="m", base_url="http://127.0.0.1:1",
                                       max_outage_s=0))
    assert isinstance(held, OpenAIBackend) and isinstance(off, OpenAIBackend)
    assert (held.outage.max_outage_s, off.outage.max_outage_s) == (300.0, 0.0)
    for backend in (held, off):
        await backend.aclose()
    with pytest.raises(ValidationError):
        EndpointConfig(max_outage_s=-1)


async def test_several_urls_build_a_router_with_the_runs_router_settings() -> None:
    from agentmath.backends.routing import RouterConfig
    from agentmath.rl.config import RLConfig

    cfg = RLConfig.model_validate({
        "model": "m", "data": {"dataset": "d.jsonl"},
        "generator": {"backend": "openai", "base_urls": ["http://a:1", "http://b:2"],
                      "router": {"probe_interval_s": 1.5, "policy": "round_robin"}}})
    router = make_backend("openai", "m", base_url=cfg.generator.base_urls,
                          router=cfg.generator.router, max_outage_s=5)
    default = make_backend("openai", "m", base_url=["http://a:1", "http://b:2"])
    assert isinstance(router, Router) and isinstance(default, Router)
    assert (router.config.probe_interval_s, router.config.policy) == (1.5, "round_robin")
    assert default.config == RouterConfig() and router.outage.max_outage_s == 5
    for backend in (router, default):
        await backend.aclose()
    with pytest.raises(ValidationError, match="unknown routing policy"):
        RLConfig.model_validate({"model": "m", "data": {"dataset": "d.jsonl"},
                                 "generator": {"router": {"policy": "nope"}}})
