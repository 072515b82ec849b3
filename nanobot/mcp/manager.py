"""All the configured MCP servers: started in the background, their tools registered as they come.

The chat's prompt does not wait for them; a turn waits (at most STARTUP_TIMEOUT) for the
servers still starting, so the model sees every tool that could be had. A server that fails
is reported once, in one line, and skipped; the others carry on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nanobot import paths
from nanobot.config import MCPServerConfig
from nanobot.mcp.connection import STARTUP_TIMEOUT, ServerConnection
from nanobot.mcp.tools import MCPTool, enabled, wrapped_name
from nanobot.tools.base import ToolContext
from nanobot.tools.registry import ToolRegistry

Notify = Callable[[str], None]


def log_path(name: str) -> Path:
    return paths.nanobot_home() / "logs" / f"mcp-{name}.log"


@dataclass
class ServerReport:
    name: str
    transport: str
    state: str
    error: str
    tools: list[str]  # registered names
    not_enabled: list[str]  # offered by the server, left out by enabledTools
    unknown_enabled: list[str]  # named in enabledTools, not offered by the server
    trusted: bool


class MCPManager:
    def __init__(
        self,
        servers: dict[str, MCPServerConfig],
        workspace: Path,
        ctx: ToolContext,
        notify: Notify | None = None,
    ) -> None:
        self.ctx = ctx
        self.notify = notify
        self.connections = [
            ServerConnection(name, cfg, workspace, log_path(name)) for name, cfg in servers.items()
        ]
        self._registries: list[ToolRegistry] = []
        self._tasks: list[asyncio.Task] = []
        self.registered: dict[str, list[str]] = {}

    def start(self, registries: list[ToolRegistry]) -> None:
        """Start every server in the background (needs a running event loop)."""
        self._registries = registries
        loop = asyncio.get_running_loop()
        for conn in self.connections:
            conn.start()
            self._tasks.append(
                loop.create_task(self._register_when_ready(conn), name=f"mcp-register-{conn.name}")
            )

    async def _register_when_ready(self, conn: ServerConnection) -> None:
        if not await conn.wait_ready():
            self._say(
                f"MCP server {conn.name} failed to start: {conn.error or conn.state}; skipped "
                f"(`nanobot mcp list` shows it)"
            )
            return
        names = []
        for tool in conn.tools:
            if not enabled(conn.cfg.enabled_tools, conn.name, tool.name):
                continue
            wrapper = MCPTool(self.ctx, conn, tool)
            for registry in self._registries:
                if wrapper.name in registry:
                    self._say(
                        f"MCP server {conn.name}: a tool named {wrapper.name} exists already; skipped"
                    )
                    break
                registry.register(wrapper)
            names.append(wrapper.name)
        self.registered[conn.name] = names

    async def wait_ready(self, timeout: float = STARTUP_TIMEOUT + 1) -> None:
        """Until every server is started (or failed) and its tools are registered."""
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    def starting(self) -> list[str]:
        return [c.name for c in self.connections if c.state == "starting"]

    def reports(self) -> list[ServerReport]:
        out = []
        for conn in self.connections:
            offered = [t.name for t in conn.tools]
            wanted = [n for n in conn.cfg.enabled_tools if n != "*"]
            known = set(offered) | {wrapped_name(conn.name, t) for t in offered}
            out.append(
                ServerReport(
                    conn.name,
                    conn.transport or "?",
                    conn.state,
                    conn.error,
                    self.registered.get(conn.name, []),
                    [t for t in offered if not enabled(conn.cfg.enabled_tools, conn.name, t)],
                    [n for n in wanted if n not in known] if conn.state == "ready" else [],
                    conn.cfg.trusted,
                )
            )
        return out

    def _say(self, text: str) -> None:
        if self.notify is not None:
            self.notify(text)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*(c.stop() for c in self.connections), return_exceptions=True)
