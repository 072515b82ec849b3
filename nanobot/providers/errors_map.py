"""Translate SDK and HTTP failures into ProviderError with a message that says what to fix."""

from __future__ import annotations

import re

from nanobot.errors import ProviderError
from nanobot.secrets_mask import mask_secrets

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


# How providers say "prompt too long": OpenAI and vLLM ("maximum context length is N tokens ...
# resulted in M tokens"), Anthropic ("prompt is too long: M tokens > N maximum"), llama.cpp and others.
_OVERFLOW = re.compile(r"context.length|context window|maximum context|prompt is too long|too many tokens|"
                       r"reduce the length|exceeds the available context", re.I)
_WINDOW = (re.compile(r"maximum context length is (\d+)", re.I), re.compile(r"\d+ tokens? > (\d+)", re.I))
_TOKENS = (re.compile(r"resulted in (\d+) tokens", re.I), re.compile(r"(\d+) tokens? > \d+", re.I))


def _first_int(patterns: tuple[re.Pattern, ...], text: str) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def status_error(provider: str, status: int, message: str, retry_after: str | None = None) -> ProviderError:
    message = mask_secrets(message)  # a 401 body often echoes the key it rejected
    retryable = status in _RETRYABLE or status >= 500
    label = "overloaded" if status == 529 else f"HTTP {status}"
    overflow = status in (400, 413) and bool(_OVERFLOW.search(message))
    return ProviderError(
        f"{provider}: {label}: {message}".rstrip(": "),
        hint=_OVERFLOW_HINT if overflow else None if retryable else _HINTS.get(status),
        status=status,
        retryable=retryable,
        retry_after=parse_retry_after(retry_after),
        context_overflow=overflow,
        reported_window=_first_int(_WINDOW, message) if overflow else None,
        reported_tokens=_first_int(_TOKENS, message) if overflow else None,
    )


_OVERFLOW_HINT = ("The prompt was too long for the model: set agents.defaults.contextWindowTokens to the "
                  "model's real context window.")


def connection_error(provider: str, exc: BaseException, *, timeout: bool = False) -> ProviderError:
    what = "timed out" if timeout else "could not connect"
    return ProviderError(
        mask_secrets(f"{provider}: {what}: {exc}"),
        hint="Check the network and the provider's apiBase.",
        retryable=True,
    )
