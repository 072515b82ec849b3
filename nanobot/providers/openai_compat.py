"""OpenAI and every OpenAI-compatible server (openrouter, deepseek, ollama, vllm, custom)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import httpx2
import openai

from nanobot.errors import ProviderError
from nanobot.messages import Message, for_wire
from nanobot.providers.base import (
    DEFAULT_TIMEOUT,
    DeltaCallback,
    LLMResponse,
    Provider,
    ToolCallRequest,
    Usage,
    http_timeout,
    parse_arguments,
    post_encodable,
)
from nanobot.providers.errors_map import translate
from nanobot.providers.raw_http import (
    RAW_STREAM_HEADERS,
    sse_json,
    stream_error,
)
from nanobot.providers.raw_http import json_body as _json_body
from nanobot.tls import shared_tls_context


class OpenAICompatProvider(Provider):
    def __init__(
        self,
        model: str,
        *,
        name: str = "openai",
        api_key: str = "",
        api_base: str | None = None,
        extra_headers: dict[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        http_client: httpx2.AsyncClient | None = None,
        extra_params: dict[str, Any] | None = None,
        send_temperature: bool = True,
        reasoning_back: bool = False,
        details_back: bool = False,
    ) -> None:
        super().__init__(model)
        self.timeout = timeout
        self.name = name
        # fields added to every request (reasoning_effort; extra_body for server-specific ones)
        self.extra_params = dict(extra_params or {})
        self.send_temperature = send_temperature  # OpenAI's reasoning models reject one
        self.reasoning_back = (
            reasoning_back  # tool-call messages keep reasoning_content (provider_table.py)
        )
        self.details_back = (
            details_back  # assistant messages keep reasoning_details (provider_table.py)
        )
        self._client = openai.AsyncOpenAI(
            api_key=api_key or "no-key",
            base_url=api_base or None,
            max_retries=0,
            timeout=http_timeout(timeout),
            default_headers=extra_headers or None,
            # the SDK's own default client, with the process's one TLS context (tests pass an in-process transport)
            http_client=http_client or openai.DefaultAsyncHttpxClient(verify=shared_tls_context()),
        )

    def _wire_messages(self, messages: list[Message]) -> list[Message]:
        wire = []
        for msg in messages:
            out = for_wire(msg)
            if self.reasoning_back and out.get("role") == "assistant" and out.get("tool_calls"):
                out["reasoning_content"] = (
                    out.get("reasoning_content") or ""
                )  # the field must be there
            else:
                out.pop("reasoning_content", None)  # most servers reject it as input
            if out.get("role") == "tool":
                out.pop("name", None)
            if (
                self.details_back
                and msg.get("role") == "assistant"
                and msg.get("reasoning_details")
            ):
                out["reasoning_details"] = msg[
                    "reasoning_details"
                ]  # whole, as the server sent them
            wire.append(out)
        return wire

    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        max_tokens: int = 4096,
        temperature: float = 0.1,
        on_delta: DeltaCallback | None = None,
    ) -> LLMResponse:
        params: dict[str, Any] = {
            **self.extra_params,
            "model": self.model,
            "messages": self._wire_messages(messages),
        }
        if self.send_temperature:
            params["temperature"] = temperature
        # the official API wants max_completion_tokens (o-series reject max_tokens); compatibles want max_tokens
        params["max_completion_tokens" if self.name == "openai" else "max_tokens"] = max_tokens
        if tools:
            params["tools"] = tools
            if tool_choice is not None:
                params["tool_choice"] = (
                    {"type": "function", "function": {"name": tool_choice["name"]}}
                    if isinstance(tool_choice, dict)
                    else tool_choice
                )
        answering = (
            False  # the server's answer had begun: a failure now is a drop, not "could not connect"
        )
        try:
            if on_delta is None:
                response = await self._post(params)
                answering = True
                try:
                    return _from_completion(
                        _json_body(self.name, response, await response.aread()), self.name
                    )
                finally:
                    await response.aclose()
            response = await self._post(
                {**params, "stream": True, "stream_options": {"include_usage": True}}
            )
            answering = True
            try:
                return await _from_stream(self.name, response, on_delta)
            finally:
                await response.aclose()
        except (openai.APIStatusError, openai.APIConnectionError, httpx2.TransportError) as exc:
            # a read timeout or a cut while streaming escapes the SDK as a bare httpx error
            raise translate(
                self.name,
                exc,
                url=str(self._client.base_url),
                seconds=self.timeout,
                dropped=answering,
            ) from None

    async def _post(self, body: dict[str, Any]) -> httpx2.Response:
        """POST the body as plain JSON through the SDK's low-level client (auth, headers, status
        errors and timeouts stay the SDK's) and get the unread response back. The typed
        `chat.completions.create` would first walk every message through its request transform
        and then build a pydantic object per streamed chunk; on a long history that is most of a
        turn's local overhead. The wire bytes are the same (tests/providers/test_raw_http.py)."""
        return await post_encodable(
            self._client.post,
            "/chat/completions",
            body,
            cast_to=httpx2.Response,
            options={"headers": RAW_STREAM_HEADERS},
        )

    async def aclose(self) -> None:
        await self._client.close()


def _calls(raw_calls: Sequence[tuple[str | None, str, str | None]]) -> list[ToolCallRequest]:
    """(id, name, arguments JSON) as the provider sent them: the id and the arguments may be missing."""
    calls = []
    for call_id, name, raw in raw_calls:
        args, error = parse_arguments(raw)
        # some local servers (LM Studio, llama.cpp) send "" or null ids; an id-less call would be
        # dropped from history with its result, and the model would repeat it forever
        calls.append(
            ToolCallRequest(
                call_id or f"call_{secrets.token_hex(6)}", name, args, raw or "{}", error
            )
        )
    return calls


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        cache_read_tokens=int(cached or 0),
    )


def _no_choices(provider: str) -> ProviderError:
    # OpenRouter and some gateways answer 200 with no choices when the model behind them failed
    return ProviderError(
        f"{provider}: the server answered without a message (its reply had no choices)",
        hint="Usually the model behind a gateway failed; try again, or another model with --model.",
        retryable=True,
    )


def _from_completion(completion: dict[str, Any], provider: str = "openai") -> LLMResponse:
    choices = completion.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise _no_choices(provider)
    choice = choices[0]
    msg = choice.get("message") or {}
    raw = [
        (
            c.get("id"),
            (c.get("function") or {}).get("name") or "",
            (c.get("function") or {}).get("arguments"),
        )
        for c in (msg.get("tool_calls") or [])
        if isinstance(c, dict) and isinstance(c.get("function"), dict)
    ]
    details: list[dict[str, Any]] = []
    add_details(details, msg.get("reasoning_details"))
    return LLMResponse(
        content=msg.get("content"),
        tool_calls=_calls(raw),
        finish_reason=choice.get("finish_reason") or "stop",
        usage=_usage(completion.get("usage")),
        reasoning=msg.get("reasoning_content")
        or msg.get("reasoning")
        or details_text(details)
        or None,
        reasoning_details=details,
    )


def _as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    """A whole completion (a server that ignored `stream`) as the one chunk that says it all."""
    choices = [
        {"delta": c.get("message") or {}, "finish_reason": c.get("finish_reason")}
        for c in completion.get("choices") or []
        if isinstance(c, dict)
    ]
    return {"choices": choices, "usage": completion.get("usage")}


def _slot(calls: list[list[str]], slot_of: dict[int, list[str]], tc: dict[str, Any]) -> list[str]:
    """The call a streamed tool-call delta belongs to: by index, or (servers that omit it) by a new id."""
    index, call_id = tc.get("index"), tc.get("id")
    if index is not None:
        if index not in slot_of:
            slot_of[index] = ["", "", ""]
            calls.append(slot_of[index])
        return slot_of[index]
    if not calls or (call_id and calls[-1][0] and call_id != calls[-1][0]):
        calls.append(["", "", ""])
    return calls[-1]


async def _from_stream(
    provider: str, response: httpx2.Response, on_delta: DeltaCallback
) -> LLMResponse:
    text: list[str] = []
    reasoning: list[str] = []
    details: list[dict[str, Any]] = []  # MiniMax's reasoning_details, pieces joined
    calls: list[list[str]] = []  # [id, name, arguments] per call, in order
    slot_of: dict[int, list[str]] = {}  # the server's index -> its slot
    finish = None
    usage = None
    saw_choice = False
    async for chunk in sse_json(provider, response, whole=_as_chunk):
        if chunk.get("error"):
            raise stream_error(provider, chunk["error"])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            saw_choice = True
            delta = choice.get("delta")
            if not delta:
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
                continue
            content = delta.get("content")
            if content:
                text.append(content)
                on_delta(content)
            extra = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(extra, str):
                reasoning.append(extra)
            add_details(details, delta.get("reasoning_details"))
            for tc in delta.get("tool_calls") or ():
                slot = _slot(calls, slot_of, tc)
                fn = tc.get("function") or {}
                if tc.get("id"):
                    slot[0] = tc["id"]
                if fn.get("name"):
                    slot[1] += fn["name"]
                if fn.get("arguments"):
                    slot[2] += fn["arguments"]
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    if not saw_choice:
        raise _no_choices(provider)
    raw = [(slot[0], slot[1], slot[2]) for slot in calls]
    return LLMResponse(
        content="".join(text) or None,
        tool_calls=_calls(raw),
        finish_reason=finish or ("tool_calls" if raw else "stop"),
        usage=_usage(usage),
        reasoning="".join(reasoning) or details_text(details) or None,
        reasoning_details=details,
    )


def add_details(merged: list[dict[str, Any]], pieces: Any) -> None:
    """Fold `reasoning_details` entries (a whole message's, or one streamed chunk's) into `merged`,
    one entry per index (or id). MiniMax streams each entry's text in pieces; its guide's example
    reads each piece as the text so far, servers send continuations: a piece that starts with the
    text so far replaces it, any other is appended."""
    if not isinstance(pieces, list):
        return
    for piece in pieces:
        if not isinstance(piece, dict):
            continue
        key = piece.get("index", piece.get("id"))
        slot = (
            next((m for m in merged if m.get("index", m.get("id")) == key), None)
            if key is not None
            else (merged[-1] if merged else None)
        )
        if slot is None:
            merged.append(dict(piece))
            continue
        for name, value in piece.items():
            if name == "text" and isinstance(value, str):
                before = slot["text"] if isinstance(slot.get("text"), str) else ""
                grown = before and len(value) > len(before) and value.startswith(before)
                slot["text"] = value if grown else before + value
            elif slot.get(name) in (None, ""):
                slot[name] = value


def details_text(details: list[dict[str, Any]]) -> str:
    """The thinking text of `reasoning_details` (what reasoning_content holds for other servers)."""
    return "".join(d["text"] for d in details if isinstance(d.get("text"), str))
