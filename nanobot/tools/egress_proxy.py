"""Network egress by domain for exec: a loopback HTTP proxy, owned by nanobot for one command.

A command that was allowed the network (tools.exec.network true, or "ask" and approved) gets
HTTP_PROXY / HTTPS_PROXY / ALL_PROXY pointing here, and the sandbox lets it open TCP connections
to this port only (sandbox/confine.py: a Landlock network rule, a seccomp filter refusing UDP and
raw sockets). Every connection asks the question web_fetch asks, in the same words and with the
same session answers (`may_contact` below, policy/egress.py judging):
1. a URL or host carrying a secret is refused outright;
2. an allowed domain (tools.web.allowDomains, named by the user, `--approve web-domain`, an
   earlier "always") goes through; any other is asked about (in the chat, while the command waits;
   one-shot mode refuses it and the refusal summary lists it);
3. only then is the name resolved, and the address checked as web_fetch checks it (no loopback,
   private or link-local targets; tools/safe_http.py); the proxy connects to that checked address.
`CONNECT host:port` (https) is a tunnel; an absolute-URI request (`GET http://host/path`) is
forwarded with `Connection: close`, one request per connection. The proxy runs on nanobot's
event loop, so a question it asks goes through the session's approver like any other, one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from urllib.parse import urlsplit

from nanobot.errors import ToolError
from nanobot.policy.egress import EgressPolicy
from nanobot.tools.approval import ApprovalRequest, Approver, approve_flag_hint
from nanobot.tools.safe_http import SafeFetcher

__all__ = ["EgressProxy", "may_contact"]

_HEAD_LIMIT = 64 * 1024  # bytes of a request line and headers
_HEAD_WITHIN = 30.0  # seconds for a client to send its request head
_CONNECT_WITHIN = 20.0  # seconds to connect to the checked address
_HOP_HEADERS = {
    "proxy-connection",
    "proxy-authorization",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
}


async def may_contact(
    approver: Approver,
    egress: EgressPolicy,
    url: str,
    *,
    who: str = "web_fetch",
    outcome: str = "fetched",
    detail: str = "",
) -> None:
    """The one egress decision, for web_fetch's every hop and exec's every proxied connection:
    judged by the session's EgressPolicy, a new domain asked about (kind web-domain, "always" per
    domain); raises ToolError when it may not be contacted. No DNS query happens here."""
    verdict = egress.judge(url)
    if verdict.refused:
        raise ToolError(f"refused {url}: {verdict.refused}; it was not {outcome}")
    if verdict.allowed:
        return
    domain = verdict.domain
    decision = await approver.approve(
        ApprovalRequest(
            "web-domain",
            f"{who} wants to contact {domain}, a domain not approved in this session: {url}",
            detail=detail or url,
            always_key=f"web-domain:{domain}",
            allow_hint=f"{approve_flag_hint('web-domain')}, or add {domain!r} to tools.web.allowDomains",
        )
    )
    if not decision.allowed:
        why = f": {decision.reason}" if decision.reason else ""
        raise ToolError(f"{url} was not {outcome}; contacting {domain} was refused{why}")


def default_checker() -> SafeFetcher:
    """The address checks of web_fetch: public hosts only, the system resolver. Tests that run the
    whole assistant replace this function to reach a loopback site by name; no setting reaches it."""
    return SafeFetcher()


class EgressProxy:
    """One command's proxy: listen (`start`, or `serve_from` the command's own network namespace),
    give the command `env()`, `close()` after it; `note()` says what was refused."""

    def __init__(
        self,
        approver: Approver,
        egress: EgressPolicy,
        command: str = "",
        checker: SafeFetcher | None = None,
    ) -> None:
        self.approver = approver
        self.egress = egress
        self.command = command  # shown with each question
        self.checker = (
            checker or default_checker()
        )  # resolves and checks addresses, as web_fetch does
        self.port = 0
        self.refused: dict[str, str] = {}  # host -> why, for the note after the command
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._channel: socket.socket | None = None

    async def start(self) -> int:
        """Listen on a free port of the host's loopback (the sandbox then holds TCP connect to it)."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=_HEAD_LIMIT)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def serve_from(self, channel: socket.socket, port: int) -> None:
        """Serve the listener the command's own network namespace sends over `channel` on `port`
        (sandbox/keeper.py's egress_listener): the command reaches nothing else."""
        self.port, self._channel = port, channel
        loop = asyncio.get_running_loop()
        channel.setblocking(False)
        loop.add_reader(channel.fileno(), self._adopt)

    def _adopt(self) -> None:
        channel, self._channel = self._channel, None
        if channel is None:
            return
        asyncio.get_running_loop().remove_reader(channel.fileno())
        try:
            _, fds, _, _ = socket.recv_fds(channel, 16, 1)
        except OSError:
            return
        if fds:
            task = asyncio.ensure_future(self._listen(socket.socket(fileno=fds[0])))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _listen(self, listener: socket.socket) -> None:
        self._server = await asyncio.start_server(self._serve, sock=listener, limit=_HEAD_LIMIT)

    def env(self, port: int, *, own_loopback: bool = False) -> dict[str, str]:
        """What the command's environment gets: every proxy variable pointing here, and no exceptions
        but, in a network namespace of its own (`own_loopback`), that loopback (a server the command
        starts itself)."""
        url = f"http://127.0.0.1:{port}"
        names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
        direct = "localhost,127.0.0.1,::1" if own_loopback else ""
        return {**dict.fromkeys(names, url), "NO_PROXY": direct, "no_proxy": direct}

    def close(self) -> None:
        """Stop listening and drop every connection still open (a question still waiting is cancelled)."""
        if self._channel is not None:
            asyncio.get_running_loop().remove_reader(self._channel.fileno())
            self._channel = None
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()

    def note(self) -> str:
        """A line for the command's result naming the hosts the proxy refused, and why."""
        if not self.refused:
            return ""
        parts = "; ".join(f"{host}: {why}" for host, why in self.refused.items())
        return f"\n[network: nanobot's egress proxy refused {len(self.refused)} host(s): {parts}]"

    # --- one client connection -------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (
            OSError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ValueError,
        ):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_WITHIN)
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = (lines[0].split(" ") + ["", "", ""])[:3]
        if method.upper() == "CONNECT":
            host, port = _host_port(target, 443)
            url = f"https://{_bracket(host)}:{port}/"
        else:
            url = target
            parts = urlsplit(target)
            if parts.scheme.lower() != "http" or not parts.hostname:
                await _reply(
                    writer,
                    400,
                    "send http:// URLs in full (a proxy request), https through CONNECT",
                )
                return
            host, port = parts.hostname, parts.port or 80
        try:
            await may_contact(
                self.approver,
                self.egress,
                url,
                who="a command (exec)",
                outcome="contacted",
                detail=f"{url}\ncommand: {self.command}" if self.command else url,
            )
            _, ip = await self.checker.check_url(url)  # names are resolved only now, once allowed
        except ToolError as exc:
            self.refused.setdefault(host.lower(), exc.message)
            await _reply(writer, 403, exc.message)
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(ip, port), _CONNECT_WITHIN
            )
        except (OSError, TimeoutError) as exc:
            await _reply(
                writer, 502, f"could not connect to {host}:{port} ({exc or type(exc).__name__})"
            )
            return
        try:
            if method.upper() == "CONNECT":
                writer.write(
                    f"{version or 'HTTP/1.1'} 200 Connection established\r\n\r\n".encode("latin-1")
                )
                await writer.drain()
            else:
                up_writer.write(_origin_form(method, target, version, lines[1:]))
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()


def _host_port(target: str, default: int) -> tuple[str, int]:
    host, sep, port = target.rpartition(":")
    if not sep or host.count(":") and not host.endswith("]"):  # no port, or a bare IPv6 address
        host, port = target, str(default)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad CONNECT target {target!r}")
    return host, int(port)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _origin_form(method: str, target: str, version: str, headers: list[str]) -> bytes:
    """The request as the origin server expects it: path only, no proxy or hop-by-hop headers."""
    parts = urlsplit(target)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kept = [h for h in headers if h and h.split(":", 1)[0].strip().lower() not in _HOP_HEADERS]
    return "\r\n".join(
        [f"{method} {path} {version or 'HTTP/1.1'}", *kept, "Connection: close", "", ""]
    ).encode("latin-1")


async def _reply(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = f"nanobot egress proxy: {text}\n".encode(errors="replace")
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()
