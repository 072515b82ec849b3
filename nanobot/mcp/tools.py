"""An MCP server's tool as one of ours: mcp_<server>_<tool>, the server's own schema, approval first."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from nanobot.mcp.connection import CallFailed, ServerConnection
from nanobot.tools.approval import ApprovalRequest
from nanobot.tools.base import Tool, ToolContext, ToolResult
from nanobot.untrusted import fence

MAX_NAME = 64  # what the OpenAI and Anthropic APIs accept for a tool name


def wrapped_name(server: str, tool: str) -> str:
    """mcp_<server>_<tool>, with characters the APIs refuse replaced and long names shortened stably."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", f"mcp_{server}_{tool}")
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - 9]}_{digest}"
    return name


def model_schema(schema: Any) -> dict[str, Any]:
    """The server's input schema as a function-parameters schema (always an object)."""
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    out = dict(schema)
    out["type"] = "object"
    out.setdefault("properties", {})
    return out


def enabled(cfg_names: list[str], server: str, tool: str) -> bool:
    names = set(cfg_names)
    return "*" in names or tool in names or wrapped_name(server, tool) in names


def result_text(result: Any) -> str:
    """The text of a CallToolResult: text parts joined, other parts named."""
    parts: list[str] = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind in ("image", "audio"):
            parts.append(
                f"[{kind}: {getattr(item, 'mimeType', '?')}, {len(getattr(item, 'data', '') or '')} base64 chars]"
            )
        elif kind == "resource":
            resource = item.resource
            parts.append(getattr(resource, "text", None) or f"[resource: {resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource: {item.uri}]")
    structured = getattr(result, "structuredContent", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    return "\n".join(parts) or "(no output)"


class MCPTool(Tool):
    closed_schema = False  # the server's schema, with JSON Schema's own meaning

    def __init__(self, ctx: ToolContext, server: ServerConnection, tool: Any) -> None:
        super().__init__(ctx)
        self.server = server
        self.remote_name = tool.name
        self.name = wrapped_name(server.name, tool.name)
        self.description = (
            tool.description or f"{tool.name} from MCP server {server.name}"
        ).strip()
        self.parameters = model_schema(tool.inputSchema)

    def hint(self, args: dict[str, Any]) -> str:
        """Every argument, not only the first: a server's tool says little by its first alone."""
        shown = ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items()
        ).replace("\n", " ")
        return f"{self.name}({shown[:117] + '...' if len(shown) > 120 else shown})"

    async def run(self, **kwargs: Any) -> ToolResult:
        if not self.server.cfg.trusted:
            preview = json.dumps(kwargs, ensure_ascii=False)
            decision = await self.ctx.approver.approve(
                ApprovalRequest(
                    kind="mcp",
                    summary=f"MCP server {self.server.name} wants to run its tool {self.remote_name}: "
                    f"{preview[:120]}",
                    detail=json.dumps(kwargs, ensure_ascii=False, indent=2),
                    always_key=f"mcp:{self.server.name}:{self.remote_name}",
                    allow_hint=f'"trusted": true in tools.mcpServers.{self.server.name} of the config, or --approve mcp',
                )
            )
            if not decision.allowed:
                return ToolResult(
                    f"Error: not run: {decision.reason or 'the user declined'}", is_error=True
                )
        try:
            result = await self.server.call(self.remote_name, kwargs)
        except CallFailed as exc:
            return ToolResult(f"Error: {exc}", is_error=True)
        text = fence(result_text(result), f"MCP server {self.server.name}, tool {self.remote_name}")
        if getattr(result, "isError", False):
            return ToolResult(f"Error: the tool reported a failure:\n{text}", is_error=True)
        return ToolResult(text)
