"""Translate SDK and HTTP failures into ProviderError with a message that says what to fix."""

from __future__ import annotations

from nanobot.errors import ProviderError

_RETRYABLE = {408, 409, 429, 500, 502, 503, 504, 529}

_HINTS = {
    400: "The provider rejected the request as malformed; this is a bug in nanobot if it repeats — "
         "run `nanobot session repair` on the session and report it.",
    401: "The API key was rejected: check the key (environment variable or providers.<name>.apiKey "
         "in the config) and run `nanobot status`.",
    403: "The key is not allowed to use this model or endpoint: check the account's permissions.",
    404: "The model or endpoint was not found: check agents.defaults.model and the provider's apiBase.",
    413: "The request is too large for the provider.",
}


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def status_error(provider: str, status: int, message: str, retry_after: str | None = None) -> ProviderError:
    retryable = status in _RETRYABLE or status >= 500
    label = "overloaded" if status == 529 else f"HTTP {status}"
    return ProviderError(
        f"{provider}: {label}: {message}".rstrip(": "),
        hint=None if retryable else _HINTS.get(status),
        status=status,
        retryable=retryable,
        retry_after=parse_retry_after(retry_after),
    )


def connection_error(provider: str, exc: BaseException, *, timeout: bool = False) -> ProviderError:
    what = "timed out" if timeout else "could not connect"
    return ProviderError(
        f"{provider}: {what}: {exc}",
        hint="Check the network and the provider's apiBase.",
        retryable=True,
    )
