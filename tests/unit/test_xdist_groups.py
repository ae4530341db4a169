"""How the suite splits over xdist workers (tests/conftest.py): every test of a session-wide
server shares a worker, so the server starts once."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import xdist_group_of


def test_vllm_tests_share_a_worker_by_marker_or_fixture() -> None:
    assert xdist_group_of({"vllm", "integration"}, set()) == "vllm"
    for fixture in ("vllm_server", "vllm_server_handle", "vllm_server_pair"):
        assert xdist_group_of({"integration"}, {fixture, "tmp_path"}) == "vllm"
    assert xdist_group_of({"vllm", "ray"}, set()) == "vllm"  # one worker for either server


def test_ray_tests_share_a_worker_and_the_rest_spread() -> None:
    assert xdist_group_of({"ray", "slow"}, {"tiny_model_dir"}) == "ray"
    assert xdist_group_of({"integration", "slow"}, {"tiny_model_dir", "tmp_path"}) is None
    assert xdist_group_of(set(), set()) is None


def test_loadgroup_keeps_a_group_on_one_worker(tmp_path: Path) -> None:
    """pytest-xdist's loadgroup really groups, for a module's ``pytestmark`` and for a mark
    added by a conftest hook as tests/conftest.py adds them (pytest 9.2 broke it silently:
    pytest-dev/pytest-xdist#1386, hence the pin in pyproject.toml)."""
    pytest.importorskip("xdist")
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        if item.name.startswith('test_dyn'):\n"
        "            item.add_marker(pytest.mark.xdist_group('dyn'))\n")
    (tmp_path / "test_static.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.xdist_group('static')\n\n"
        + "".join(f"def test_s{i}():\n    pass\n\n" for i in range(4)))
    (tmp_path / "test_dynamic.py").write_text(
        "".join(f"def test_dyn{i}():\n    pass\n\n" for i in range(4)))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "loadgroup", "-v", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    ran = re.findall(r"\[(gw\d)\].*PASSED \S+::(test_\w+)@(\w+)", proc.stdout)
    assert len(ran) == 8, proc.stdout[-2000:]
    workers = {group: {w for w, _, g in ran if g == group} for group in ("static", "dyn")}
    assert all(len(w) == 1 for w in workers.values()), ran
