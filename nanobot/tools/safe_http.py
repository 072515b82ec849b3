"""SSRF-safe HTTP fetching for tools that take URLs from the model.

A URL chosen by the model (or by a page it read) must never reach the machine's own
services, the LAN or a cloud metadata endpoint. So every hop is checked the same way:
http/https only; the host is resolved here and refused if ANY address is non-public;
then the connection goes to the checked address itself (URL host rewritten to the IP,
Host header and TLS SNI keep the name), so a second DNS answer cannot rebind it.
Redirects are followed by hand, at most `max_redirects`, each hop checked again.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx2

from nanobot.errors import ToolError
from nanobot.tls import shared_tls_context

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]
Gate = Callable[[str], Awaitable[None]]  # raises ToolError when a hop's URL may not be contacted

DEFAULT_MAX_BYTES = 2 * 1024 * 1024
DEFAULT_USER_AGENT = "Mozilla/5.0 (compatible; nanobot/0.1; +https://github.com/HKUDS/nanobot)"
_REDIRECT_CODES = {301, 302, 303, 307, 308}

# Ranges that older Pythons' is_private/is_global get wrong or that must be spelled out.
_BLOCKED_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
        "100::/64",
        "2001:db8::/32",
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a v6 address tunnels to (mapped, 6to4, Teredo, NAT64), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal_reason(ip: IPAddress) -> str | None:
    """Why connecting to `ip` is refused by default, or None if it is a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            reason = refusal_reason(inner)
            return f"{reason} (embedded in {ip})" if reason else None
    for label in ("loopback", "private", "link_local", "multicast", "unspecified", "reserved"):
        if getattr(ip, f"is_{label}"):
            return label.replace("_", "-")
    if any(ip.version == net.version and ip in net for net in _BLOCKED_NETWORKS):
        return "non-public"
    if not ip.is_global:
        return "non-public"
    return None


@dataclass(frozen=True)
class AddressPolicy:
    """Which resolved addresses may be contacted.

    The default refuses every non-public address. `allow` lists networks to let through
    anyway (tests serving pages on 127.0.0.2, or a user who wants a LAN host).
    """

    allow_private: bool = False
    allow: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def allowing(cls, *networks: str) -> AddressPolicy:
        return cls(allow=tuple(ipaddress.ip_network(n) for n in networks))

    def check(self, ip: IPAddress) -> str | None:
        if self.allow_private or any(ip.version == n.version and ip in n for n in self.allow):
            return None
        return refusal_reason(ip)


async def system_resolver(host: str, port: int) -> list[str]:
    """All addresses the OS resolver gives for host (run in a thread: getaddrinfo blocks)."""
    infos = await asyncio.to_thread(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


@dataclass
class FetchResult:
    url: str  # the final URL, after redirects
    status: int
    headers: httpx2.Headers
    content: bytes
    truncated: bool  # the body was longer than max_bytes and was cut off
    redirects: list[str] = field(default_factory=list)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def charset(self) -> str | None:
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                return value.strip("\"' ")
        return None


class SafeFetcher:
    """GET a URL the model chose, refusing private targets on every hop."""

    def __init__(
        self,
        policy: AddressPolicy | None = None,
        *,
        resolver: Resolver | None = None,
        max_redirects: int = 5,
        max_bytes: int = DEFAULT_MAX_BYTES,
        timeout: float = 20.0,
        user_agent: str = DEFAULT_USER_AGENT,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.policy = policy or AddressPolicy()
        self.resolver = resolver or system_resolver
        self.max_redirects = max_redirects
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.user_agent = user_agent
        self.verify = verify  # an SSLContext trusting a private CA (tests, corporate proxies)

    async def check_url(self, url: str | httpx2.URL) -> tuple[httpx2.URL, str]:
        """Validate one hop; return the parsed URL and the checked IP to connect to."""
        try:
            parsed = httpx2.URL(str(url))
        except Exception as exc:
            raise ToolError(f"invalid URL {url!r}: {exc}") from exc
        if parsed.scheme not in ("http", "https"):
            raise ToolError(f"refused {url}: only http and https URLs can be fetched")
        host = parsed.raw_host.decode("ascii")  # punycode for IDNA names
        if not host:
            raise ToolError(f"invalid URL {url!r}: no host")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            addresses = await self._resolve(host, port)
        for ip in addresses:
            reason = self.policy.check(ip)
            if reason:
                raise ToolError(
                    f"refused {url}: {host} resolves to {ip}, a {reason} address; "
                    "only public internet hosts are contacted"
                )
        return parsed, str(addresses[0])

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        try:
            raw = await self.resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise ToolError(f"cannot resolve host {host!r}: {exc}") from exc
        addresses: list[IPAddress] = []
        for text in raw:
            # Scoped v6 addresses ("fe80::1%eth0") carry a zone id ip_address() rejects.
            try:
                addresses.append(ipaddress.ip_address(text.split("%", 1)[0]))
            except ValueError as exc:
                raise ToolError(f"cannot resolve host {host!r}: odd address {text!r}") from exc
        if not addresses:
            raise ToolError(f"cannot resolve host {host!r}: no addresses")
        return addresses

    async def fetch(
        self, url: str, *, headers: dict[str, str] | None = None, gate: Gate | None = None
    ) -> FetchResult:
        """Follow up to max_redirects redirects; read at most max_bytes of the final body. `gate`
        judges each hop's URL before its name is resolved (the session's domain approvals)."""
        try:
            return await asyncio.wait_for(
                self._fetch(url, headers or {}, gate), timeout=self.timeout * 2
            )
        except TimeoutError as exc:
            raise ToolError(f"fetching {url} timed out") from exc

    async def _fetch(
        self, url: str, extra_headers: dict[str, str], gate: Gate | None = None
    ) -> FetchResult:
        redirects: list[str] = []
        current = url
        # trust_env=False: a proxy would do its own DNS lookup and undo the address check.
        # verify=True: the process's one context (nanobot/tls.py), not a new load of the CA file
        verify = shared_tls_context() if self.verify is True else self.verify
        async with httpx2.AsyncClient(
            trust_env=False, follow_redirects=False, timeout=self.timeout, verify=verify
        ) as client:
            while True:
                if (
                    gate is not None
                ):  # before any DNS query: a refused domain is never even looked up
                    await gate(current)
                parsed, ip = await self.check_url(current)
                request = self._pinned_request(client, parsed, ip, extra_headers)
                try:
                    response = await client.send(request, stream=True)
                except httpx2.HTTPError as exc:
                    raise ToolError(f"fetching {current} failed: {_describe(exc)}") from exc
                try:
                    if response.status_code in _REDIRECT_CODES and "location" in response.headers:
                        if len(redirects) >= self.max_redirects:
                            raise ToolError(
                                f"refused {url}: more than {self.max_redirects} redirects"
                            )
                        # Resolve against the name-based URL, not the pinned IP one.
                        current = str(parsed.join(response.headers["location"]))
                        redirects.append(current)
                        continue
                    content, truncated = await self._read_capped(response, current)
                    return FetchResult(
                        url=str(parsed),
                        status=response.status_code,
                        headers=response.headers,
                        content=content,
                        truncated=truncated,
                        redirects=redirects,
                    )
                finally:
                    await response.aclose()

    def _pinned_request(
        self, client: httpx2.AsyncClient, parsed: httpx2.URL, ip: str, extra: dict[str, str]
    ) -> httpx2.Request:
        headers = {
            "User-Agent": self.user_agent,
            "Accept": "text/html,application/xhtml+xml,application/json;q=0.9,text/*;q=0.8,*/*;q=0.5",
            **extra,
            "Host": parsed.netloc.decode("ascii"),
        }
        extensions = {}
        if parsed.scheme == "https":
            host = parsed.raw_host.decode("ascii")
            try:
                ipaddress.ip_address(host)
            except ValueError:
                extensions["sni_hostname"] = host  # the certificate is checked against the name
        return client.build_request(
            "GET", parsed.copy_with(host=ip), headers=headers, extensions=extensions
        )

    async def _read_capped(self, response: httpx2.Response, url: str) -> tuple[bytes, bool]:
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_bytes():
                if size + len(chunk) > self.max_bytes:
                    chunks.append(chunk[: self.max_bytes - size])
                    # Stop here: closing the unread stream drops the connection.
                    return b"".join(chunks), True
                chunks.append(chunk)
                size += len(chunk)
        except httpx2.HTTPError as exc:
            raise ToolError(f"reading {url} failed: {_describe(exc)}") from exc
        return b"".join(chunks), False


def _describe(exc: httpx2.HTTPError) -> str:
    if isinstance(exc, httpx2.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx2.ConnectError):
        return f"could not connect ({exc})" if str(exc) else "could not connect"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
