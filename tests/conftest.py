"""Fixtures shared by every test tier (model and server fixtures live in tests/fixtures)."""

from __future__ import annotations

from tests.fixtures.models import tiny_model_dir
from tests.fixtures.vllm_server import vllm_server, vllm_server_pair

__all__ = ["tiny_model_dir", "vllm_server", "vllm_server_pair"]
