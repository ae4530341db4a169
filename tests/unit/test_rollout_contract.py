"""The local and the Ray rollout paths satisfy one contract (agentmath.rollout.contract)."""

from __future__ import annotations

import inspect

import pytest

from agentmath.backends.registry import BackendSettings
from agentmath.backends.scripted import ScriptedBackend
from agentmath.config import RayConfig
from agentmath.distributed.engine import RayRolloutEngine
from agentmath.distributed.iterations import RayIterations
from agentmath.distributed.worker import WorkerSpec
from agentmath.formats import get_format
from agentmath.rollout.contract import EngineControl, Iterations
from agentmath.rollout.partial import PartialRollout
from agentmath.rollout.scheduler import RolloutEngine


def _members(protocol: type) -> list[str]:
    return [n for n in vars(protocol) if not n.startswith("_")]


def _engines() -> list[object]:
    local = RolloutEngine(ScriptedBackend(["hi"]), None, get_format("code_interpreter"))
    ray = RayRolloutEngine(WorkerSpec(backend="openai", settings=BackendSettings("m")), RayConfig(),
                           lambda request, index: None, max_in_flight=1)  # type: ignore[arg-type,return-value]
    return [local, ray]


@pytest.mark.parametrize("which", [0, 1], ids=["local", "ray"])
def test_both_paths_satisfy_the_contract(which: int) -> None:
    engine = _engines()[which]
    iterations = (PartialRollout if which == 0 else RayIterations)(engine, iter([]))  # type: ignore[arg-type]
    assert isinstance(engine, EngineControl)
    assert isinstance(iterations, Iterations)
    assert engine.version == 0 and iterations.parked == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(("protocol", "classes"), [
    (EngineControl, (RolloutEngine, RayRolloutEngine)),
    (Iterations, (PartialRollout, RayIterations)),
])
def test_the_methods_have_the_contracts_signatures(protocol: type,
                                                   classes: tuple[type, ...]) -> None:
    for name in _members(protocol):
        declared = inspect.getattr_static(protocol, name)
        if isinstance(declared, property):
            continue
        want = list(inspect.signature(declared).parameters)
        for cls in classes:
            method = inspect.getattr_static(cls, name)
            assert list(inspect.signature(method).parameters) == want, (cls, name)
            assert inspect.iscoroutinefunction(method) == inspect.iscoroutinefunction(declared)
