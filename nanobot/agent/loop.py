"""The agent loop: LLM <-> tools until a final answer or the iteration limit.

It knows messages, a provider, a tool runner and the context budget (a `LoopSpec`), nothing
else: it never prints and never touches files. What the caller does with a run hangs off a
`LoopHooks`: `on_event` gets progress (text, tool starts and ends, notices), `on_message` gets
every new message as soon as it exists (an assistant message, then each tool result) so the
caller can checkpoint it. One step is a model call (`_Run.call_model`) and then, if the model
asked for tools, a tool step (`_Run.run_tools`); the run ends with a `StopReason`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from nanobot.agent.budget import ContextBudget, CutKind, Fitted
from nanobot.agent.events import (
    Event,
    Notice,
    StopReason,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnOutcome,
)
from nanobot.errors import ProviderError, RequestTooLarge
from nanobot.messages import Message, tool_result
from nanobot.providers.base import LLMResponse, Provider, ToolCallRequest, Usage
from nanobot.session.validity import make_valid

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)\s*", re.S)


class ToolOutput(Protocol):
    """What running one tool call gives back (nanobot.tools.base.ToolResult is one)."""

    @property
    def content(self) -> str: ...

    @property
    def is_error(self) -> bool: ...


class ToolRunner(Protocol):
    """What the loop needs of its tools (nanobot.tools.registry.ToolRegistry is one)."""

    def schemas(self) -> list[dict[str, Any]]: ...

    def hint(self, name: str, args: Any) -> str: ...

    async def execute(self, name: str, args: Any, parse_error: str | None = None) -> ToolOutput: ...


@dataclass(frozen=True)
class LoopSpec:
    """Everything a run of the loop needs besides its messages and hooks."""

    provider: Provider
    tools: ToolRunner
    budget: ContextBudget  # fits every request to the window and sets its max_tokens
    max_iterations: int = 40  # model calls per run (agents.defaults.maxToolIterations)
    temperature: float = 0.1
    stream: bool = True  # pass text deltas on as they arrive (TextDelta events)


class LoopHooks:
    """What a caller hangs off a run; subclass and override. The defaults do nothing."""

    def on_message(self, messages: list[Message]) -> None:
        """New messages of the run, as soon as they exist: save them here (one call, one append)."""

    def on_event(self, event: Event) -> None:
        """Progress for the screen: text deltas, tool starts and ends, notices."""


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
                self.buffer = self.buffer[at + len(tag) :]
                self.inside = not self.inside
                continue
            # keep a possible partial tag at the end for the next chunk
            keep = next((n for n in range(len(tag) - 1, 0, -1) if self.buffer.endswith(tag[:n])), 0)
            emit, self.buffer = (
                self.buffer[: len(self.buffer) - keep],
                self.buffer[len(self.buffer) - keep :],
            )
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


INTERRUPTED_MARK = "[interrupted: the user stopped this answer here]"


def interrupted_answer(shown: str) -> Message:
    """The part of an answer the user saw before stopping it (Ctrl-C), kept with a marker so the
    session and the model both know it is not a whole answer."""
    return {"role": "assistant", "content": f"{shown.rstrip()}\n\n{INTERRUPTED_MARK}"}


def is_interrupted_answer(msg: Message) -> bool:
    content = msg.get("content")
    return (
        msg.get("role") == "assistant"
        and isinstance(content, str)
        and content.endswith(INTERRUPTED_MARK)
    )


class StreamSink:
    """What the loop gives a provider as `on_delta`: the text goes on (think blocks left out) and
    is remembered as shown; `restart` says the attempt that streamed it was dropped and will be
    asked again (providers/retry.py), so its text is finished off rather than glued to the next."""

    def __init__(self, sink: Callable[[str], None]) -> None:
        self.held = HoldLast(self._show)
        self.sink = sink
        self.think = ThinkFilter(self.held)
        self.shown: list[str] = []  # of the current attempt, as passed to `sink`
        self.dropped = ""  # the last dropped attempt's text: still on screen while a retry waits

    def __call__(self, chunk: str) -> None:
        self.think.feed(chunk)

    def _show(self, text: str) -> None:
        self.shown.append(text)
        self.sink(text)

    def flush(self) -> None:
        self.held.flush()

    def restart(self) -> None:
        self.held.flush()  # what arrived is shown; the renderer closes it when told of the retry
        self.think = ThinkFilter(self.held)
        if self.shown:
            self.dropped = self.text()
        self.shown = []

    def text(self) -> str:
        return "".join(self.shown)

    def last_seen(self) -> str:
        """The answer the user last saw: this attempt's text, or while a retry has shown nothing
        yet (its wait, its request), the dropped attempt's."""
        return self.text() if self.text().strip() else self.dropped


@dataclass
class LoopResult:
    outcome: TurnOutcome = field(default_factory=TurnOutcome)
    new_messages: list[Message] = field(default_factory=list)
    total_usage: Usage = field(default_factory=Usage)  # of every request (outcome.usage: the last)
    requests: int = 0


def max_iterations_message(limit: int) -> str:
    return (
        f"I stopped after {limit} steps without reaching a final answer (the maxToolIterations limit). "
        "Tell me to continue, or raise agents.defaults.maxToolIterations in the config."
    )


def cut_off_result(call: ToolCallRequest, max_tokens: int) -> Message:
    return tool_result(
        call.id,
        call.name,
        (
            f"Error: not run. Your reply reached the length limit ({max_tokens:,} tokens) and was cut off, so this "
            "call may be incomplete even where its arguments parse; no call of that reply was run. Send the calls "
            "again with less in them (write a long file in several smaller steps)."
        ),
    )


def over_cap_result(call: ToolCallRequest, asked: int, cap: int) -> Message:
    return tool_result(
        call.id,
        call.name,
        (
            f"Error: not run. This step asked for {asked:,} tool calls; at most {cap} run per step "
            "(agents.defaults.maxToolCallsPerStep). Ask again for the calls you still need, fewer at a time."
        ),
    )


async def run_loop(
    spec: LoopSpec, messages: list[Message], hooks: LoopHooks | None = None
) -> LoopResult:
    """Run one turn. `messages` is the full request (system, history, current user message)."""
    run = _Run(spec, messages, hooks or LoopHooks())
    for _ in range(spec.max_iterations):
        response = await run.call_model()
        if response is None:
            return run.result
        if not response.tool_calls:
            return run.finish(response)
        # checkpoint the call before running it, and each result as it lands, so a crash or
        # Ctrl-C mid-step never loses a side effect that already happened
        run.record([response.to_message()])
        run.shown.flush()
        if response.finish_reason == "length":  # a cut-off reply never acts
            run.refuse_cut_off(response)
            continue
        await run.run_tools(response.tool_calls)
    return run.stop(StopReason.MAX_ITERATIONS, content=max_iterations_message(spec.max_iterations))


class _Run:
    """One run of the loop: the request as it grows, the result so far, the notices already given."""

    def __init__(self, spec: LoopSpec, messages: list[Message], hooks: LoopHooks) -> None:
        self.spec = spec
        self.hooks = hooks
        self.messages = list(messages)
        self.result = LoopResult()
        self.schemas = spec.tools.schemas()
        self.told: set[str] = set()
        self.shown = StreamSink(self._text)  # the streamed text of the current model call
        self.max_tokens = spec.budget.max_tokens  # asked for by the current model call

    def _text(self, text: str) -> None:
        self.hooks.on_event(TextDelta(text))

    def record(self, new: list[Message]) -> None:
        """Every new message goes through here: into the request, into the result, to the hooks."""
        self.messages.extend(new)
        self.result.new_messages.extend(new)
        self.hooks.on_message(new)

    def stop(
        self, reason: StopReason, *, content: str | None = None, error: str | None = None
    ) -> LoopResult:
        self.result.outcome.stop_reason = reason
        self.result.outcome.content = content
        self.result.outcome.error = error
        return self.result

    def _fit(self) -> Fitted:
        fitted = self.spec.budget.fit(make_valid(self.messages), self.schemas)
        for cut in fitted.cuts:
            # cut tool results carry their own marker, seen by the model; the user is not told each time
            if cut.kind is not CutKind.TOOL_RESULTS and cut.words not in self.told:
                self.told.add(cut.words)
                self.hooks.on_event(
                    Notice(
                        f"to fit the context window, nanobot {cut.words} (this request only; the "
                        "session keeps everything)"
                    )
                )
        return fitted

    async def call_model(self) -> LLMResponse | None:
        """The model-call step: fit the request, send it, account for it. None: the run stopped."""
        budget = self.spec.budget
        shrunk = False
        while True:
            try:
                fitted = self._fit()
            except RequestTooLarge as exc:
                self.stop(StopReason.ERROR, error=str(exc))
                return None
            self.shown = StreamSink(self._text)
            try:
                response = await self.spec.provider.chat(
                    fitted.messages,
                    tools=self.schemas or None,
                    max_tokens=fitted.max_tokens,
                    temperature=self.spec.temperature,
                    on_delta=self.shown if self.spec.stream else None,
                )
            except asyncio.CancelledError:
                # stopped mid-answer or during a retry's wait (Ctrl-C): what the user saw stays in the session, marked
                seen = self.shown.last_seen()
                if seen.strip():
                    self.record([interrupted_answer(seen)])
                raise
            except ProviderError as exc:
                self.shown.flush()
                if not exc.context_overflow:
                    self.stop(StopReason.ERROR, error=str(exc))
                    return None
                sent = budget.calibration.adjust(fitted.estimate) if fitted.estimate else 0
                ratio = budget.calibration.ratio
                budget.observe(fitted.estimate, exc.reported_tokens)
                # "prompt too long": once, learn what the provider said (its window or its count), refit, send again
                notice = (
                    None
                    if shrunk
                    else budget.shrink(
                        exc.reported_window, recounted=budget.calibration.ratio > ratio
                    )
                )
                if notice is not None:
                    shrunk = True
                    self.hooks.on_event(Notice(notice, "warning"))
                    continue
                self.stop(StopReason.ERROR, error=str(budget.overflow_error(exc, sent)))
                return None
            budget.observe(
                fitted.estimate, response.usage.prompt_tokens, fallback=response.fallback
            )
            return self._received(response, fitted.max_tokens)

    def _received(self, response: LLMResponse, max_tokens: int) -> LLMResponse | None:
        self.max_tokens = max_tokens
        result = self.result
        result.requests += 1
        result.outcome.usage = response.usage
        result.total_usage.prompt_tokens += response.usage.prompt_tokens
        result.total_usage.completion_tokens += response.usage.completion_tokens
        if response.finish_reason == "error":
            self.shown.flush()
            self.stop(StopReason.ERROR, error=response.content or "the provider returned an error")
            return None
        response.content = strip_think(response.content)
        return response

    def finish(self, response: LLMResponse) -> LoopResult:
        """The model answered without tool calls: the run is done."""
        if not response.content:
            self.hooks.on_event(
                Notice("the model returned an empty answer; try rephrasing or ask again", "warning")
            )
        elif response.finish_reason == "length":
            limit, fix = self.reply_limit(response)
            self.hooks.on_event(
                Notice(
                    f"the answer reached the reply limit ({limit:,} tokens) and may be "
                    f"cut off; ask me to continue, or {fix}",
                    "warning",
                )
            )
        if response.content:
            self.record([response.to_message()])
        self.shown.flush()  # after the answer is saved: an answer fully on screen is on disk
        return self.stop(StopReason.DONE, content=response.content)

    def reply_limit(self, response: LLMResponse) -> tuple[int, str]:
        """The reply limit that applied to `response`, and what raises it: the configured one, or
        less where the window's last check lowered it because the context was nearly full."""
        if response.reply_limit is not None and response.reply_limit < self.max_tokens:
            return response.reply_limit, "free room in the context window (/compact, or /new)"
        return self.max_tokens, "raise agents.defaults.maxTokens"

    def refuse_cut_off(self, response: LLMResponse) -> None:
        """The reply ended at the length limit: answer each of its calls with an error, run none."""
        calls = response.tool_calls
        limit, fix = self.reply_limit(response)
        self.record([cut_off_result(call, limit) for call in calls])  # one durable append for all
        self.result.outcome.tool_calls.extend(
            {"name": c.name, "arguments": c.arguments, "is_error": True} for c in calls
        )
        self.hooks.on_event(
            Notice(
                f"the model's reply reached the reply limit ({limit:,} tokens) in the middle of "
                f"{len(calls)} tool call(s); none was run and the model was asked to retry with less "
                f"(or {fix})",
                "warning",
            )
        )

    async def run_tools(self, calls: list[ToolCallRequest]) -> None:
        """The tool step: run the calls, up to the per-step cap; each call past it gets an error result."""
        cap = self.spec.budget.max_tool_calls
        tools = self.spec.tools
        for call in calls[:cap]:
            self.hooks.on_event(
                ToolStarted(call.id, call.name, tools.hint(call.name, call.arguments))
            )
            output = await tools.execute(call.name, call.arguments, parse_error=call.parse_error)
            self.record([tool_result(call.id, call.name, output.content)])
            self.result.outcome.tool_calls.append(
                {"name": call.name, "arguments": call.arguments, "is_error": output.is_error}
            )
            first_line = output.content.strip().splitlines()[0] if output.content.strip() else ""
            self.hooks.on_event(ToolFinished(call.id, call.name, output.is_error, first_line[:200]))
        extra = calls[cap:]
        if not extra:
            return
        self.record(
            [over_cap_result(call, len(calls), cap) for call in extra]
        )  # one durable append for all
        self.result.outcome.tool_calls.extend(
            {"name": c.name, "arguments": c.arguments, "is_error": True} for c in extra
        )
        self.hooks.on_event(
            Notice(
                f"the model asked for {len(calls):,} tool calls in one step; ran the first {cap} and answered the other "
                f"{len(extra):,} with an error (agents.defaults.maxToolCallsPerStep)",
                "warning",
            )
        )
