"""What a tool is. How to add one: subclass Tool, set name/description/parameters,
implement `run`, and register it in nanobot/app.py (the one place that wires tools).

A tool failure is a result the model reads (is_error=True), never an exception that
ends the turn: raise ToolError inside `run` and the registry turns it into an error result.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from nanobot.policy.egress import EgressPolicy
from nanobot.sandbox import Confinement, Limits, choose
from nanobot.tools.approval import Approver, RefuseApprover
from nanobot.tools.exec_rules import ExecRules


@dataclass
class ToolResult:
    content: str
    is_error: bool = False


@dataclass
class ToolContext:
    """What every tool may know about where and how it runs."""

    workspace: Path
    restrict_to_workspace: bool = False  # refuse paths outside the workspace
    exec_enabled: bool = True
    exec_timeout: float = 60.0  # seconds before exec kills the whole process group
    secret_env_names: frozenset[str] = field(default_factory=frozenset)  # removed from exec's env
    approver: Approver = field(
        default_factory=RefuseApprover
    )  # who decides risky actions (see tools/approval.py)
    confinement: Confinement = field(
        default_factory=choose
    )  # how exec is sandboxed (see nanobot/sandbox)
    exec_rules: ExecRules = field(default_factory=ExecRules)  # allow / ask / deny patterns, network
    exec_limits: Limits = field(default_factory=Limits)  # processes, file size, memory per command
    egress: EgressPolicy = field(
        default_factory=EgressPolicy
    )  # which domains web_fetch may contact (policy/egress.py)


class Tool(ABC):
    # set on the class by a built-in tool, on the instance by an MCP tool
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments (type "object")
    # unknown argument names are refused unless the schema allows them; MCP tools use the
    # standard JSON-schema meaning instead (tools/schema_check.py)
    closed_schema: ClassVar[bool] = True

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx = ctx

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool schema sent to the model."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def hint(self, args: dict[str, Any]) -> str:
        """A short line shown while the tool runs, e.g. read_file("notes.md")."""
        first = next(iter(args.values()), None) if args else None
        if first is None:
            return f"{self.name}()"
        text = first if isinstance(first, str) else json.dumps(first, ensure_ascii=False)
        text = text.replace("\n", " ")
        if len(text) > 60:
            text = text[:57] + "..."
        return f'{self.name}("{text}")' if isinstance(first, str) else f"{self.name}({text})"

    @abstractmethod
    async def run(self, **kwargs: Any) -> str | ToolResult:
        """Do the work; return text for the model or raise ToolError."""
