"""The hot path under the SDK adapters: the unread HTTP response, and a small SSE reader.

Both adapters send their request through the official client's low-level `post` (so auth,
default headers, status errors and timeouts stay the SDK's) and ask it, with the SDK's own
raw-response switch, for the response unread. The body is read here: each SSE `data:` payload
becomes one dict, with no pydantic object per chunk. A server that answers with a web page,
or anything that is not the API's JSON, gets a message that names what it sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2

from nanobot.errors import ProviderError
from nanobot.policy.arguments import clip_depth, max_depth
from nanobot.providers.errors_map import status_error

__all__ = ["RAW_STREAM_HEADERS", "json_body", "sse_json", "stream_error"]

# The SDKs' switch (X-Stainless-Raw-Response) for "return the httpx response, unread".
RAW_STREAM_HEADERS = {"X-Stainless-Raw-Response": "stream"}


def _not_api(provider: str, response: httpx2.Response, data: bytes) -> ProviderError:
    kind = response.headers.get("content-type", "no content type").split(";")[0].strip()
    looks = "a web page" if data.lstrip()[:1] == b"<" else f"{kind} that is not the API's JSON"
    return ProviderError(
        f"{provider}: the server at {response.request.url} answered with {looks}",
        hint=f"check providers.{provider}.apiBase: it must be the API's base URL (for OpenAI-compatible "
        "servers it usually ends in /v1)",
    )


# json.loads recurses once per nesting level; an answer nested deeper than this has its deeper
# values replaced by a marker first (a model's tool arguments are the only deep part of an answer,
# and those are refused at 64 levels anyway: nanobot/policy/arguments.py)
_PARSE_DEPTH = 200


def _loads(data: bytes | str) -> Any:
    text = data.decode() if isinstance(data, bytes) else data
    if _nesting(text) > _PARSE_DEPTH:
        text = clip_depth(text, _PARSE_DEPTH)
    return json.loads(text)


def _nesting(text: str) -> int:
    # a cheap upper bound first: fewer brackets than the limit cannot nest past it
    if text.count("[") + text.count("{") <= _PARSE_DEPTH:
        return 0
    return max_depth(text, _PARSE_DEPTH)


def json_body(provider: str, response: httpx2.Response, data: bytes) -> dict[str, Any]:
    """The JSON object a non-streamed answer carries, or a ProviderError naming what came instead."""
    try:
        body = _loads(data)
    except (ValueError, UnicodeDecodeError):
        raise _not_api(provider, response, data) from None
    if not isinstance(body, dict):
        raise _not_api(provider, response, data)
    if body.get("error"):
        raise stream_error(provider, body["error"])
    return body


def stream_error(provider: str, error: Any) -> ProviderError:
    """An error the server sent inside a 200 answer (an SSE error event or an error body)."""
    if isinstance(error, dict):
        message = str(error.get("message") or error.get("type") or error)
        code = error.get("code") if isinstance(error.get("code"), int) else None
        kind = str(error.get("type") or "")
    else:
        message, code, kind = str(error), None, ""
    status = code or (
        529
        if kind == "overloaded_error"
        else 429
        if kind == "rate_limit_error"
        else 500
        if kind in ("api_error", "server_error")
        else 400
    )
    return status_error(provider, status, message)


async def sse_json(
    provider: str,
    response: httpx2.Response,
    whole: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Each `data:` payload of an SSE stream as a dict, until `[DONE]` or the end.

    A server that answered a streaming request with one plain JSON body instead (some
    compatible servers ignore `stream`) yields `whole(body)` once, when `whole` is given.
    """
    kind = response.headers.get("content-type", "")
    if "event-stream" not in kind:
        body = json_body(provider, response, await response.aread())
        if whole is None:
            raise _not_api(provider, response, json.dumps(body).encode())
        yield whole(body)
        return
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[6:] if line.startswith("data: ") else line[5:])
            continue
        if line or not data:
            continue  # event:, id:, retry: and comments carry nothing we use; the payload says its type
        payload = "\n".join(data)
        data.clear()
        if payload.strip() == "[DONE]":
            return
        try:
            event = _loads(payload)
        except ValueError:
            raise ProviderError(
                f"{provider}: the stream carried a line that is not JSON: {payload[:200]!r}",
                hint="check the provider's apiBase; if it is right, try again",
            ) from None
        if isinstance(event, dict):
            yield event
    if data:
        payload = "\n".join(data)
        if payload.strip() != "[DONE]":
            try:
                event = _loads(payload)
            except ValueError:
                return
            if isinstance(event, dict):
                yield event
