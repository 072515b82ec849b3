"""OpenAI and every OpenAI-compatible server (openrouter, deepseek, ollama, vllm, custom)."""

from __future__ import annotations

import secrets
from typing import Any

import openai
import httpx2

from nanobot.messages import Message, for_wire
from nanobot.providers.base import DeltaCallback, LLMResponse, Provider, ToolCallRequest, Usage, parse_arguments
from nanobot.providers.errors_map import connection_error, status_error


class OpenAICompatProvider(Provider):
    def __init__(self, model: str, *, name: str = "openai", api_key: str = "", api_base: str | None = None,
                 extra_headers: dict[str, str] | None = None, timeout: float = 600.0,
                 extra_params: dict[str, Any] | None = None, send_temperature: bool = True) -> None:
        super().__init__(model)
        self.name = name
        # fields added to every request (reasoning_effort; extra_body for server-specific ones)
        self.extra_params = dict(extra_params or {})
        self.send_temperature = send_temperature  # OpenAI's reasoning models reject one
        self._client = openai.AsyncOpenAI(
            api_key=api_key or "no-key", base_url=api_base or None, max_retries=0, timeout=timeout,
            default_headers=extra_headers or None,
        )

    def _wire_messages(self, messages: list[Message]) -> list[dict]:
        wire = []
        for msg in messages:
            out = for_wire(msg)
            out.pop("reasoning_content", None)  # most servers reject it as input
            if out.get("role") == "tool":
                out.pop("name", None)
            wire.append(out)
        return wire

    async def chat(self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None,
                   tool_choice: str | dict[str, Any] | None = None, max_tokens: int = 4096,
                   temperature: float = 0.1, on_delta: DeltaCallback | None = None) -> LLMResponse:
        params: dict[str, Any] = {**self.extra_params, "model": self.model,
                                  "messages": self._wire_messages(messages)}
        if self.send_temperature:
            params["temperature"] = temperature
        # the official API wants max_completion_tokens (o-series reject max_tokens); compatibles want max_tokens
        params["max_completion_tokens" if self.name == "openai" else "max_tokens"] = max_tokens
        if tools:
            params["tools"] = tools
            if tool_choice is not None:
                params["tool_choice"] = (
                    {"type": "function", "function": {"name": tool_choice["name"]}}
                    if isinstance(tool_choice, dict) else tool_choice
                )
        try:
            if on_delta is None:
                completion = await self._client.chat.completions.create(**params)
                return _from_completion(completion)
            stream = await self._client.chat.completions.create(
                **params, stream=True, stream_options={"include_usage": True})
            return await _from_stream(stream, on_delta)
        except openai.APIStatusError as exc:
            raise status_error(self.name, exc.status_code, _error_message(exc),
                               exc.response.headers.get("retry-after")) from None
        except openai.APITimeoutError as exc:
            raise connection_error(self.name, exc, timeout=True) from None
        except openai.APIConnectionError as exc:
            raise connection_error(self.name, exc) from None
        except httpx2.TransportError as exc:  # a stream cut mid-way escapes the SDK unwrapped
            raise connection_error(self.name, exc) from None

    async def aclose(self) -> None:
        await self._client.close()


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(getattr(exc, "message", exc))


def _calls(raw_calls: list[tuple[str | None, str, str]]) -> list[ToolCallRequest]:
    calls = []
    for call_id, name, raw in raw_calls:
        args, error = parse_arguments(raw)
        # some local servers (LM Studio, llama.cpp) send "" or null ids; an id-less call would be
        # dropped from history with its result, and the model would repeat it forever
        calls.append(ToolCallRequest(call_id or f"call_{secrets.token_hex(6)}", name, args, raw or "{}", error))
    return calls


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    return Usage(getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0)


def _from_completion(completion: Any) -> LLMResponse:
    if not completion.choices:
        return LLMResponse(content=None, finish_reason="error", usage=_usage(completion.usage))
    choice = completion.choices[0]
    msg = choice.message
    raw = [(c.id, c.function.name, c.function.arguments) for c in (msg.tool_calls or [])
           if getattr(c, "function", None)]
    return LLMResponse(
        content=msg.content,
        tool_calls=_calls(raw),
        finish_reason=choice.finish_reason or "stop",
        usage=_usage(completion.usage),
        reasoning=getattr(msg, "reasoning_content", None) or getattr(msg, "reasoning", None),
    )


def _slot(calls: list[list[str]], slot_of: dict[int, list[str]], tc: Any) -> list[str]:
    """The call a streamed tool-call delta belongs to: by index, or (servers that omit it) by a new id."""
    if tc.index is not None:
        if tc.index not in slot_of:
            slot_of[tc.index] = ["", "", ""]
            calls.append(slot_of[tc.index])
        return slot_of[tc.index]
    if not calls or (tc.id and calls[-1][0] and tc.id != calls[-1][0]):
        calls.append(["", "", ""])
    return calls[-1]


async def _from_stream(stream: Any, on_delta: DeltaCallback) -> LLMResponse:
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[list[str]] = []  # [id, name, arguments] per call, in order
    slot_of: dict[int, list[str]] = {}  # the server's index -> its slot
    finish = None
    usage = None
    async for chunk in stream:
        if getattr(chunk, "usage", None):
            usage = chunk.usage
        for choice in chunk.choices or []:
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                text.append(delta.content)
                on_delta(delta.content)
            extra = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
            if isinstance(extra, str):
                reasoning.append(extra)
            for tc in delta.tool_calls or []:
                slot = _slot(calls, slot_of, tc)
                if tc.id:
                    slot[0] = tc.id
                if tc.function and tc.function.name:
                    slot[1] += tc.function.name
                if tc.function and tc.function.arguments:
                    slot[2] += tc.function.arguments
            if choice.finish_reason:
                finish = choice.finish_reason
    raw = [(slot[0], slot[1], slot[2]) for slot in calls]
    return LLMResponse(
        content="".join(text) or None,
        tool_calls=_calls(raw),
        finish_reason=finish or ("tool_calls" if raw else "stop"),
        usage=_usage(usage),
        reasoning="".join(reasoning) or None,
    )
