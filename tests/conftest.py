"""Fixtures shared by every test tier (model, server and cluster fixtures live in
tests/fixtures)."""

from __future__ import annotations

from tests.fixtures.models import tiny_model_dir
from tests.fixtures.ray_cluster import all_workers_ready
from tests.fixtures.vllm_server import vllm_server, vllm_server_handle, vllm_server_pair

__all__ = ["all_workers_ready", "tiny_model_dir", "vllm_server", "vllm_server_handle",
           "vllm_server_pair"]
