"""Anthropic through the official SDK: tool use, streaming and prompt caching."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2

from nanobot import reasoning
from nanobot.messages import Message, clean_unicode
from nanobot.policy.arguments import text_problem, value_problem
from nanobot.providers import anthropic_format as fmt
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
    json_body,
    sse_json,
    stream_error,
)
from nanobot.tls import shared_tls_context

_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "stop",
    "pause_turn": "stop",
    "model_context_window_exceeded": "length",
}


class AnthropicProvider(Provider):
    name = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        api_base: str | None = None,
        extra_headers: dict[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        http_client: httpx2.AsyncClient | None = None,
        reasoning_effort: str | None = None,
    ) -> None:
        super().__init__(model)
        self.timeout = timeout
        self.reasoning_effort = (
            reasoning_effort  # agents.defaults.reasoningEffort: extended thinking
        )
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key or "none",
            base_url=api_base or None,
            max_retries=0,
            timeout=http_timeout(timeout),
            default_headers=extra_headers or None,
            # the SDK's own default client, with the process's one TLS context (tests pass an in-process transport)
            http_client=http_client
            or anthropic.DefaultAsyncHttpxClient(verify=shared_tls_context()),
        )

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
        system, wire = fmt.to_anthropic(messages)
        params: dict[str, Any] = {
            "model": self.model,
            "messages": fmt.with_history_cache_marker(wire),
            "max_tokens": max_tokens,
        }  # the 2.x Messages API has no temperature parameter; the model's default applies
        if system:
            params["system"] = system
        if tools:
            params["tools"] = fmt.to_anthropic_tools(tools)
            choice = fmt.to_anthropic_tool_choice(tool_choice)
            if choice:
                params["tool_choice"] = choice
        thinking = reasoning.anthropic_thinking(
            self.reasoning_effort, max_tokens, tool_choice if tools else None
        )
        if thinking:
            params["thinking"] = thinking
        answering = (
            False  # the server's answer had begun: a failure now is a drop, not "could not connect"
        )
        try:
            response = await post_encodable(
                self._client.post,
                "/v1/messages",
                params if on_delta is None else {**params, "stream": True},
                cast_to=httpx2.Response,
                options={"headers": RAW_STREAM_HEADERS},
            )
            answering = True
            try:
                if on_delta is None:
                    message = json_body("anthropic", response, await response.aread())
                else:
                    message = await _read_stream(response, on_delta)
            finally:
                await response.aclose()
        except (
            anthropic.APIStatusError,
            anthropic.APIConnectionError,
            httpx2.TransportError,
        ) as exc:
            # a read timeout or a cut while streaming escapes the SDK as a bare httpx error
            raise translate(
                "anthropic",
                exc,
                url=str(self._client.base_url),
                seconds=self.timeout,
                dropped=answering,
            ) from None
        return _to_response(message)

    async def aclose(self) -> None:
        await self._client.close()


async def _read_stream(response: httpx2.Response, on_delta: DeltaCallback) -> dict[str, Any]:
    """The streamed events folded into the message a non-streamed call would have returned."""
    message: dict[str, Any] = {"content": [], "usage": {}, "stop_reason": None}
    blocks: dict[Any, dict[str, Any]] = {}  # by the event's index, as sent
    partial: dict[Any, list[str]] = {}  # tool_use input JSON, as it arrives
    async for event in sse_json("anthropic", response):
        kind = event.get("type")
        if kind == "content_block_delta":
            index, delta = event.get("index"), event.get("delta") or {}
            block = blocks.get(index)
            if block is None:
                continue
            dtype = delta.get("type")
            if dtype == "text_delta" and delta.get("text"):
                block["text"] = block.get("text", "") + delta["text"]
                on_delta(delta["text"])
            elif dtype == "input_json_delta":
                partial.setdefault(index, []).append(delta.get("partial_json") or "")
            elif dtype == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + (delta.get("thinking") or "")
            elif dtype == "signature_delta":
                block["signature"] = block.get("signature", "") + (delta.get("signature") or "")
        elif kind == "content_block_start":
            block = dict(event.get("content_block") or {})
            blocks[event.get("index")] = block
            message["content"].append(block)
        elif kind == "message_start":
            start = event.get("message") or {}
            message["usage"].update(start.get("usage") or {})
        elif kind == "message_delta":
            message["stop_reason"] = (event.get("delta") or {}).get("stop_reason") or message[
                "stop_reason"
            ]
            message["usage"].update(
                {k: v for k, v in (event.get("usage") or {}).items() if v is not None}
            )
        elif kind == "error":
            raise stream_error("anthropic", event.get("error"))
    for index, pieces in partial.items():
        raw = "".join(pieces)
        try:
            # too deep or too long: kept as text, never parsed (json.loads recurses); flagged below
            blocks[index]["input"] = (
                raw if text_problem(raw) else json.loads(raw) if raw.strip() else {}
            )
        except ValueError:
            blocks[index]["input"] = raw  # kept as sent; _to_response flags it for the model
    return message


def _to_response(message: dict[str, Any]) -> LLMResponse:
    texts: list[str] = []
    thinking: list[str] = []
    signed: list[dict[str, Any]] = []  # thinking blocks as sent, to replay within the turn
    calls: list[ToolCallRequest] = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type", "")
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind == "thinking":
            thinking.append(block.get("thinking") or "")
            signed.append(
                {
                    "type": "thinking",
                    "thinking": block.get("thinking") or "",
                    "signature": block.get("signature") or "",
                }
            )
        elif kind == "redacted_thinking":
            signed.append({"type": "redacted_thinking", "data": block.get("data") or ""})
        elif kind == "tool_use":
            value = block.get("input")
            if isinstance(value, str):  # text the stream could not (or must not) parse
                args, error = parse_arguments(value)
                raw = value
            elif value_problem(value):  # too deep or too long: nothing recursive may touch it
                args, error, raw = {}, value_problem(value), "{}"
            else:
                value = clean_unicode(value)  # a "\\ud800" must not reach a tool or a save
                args = value if isinstance(value, dict) else {}
                error = None if isinstance(value, dict) else "arguments must be a JSON object"
                raw = fmt.arguments_json(value)
            calls.append(
                ToolCallRequest(
                    str(block.get("id") or ""), str(block.get("name") or ""), args, raw, error
                )
            )
    usage = message.get("usage") or {}
    prompt = sum(
        int(usage.get(k) or 0)
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    return LLMResponse(
        content="".join(texts) or None,
        tool_calls=calls,
        finish_reason=_STOP.get(
            message.get("stop_reason") or "", "tool_calls" if calls else "stop"
        ),
        usage=Usage(
            prompt,
            int(usage.get("output_tokens") or 0),
            cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
            cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0),
        ),
        reasoning="\n".join(thinking) or None,
        thinking_blocks=signed,
    )
