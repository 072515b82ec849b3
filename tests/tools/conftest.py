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


class ScriptedApprover:
    """Answers approval requests from a list ('y' allow, anything else refuses with that reason)
    and records every request it was asked."""

    def __init__(self, *answers: str, default: str = "y") -> None:
        self.answers = list(answers)
        self.default = default
        self.requests = []

    async def approve(self, request):
        from nanobot.tools.approval import Decision

        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else self.default
        return Decision(True) if answer == "y" else Decision(False, answer)


@pytest.fixture
def approver():
    return ScriptedApprover
