"""The fork server MCP test servers come from (tests/mcp/forked_notes.py): what they import, and
the interpreter settings they have."""

from __future__ import annotations

import os

import forkserver

# What notes_server.py imports on either transport, imported once (a fresh server spends about
# 0.6 s of CPU on it before it answers).
SDK_PRELOAD = (
    "anyio",
    "pydantic",
    "mcp.server.fastmcp",
    "rich.logging",
    "anyio._core._sockets",
    "anyio._core._streams",
    "uvicorn.protocols.http.h11_impl",
)


def sdk_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this environment) with the interpreter settings forked_notes.py has under a
    stdio client's minimal one: no PYTHON*, LANG or LC_*, so Python sets LC_CTYPE=C.UTF-8 itself
    (PEP 538)."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if not forkserver._interpreter_variable(k)
    }
    return {**env, "LC_CTYPE": "C.UTF-8"}


def sdk_forkserver() -> forkserver.ForkServer:
    """The fork server for notes servers (forked_notes.py asks it for each one)."""
    return forkserver.shared().server_for(sdk_env(), preload=SDK_PRELOAD)
