"""Report turns: each helper that ends by itself has its report handled as a turn of the
conversation, queued behind any running turn, one at a time.

This is the small object between the two sides, so neither has to know the other: the
SubagentManager tells it how helpers start and end (it is the manager's `ReportSink`), and it
asks the conversation (a `ReportTurnRunner`) to run the turn. Both are built in one pass in
nanobot/app.py, conversation first. Why a report is a fenced user message: see subagents.py.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from nanobot.agent.events import EventSink, Notice
from nanobot.agent.subagents import HelperRecord, SubagentResult
from nanobot.messages import Message
from nanobot.usage.limits import TurnScope, current_turn


class ReportTurnRunner(Protocol):
    """What report turns need of a conversation (nanobot.agent.conversation.Conversation is one)."""

    async def inject(self, message: Message, note: Message, *, emit: EventSink) -> object:
        """Run a turn whose request ends with `message`; the session keeps `note` in its place."""

    async def save_notes(self, notes: list[Message]) -> None:
        """Save helpers' notes between turns; a helper already noted in the session is skipped."""


class ReportTurns:
    """Ended helpers' reports, each run as a turn; where their notices and turns render is `emit`."""

    def __init__(self, turns: ReportTurnRunner, emit: EventSink) -> None:
        self.turns = turns
        self.emit = emit
        self._queued: dict[asyncio.Task, SubagentResult] = {}  # report turns queued or running

    def started(self, record: HelperRecord) -> None:
        self.emit(Notice(f"subagent '{record.label}' ({record.id}) started"))

    def ended(self, result: SubagentResult) -> None:
        level = "info" if result.status == "completed" else "warning"
        self.emit(Notice(result.record.summary(), level))
        task = asyncio.get_running_loop().create_task(self._report_turn(result))
        self._queued[task] = result
        task.add_done_callback(lambda t: self._queued.pop(t, None))

    async def _report_turn(self, result: SubagentResult) -> object:
        # the helpers this turn starts continue the chain of the helper whose report it handles
        current_turn.set(TurnScope("report", depth=result.record.depth))
        return await self.turns.inject(
            result.report_message(), result.record.note(), emit=self.emit
        )

    def limited(self, text: str) -> None:
        self.emit(Notice(text, "warning"))

    def pending(self) -> int:
        return sum(1 for task in self._queued if not task.done())

    async def wait(self, timeout: float) -> bool:
        pending = [task for task in self._queued if not task.done()]
        if not pending:
            return True
        _, still = await asyncio.wait(pending, timeout=timeout)
        return not still

    async def stop(self, reason: str, stopped: list[HelperRecord]) -> None:
        notes = [record.note() for record in stopped]
        queued = [
            (task, result)
            for task, result in self._queued.items()
            if task is not asyncio.current_task()
        ]
        for task, _ in queued:
            task.cancel()
        if queued:
            await asyncio.gather(*(task for task, _ in queued), return_exceptions=True)
        # a report turn that started saved its helper's note first (save_notes skips those); one
        # that never started: its helper did finish, but nobody read the report
        notes += [
            result.record.note(f"; handling its report was stopped {reason}")
            for _, result in queued
        ]
        if notes:
            await self.turns.save_notes(notes)
