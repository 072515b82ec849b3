"""Translate SDK and HTTP failures into ProviderError with a message that says what to fix."""

from __future__ import annotations

import re

from nanobot.errors import ProviderError
from nanobot.secrets_mask import mask_secrets

_RETRYABLE = {408, 409, 429, 500, 502, 503, 504, 529}

_HINTS = {
    400: "The provider rejected the request as malformed; this is a bug in nanobot if it repeats — "
    "run `nanobot session repair` on the session and report it.",
    401: "The API key was rejected: check {where} and run `nanobot status`.",
    403: "The key is not allowed to use this model or endpoint: check the account's permissions.",
    404: "The model or endpoint was not found: check agents.defaults.model and the provider's apiBase.",
    413: "The request is too large for the provider.",
}


# How providers say "prompt too long": OpenAI and vLLM ("maximum context length is N tokens ...
# resulted in M tokens"), Anthropic ("prompt is too long: M tokens > N maximum"), llama.cpp and others.
# Anthropic also says "input length and `max_tokens` exceed context limit: 8123 + 2048 > 8192", and
# OpenAI "you requested 10171 tokens (8123 in the messages, 2048 in the completion)".
_OVERFLOW = re.compile(
    r"context.length|context window|maximum context|prompt is too long|too many tokens|"
    r"reduce the length|exceeds the available context|exceed context limit",
    re.I,
)
_WINDOW = (
    re.compile(r"maximum context length is (\d+)", re.I),
    re.compile(r"\d+ tokens? > (\d+)", re.I),
    re.compile(r"\d+ \+ \d+ > (\d+)"),
)
_TOKENS = (
    re.compile(r"resulted in (\d+) tokens", re.I),
    re.compile(r"\((\d+) in the messages", re.I),
    re.compile(r"(\d+) tokens? > \d+", re.I),
    re.compile(r"(\d+) \+ \d+ > \d+"),
)


# How a provider says it cannot force a tool call ("tool_choice of type 'function' is not supported").
_TOOL_CHOICE = re.compile(r"tool.choice", re.I)


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


# Quota and spend caps: waiting a few seconds cannot help (OpenAI insufficient_quota, Anthropic's
# "usage limits" / credit balance, OpenRouter's credits, billing hard limits).
_QUOTA = re.compile(
    r"insufficient.quota|exceeded your current quota|credit balance|insufficient credits|"
    r"out of credits|billing|spend(ing)?.(limit|cap)|usage limits?|monthly limit|budget",
    re.I,
)
# ... unless the provider says when to come back (Gemini words per-minute limits as "quota" too)
_RETRY_IN = re.compile(r"retry (in|after)|try again in", re.I)

_QUOTA_HINT = (
    "The account's quota or spending limit is used up: add credit or raise the limit in the provider's "
    "console, or use another model with --model."
)


def is_quota(
    status: int, message: str, error_type: str = "", retry_after: float | None = None
) -> bool:
    """A 429 (or 400/402/403) that says the account is out of quota or credit, not 'slow down'."""
    if status not in (400, 402, 403, 429):  # Anthropic says "credit balance is too low" with a 400
        return False
    if status == 402:
        return True
    said = f"{error_type} {message}"
    return bool(_QUOTA.search(said)) and retry_after is None and not _RETRY_IN.search(said)


def _hint(status: int, provider: str) -> str | None:
    """The fix for an HTTP status, naming this provider's key where the key is the trouble."""
    hint = _HINTS.get(status)
    if hint is None or "{where}" not in hint:
        return hint
    from nanobot import provider_table
    from nanobot.config_check import to_camel

    spec = provider_table.find(provider)
    where = f"providers.{to_camel(provider_table.canonical(provider))}.apiKey in the config"
    return hint.format(
        where=f"{spec.env_key} or {where}" if spec is not None and spec.env_key else where
    )


def status_error(
    provider: str,
    status: int,
    message: str,
    retry_after: str | None = None,
    error_type: str = "",
    url: str | None = None,
) -> ProviderError:
    message = mask_secrets(message)  # a 401 body often echoes the key it rejected
    wait = parse_retry_after(retry_after)
    quota = is_quota(status, message, error_type, wait)
    retryable = not quota and (status in _RETRYABLE or status >= 500)
    label = (
        "overloaded"
        if status == 529
        else "quota or spending limit reached"
        if quota
        else f"HTTP {status}"
    )
    if url and status in (
        404,
        405,
    ):  # a wrong apiBase usually shows up as "not found": say where we asked
        label += f" from {url}"
    overflow = status in (400, 413) and bool(_OVERFLOW.search(message))
    tool_choice_refused = status == 400 and not overflow and bool(_TOOL_CHOICE.search(message))
    return ProviderError(
        f"{provider}: {label}: {message}".rstrip(": "),
        hint=_OVERFLOW_HINT
        if overflow
        else _QUOTA_HINT
        if quota
        else None
        if retryable
        else _hint(status, provider),
        status=status,
        retryable=retryable,
        retry_after=wait,
        context_overflow=overflow,
        reported_window=_first_int(_WINDOW, message) if overflow else None,
        reported_tokens=_first_int(_TOKENS, message) if overflow else None,
        tool_choice_refused=tool_choice_refused,
    )


_OVERFLOW_HINT = (
    "The prompt was too long for the model: set agents.defaults.contextWindowTokens to the "
    "model's real context window."
)


def connection_error(
    provider: str,
    exc: BaseException,
    *,
    timeout: bool = False,
    url: str | None = None,
    seconds: float | None = None,
    dropped: bool = False,
    sent: bool = False,
) -> ProviderError:
    """`dropped`: the server had begun answering (the connection was made) when it failed; `sent`: the
    request had reached it (so it may bill the attempt: usage/meter.py), implied by `dropped`."""
    where = f" {url}" if url else ""
    if dropped and not timeout:
        reason = str(exc).strip() or type(exc).__name__
        message = f"{provider}: the connection dropped mid-answer ({reason})"
        hint = (
            f"The server began answering, then the connection closed. If it keeps happening, check the "
            f"network or a proxy between here and{where or ' the server'}."
        )
    elif timeout:
        waited = f" within {seconds:.0f}s" if seconds else ""
        message = f"{provider}: no answer from{where or ' the server'}{waited}"
        hint = (
            f"The server accepted the connection but did not answer. Check that it is the right server, "
            f"or raise providers.{provider}.timeout if it is just slow."
        )
    else:
        reason = str(exc).strip() or type(exc).__name__
        cause = getattr(exc, "__cause__", None)
        if cause is not None and str(cause).strip() and str(cause) not in reason:
            reason = f"{reason} ({cause})"
        message = f"{provider}: could not connect to{where or ' the server'}: {reason}"
        hint = (
            f"Check the network, that the server is running, and providers.{provider}.apiBase "
            "(`nanobot doctor` tries the connection)."
        )
    return ProviderError(mask_secrets(message), hint=hint, retryable=True, sent=sent or dropped)


def body_message(body: object, fallback: str) -> tuple[str, str]:
    """(message, error type or code) from a provider's JSON error body."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            kind = " ".join(str(err.get(k)) for k in ("type", "code") if err.get(k))
            if err.get("message"):
                return str(err["message"]), kind
            return fallback, kind
    return fallback, ""


def translate(
    provider: str,
    exc: BaseException,
    *,
    url: str | None,
    seconds: float | None,
    dropped: bool = False,
) -> ProviderError:
    """An SDK or transport exception as a ProviderError (status, timeout or connection); `dropped`:
    it happened after the server's answer had begun (so it was not a failure to connect)."""
    import httpx2

    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    if isinstance(status, int) and response is not None:
        message, kind = body_message(getattr(exc, "body", None), str(getattr(exc, "message", exc)))
        return status_error(
            provider, status, message, response.headers.get("retry-after"), kind, url=url
        )
    timed_out = isinstance(exc, httpx2.TimeoutException) or type(exc).__name__ == "APITimeoutError"
    return connection_error(
        provider,
        exc,
        timeout=timed_out,
        url=url,
        seconds=seconds,
        dropped=dropped,
        sent=not _never_connected(exc),
    )


def _never_connected(exc: BaseException) -> bool:
    """True when `exc` (or what caused it) is a failure to connect: the request never left."""
    import httpx2

    seen: BaseException | None = exc
    for _ in range(4):  # the SDK wraps the transport's error, which may wrap the socket's
        if seen is None:
            return False
        if isinstance(seen, (httpx2.ConnectError, httpx2.ConnectTimeout, ConnectionRefusedError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
