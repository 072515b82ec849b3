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

from nanobot.agent.budget import DEFAULT_MAX_TOOL_CALLS, ContextBudget, Fitted
from nanobot.agent.events import EventSink, Notice, TextDelta, ToolFinished, ToolStarted, ignore
from nanobot.errors import ProviderError, RequestTooLarge
from nanobot.messages import Message, tool_result
from nanobot.providers.base import LLMResponse, Provider, ToolCallRequest, Usage
from nanobot.session.validity import make_valid

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)\s*", re.S)

StepCallback = Callable[[list[Message]], None]


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


def over_cap_result(call: ToolCallRequest, asked: int, cap: int) -> Message:
    return tool_result(call.id, call.name, (
        f"Error: not run. This step asked for {asked:,} tool calls; at most {cap} run per step "
        "(agents.defaults.maxToolCallsPerStep). Ask again for the calls you still need, fewer at a time."))


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
    budget: ContextBudget | None = None,
    stream: bool = True,
) -> LoopResult:
    """Run one turn. `messages` is the full request (system, history, current user message).

    With a `budget`, every request is fitted to it (and max_tokens comes from it); without one
    (narrow tests) requests go as they are with `max_tokens`.
    """
    conversation = list(messages)
    result = LoopResult(content=None, stop_reason="done")
    schemas = tools.schemas() if tools is not None else None
    cap = budget.max_tool_calls if budget is not None else DEFAULT_MAX_TOOL_CALLS
    told: set[str] = set()
    for _ in range(max_iterations):
        for attempt in (1, 2):
            request = make_valid(conversation)
            try:
                fitted = budget.fit(request, schemas) if budget is not None else Fitted(request, max_tokens)
            except RequestTooLarge as exc:
                result.stop_reason, result.error = "error", str(exc)
                return result
            for cut in fitted.cuts:
                if cut not in told and cut != "cut tool results":
                    told.add(cut)
                    emit(Notice(f"to fit the context window, nanobot {cut} (this request only; the session keeps "
                                "everything)"))
            shown = HoldLast(lambda text: emit(TextDelta(text)))
            think = ThinkFilter(shown)
            try:
                response = await provider.chat(
                    fitted.messages, tools=schemas or None, max_tokens=fitted.max_tokens, temperature=temperature,
                    on_delta=think.feed if stream else None,
                )
                if budget is not None:
                    budget.observe(fitted.estimate, response.usage.prompt_tokens)
                break
            except ProviderError as exc:
                shown.flush()
                if exc.context_overflow and budget is not None:
                    sent = budget.calibration.adjust(fitted.estimate) if fitted.estimate else 0
                    budget.observe(fitted.estimate, exc.reported_tokens)
                    # "prompt too long": once, shrink to the window the provider reported, refit, send again
                    if attempt == 1 and budget.shrink(exc.reported_window):
                        emit(Notice(f"the provider said the prompt was too long for its context window; working "
                                    f"within {budget.window:,} tokens from now on (set "
                                    "agents.defaults.contextWindowTokens to the model's real window)", "warning"))
                        continue
                    exc = budget.overflow_error(exc, sent)
                result.stop_reason, result.error = "error", str(exc)
                return result
        max_tokens = fitted.max_tokens
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
        await _run_calls(tools, response, cap, conversation, result, emit, on_step)
    result.stop_reason = "max_iterations"
    result.content = max_iterations_message(max_iterations)
    return result


async def _run_calls(tools: Any, response: LLMResponse, cap: int, conversation: list[Message],
                     result: LoopResult, emit: EventSink, on_step: StepCallback | None) -> None:
    """Run the step's tool calls, up to `cap`; each call past it gets an error result instead."""
    calls = response.tool_calls
    for call in calls[:cap]:
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
    extra = calls[cap:]
    if not extra:
        return
    refused = [over_cap_result(call, len(calls), cap) for call in extra]
    conversation.extend(refused)
    result.new_messages.extend(refused)
    if on_step:
        on_step(refused)  # one durable append for all of them
    result.tool_calls.extend({"name": c.name, "arguments": c.arguments, "is_error": True} for c in extra)
    emit(Notice(f"the model asked for {len(calls):,} tool calls in one step; ran the first {cap} and answered "
                f"the other {len(extra):,} with an error (agents.defaults.maxToolCallsPerStep)", "warning"))
