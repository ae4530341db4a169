"""Ray scale-out without a cluster: the config, the missing-extra message, resume identity."""

from __future__ import annotations

import pickle
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from agentmath.agent.trajectory import Trajectory
from agentmath.backends.registry import BackendSettings
from agentmath.backends.routing import RouterConfig
from agentmath.config import RayConfig, VLLMEngineConfig
from agentmath.errors import MissingExtraError
from agentmath.eval.config import EvalConfig
from agentmath.eval.runner import identity, worker_spec


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentmath.distributed.cluster import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(MissingExtraError, match=r"agentmath\[ray\]"):
        import_ray()


def test_importing_the_package_does_not_import_ray() -> None:
    import subprocess

    code = ("import sys, agentmath.distributed, agentmath.distributed.engine; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_ray_is_not_identity_so_a_run_resumes_with_or_without_it() -> None:
    base = EvalConfig(dataset="gsm8k", model="m")
    on_ray = base.model_copy(update={"ray": RayConfig(address="local", workers=3)})
    assert identity(base) == identity(on_ray)


def test_ray_config_bounds_name_the_field() -> None:
    with pytest.raises(ValidationError, match="workers"):
        RayConfig(workers=0)
    with pytest.raises(ValidationError, match="address"):
        RayConfig(address="")


def test_worker_spec_carries_what_the_workers_need_but_no_token() -> None:
    cfg = EvalConfig(dataset="gsm8k", model="m", base_url=["http://a:1", "http://b:2"],
                     format="markdown", sandbox_url=["http://s:8080"],
                     sandbox_token_file="/etc/agentmath/token", http_retries=7)
    spec = worker_spec(cfg)
    assert spec.settings == BackendSettings("m", ["http://a:1", "http://b:2"], max_retries=7,
                                            timeout_s=120.0, max_outage_s=300.0, device="auto",
                                            vllm=VLLMEngineConfig())
    assert spec.format == "markdown"
    assert pickle.loads(pickle.dumps(spec)) == spec  # sent to every worker
    assert spec.sandbox_url == ["http://s:8080"]
    assert spec.sandbox_token_file == "/etc/agentmath/token"  # a path, read on the node


# ------------------------------------------------------------------------- RL rollouts on Ray
def _rl(**over: object) -> Any:
    from agentmath.rl.config import RLConfig

    data: dict[str, Any] = {
        "model": "/models/tiny", "data": {"dataset": "train.jsonl"},
        "generator": {"backend": "openai", "base_urls": ["http://a:1", "http://b:2"],
                      "served_name": "tiny", "http_timeout_s": 30},
        "sandbox_url": ["http://s:8080"], "ray": {"address": "local", "workers": 2}}
    data.update(over)
    return RLConfig.model_validate(data)


@pytest.mark.parametrize(("over", "field"), [
    ({"generator": {"backend": "hf"}}, "generator.backend"),
    ({"rollout": {"mode": "sync"}}, "rollout.mode"),
    ({"rollout": {"max_in_flight_tokens": 100_000}}, "rollout.max_in_flight_tokens"),
])
def test_rl_on_ray_refuses_what_it_cannot_run_naming_the_field(over: dict[str, Any],
                                                               field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        _rl(**over)
    if "generator" not in over:
        assert _rl(**over, ray=None).ray is None  # the same settings run in one process


def test_rl_on_ray_runs_partial_rollout() -> None:
    """Segment budgets (in the rollout section or a stage's) are accepted on Ray: episodes
    park on their workers between steps (agentmath/distributed/partial.py)."""
    cfg = _rl(rollout={"segment_tokens": 512, "segment_tool_calls": 2, "max_staleness": 1})
    assert cfg.rollout.segment_tokens == 512 and cfg.ray is not None
    staged = _rl(stages={"stages": [
        {"max_total_tokens": 4096, "max_model_tokens": 2048, "max_tool_calls": 4},
        {"max_total_tokens": 8192, "max_model_tokens": 4096, "max_tool_calls": 8,
         "segment_tokens": 1024}]})
    assert staged.stages.stages[1].segment_tokens == 1024


def test_rl_worker_spec_reaches_the_generators_and_sandboxes() -> None:
    from agentmath.config import LoopConfig
    from agentmath.rl.compose import worker_spec

    loop = LoopConfig(max_tool_calls=5)
    spec = worker_spec(_rl(), loop)
    assert spec.backend == "openai" and spec.loop == loop
    assert spec.settings == BackendSettings("tiny", ["http://a:1", "http://b:2"], timeout_s=30.0,
                                            max_outage_s=300.0, router=RouterConfig())
    probed = worker_spec(_rl(generator={"backend": "openai", "base_urls": ["http://a:1", "http://b:2"],
                                        "router": {"probe_interval_s": 1.5}}), loop)
    assert probed.settings.router == RouterConfig(probe_interval_s=1.5)  # the workers' routers
    assert spec.sandbox_url == ["http://s:8080"]
    one = worker_spec(_rl(generator={"backend": "openai", "base_urls": ["http://a:1"]}), loop)
    assert one.settings.base_url == "http://a:1"
    assert one.settings.model == "tiny"  # the model dir's name


def test_the_engines_policy_goes_with_every_episode_and_the_budgets_with_every_segment(
        ) -> None:
    from agentmath.config import LoopConfig, RolloutConfig
    from agentmath.distributed.engine import RayRolloutEngine
    from agentmath.distributed.worker import EpisodePolicy, WorkerSpec

    spec = WorkerSpec(backend="openai", settings=BackendSettings("m"))
    engine = RayRolloutEngine(spec, RayConfig(),
                              lambda request, index: None, max_in_flight=4)  # type: ignore[arg-type,return-value]
    loop = LoopConfig(max_tool_calls=2)
    engine.set_policy_version(3)
    engine.use_model("policy-v3")
    engine.set_budgets(loop, RolloutConfig())
    assert engine.policy == EpisodePolicy(version=3, model="policy-v3", loop=loop)
    assert engine.version == 3
    engine.set_budgets(loop, RolloutConfig(segment_tokens=64, max_staleness=1))
    assert engine.rollout.segment_tokens == 64 and engine.rollout.max_staleness == 1


class _FakeEngine:
    """RayRolloutEngine's stream contract without a cluster: groups come back in reverse."""

    def __init__(self) -> None:
        from agentmath.config import RolloutConfig

        self.version = 7
        self.rollout = RolloutConfig()
        self.stats: Any = None
        self.calls: list[list[str]] = []

    async def stream(self, requests: list[Any]) -> Any:
        from agentmath.rollout.records import Group, Sample

        self.calls.append([r.group_id for r in requests])
        for request in reversed(requests):
            group = Group(request)
            for i in request.sample_indices:
                group.samples.append(Sample(request.group_id, i, Trajectory(problem="p")))
                self.stats.samples_done += 1
            yield group


async def test_ray_iterations_draw_what_they_need_and_keep_draw_order() -> None:
    from agentmath.distributed.iterations import RayIterations
    from agentmath.rollout.records import GroupRequest
    from agentmath.tasks import Task

    engine = _FakeEngine()
    requests = [GroupRequest(Task(f"p{i}", "x", "1"), samples=2) for i in range(5)]
    iterations = RayIterations(engine, requests)  # type: ignore[arg-type]
    first = await iterations.iteration(3)
    assert [g.request.group_id for g in first.groups] == ["p0", "p1", "p2"]
    assert first.version == 7 and first.stats.samples_done == 6 and not first.exhausted
    second = await iterations.iteration(3)
    assert [g.request.group_id for g in second.groups] == ["p3", "p4"] and second.exhausted
    assert engine.calls == [["p0", "p1", "p2"], ["p3", "p4"]]
    assert iterations.pending_groups() == [] and iterations.parked == 0
    with pytest.raises(ValueError, match="at least 1"):
        await iterations.iteration(0)


def test_cli_rl_ray_with_the_in_process_generator_exits_2_naming_the_field(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from agentmath.cli.main import app

    config = tmp_path / "rl.toml"
    config.write_text('model = "/models/tiny"\n[data]\ndataset = "train.jsonl"\n')
    result = CliRunner().invoke(app, ["rl", "-c", str(config), "--ray", "local",
                                      "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "generator.backend" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()  # refused before anything was written
