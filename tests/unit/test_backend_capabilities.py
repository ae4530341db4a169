"""Optional backend capabilities are declared protocols, checked with isinstance.

Each backend states what it offers by having the protocol's methods; the engine, the trainer,
the router and the weight sync ask with ``isinstance`` (no attribute probing by name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import agentmath
from agentmath.backends import use_model
from agentmath.backends.base import (
    Addressed,
    Backend,
    ChatCompletion,
    HealthChecked,
    ModelNamed,
    ModelThread,
    PolicyVersioned,
    PrefixCacheCounted,
    StickyHomes,
)
from agentmath.backends.openai import OpenAIBackend
from agentmath.backends.router import Router
from agentmath.backends.scripted import ScriptedBackend

CAPABILITIES = (Addressed, ChatCompletion, HealthChecked, ModelNamed, ModelThread,
                PolicyVersioned, PrefixCacheCounted, StickyHomes)


def _offers(backend: object) -> set[str]:
    return {c.__name__ for c in CAPABILITIES if isinstance(backend, c)}


def test_each_backend_declares_what_it_offers() -> None:
    server = OpenAIBackend("http://127.0.0.1:9", "m")
    router = Router([server, OpenAIBackend("http://127.0.0.1:10", "m")])
    scripted = ScriptedBackend(["hi"])
    assert all(isinstance(b, Backend) for b in (server, router, scripted))
    assert _offers(server) == {"Addressed", "ChatCompletion", "HealthChecked", "ModelNamed",
                               "PrefixCacheCounted"}
    assert _offers(router) == {"ModelNamed", "PolicyVersioned", "StickyHomes"}
    assert _offers(scripted) == set()


def test_the_in_process_generator_runs_the_update_on_its_thread() -> None:
    pytest.importorskip("torch")
    from agentmath.backends.hf import HFBackend

    assert issubclass(HFBackend, ModelThread)
    assert not issubclass(HFBackend, PolicyVersioned)


def test_use_model_reaches_every_server_of_a_router_through_its_public_method() -> None:
    servers = [OpenAIBackend(f"http://127.0.0.1:{p}", "base") for p in (9, 10)]
    router = Router(servers)
    use_model(router, "adapter-v3")
    assert [s.model for s in servers] == ["adapter-v3", "adapter-v3"]
    use_model(servers[0], "adapter-v4")
    assert servers[0].model == "adapter-v4"
    with pytest.raises(TypeError, match="ScriptedBackend has no model name"):
        use_model(ScriptedBackend(["hi"]), "x")
    mixed = Router([OpenAIBackend("http://127.0.0.1:11", "base"), ScriptedBackend(["hi"])])
    with pytest.raises(TypeError, match="ScriptedBackend"):
        mixed.use_model("x")
    assert mixed.stats().servers[0].server == "http://127.0.0.1:11"  # unchanged before failing


def test_no_capability_is_found_by_probing_attribute_names() -> None:
    names = ("run_on_model_thread", "forget", "set_policy_version", "aclose", "healthy",
             "prefix_cache_counters", "_servers", "chat", "base_url", "alive",
             "preload_errors")
    alternatives = "|".join(names)
    probe = re.compile(rf"""(getattr|hasattr)\([^)]*["']({alternatives})["']""")
    # nor any attribute of a backend, engine, sandbox, session or an episode's tool format by
    # name (``name`` is part of the Backend and ToolFormat protocols; formats/registry.py checks
    # a plugin's object against ToolFormat when it is registered, naming what it lacks)
    subject = re.compile(r"(getattr|hasattr)\((([\w.]+\.)?(backend|engine|sandbox|session)"
                         r"|[\w.]+\.fmt)(\.pool)?\b")
    root = Path(agentmath.__file__).parent
    found = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py")
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if probe.search(line) or subject.search(line)]
    assert found == []
