"""One session's turns: build the request, run the loop, save every step durably.

This is where the pure agent loop meets the session store. Printing stays in the CLI,
which receives events; this module only orchestrates.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from nanobot.agent.budget import ContextBudget
from nanobot.agent.consolidation import ConsolidationReport, Consolidator, probe_message
from nanobot.agent.context import ContextBuilder
from nanobot.agent.events import EventSink, Notice, TurnDone, ignore
from nanobot.agent.loop import LoopResult, run_loop
from nanobot.agent.paste import keep_large_paste
from nanobot.agent.subagents import HelperRecord, SubagentResult
from nanobot.errors import UsageError
from nanobot.messages import Message, text_of
from nanobot.providers.base import Provider, Usage
from nanobot.secrets_mask import REDACTED, find_secrets, mask_secrets, mask_value
from nanobot.session.save_policy import TurnCheckpoint, save_turn
from nanobot.session.store import Session, SessionStore


@dataclass
class TurnSettings:
    max_iterations: int = 40
    temperature: float = 0.1
    stream: bool = True
    channel: str = "cli"
    chat_id: str = "direct"
    # a turn waits this long for consolidation to make room, then goes ahead with older turns
    # left out of its request while consolidation finishes in the background
    room_wait_seconds: float = 5.0


@dataclass
class TurnOutcome:
    content: str | None
    stop_reason: str  # "done" | "max_iterations" | "error"
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class Conversation:
    """Turns of one session. User turns and injected subagent turns share one lock, so a
    subagent's report waits behind a running user turn and reports are handled one by one."""

    def __init__(self, *, session: Session, store: SessionStore, provider: Provider, tools: Any,
                 context: ContextBuilder, budget: ContextBudget, consolidator: Consolidator,
                 settings: TurnSettings | None = None) -> None:
        self.session = session
        self.store = store
        self.provider = provider
        self.tools = tools
        self.context = context
        self.settings = settings or TurnSettings()
        self.last_usage = Usage()
        self.subagents: Any = None  # nanobot.agent.subagents.SubagentManager, wired by app.py
        self.background_emit: EventSink = ignore  # where injected turns render (set by the CLI)
        self._turn_lock = asyncio.Lock()
        # report turns queued or running -> their result (None once the turn saved its note)
        self._reports: dict[asyncio.Task, SubagentResult | None] = {}
        self.budget = budget
        self.consolidator = consolidator
        self.last_consolidation: ConsolidationReport | None = None
        self._consolidation: asyncio.Task | None = None
        self._waiting_emit: EventSink | None = None  # where consolidation reports while a turn waits for it

    def build_request(self) -> list[Message]:
        """System prompt + the session's history, which ends with the saved current user message."""
        return self.context.build_messages(self.session.get_history())

    async def send(self, text: str, *, emit: EventSink = ignore) -> TurnOutcome:
        """Run one user turn. The user's message is saved first: nothing after it can lose it."""
        if not text.strip():
            raise UsageError("the message is empty", hint='Type something, e.g. nanobot agent -m "hello".')
        text = self._mask_user_text(text, emit)
        async with self._turn_lock:
            text = keep_large_paste(text, self.budget, self.context.workspace, emit)
            await self._make_room(text, emit)
            s = self.settings
            save_turn(self.store, self.session, [self.context.user_message(text, channel=s.channel, chat_id=s.chat_id)])
            request = self.build_request()
            return await self._run_turn(request, new_from=len(request), emit=emit)

    @staticmethod
    def _mask_user_text(text: str, emit: EventSink) -> str:
        """The user's own message passes the masker before it is saved or sent; say so once."""
        masked, found = find_secrets(text)
        if found:
            emit(Notice(f"your message held {' and '.join(found)}; it was replaced by {REDACTED} before it was "
                        "saved or sent. Keys belong in the config (providers.<name>.apiKey in "
                        "~/.nanobot/config.json) or an environment variable, not in the chat.", "warning"))
        return masked

    async def _run_turn(self, request: list[Message], *, new_from: int, emit: EventSink) -> TurnOutcome:
        """Run the loop on `request`, saving every message from index `new_from` on as it appears."""
        checkpoint = TurnCheckpoint(self.store, self.session, skip=new_from)
        transcript = list(request)
        checkpoint.save(transcript)

        def on_step(new: list[Message]) -> None:
            transcript.extend(new)
            checkpoint.save(transcript)

        s = self.settings
        result: LoopResult = await run_loop(
            self.provider, self.tools, request, max_iterations=s.max_iterations, temperature=s.temperature,
            emit=emit, on_step=on_step, stream=s.stream, budget=self.budget,
        )
        if result.stop_reason == "max_iterations" and result.content:
            # the limit notice is a real answer the user sees; keep it so the next turn has the context
            on_step([{"role": "assistant", "content": result.content}])
        if result.requests:
            self.last_usage = result.usage
        outcome = TurnOutcome(result.content, result.stop_reason, mask_secrets(result.error), result.usage,
                              mask_value(result.tool_calls))
        self._consolidate_in_background()
        emit(TurnDone(outcome.content, outcome.stop_reason, outcome.usage, outcome.error, outcome.tool_calls))
        return outcome

    # -- token budget and consolidation ----------------------------------------------------------

    def _schemas(self) -> list[dict] | None:
        return self.tools.schemas() if self.tools is not None else None

    def estimate(self, probe: str | None = None) -> int:
        """The next request's estimated size, as the budget sees it (for /status too)."""
        return self.budget.estimate(self.session, system_prompt=self.context.system_prompt, tools=self._schemas(),
                                    probe=probe_message(probe) if probe is not None else probe_message())

    def snapshot(self):
        """The budget's figures for this session's next request (what /status shows)."""
        return self.budget.snapshot(self.session, system_prompt=self.context.system_prompt,
                                    tools=self._schemas(), probe=probe_message())

    async def join_consolidation(self, timeout: float | None = None) -> bool:
        """Wait for the background consolidation, if one runs; False if `timeout` passed first.

        Cancelling the waiter (Ctrl-C) never cancels the consolidation; its failures are reported by it."""
        task = self._consolidation
        if task is None or task.done():
            return True
        done, _ = await asyncio.wait([task], timeout=timeout)
        return bool(done)

    async def _make_room(self, probe: str, emit: EventSink) -> None:
        """Before a turn: when the prompt would not fit, consolidate first, waiting a few seconds at most.

        If consolidation takes longer, the turn goes ahead: the budget leaves the oldest turns out of
        this request (marked) and consolidation finishes in the background."""
        wait = self.settings.room_wait_seconds
        self._waiting_emit = emit
        try:
            # one still running from the last turn gets a few seconds; otherwise the consolidator
            # (asking the budget) decides whether this turn needs room, and makes it
            if await self.join_consolidation(wait):
                self._start_consolidation(probe)
                if await self.join_consolidation(wait):
                    return
            emit(Notice(f"memory consolidation is taking longer than {wait:g} s; it goes on in the background, and "
                        "until it is done a request that does not fit leaves the oldest turns out"))
        finally:
            self._waiting_emit = None

    def _route(self, event) -> None:
        (self._waiting_emit or self.background_emit)(event)

    def _consolidate_in_background(self) -> None:
        if self._consolidation is not None and not self._consolidation.done():
            return
        self._start_consolidation(None)

    def _start_consolidation(self, probe: str | None) -> None:
        self._consolidation = asyncio.get_running_loop().create_task(self._consolidate(probe))

    async def _consolidate(self, probe: str | None) -> None:
        kwargs = {"probe": probe} if probe is not None else {}
        try:
            report = await self.consolidator.maybe_consolidate_by_tokens(
                self.session, system_prompt=self.context.system_prompt, tool_schemas=self._schemas(),
                emit=self._route, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never lost: the pointer did not move, the next check tries again
            self._route(Notice(f"memory consolidation failed: {exc}; nothing was lost, it will be tried again "
                               "after the next turn", "warning"))
            return
        self._report(report, self._route)

    def _report(self, report: ConsolidationReport, emit: EventSink) -> None:
        if report.ran:
            self.last_consolidation = report
        for message in report.notices:
            emit(Notice(message, "warning"))

    async def compact(self, *, emit: EventSink = ignore) -> ConsolidationReport:
        """/compact: consolidate everything but the last exchange now."""
        async with self._turn_lock:
            await self.join_consolidation()
            report = await self.consolidator.compact(self.session, emit=emit)
            self._report(report, emit)
            return report

    # -- subagent reports ----------------------------------------------------------------------

    def announce_start(self, sub_id: str, label: str) -> None:
        self.background_emit(Notice(f"subagent '{label}' ({sub_id}) started"))

    def deliver(self, result: SubagentResult) -> None:
        """Called when a subagent ends: queue its report as a turn behind any running turn."""
        level = "info" if result.status == "completed" else "warning"
        self.background_emit(Notice(result.record.summary(), level))
        task = asyncio.get_running_loop().create_task(self._process_report(result))
        self._reports[task] = result
        task.add_done_callback(lambda t: self._reports.pop(t, None))

    async def _process_report(self, result: SubagentResult) -> TurnOutcome:
        """A report turn: the request ends with the report as a labelled user message (see
        nanobot/agent/subagents.py for why); the session keeps only the helper's one-line note there."""
        report = result.report_message()
        async with self._turn_lock:
            await self._make_room(text_of(report["content"]), self.background_emit)
            history = self.session.get_history()
            save_turn(self.store, self.session, [result.record.note()])
            me = asyncio.current_task()
            if me in self._reports:
                self._reports[me] = None  # the note is saved: a stop adds nothing
            system = {"role": "system", "content": self.context.system_prompt()}
            request = [system, *history, report]  # the report is context for this turn only
            return await self._run_turn(request, new_from=len(request), emit=self.background_emit)

    def running_subagents(self) -> list[tuple[str, str, str]]:
        return self.subagents.running() if self.subagents is not None else []

    def helpers(self) -> list[HelperRecord]:
        """Every helper this process started, running or ended (for /status)."""
        return list(self.subagents.records.values()) if self.subagents is not None else []

    def background_pending(self) -> tuple[int, int]:
        """(running subagents, report turns queued or running)."""
        return len(self.running_subagents()), sum(1 for t in self._reports if not t.done())

    async def wait_for_background(self, timeout: float) -> bool:
        """Wait for subagents and the turns their reports trigger; False if `timeout` passed first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if loop.time() > deadline:
                return False
            if self.subagents is not None and not await self.subagents.wait(max(0.0, deadline - loop.time())):
                return False
            pending = [t for t in self._reports if not t.done()]
            if not pending:
                if not self.running_subagents():
                    return True
                continue
            _, still = await asyncio.wait(pending, timeout=max(0.0, deadline - loop.time()))
            if still:
                return False

    async def stop_background(self, reason: str = "when nanobot closed") -> list[HelperRecord]:
        """Stop every subagent and report turn; each one stopped leaves its one-line note in the
        session, so the model knows on the next turn. `reason` completes "was stopped ...".
        Call it between turns (it takes the turn lock to write the notes)."""
        stopped = await self.subagents.cancel_all(reason) if self.subagents is not None else []
        notes = [record.note() for record in stopped]
        reports = [(t, r) for t, r in self._reports.items() if t is not asyncio.current_task()]
        for task, _ in reports:
            task.cancel()
        if reports:
            await asyncio.gather(*(task for task, _ in reports), return_exceptions=True)
        # a report whose turn never started: its helper did finish, but nobody read the report
        notes += [result.record.note(f"; handling its report was stopped {reason}")
                  for _, result in reports if result is not None]
        if notes:
            async with self._turn_lock:
                save_turn(self.store, self.session, notes)
        return stopped

    async def new_session(self, *, emit: EventSink = ignore) -> ConsolidationReport | None:
        """/new: archive every unconsolidated message first, then clear (a crash between loses nothing)."""
        async with self._turn_lock:
            await self.join_consolidation()
            report = await self.consolidator.archive_all(self.session, emit=emit)
            self._report(report, emit)
            self.store.clear(self.session)
            return report
