"""One session's turns: build the request, run the loop, save every step durably.

This is where the pure agent loop meets the session store. Printing stays in the CLI,
which receives events; this module only orchestrates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nanobot.agent.context import ContextBuilder
from nanobot.agent.events import EventSink, TurnDone, ignore
from nanobot.agent.loop import LoopResult, run_loop
from nanobot.messages import Message
from nanobot.providers.base import Provider, Usage
from nanobot.session import Session, SessionStore, TurnCheckpoint


@dataclass
class TurnSettings:
    max_iterations: int = 40
    max_tokens: int = 8192
    temperature: float = 0.1
    stream: bool = True
    channel: str = "cli"
    chat_id: str = "direct"


@dataclass
class TurnOutcome:
    content: str | None
    stop_reason: str  # "done" | "max_iterations" | "error"
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class Conversation:
    def __init__(self, *, session: Session, store: SessionStore, provider: Provider, tools: Any,
                 context: ContextBuilder, settings: TurnSettings | None = None) -> None:
        self.session = session
        self.store = store
        self.provider = provider
        self.tools = tools
        self.context = context
        self.settings = settings or TurnSettings()
        self.last_usage = Usage()

    def build_request(self, text: str) -> list[Message]:
        return self.context.build_messages(self.session.get_history(), text, channel=self.settings.channel,
                                           chat_id=self.settings.chat_id)

    async def send(self, text: str, *, emit: EventSink = ignore) -> TurnOutcome:
        """Run one user turn. The user's message is on disk before the LLM is called."""
        request = self.build_request(text)
        checkpoint = TurnCheckpoint(self.store, self.session, skip=len(request) - 1)
        transcript = list(request)
        checkpoint.save(transcript)

        def on_step(new: list[Message]) -> None:
            transcript.extend(new)
            checkpoint.save(transcript)

        s = self.settings
        result: LoopResult = await run_loop(
            self.provider, self.tools, request, max_iterations=s.max_iterations, max_tokens=s.max_tokens,
            temperature=s.temperature, emit=emit, on_step=on_step, stream=s.stream,
        )
        if result.stop_reason == "max_iterations" and result.content:
            # the limit notice is a real answer the user sees; keep it so the next turn has the context
            on_step([{"role": "assistant", "content": result.content}])
        if result.requests:
            self.last_usage = result.usage
        outcome = TurnOutcome(result.content, result.stop_reason, result.error, result.usage, result.tool_calls)
        emit(TurnDone(outcome.content, outcome.stop_reason, outcome.usage, outcome.error, outcome.tool_calls))
        return outcome

    def new_session(self) -> None:
        """/new: start over with an empty session (archiving comes with memory consolidation)."""
        self.store.clear(self.session)
