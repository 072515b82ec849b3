"""Self-signed certificates and a record of CA loads, for the tests of https and the shared TLS context."""

from __future__ import annotations

import ipaddress
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest


def self_signed(folder: Path, host: str) -> tuple[Path, ssl.SSLContext]:
    """A one-day certificate for `host` (a name or an IP address) and a server context that
    presents it; skips the test where there is no `openssl` command."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    try:
        ipaddress.ip_address(host)
        san = f"IP:{host}"
    except ValueError:
        san = f"DNS:{host}"
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            f"/CN={host}",
            "-addext",
            f"subjectAltName={san}",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    return cert, server_ctx


def record_ca_loads(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The arguments of every CA load from now on, by any SSLContext (httpx2's eager one included)."""
    loads: list[tuple] = []
    real = ssl.SSLContext.load_verify_locations

    def recording(self, *args, **kwargs):
        loads.append(args or tuple(kwargs.values()))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", recording)
    return loads
