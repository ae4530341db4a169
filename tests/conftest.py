"""Fixtures shared by every test tier."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tool_model_dir() -> Path:
    """A tiny model trained (once, then cached) to emit <code> blocks; see fixtures/tool_model."""
    pytest.importorskip("torch", reason="needs the 'train' extra (torch, transformers)")
    from tests.fixtures.tool_model import build_tool_model

    return build_tool_model()
