"""The process's one TLS context for `verify=True`, shared by the httpx2 clients nanobot makes.

The SDK clients (providers/, `nanobot doctor`'s probe), `web_fetch` and Brave search all verify
against the context httpx2 builds for `verify=True`. (The MCP SDK's HTTP transports use httpx,
with its own certificate bundle; they keep their own context.) Building one loads the CA
certificates, about 25 ms of CPU; made once per process and shared (an SSLContext is made to be
shared between connections), and on Linux loaded at the first TLS handshake rather than when it is
made, a process that only talks plain http (a model served on this machine) never loads them at all.
"""

from __future__ import annotations

import os
import platform
import ssl
import sys
import threading
from typing import Any

import httpx2

from nanobot.threads import start_quiet

__all__ = ["CertsAtFirstHandshake", "prewarm_tls_context", "shared_tls_context"]


_TLS_CONTEXTS: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
_TLS_LOCK = threading.Lock()  # one build at a time: a caller waits for a prewarm already under way


def shared_tls_context() -> ssl.SSLContext:
    """The TLS context httpx2 builds for `verify=True`, made once per process and given to every
    httpx2 client nanobot makes. Loading the CA certificates takes about 25 ms of CPU, which each
    client did again: the fallback models', each fetch's, each test's. An SSLContext is made to be
    shared between connections. A new one is made when SSL_CERT_FILE or SSL_CERT_DIR changes.

    On Linux the certificates are loaded at the first TLS handshake (or by `prewarm_tls_context`
    for an https server), not when the context is made: a client that only ever talks plain http
    (a model served on this machine) never loads them."""
    key = _tls_key()
    with _TLS_LOCK:
        ctx = _TLS_CONTEXTS.get(key)
        if ctx is None:
            ctx = _TLS_CONTEXTS[key] = _deferred_context(*key) or httpx2.create_ssl_context()
    return ctx


class CertsAtFirstHandshake(ssl.SSLContext):
    """httpx2's `verify=True` context on Linux (what `httpcore2.default_ssl_context` makes), whose
    CA file or folder is loaded when a handshake first needs it. Verification is never off: the
    context requires a certificate and checks the host name from the start, a handshake loads the
    certificates before it begins, and one they do not vouch for is refused."""

    def __new__(
        cls, cafile: str | None, capath: str | None, *, from_env: bool
    ) -> CertsAtFirstHandshake:
        return super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)

    def __init__(self, cafile: str | None, capath: str | None, *, from_env: bool) -> None:
        self._locations: tuple[str | None, str | None] | None = (cafile, capath)
        self._loading = threading.Lock()
        if from_env:  # what ssl.create_default_context adds, which httpcore2 uses for SSL_CERT_*
            keylog = os.environ.get("SSLKEYLOGFILE")
            if keylog and not sys.flags.ignore_environment:
                self.keylog_filename = keylog
            if sys.version_info >= (3, 13):
                self.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN | ssl.VERIFY_X509_STRICT

    def load_certificates(self) -> None:
        """Load the CA certificates now, once (a second caller waits for the first)."""
        with self._loading:
            if self._locations is not None:
                self.load_verify_locations(*self._locations)
                self._locations = None

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:  # asyncio's and anyio's TLS
        self.load_certificates()
        return super().wrap_bio(*args, **kwargs)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:  # httpcore2's sync TLS
        self.load_certificates()
        return super().wrap_socket(*args, **kwargs)


def _deferred_context(cert_file: str | None, cert_dir: str | None) -> CertsAtFirstHandshake | None:
    """httpx2's `verify=True` context with its loading deferred, for the CA file or folder it
    loads: SSL_CERT_FILE, else SSL_CERT_DIR, else OpenSSL's compiled-in file (and its folder when
    there is one). None where httpx2 does something else (the platform's trust store on Windows and
    macOS, a list of candidates when that file is missing): that context is built as httpx2 builds it."""
    if platform.system() in ("Windows", "Darwin"):
        return None
    if cert_file or cert_dir:
        return CertsAtFirstHandshake(cert_file, None if cert_file else cert_dir, from_env=True)
    paths = ssl.get_default_verify_paths()
    if not os.path.isfile(paths.openssl_cafile):
        return None
    capath = paths.openssl_capath if os.path.isdir(paths.openssl_capath) else None
    return CertsAtFirstHandshake(paths.openssl_cafile, capath, from_env=False)


def prewarm_tls_context(api_base: str | None = None) -> None:
    """Start loading the shared context's certificates in a background thread, where the client
    will talk https (`api_base` None is the SDK's default, https). OpenSSL parses the CA file with
    the GIL released, so on a second core it overlaps the SDK import that comes before the first
    request; the client then finds the context built (or waits for the rest of the build).

    httpcore2 (which builds the context) is imported here first, on the calling thread, where the
    client needs it anyway: left to the thread, its import ran beside the SDK's on the main
    thread, and the two traded the GIL some 650 times (voluntary context switches) for no gain.
    The same thread then reads the platform facts both SDKs put in every request's headers
    (`platform.platform()` runs `uname -p`), so the first request does not wait on that child."""
    if _tls_key() not in _TLS_CONTEXTS:  # the chat's prewarm built it before the first request
        import httpcore2  # noqa: F401

        https = api_base is None or not api_base.lower().startswith("http://")
        start_quiet(_prewarm, https, name="tls-prewarm")


def _prewarm(https: bool) -> None:
    ctx = shared_tls_context()
    if https and isinstance(ctx, CertsAtFirstHandshake):
        ctx.load_certificates()
    try:
        platform.platform()  # cached by the platform module; the SDKs ask it on their first request
        platform.freedesktop_os_release()
    except OSError:  # no os-release file: the SDK copes, and asks again itself
        pass


def _tls_key() -> tuple[str | None, str | None]:
    return os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
