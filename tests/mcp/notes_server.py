"""A real MCP server for the tests, written with the SDK's own FastMCP API.

Run: python notes_server.py stdio | streamable-http PORT | sse PORT
Every call it receives is appended to $NOTES_CALL_LOG (if set), so a test can prove that a
call did or did not reach the server.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import anyio
from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel, Field


def _log(name: str, detail: str) -> None:
    path = os.environ.get("NOTES_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{name} {detail}\n")


class Point(BaseModel):
    x: float
    y: float


def build(port: int = 0) -> FastMCP:
    server = FastMCP("notes", host="127.0.0.1", port=port or 8000, log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        _log("add", f"{a} {b}")
        return a + b

    @server.tool()
    def lookup(code: Annotated[str, Field(pattern=r"^[A-Z]{3}$")], limit: int | None = None) -> str:
        """Look up an airport by its three-letter code."""
        _log("lookup", code)
        return f"{code}: found (limit {limit})"

    @server.tool()
    def distance(p: Point, q: Point) -> float:
        """Distance between two points."""
        _log("distance", f"{p} {q}")
        return ((p.x - q.x) ** 2 + (p.y - q.y) ** 2) ** 0.5

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer (without blocking the server's other calls)."""
        _log("slow", str(seconds))
        await anyio.sleep(seconds)
        return "woke up"

    @server.tool()
    def crash() -> str:
        """Exit the server process in the middle of the call."""
        _log("crash", "")
        os._exit(3)

    @server.tool()
    def header(name: str, ctx: Context) -> str:
        """The value of one HTTP header of the request that carried this call."""
        request = ctx.request_context.request
        return request.headers.get(name, "(absent)") if request is not None else "(not over HTTP)"

    @server.tool()
    def env_names() -> list[str]:
        """The names of the environment variables this server was started with."""
        return sorted(os.environ)

    @server.tool()
    def fail() -> str:
        """Raise an error inside the tool."""
        raise ValueError("the notebook is locked")

    return server


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    build(port).run(transport=mode)
