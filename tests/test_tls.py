"""Every SDK client gets the process's one TLS context (nanobot/tls.py, shared_tls_context):
certificates are still verified, SSL_CERT_FILE still counts, it is built once, not per client,
and its CA certificates are loaded only when an https server is to be talked to."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from nanobot.errors import ProviderError
from nanobot.providers.anthropic import AnthropicProvider
from nanobot.providers.openai_compat import OpenAICompatProvider
from nanobot.tls import shared_tls_context

from provider_calls import chat_once
from tls_helpers import record_ca_loads, self_signed

ANSWERS = {
    "/v1/chat/completions": {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "secure hello"},
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    },
    "/v1/messages": {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "stop_reason": "end_turn",
        "content": [{"type": "text", "text": "secure hello"}],
        "usage": {"input_tokens": 3, "output_tokens": 2},
    },
}


@pytest.fixture
def tls_server(tmp_path):
    cert, server_ctx = self_signed(tmp_path, "127.0.0.1")
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            seen.append(self.path)
            body = json.dumps(ANSWERS[self.path]).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = server_ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    ).start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}", cert, seen
    httpd.shutdown()
    httpd.server_close()


def ask(provider) -> str:
    return chat_once(provider, [{"role": "user", "content": "hi"}]).content


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_certificates_are_verified_and_ssl_cert_file_counts(tls_server, monkeypatch, kind):
    base, cert, seen = tls_server

    def provider():
        if kind == "openai":
            return OpenAICompatProvider("m", api_key="k", api_base=f"{base}/v1", timeout=10)
        return AnthropicProvider("m", api_key="k", api_base=base, timeout=10)

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with pytest.raises(ProviderError):
        ask(provider())  # a self-signed certificate the system does not trust
    assert seen == []  # refused at the handshake: no request reached the server
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    assert ask(provider()) == "secure hello"
    assert len(seen) == 1


def test_the_context_is_built_once_and_verifies(monkeypatch, tmp_path):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    ctx = shared_tls_context()
    assert ctx is shared_tls_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    assert shared_tls_context() is not ctx


def _deferred(api_base: str):
    from nanobot.config import ResolvedModel
    from nanobot.provider_table import find
    from nanobot.providers.factory import DeferredProvider

    spec = find("custom")
    assert spec is not None
    return DeferredProvider(
        ResolvedModel(
            spec=spec, model="m", api_key="k", api_base=api_base, extra_headers={}, timeout=10
        )
    )


def _record_loads(monkeypatch) -> list[str]:
    """The names of the threads that load a shared context's CA certificates, as they do it."""
    from nanobot import tls

    loads: list[str] = []
    real = tls.CertsAtFirstHandshake.load_verify_locations

    def recording(self, *args, **kwargs):
        loads.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(tls.CertsAtFirstHandshake, "load_verify_locations", recording)
    return loads


def _join_prewarm() -> None:
    for thread in threading.enumerate():
        if thread.name == "tls-prewarm":
            thread.join(30)


def test_the_first_request_builds_the_context_in_the_background_and_uses_it(
    monkeypatch, tmp_path, tls_server
):
    """A deferred provider's first request to an https server starts loading the certificates on
    its own thread before it imports the SDK, and the client it then makes uses that one context
    (it verifies: a server the context does not trust is refused, one SSL_CERT_FILE names is answered)."""
    base, cert, seen = tls_server
    loads = _record_loads(monkeypatch)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))  # a key no earlier test made a context for
    answer = chat_once(_deferred(f"{base}/v1"), [{"role": "user", "content": "hi"}])
    assert answer.content == "secure hello" and len(seen) == 1
    assert loads == ["tls-prewarm"]  # loaded once, off the thread that imported the SDK


def test_a_plain_http_model_never_loads_the_certificates_and_https_still_verifies(
    monkeypatch, tmp_path, tls_server, fake_llm
):
    """A model served over plain http (on this machine, say) costs no CA load, at the prewarm or
    at the request; the same context then loads them for the first https handshake, and verifies."""
    from nanobot.fakellm import Reply

    base, cert, seen = tls_server
    loads = _record_loads(monkeypatch)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "fresh"))  # a new key: a new context
    fake_llm.script(Reply.text("plain hello"))
    assert (
        chat_once(_deferred(fake_llm.openai_base_url), [{"role": "user", "content": "hi"}]).content
        == "plain hello"
    )
    _join_prewarm()
    ctx = shared_tls_context()
    assert loads == [] and ctx.cert_store_stats()["x509_ca"] == 0
    answer = chat_once(
        OpenAICompatProvider("m", api_key="k", api_base=f"{base}/v1", timeout=10),
        [{"role": "user", "content": "hi"}],
    )
    assert answer.content == "secure hello" and len(seen) == 1
    assert len(loads) == 1 and ctx.cert_store_stats()["x509_ca"] == 1  # the handshake loaded them
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "other.pem"))
    (tmp_path / "other.pem").write_text(
        Path(ssl.get_default_verify_paths().openssl_cafile).read_text()
    )
    with pytest.raises(ProviderError):  # the system's authorities do not vouch for the test server
        chat_once(
            OpenAICompatProvider("m", api_key="k", api_base=f"{base}/v1", timeout=10),
            [{"role": "user", "content": "hi"}],
        )
    assert len(seen) == 1


@pytest.mark.parametrize("env", ["none", "SSL_CERT_FILE", "SSL_CERT_DIR"])
def test_the_loaded_context_is_the_one_httpx2_builds(monkeypatch, tmp_path, env):
    """Settings and certificates as httpx2.create_ssl_context() gives them, in each of the ways it
    finds the certificates (a drift here means httpx2 or Python changed what verify=True is)."""
    import httpx2

    paths = ssl.get_default_verify_paths()
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    if env == "SSL_CERT_FILE":
        bundle = tmp_path / "bundle.pem"
        bundle.write_text(Path(paths.openssl_cafile).read_text())
        monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    elif env == "SSL_CERT_DIR":
        monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    monkeypatch.setenv("SSLKEYLOGFILE", str(tmp_path / "keys.log"))
    from nanobot import tls

    monkeypatch.setattr(tls, "_TLS_CONTEXTS", {})
    ctx = shared_tls_context()
    assert isinstance(ctx, tls.CertsAtFirstHandshake)
    reference = httpx2.create_ssl_context()
    ctx.load_certificates()
    for setting in (
        "protocol",
        "verify_mode",
        "check_hostname",
        "options",
        "verify_flags",
        "minimum_version",
        "maximum_version",
        "post_handshake_auth",
        "security_level",
        "keylog_filename",
        "hostname_checks_common_name",
    ):
        assert getattr(ctx, setting) == getattr(reference, setting), setting
    assert ctx.get_ca_certs() == reference.get_ca_certs()
    assert ctx.cert_store_stats() == reference.cert_store_stats()
    if env != "SSL_CERT_DIR":
        assert ctx.cert_store_stats()["x509_ca"] > 0


def test_a_caller_waits_for_a_load_under_way_and_it_happens_once(monkeypatch, tmp_path, tls_server):
    from nanobot import tls

    base, cert, seen = tls_server
    started, release = threading.Event(), threading.Event()
    loads: list[str] = []
    real = tls.CertsAtFirstHandshake.load_verify_locations

    def slow(self, *args, **kwargs):
        loads.append(threading.current_thread().name)
        started.set()
        release.wait(5)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(tls.CertsAtFirstHandshake, "load_verify_locations", slow)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    tls.prewarm_tls_context(f"{base}/v1")
    assert started.wait(5)
    threading.Timer(0.2, release.set).start()
    answer = chat_once(
        OpenAICompatProvider("m", api_key="k", api_base=f"{base}/v1", timeout=10),
        [{"role": "user", "content": "hi"}],
    )  # its handshake waits for the prewarm's load
    assert answer.content == "secure hello"
    assert loads == ["tls-prewarm"]


PREWARM = """
import json, sys, threading
from nanobot import tls
tls.prewarm_tls_context()
imported_first = "httpcore2" in sys.modules
before = set(sys.modules)
next(t for t in threading.enumerate() if t.name == "tls-prewarm").join(30)
by_thread = sorted(set(sys.modules) - before)
log = open(sys.argv[1]).read() if __import__("os").path.exists(sys.argv[1]) else ""
import openai._base_client as base
platform_name = base.get_platform()  # what the SDK asks on its first request
print(json.dumps({"imported_first": imported_first, "by_thread": by_thread, "platform": str(platform_name),
                  "log_before_sdk": log}))
"""


def test_the_background_build_imports_nothing_heavy_and_reads_the_platform_facts_first(tmp_path):
    """httpcore2 is imported by the caller (so the thread is nearly all OpenSSL, which releases the
    GIL), and the thread also runs the `uname -p` the SDKs' platform header needs: the SDK's own
    call afterwards starts no child."""
    import os
    import sys

    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    log = tmp_path / "uname.log"
    (fake_bin / "uname").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec /bin/uname "$@"\n')
    (fake_bin / "uname").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}"}
    out = subprocess.run(
        [sys.executable, "-c", PREWARM, str(log)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["imported_first"]
    assert not [
        m for m in result["by_thread"] if m.split(".")[0] in ("httpcore2", "h11", "anyio", "httpx2")
    ]
    assert result["platform"] == "Linux"
    assert result["log_before_sdk"] == "-p\n"  # run on the prewarm thread, before the SDK asked
    assert log.read_text() == "-p\n"  # and not again for the SDK


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_doctors_probe_shares_the_context_and_loads_nothing_for_a_plain_http_model(
    monkeypatch, fake_llm, protocol
):
    import asyncio

    from nanobot import tls
    from nanobot.config import ResolvedModel
    from nanobot.provider_table import find
    from nanobot.providers.probe import probe

    loads = record_ca_loads(monkeypatch)
    monkeypatch.setattr(tls, "_TLS_CONTEXTS", {})
    spec = find("anthropic" if protocol == "anthropic" else "custom")
    assert spec is not None
    base = fake_llm.anthropic_base_url if protocol == "anthropic" else fake_llm.openai_base_url
    result = asyncio.run(
        probe(
            ResolvedModel(
                spec=spec,
                model="test-model",
                api_key="k",
                api_base=base,
                extra_headers={},
                timeout=10,
            )
        )
    )
    assert (
        result.url.startswith("http://127.0.0.1") and result.model_known is True
    )  # the server answered
    assert loads == []
