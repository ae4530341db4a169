"""Ray scale-out without a cluster: the config, the missing-extra message, resume identity."""

from __future__ import annotations

import sys

import pytest
from pydantic import ValidationError

from agentmath.config import EvalConfig, RayConfig
from agentmath.errors import MissingExtraError
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
    assert spec.base_url == ["http://a:1", "http://b:2"] and spec.format == "markdown"
    assert spec.backend_options == {"max_retries": 7, "timeout_s": 120.0}
    assert spec.sandbox_url == ["http://s:8080"]
    assert spec.sandbox_token_file == "/etc/agentmath/token"  # a path, read on the node
