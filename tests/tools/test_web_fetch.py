"""web_fetch against real local servers: extraction, caps, redirects and SSRF refusals.

Pages are served on 127.0.0.2, which the tests' policy allows explicitly. The canary
listens on 127.0.0.1 (and ::1), which stays forbidden: it counts every TCP connection
it accepts, so "refused without contacting the target" is checked at the socket level.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from nanobot.errors import ToolError
from nanobot.policy.egress import EgressPolicy
from nanobot.tools.base import ToolContext
from nanobot.tools.safe_http import AddressPolicy, SafeFetcher, refusal_reason
from nanobot.tools.web import UNTRUSTED_BANNER, WebFetchTool

from tls_helpers import record_ca_loads, self_signed

SITE_HOST = "127.0.0.2"
ARTICLE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Tidal Power in the Bay of Fundy | Coastal News</title></head>
<body>
<header><nav class="menu"><a href="/">Home</a> | <a href="/sport">NAVSPORT</a> | <a href="/shop">NAVSHOP</a></nav></header>
<div class="ad banner sponsored">ADVERT: Buy cheap watches today!</div>
<aside class="sidebar"><h3>Trending</h3><ul><li><a href="/x">SIDEBAR celebrity gossip</a></li></ul></aside>
<main><article class="post-content">
<h1>Tidal power comes of age in the Bay of Fundy</h1>
<p>The Bay of Fundy has the highest tides in the world, rising up to sixteen metres twice a day.
Engineers have long dreamed of turning that motion into electricity, and a new turbine array
installed this spring is finally delivering steady power to the grid.</p>
<h2>How the turbines work</h2>
<p>Each turbine sits on the sea floor and spins in both directions as the tide floods and ebbs.
Unlike wind, the tide is predictable years in advance, which makes grid planning far easier.</p>
<p>Operators report that the array produced <strong>more than 1,200 megawatt-hours</strong> in its first
quarter, enough for roughly four hundred homes. Fishermen remain cautious about the effect on fish.</p>
<ul><li>Predictable output</li><li>Low visual impact</li><li>High maintenance costs</li></ul>
<p>Read the <a href="https://example.org/report">full technical report</a> for details.</p>
</article></main>
<footer class="site-footer"><p>FOOTERNOTE Copyright 2026 Coastal News. All rights reserved.</p>
<a href="/privacy">Privacy</a> <a href="/terms">Terms</a></footer>
</body></html>
"""


class CountingServer(ThreadingHTTPServer):
    """An HTTP server that counts accepted connections and bytes it managed to send."""

    daemon_threads = True
    block_on_close = False

    def __init__(
        self, host: str, routes: dict[str, Callable], family: int = socket.AF_INET
    ) -> None:
        self.address_family = family
        self.routes = routes
        self.connections = 0
        self.bytes_sent = 0
        self.finished = threading.Event()
        super().__init__((host, 0), Handler)

    def verify_request(self, request, client_address) -> bool:
        self.connections += 1
        return True

    @property
    def port(self) -> int:
        return self.server_address[1]


class Handler(BaseHTTPRequestHandler):
    server: CountingServer

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        route = self.server.routes.get(path) or self.server.routes.get("*")
        if route is None:
            self.reply(404, b"not found", "text/plain")
            return
        route(self)

    def reply(
        self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[..., CountingServer]]:
    servers: list[CountingServer] = []

    def start(
        host: str = SITE_HOST,
        routes: dict | None = None,
        family: int = socket.AF_INET,
        tls: ssl.SSLContext | None = None,
    ) -> CountingServer:
        server = CountingServer(host, routes or {}, family)
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def canary(serve) -> CountingServer:
    return serve("127.0.0.1", {"*": lambda h: h.reply(200, b"SECRET-INTERNAL-DATA", "text/plain")})


def site_fetcher(**kwargs) -> SafeFetcher:
    """Allows only the page server's address; loopback 127.0.0.1 stays forbidden."""
    return SafeFetcher(AddressPolicy.allowing(f"{SITE_HOST}/32"), **kwargs)


def fetch_tool(fetcher: SafeFetcher | None = None) -> WebFetchTool:
    # every domain approved: these tests are about the address checks (test_egress.py: domains)
    return WebFetchTool(
        ToolContext(workspace=Path("."), egress=EgressPolicy(("*",))),
        fetcher=fetcher or site_fetcher(),
    )


def run(coro):
    return asyncio.run(coro)


# --- extraction ------------------------------------------------------------------


def test_article_is_extracted_as_markdown_without_page_chrome(serve) -> None:
    site = serve(
        routes={"/article": lambda h: h.reply(200, ARTICLE.encode(), "text/html; charset=utf-8")}
    )
    out = run(fetch_tool().run(url=f"http://{SITE_HOST}:{site.port}/article"))

    assert out.startswith(UNTRUSTED_BANNER)
    assert "untrusted" in out.splitlines()[0].lower()
    assert f"URL: http://{SITE_HOST}:{site.port}/article" in out
    assert "Status: 200" in out
    assert "Title: Tidal power" in out or "Title: Tidal Power" in out
    assert "# Tidal power comes of age" in out
    assert "## How the turbines work" in out
    assert "**more than 1,200 megawatt-hours**" in out
    assert "[full technical report](https://example.org/report)" in out
    assert "highest tides in the world" in out
    for noise in ("NAVSPORT", "NAVSHOP", "ADVERT", "SIDEBAR", "FOOTERNOTE", "Privacy"):
        assert noise not in out
    assert "<p>" not in out


def test_text_mode_returns_plain_text(serve) -> None:
    site = serve(routes={"/article": lambda h: h.reply(200, ARTICLE.encode(), "text/html")})
    out = run(fetch_tool().run(url=f"http://{SITE_HOST}:{site.port}/article", extractMode="text"))
    assert "highest tides in the world" in out
    assert "**" not in out and "](" not in out and "# Tidal" not in out
    assert "FOOTERNOTE" not in out


def test_json_passes_through(serve) -> None:
    payload = {"city": "Zürich", "temps": [3, 5, 8], "nested": {"ok": True}}
    site = serve(
        routes={"/api": lambda h: h.reply(200, json.dumps(payload).encode(), "application/json")}
    )
    out = run(fetch_tool().run(url=f"http://{SITE_HOST}:{site.port}/api"))
    body = out.split('">\n', 1)[1].split("\n</untrusted-data>", 1)[0]  # inside the fence
    assert json.loads(body) == payload
    assert "Extractor: json" in out
    assert f'<untrusted-data source="web_fetch http://{SITE_HOST}:{site.port}/api">' in out


def test_plain_text_passes_through_and_binary_is_refused(serve) -> None:
    site = serve(
        routes={
            "/notes.txt": lambda h: h.reply(200, b"line one\nline two\n", "text/plain"),
            "/pic.png": lambda h: h.reply(200, b"\x89PNG\r\n\x1a\n" + b"\0" * 100, "image/png"),
        }
    )
    out = run(fetch_tool().run(url=f"http://{SITE_HOST}:{site.port}/notes.txt"))
    assert "line one\nline two" in out
    with pytest.raises(ToolError, match="image/png"):
        run(fetch_tool().run(url=f"http://{SITE_HOST}:{site.port}/pic.png"))


def test_max_chars_truncates_with_a_note(serve) -> None:
    text = "".join(f"{i:05d} " for i in range(5000))
    site = serve(routes={"/long": lambda h: h.reply(200, text.encode(), "text/plain")})
    out = run(fetch_tool().run(url=f"http://{SITE_HOST}:{site.port}/long", maxChars=500))
    body = out.split('">\n', 1)[1].split("\n</untrusted-data>", 1)[0]  # inside the fence
    assert len(body) == 500
    assert "showing 500 of 30,000 characters" in out


def test_http_errors_and_dead_ports_become_tool_errors(serve) -> None:
    site = serve(routes={})
    with pytest.raises(ToolError, match="HTTP 404"):
        run(fetch_tool().run(url=f"http://{SITE_HOST}:{site.port}/missing"))
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind((SITE_HOST, 0))
        dead_port = sock.getsockname()[1]
    with pytest.raises(ToolError, match="could not connect"):
        run(fetch_tool().run(url=f"http://{SITE_HOST}:{dead_port}/"))
    with pytest.raises(ToolError, match="cannot resolve"):
        run(fetch_tool(site_fetcher(resolver=_fail_resolver)).run(url="http://nowhere.invalid/"))


async def _fail_resolver(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


# --- size cap --------------------------------------------------------------------


def test_huge_body_is_not_read_fully(serve) -> None:
    total = 10 * 1024 * 1024
    chunk = b"x" * 65536

    def huge(h: Handler) -> None:
        # A small send buffer keeps the kernel from absorbing the body for us.
        h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(total))
        h.end_headers()
        try:
            for _ in range(total // len(chunk)):
                h.wfile.write(chunk)
                h.server.bytes_sent += len(chunk)
        except OSError:
            pass
        finally:
            h.server.finished.set()

    site = serve(routes={"/huge": huge})
    fetcher = site_fetcher(max_bytes=256 * 1024)
    result = run(fetcher.fetch(f"http://{SITE_HOST}:{site.port}/huge"))
    assert result.truncated
    assert len(result.content) == 256 * 1024

    assert site.finished.wait(10), "server kept sending: the client did not hang up"
    assert site.bytes_sent < total // 2, f"server sent {site.bytes_sent} bytes"

    out = run(
        fetch_tool(site_fetcher(max_bytes=100_000)).run(url=f"http://{SITE_HOST}:{site.port}/huge")
    )
    assert "Download stopped at 100,000 bytes" in out


# --- redirects -------------------------------------------------------------------


def chain_routes(length: int) -> dict[str, Callable]:
    def hop(h: Handler) -> None:
        n = int(h.path.rsplit("/", 1)[1])
        if n == 0:
            h.reply(200, b"arrived", "text/plain")
        else:
            h.reply(302, b"", "text/plain", {"Location": f"/hop/{n - 1}"})

    return {"*": hop}


def test_redirects_are_followed_up_to_five(serve) -> None:
    site = serve(routes=chain_routes(5))
    result = run(site_fetcher().fetch(f"http://{SITE_HOST}:{site.port}/hop/5"))
    assert result.content == b"arrived"
    assert result.url == f"http://{SITE_HOST}:{site.port}/hop/0"
    assert len(result.redirects) == 5


def test_sixth_redirect_is_refused(serve) -> None:
    site = serve(routes=chain_routes(6))
    with pytest.raises(ToolError, match="more than 5 redirects"):
        run(site_fetcher().fetch(f"http://{SITE_HOST}:{site.port}/hop/6"))
    assert site.connections <= 6  # hop/0 was never requested


async def evil_resolver(host: str, port: int) -> list[str]:
    """DNS for the tests: *.test names point at loopback unless they say 'site'."""
    return [SITE_HOST] if host.startswith("site.") else ["127.0.0.1"]


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{canary}/",
        "http://localhost:{canary}/",
        "http://evil.test:{canary}/",
        "http://[::ffff:127.0.0.1]:{canary}/",
        "http://2130706433:{canary}/",
    ],
)
def test_redirect_to_internal_target_is_refused(serve, canary, target: str) -> None:
    target = target.format(canary=canary.port)
    site = serve(routes={"/go": lambda h: h.reply(302, b"", "text/plain", {"Location": target})})
    fetcher = site_fetcher(resolver=evil_resolver if "evil" in target else None)
    with pytest.raises(ToolError, match="refused"):
        run(fetcher.fetch(f"http://{SITE_HOST}:{site.port}/go"))
    assert site.connections == 1  # the allowed first hop was really fetched
    assert canary.connections == 0


def test_pinned_connection_keeps_the_hostname(serve) -> None:
    seen: list[str] = []

    def echo(h: Handler) -> None:
        seen.append(h.headers["Host"])
        h.reply(302 if h.path == "/a" else 200, b"ok", "text/plain", {"Location": "/b"})

    site = serve(routes={"*": echo})
    result = run(site_fetcher(resolver=evil_resolver).fetch(f"http://site.test:{site.port}/a"))
    assert result.url == f"http://site.test:{site.port}/b"
    assert seen == [f"site.test:{site.port}"] * 2


# --- SSRF refusals ---------------------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        "http://127.0.0.1:{port}/",
        "http://localhost:{port}/",
        "http://[::1]:{port}/",
        "http://[::ffff:127.0.0.1]:{port}/",
        "http://[::ffff:7f00:1]:{port}/",
        "http://0.0.0.0:{port}/",
        "http://2130706433:{port}/",
        "http://0x7f000001:{port}/",
        "http://127.1:{port}/",
        "http://017700000001:{port}/",
        "http://evil.test:{port}/",
        "http://LocalHost:{port}/",
        "http://user:pw@127.0.0.1:{port}/",
    ],
)
def test_loopback_forms_are_refused_without_contact(canary, template: str) -> None:
    url = template.format(port=canary.port)
    with pytest.raises(ToolError, match="refused"):
        run(fetch_tool(SafeFetcher(resolver=evil_resolver if "evil" in url else None)).run(url=url))
    assert canary.connections == 0


def test_ipv6_loopback_canary_sees_nothing(serve) -> None:
    canary6 = serve(
        "::1", {"*": lambda h: h.reply(200, b"secret", "text/plain")}, family=socket.AF_INET6
    )
    with pytest.raises(ToolError, match="refused"):
        run(SafeFetcher().fetch(f"http://[::1]:{canary6.port}/"))
    assert canary6.connections == 0


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/",
        "http://10.0.0.1/",
        "http://10.255.255.254:8080/",
        "http://172.16.0.1/",
        "http://172.31.255.255/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
        "http://100.127.255.254/",
        "http://224.0.0.1/",
        "http://240.0.0.1/",
        "http://255.255.255.255/",
        "http://[fd00::1]/",
        "http://[fc00::1]/",
        "http://[::]/",
        "http://[ff02::1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[::ffff:10.0.0.1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[2002:7f00:1::]/",
    ],
)
def test_private_and_special_addresses_are_refused(url: str) -> None:
    # A refusal must come before any connection attempt: these would otherwise hang or fail to connect.
    started = time.monotonic()
    with pytest.raises(ToolError, match="refused"):
        run(SafeFetcher(timeout=2).fetch(url))
    assert time.monotonic() - started < 1


def test_hostname_with_any_private_address_is_refused() -> None:
    async def mixed(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "10.0.0.5"]

    with pytest.raises(ToolError, match="10.0.0.5"):
        run(SafeFetcher(resolver=mixed).fetch("http://mixed.test/"))


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.com/file",
        "gopher://127.0.0.1:70/_evil",
        "javascript:alert(1)",
        "data:text/plain,hi",
        "dict://127.0.0.1:11211/stats",
    ],
)
def test_non_http_schemes_are_refused(canary, url: str) -> None:
    with pytest.raises(ToolError, match="only http and https"):
        run(fetch_tool(SafeFetcher()).run(url=url))
    assert canary.connections == 0


def test_public_addresses_pass_the_policy() -> None:
    import ipaddress

    for text in ("93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"):
        assert refusal_reason(ipaddress.ip_address(text)) is None, text


# --- HTTPS pinning ---------------------------------------------------------------


def test_https_connects_to_pinned_ip_and_verifies_the_hostname(tmp_path: Path, serve) -> None:
    cert, server_ctx = self_signed(tmp_path, "site.test")
    site = serve(
        routes={"*": lambda h: h.reply(200, b"secure hello", "text/plain")}, tls=server_ctx
    )
    client_ctx = ssl.create_default_context(cafile=str(cert))

    result = run(
        site_fetcher(resolver=evil_resolver, verify=client_ctx).fetch(
            f"https://site.test:{site.port}/"
        )
    )
    assert result.content == b"secure hello"

    async def wrong_name(host: str, port: int) -> list[str]:
        return [SITE_HOST]

    # Same server under another name: the certificate check must use the name, not the IP.
    with pytest.raises(ToolError, match="failed"):
        run(
            site_fetcher(resolver=wrong_name, verify=client_ctx).fetch(
                f"https://other.test:{site.port}/"
            )
        )


def test_fetches_share_one_tls_context_loaded_only_for_https_and_still_verify(
    tmp_path: Path, serve, monkeypatch
) -> None:
    """Without a `verify` of its own a fetch uses the process's one context (nanobot/tls.py): a
    plain http page loads no CA file, the first https page loads it once, and a certificate it
    does not vouch for is refused; SSL_CERT_FILE is honoured, as httpx2's own default does."""
    from nanobot import tls

    cert, server_ctx = self_signed(tmp_path, "site.test")
    loads = record_ca_loads(monkeypatch)
    monkeypatch.setattr(tls, "_TLS_CONTEXTS", {})
    page = serve(routes={"*": lambda h: h.reply(200, b"plain hello", "text/plain")})
    secure = serve(
        routes={"*": lambda h: h.reply(200, b"secure hello", "text/plain")}, tls=server_ctx
    )

    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    for _ in range(2):
        assert (
            run(site_fetcher().fetch(f"http://{SITE_HOST}:{page.port}/")).content == b"plain hello"
        )
    assert loads == []
    for _ in range(2):
        assert (
            run(
                site_fetcher(resolver=evil_resolver).fetch(f"https://site.test:{secure.port}/")
            ).content
            == b"secure hello"
        )
    assert loads == [(str(cert), None)]
    assert secure.connections == 2

    monkeypatch.delenv("SSL_CERT_FILE")  # the system's authorities: they do not vouch for site.test
    with pytest.raises(ToolError, match="CERTIFICATE_VERIFY_FAILED"):
        run(site_fetcher(resolver=evil_resolver).fetch(f"https://site.test:{secure.port}/"))


def test_a_configured_proxy_is_never_used(serve, canary, monkeypatch) -> None:
    """A proxy would resolve the name itself and undo the address check: fetches go direct."""
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.setenv(name, f"http://127.0.0.1:{canary.port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    page = serve(routes={"*": lambda h: h.reply(200, b"direct hello", "text/plain")})
    assert run(site_fetcher().fetch(f"http://{SITE_HOST}:{page.port}/")).content == b"direct hello"
    assert page.connections == 1 and canary.connections == 0
