"""The agent loop: LLM <-> tools until a final answer or the iteration limit.

It knows messages, a provider and a tool registry, nothing else: it never prints and
never touches files. Progress goes out as events; `on_step` receives every new message as
soon as it exists (an assistant message, then each tool result) so the caller can checkpoint it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nanobot.agent.events import EventSink, Notice, TextDelta, ToolFinished, ToolStarted, ignore
from nanobot.errors import ProviderError
from nanobot.messages import Message, tool_result
from nanobot.providers.base import Provider, Usage
from nanobot.validity import make_valid

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)\s*", re.S)

StepCallback = Callable[[list[Message]], None]
Prepare = Callable[[list[Message]], list[Message]]


def strip_think(text: str | None) -> str | None:
    """Remove <think>...</think> blocks (and an unclosed trailing one) from model text."""
    if not text:
        return text
    cleaned = _THINK.sub("", text).strip()
    return cleaned or None


class ThinkFilter:
    """Streaming counterpart of strip_think: passes through only text outside <think> blocks."""

    def __init__(self, sink: Callable[[str], None]) -> None:
        self.sink = sink
        self.buffer = ""
        self.inside = False

    def feed(self, chunk: str) -> None:
        self.buffer += chunk
        while self.buffer:
            tag = "</think>" if self.inside else "<think>"
            at = self.buffer.find(tag)
            if at >= 0:
                if not self.inside and at:
                    self.sink(self.buffer[:at])
                self.buffer = self.buffer[at + len(tag):]
                self.inside = not self.inside
                continue
            # keep a possible partial tag at the end for the next chunk
            keep = next((n for n in range(len(tag) - 1, 0, -1) if self.buffer.endswith(tag[:n])), 0)
            emit, self.buffer = self.buffer[: len(self.buffer) - keep], self.buffer[len(self.buffer) - keep:]
            if emit and not self.inside:
                self.sink(emit)
            return


class HoldLast:
    """Passes streamed text on one piece late, so the end of an answer is shown only after the
    message holding it is saved: an answer fully on screen is always on disk."""

    def __init__(self, sink: Callable[[str], None]) -> None:
        self.sink = sink
        self.held = ""

    def __call__(self, text: str) -> None:
        if self.held:
            self.sink(self.held)
        self.held = text

    def flush(self) -> None:
        if self.held:
            self.sink(self.held)
            self.held = ""


@dataclass
class LoopResult:
    content: str | None
    stop_reason: str  # "done" | "max_iterations" | "error"
    new_messages: list[Message] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)  # of the last request
    total_usage: Usage = field(default_factory=Usage)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    requests: int = 0


def max_iterations_message(limit: int) -> str:
    return (f"I stopped after {limit} steps without reaching a final answer (the maxToolIterations limit). "
            "Tell me to continue, or raise agents.defaults.maxToolIterations in the config.")


async def run_loop(
    provider: Provider,
    tools: Any,  # nanobot.tools.registry.ToolRegistry
    messages: list[Message],
    *,
    max_iterations: int = 40,
    max_tokens: int = 4096,
    temperature: float = 0.1,
    emit: EventSink = ignore,
    on_step: StepCallback | None = None,
    prepare: Prepare | None = None,
    stream: bool = True,
    on_overflow: Callable[[ProviderError], bool] | None = None,
) -> LoopResult:
    """Run one turn. `messages` is the full request (system, history, current user message)."""
    conversation = list(messages)
    result = LoopResult(content=None, stop_reason="done")
    schemas = tools.schemas() if tools is not None else None
    for _ in range(max_iterations):
        for attempt in (1, 2):
            request = make_valid(conversation)
            if prepare is not None:
                request = prepare(request)
            shown = HoldLast(lambda text: emit(TextDelta(text)))
            think = ThinkFilter(shown)
            try:
                response = await provider.chat(
                    request, tools=schemas or None, max_tokens=max_tokens, temperature=temperature,
                    on_delta=think.feed if stream else None,
                )
                break
            except ProviderError as exc:
                shown.flush()
                # "prompt too long": once, let the caller shrink its budget, then fit and send again
                if attempt == 1 and exc.context_overflow and on_overflow is not None and on_overflow(exc):
                    continue
                result.stop_reason, result.error = "error", str(exc)
                return result
        result.requests += 1
        result.usage = response.usage
        result.total_usage.prompt_tokens += response.usage.prompt_tokens
        result.total_usage.completion_tokens += response.usage.completion_tokens
        if response.finish_reason == "error":
            shown.flush()
            result.stop_reason, result.error = "error", response.content or "the provider returned an error"
            return result
        response.content = strip_think(response.content)
        assistant_msg = response.to_message()
        if not response.tool_calls:
            result.content = response.content
            if not response.content:
                emit(Notice("the model returned an empty answer; try rephrasing or ask again", "warning"))
            elif response.finish_reason == "length":
                emit(Notice(f"the answer reached the reply limit ({max_tokens:,} tokens) and may be cut off; "
                            "ask me to continue, or raise agents.defaults.maxTokens", "warning"))
            if response.content:
                conversation.append(assistant_msg)
                result.new_messages.append(assistant_msg)
                if on_step:
                    on_step([assistant_msg])
            shown.flush()
            return result
        # checkpoint the call before running it, and each result as it lands, so a crash or
        # Ctrl-C mid-step never loses a side effect that already happened
        conversation.append(assistant_msg)
        result.new_messages.append(assistant_msg)
        if on_step:
            on_step([assistant_msg])
        shown.flush()
        for call in response.tool_calls:
            hint = tools.hint(call.name, call.arguments)
            emit(ToolStarted(call.id, call.name, hint))
            outcome = await tools.execute(call.name, call.arguments, parse_error=call.parse_error)
            message = tool_result(call.id, call.name, outcome.content)
            conversation.append(message)
            result.new_messages.append(message)
            if on_step:
                on_step([message])
            result.tool_calls.append({"name": call.name, "arguments": call.arguments, "is_error": outcome.is_error})
            first_line = outcome.content.strip().splitlines()[0] if outcome.content.strip() else ""
            emit(ToolFinished(call.id, call.name, outcome.is_error, first_line[:200]))
    result.stop_reason = "max_iterations"
    result.content = max_iterations_message(max_iterations)
    return result
