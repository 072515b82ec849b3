"""Fixtures for the core tool tests: a throwaway workspace and a context factory."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanobot.tools.base import ToolContext


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace folder beside (not inside) the fake home."""
    root = tmp_path / "workspace"
    root.mkdir()
    return root


@pytest.fixture
def make_ctx(ws: Path):
    def make(**overrides) -> ToolContext:
        return ToolContext(workspace=ws, **overrides)

    return make
