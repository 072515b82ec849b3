"""Anthropic through the official SDK: tool use, streaming and prompt caching."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2

from nanobot.messages import Message
from nanobot.providers import anthropic_format as fmt
from nanobot.providers.base import DeltaCallback, LLMResponse, Provider, ToolCallRequest, Usage
from nanobot.providers.errors_map import connection_error, status_error

_STOP = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
         "refusal": "stop", "pause_turn": "stop", "model_context_window_exceeded": "length"}


class AnthropicProvider(Provider):
    name = "anthropic"

    def __init__(self, model: str, *, api_key: str, api_base: str | None = None,
                 extra_headers: dict[str, str] | None = None, timeout: float = 600.0) -> None:
        super().__init__(model)
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key or "none", base_url=api_base or None, max_retries=0, timeout=timeout,
            default_headers=extra_headers or None,
        )

    async def chat(self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None,
                   tool_choice: str | dict[str, Any] | None = None, max_tokens: int = 4096,
                   temperature: float = 0.1, on_delta: DeltaCallback | None = None) -> LLMResponse:
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
        try:
            if on_delta is None:
                message = await self._client.messages.create(**params)
            else:
                async with self._client.messages.stream(**params) as stream:
                    async for event in stream:
                        if event.type == "text" and event.text:
                            on_delta(event.text)
                    message = await stream.get_final_message()
        except anthropic.APIStatusError as exc:
            raise status_error("anthropic", exc.status_code, _error_message(exc),
                               exc.response.headers.get("retry-after")) from None
        except anthropic.APITimeoutError as exc:
            raise connection_error("anthropic", exc, timeout=True) from None
        except anthropic.APIConnectionError as exc:
            raise connection_error("anthropic", exc) from None
        except httpx2.TransportError as exc:  # a stream cut mid-way escapes the SDK unwrapped
            raise connection_error("anthropic", exc) from None
        return _to_response(message)

    async def aclose(self) -> None:
        await self._client.close()


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(getattr(exc, "message", exc))


def _to_response(message: Any) -> LLMResponse:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCallRequest] = []
    for block in message.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            texts.append(block.text)
        elif kind == "thinking":
            thinking.append(getattr(block, "thinking", ""))
        elif kind == "tool_use":
            args = block.input if isinstance(block.input, dict) else {}
            error = None if isinstance(block.input, dict) else "arguments must be a JSON object"
            calls.append(ToolCallRequest(block.id, block.name, args, fmt.arguments_json(block.input), error))
    usage = message.usage
    prompt = (usage.input_tokens or 0) + (getattr(usage, "cache_read_input_tokens", 0) or 0) + (
        getattr(usage, "cache_creation_input_tokens", 0) or 0)
    return LLMResponse(
        content="".join(texts) or None,
        tool_calls=calls,
        finish_reason=_STOP.get(message.stop_reason or "", "tool_calls" if calls else "stop"),
        usage=Usage(prompt, usage.output_tokens or 0),
        reasoning="\n".join(thinking) or None,
    )
