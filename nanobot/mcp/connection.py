"""One MCP server: connected in a task of its own, which also closes it.

The SDK's transports are anyio context managers that must be entered and left in the same
task, so `_run` owns them for the server's whole life: it connects, initialises, lists the
tools, reports ready, and waits to be told to stop. Calls come from any task on the loop.
A stdio server inherits only the SDK's minimal environment (PATH, HOME, ...) plus its own
`env`, never our API keys; its stderr goes to a log file, not over the chat.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nanobot.config import MCPServerConfig
from nanobot.errors import CallFailed
from nanobot.paths import ensure_private_dir

STARTUP_TIMEOUT = 20.0  # seconds for a server to start, answer `initialize` and list its tools
MAX_RESTARTS = (
    3  # a server that stopped mid-session is started again on its next call, this many times
)
CALL_GRACE = 5.0  # seconds beyond toolTimeout before a call is abandoned outright
PING_TIMEOUT = 2.0  # after a call timed out: is the server still there at all?


def transport_of(cfg: MCPServerConfig) -> str:
    """nanobot's rule: `type` if given; else stdio with a command, SSE for a URL ending in /sse,
    streamable HTTP for any other URL."""
    if cfg.type:
        return cfg.type
    if cfg.command:
        return "stdio"
    if cfg.url:
        return "sse" if cfg.url.rstrip("/").endswith("/sse") else "streamableHttp"
    return ""


def load_sdk() -> None:
    """Import the SDK (about half a second: pydantic models, anyio) and jsonschema, in a
    worker thread so the chat's prompt stays responsive while the servers start (httpx comes first,
    on the loop's thread: see ServerConnection._run)."""
    import jsonschema  # noqa: F401 - the first argument check then finds it loaded
    import mcp.client.sse  # noqa: F401
    import mcp.client.stdio  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401

    import mcp  # noqa: F401


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe_error(exc: BaseException) -> str:
    exc = _leaf(exc)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timed out"
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, ModuleNotFoundError):
        return f"the Python package {exc.name!r} is missing: reinstall nanobot (pip install -e .)"
    text = str(exc).strip() or type(exc).__name__
    error = getattr(exc, "error", None)  # McpError carries the JSON-RPC error
    if error is not None and getattr(error, "message", None):
        text = error.message
    if _gone(exc):
        return "the server closed the connection (did it exit?)"
    return text.splitlines()[0][:300]


def _gone(exc: BaseException) -> bool:
    """The connection to the server is gone. The SDK says so in one of several ways (which comes
    first is a race): McpError "Connection closed", a closed-stream message, or anyio's closed
    streams, which carry no text at all."""
    import anyio

    leaf = _leaf(exc)
    error = getattr(leaf, "error", None)
    text = str(getattr(error, "message", None) or leaf).lower()
    closed = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)
    return (
        isinstance(leaf, closed)
        or "connection closed" in text
        or ("closed" in text and "stream" in text)
    )


@dataclass
class ServerConnection:
    name: str
    cfg: MCPServerConfig
    workspace: Path
    log_path: Path
    state: str = "starting"  # "starting" | "ready" | "failed" | "stopped"
    error: str = ""
    tools: list[Any] = field(default_factory=list)  # mcp.types.Tool, as listed
    _session: Any = field(default=None, repr=False)
    _ready: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _stop: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _task: asyncio.Task | None = field(default=None, repr=False)
    startup_timeout: float = field(default_factory=lambda: STARTUP_TIMEOUT)
    crashed: bool = False  # it was ready once and then stopped: the next call starts it again
    restarts: int = 0
    _restart_lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def transport(self) -> str:
        return transport_of(self.cfg)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp-{self.name}")

    async def wait_ready(self, timeout: float | None = None) -> bool:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)
        return self.state == "ready"

    async def _run(self) -> None:
        try:
            # httpx (about 60 ms) is imported here, on the loop's thread, not in the worker: the openai
            # SDK looks httpx up in sys.modules while it sends and reads, and one half-imported by
            # another thread makes the user's request fail with AttributeError
            import httpx  # noqa: F401

            await asyncio.to_thread(load_sdk)
            async with contextlib.AsyncExitStack() as stack:
                # asyncio.timeout, not wait_for: the SDK's contexts must stay in this task
                async with asyncio.timeout(self.startup_timeout):
                    await self._connect(stack)
                self.state = "ready"
                self._ready.set()
                await self._stop.wait()
        except asyncio.CancelledError:
            if self.state == "starting":
                self._fail("cancelled while starting")
            raise
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - any failure of a server is reported, never raised
            if self.state == "starting":
                reason = describe_error(exc)
                if isinstance(_leaf(exc), (asyncio.TimeoutError, TimeoutError)):
                    reason = f"did not start within {self.startup_timeout:g}s"
                self._fail(reason + self._where() + self._stderr_tail())
            elif self.state == "ready":
                self._fail(f"stopped: {describe_error(exc)}{self._stderr_tail()}")
        finally:
            self._session = None
            if self.state in ("starting", "ready"):
                self.state = "stopped"
            self._ready.set()

    def _where(self) -> str:
        """For a server reached by URL, where it was looked for (without a query, which may hold a
        token): the SDK's own words ("All connection attempts failed") do not say."""
        if not self.cfg.url or self.transport == "stdio":
            return ""
        url = urlsplit(self.cfg.url)
        return f" ({url.scheme}://{url.netloc.rpartition('@')[2]}{url.path})"

    def _fail(self, reason: str) -> None:
        self.state = "failed"
        self.error = reason

    def _stderr_tail(self) -> str:
        try:
            lines = [
                ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()
            ]
        except OSError:
            return ""
        return f" (server said: {lines[-1][:200]})" if lines else ""

    async def _connect(self, stack: contextlib.AsyncExitStack) -> None:
        from mcp import ClientSession

        kind = self.transport
        if kind == "stdio":
            read, write = await stack.enter_async_context(self._stdio(stack))
        elif kind == "sse":
            from mcp.client.sse import sse_client

            read, write = await stack.enter_async_context(
                sse_client(
                    self.cfg.url, headers=self.cfg.headers or None, timeout=self.startup_timeout
                )
            )
        elif kind == "streamableHttp":
            import httpx  # the SDK's HTTP stack (mcp depends on it)
            from mcp.client.streamable_http import streamable_http_client

            # the SDK's own defaults: 30 s to connect and send, 5 minutes for a held-open response stream
            client = await stack.enter_async_context(
                httpx.AsyncClient(
                    headers=self.cfg.headers or None, timeout=httpx.Timeout(30.0, read=300.0)
                )
            )
            read, write, _ = await stack.enter_async_context(
                streamable_http_client(self.cfg.url, http_client=client)
            )
        elif not kind:
            raise ValueError("neither a command nor a url is configured")
        else:
            raise ValueError(f"unknown type {kind!r} (use stdio, sse or streamableHttp)")
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        tools, cursor = [], None
        while True:
            listed = (
                await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
            )
            tools.extend(listed.tools)
            cursor = listed.nextCursor
            if not cursor:
                break
        self.tools = tools
        self._session = session

    def _stdio(self, stack: contextlib.AsyncExitStack):
        from mcp.client.stdio import stdio_client

        from mcp import StdioServerParameters

        ensure_private_dir(self.log_path.parent)
        # 0600 like every file in the home: a server may print tokens or paths in its errors
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        errlog = stack.enter_context(os.fdopen(fd, "w", encoding="utf-8"))
        folder = Path(self.cfg.cwd).expanduser() if self.cfg.cwd else self.workspace
        if self.cfg.cwd and not folder.is_dir():
            raise ValueError(f"its cwd {folder} is not a folder")
        # None: the workspace is not created yet (`nanobot mcp list` before the first chat)
        cwd = folder if folder.is_dir() else None
        params = StdioServerParameters(
            command=self.cfg.command,
            args=list(self.cfg.args),
            env=dict(self.cfg.env) or None,
            cwd=str(cwd) if cwd else None,
        )
        return stdio_client(params, errlog=errlog)

    async def _restart(self) -> None:
        await self.stop()
        self.restarts += 1
        self.crashed = False
        self.state, self.error, self._session = "starting", "", None
        self._ready, self._stop = asyncio.Event(), asyncio.Event()
        self.start()
        await self.wait_ready()

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """The server's CallToolResult; raises CallFailed when there is none."""
        if self.crashed and self.restarts < MAX_RESTARTS:
            async with self._restart_lock:  # two calls at once start it once
                if self.crashed and self.restarts < MAX_RESTARTS:
                    await self._restart()
        session = self._session
        if session is None or self.state != "ready":
            raise CallFailed(f"MCP server {self.name} is not running ({self.error or self.state})")
        timeout = float(self.cfg.tool_timeout)
        try:
            async with asyncio.timeout(timeout + CALL_GRACE):
                return await session.call_tool(
                    tool, arguments, read_timeout_seconds=timedelta(seconds=timeout)
                )
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001
            reason = describe_error(exc)
            if _is_timeout(exc, reason):
                late = (
                    f"no answer from MCP server {self.name} within {timeout:g}s "
                    f"(tools.mcpServers.{self.name}.toolTimeout)"
                )
                if await self._answers_ping(session):
                    raise CallFailed(late) from None
                # over HTTP a server that died mid-call looks like silence: it no longer answers a ping
                self._fail(f"stopped answering during a call{self._stderr_tail()}")
                self.crashed = True
                raise CallFailed(
                    f"{late}, and it no longer answers at all; {self._again()}"
                ) from None
            await asyncio.sleep(0.05)  # let the transport notice a server that died
            if self.state != "ready" or self._session is None or _gone(exc):
                if self.state == "ready":
                    self._fail(f"stopped during a call: {reason}{self._stderr_tail()}")
                self.crashed = True
                raise CallFailed(
                    f"MCP server {self.name} stopped during the call ({reason}); {self._again()}"
                ) from None
            raise CallFailed(f"MCP server {self.name}: {reason}") from None

    def _again(self) -> str:
        if self.restarts < MAX_RESTARTS:
            return "it is started again for the next call"
        return f"it stopped {self.restarts + 1} times, so its tools stay off until nanobot restarts"

    @staticmethod
    async def _answers_ping(session: Any) -> bool:
        try:
            async with asyncio.timeout(PING_TIMEOUT):
                await session.send_ping()
            return True
        except asyncio.CancelledError:
            raise
        except BaseException:  # noqa: BLE001 - any failure means: not answering
            return False

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._task, 10)


def _is_timeout(exc: BaseException, reason: str) -> bool:
    leaf = _leaf(exc)
    return isinstance(leaf, (asyncio.TimeoutError, TimeoutError)) or "timed out" in reason.lower()
