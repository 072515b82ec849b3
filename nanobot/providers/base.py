"""The one small interface every LLM provider implements.

Messages go in as OpenAI chat dicts (see nanobot/messages.py) plus OpenAI function-tool
schemas; an LLMResponse comes out. Text deltas reach `on_delta` while streaming.
Errors are raised as nanobot.errors.ProviderError (retryable or not); retrying is the
caller's business (nanobot/providers/retry.py), so adapters stay simple.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from nanobot.messages import Message, assistant, clean_unicode, tool_call
from nanobot.policy.arguments import text_problem, value_problem

DeltaCallback = Callable[[str], None]


@runtime_checkable
class RestartableDelta(Protocol):
    """An `on_delta` that can be told the attempt streaming into it was dropped and will be made
    again (providers/retry.py), so the text so far is closed off instead of glued to the retry's."""

    def __call__(self, text: str) -> None: ...

    def restart(self) -> None: ...


class StreamTap:
    """An `on_delta` that passes streamed text on and keeps it (`text`): whether a model has begun
    answering (providers/fallback.py), what a call stopped midway had streamed (usage/meter.py).
    A retry's `restart` is passed on (RestartableDelta)."""

    def __init__(self, on_delta: DeltaCallback) -> None:
        self.on_delta = on_delta
        self.pieces: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def __call__(self, text: str) -> None:
        self.pieces.append(text)
        self.on_delta(text)

    def restart(self) -> None:
        if isinstance(self.on_delta, RestartableDelta):
            self.on_delta.restart()


# Seconds a provider may stay silent (no byte at all) before the request counts as failed; per
# provider in the config as providers.<name>.timeout. Connecting gets at most CONNECT_TIMEOUT.
DEFAULT_TIMEOUT = 180.0
CONNECT_TIMEOUT = 10.0


async def post_encodable(
    post: Callable[..., Any], path: str, body: dict[str, Any], **kwargs: Any
) -> Any:
    """`post(path, body=body)`; a body the JSON encoder refuses (a lone surrogate that slipped past
    the edges, see messages.clean_unicode) is sent once more with U+FFFD in its place. Free when clean."""
    try:
        return await post(path, body=body, **kwargs)
    except UnicodeEncodeError:
        return await post(path, body=clean_unicode(body), **kwargs)


def http_timeout(seconds: float) -> Any:
    """The SDK's timeout for `seconds` of silence: reads and writes get all of it, connecting less."""
    import httpx2

    return httpx2.Timeout(seconds, connect=min(CONNECT_TIMEOUT, seconds))


@dataclass
class ToolCallRequest:
    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str = ""
    parse_error: str | None = None  # set when the model's arguments were not a JSON object


@dataclass
class Usage:
    prompt_tokens: int = 0  # every prompt token, those read from or written to the cache included
    completion_tokens: int = 0
    cache_read_tokens: int = 0  # of prompt_tokens: read from the provider's prompt cache
    cache_write_tokens: int = (
        0  # of prompt_tokens: written to it (Anthropic's cache_creation_input_tokens)
    )


@dataclass
class LLMResponse:
    content: str | None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "tool_calls" | "length" | ...
    usage: Usage = field(default_factory=Usage)
    reasoning: str | None = None
    # Anthropic's signed thinking blocks, replayed with the tool results of the same turn (the API
    # requires them there); never a wire key, so later turns and other providers do not get them
    thinking_blocks: list[dict[str, Any]] = field(default_factory=list)
    # MiniMax's reasoning_details as sent (its OpenAI-compatible API with reasoning_split), kept the
    # same way: within the turn, back to a server that asks for them (provider_table.py: details_back)
    reasoning_details: list[dict[str, Any]] = field(default_factory=list)
    served_by: str = (
        ""  # provider/model that answered, set where a fallback chain chose it (for the ledger)
    )
    fallback: bool = False  # a fallback model answered, not the one the context budget counts for
    # the max_tokens the request went out with where the window's last check lowered it (the
    # context was nearly full), so a "reply limit" notice names the limit that applied
    reply_limit: int | None = None

    def to_message(self) -> Message:
        """The assistant message to append to the conversation."""
        calls = [
            tool_call(c.id, c.name, _replayable(c.raw_arguments) if c.parse_error else c.arguments)
            for c in self.tool_calls
        ]
        msg = assistant(self.content, calls, reasoning_content=self.reasoning)
        if self.thinking_blocks:
            msg["thinking_blocks"] = self.thinking_blocks
        if self.reasoning_details:
            msg["reasoning_details"] = self.reasoning_details
        return msg


_REPLAY_CHARS = 4000


def _replayable(raw: str) -> str:
    """Arguments that could not be used, as kept in the conversation: a huge text only in part."""
    if len(raw) <= _REPLAY_CHARS:
        return raw
    return raw[:_REPLAY_CHARS] + f"... [{len(raw) - _REPLAY_CHARS:,} more characters not kept]"


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Parse tool-call arguments; never guess: malformed input yields ({}, reason). Arguments too
    deep or too long (nanobot/policy/arguments.py) are refused before anything recurses into them."""
    if isinstance(raw, dict):
        problem = value_problem(raw)
        return ({}, problem) if problem else (clean_unicode(raw), None)
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, str):
        problem = text_problem(raw)
        if problem:
            return {}, problem
    try:
        value = json.loads(raw)
    except (TypeError, ValueError) as exc:
        return {}, f"arguments are not valid JSON ({exc})"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    return clean_unicode(value), None  # a "\\ud800" in the JSON must not reach a tool or a save


@dataclass
class Capabilities:
    """What a provider can do. Wrappers (retry, fallback, deferred) share their inner provider's
    object, so what one caller learns through a wrapper every caller sees."""

    # tool_choice may name a tool; False once the provider refused one (ProviderError.tool_choice_refused)
    forced_tool_choice: bool = True
    prewarm: bool = False  # prewarm() starts loading what the first request needs (the SDK)


class Provider(ABC):
    """An LLM endpoint. `model` is the provider-side model name (no "provider/" prefix)."""

    name: str = "provider"

    def __init__(self, model: str) -> None:
        self.model = model
        self.capabilities = Capabilities()

    def prewarm(self) -> None:  # noqa: B027 - a no-op unless capabilities.prewarm says otherwise
        """Start loading what the first request needs, in the background; returns at once."""

    @abstractmethod
    async def chat(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,  # "auto" | "required" | {"name": ...}
        max_tokens: int = 4096,
        temperature: float = 0.1,
        on_delta: DeltaCallback | None = None,
    ) -> LLMResponse:
        """One request. Raises ProviderError."""

    async def aclose(self) -> None:  # noqa: B027 - a no-op unless a provider holds connections
        """Release connections."""
