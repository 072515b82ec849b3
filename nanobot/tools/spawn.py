"""The spawn tool: start a background subagent and return at once."""

from __future__ import annotations

from typing import Any, Protocol

from nanobot.errors import ToolError
from nanobot.tools.base import Tool, ToolContext


class Spawner(Protocol):
    """What starts a helper (nanobot.agent.subagents.SubagentManager is one)."""

    def spawn(self, task: str, label: str | None = None) -> tuple[str, str]:
        """Start `task` in the background; returns (id, label) at once."""


class SpawnTool(Tool):
    name = "spawn"
    description = (
        "Start a background subagent for a longer, independent task (research, a multi-step change in one "
        "area). It has file, shell and web tools, runs while you keep talking with the user, and its report "
        "comes back into this conversation when it finishes. Give it a complete, self-contained task."
    )
    parameters = {
        "type": "object",
        "properties": {
            "task": {
                "type": "string",
                "description": "The full task, with everything the subagent needs to know",
            },
            "label": {"type": "string", "description": "A short name shown to the user"},
        },
        "required": ["task"],
    }

    def __init__(self, ctx: ToolContext, manager: Spawner) -> None:
        super().__init__(ctx)
        self.manager = manager

    def hint(self, args: dict[str, Any]) -> str:
        return f'spawn("{args.get("label") or str(args.get("task", ""))[:40]}")'

    async def run(self, task: str = "", label: str | None = None, **_: Any) -> str:
        if not task.strip():
            raise ToolError("spawn needs a non-empty task")
        sub_id, label = self.manager.spawn(task, label)
        return (
            f"started {label} (id {sub_id}). It runs in the background; its report will arrive in this "
            "conversation when it finishes. Tell the user it has started."
        )
