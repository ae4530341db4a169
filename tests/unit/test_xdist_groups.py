"""How the suite splits over xdist workers (tests/conftest.py): every test of a session-wide
server shares a worker, so the server starts once."""

from __future__ import annotations

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
